"""End-to-end tests of the ``evaluate.py`` command (run in a subprocess, as a user would)."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _evaluate(*overrides: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "evaluate.py"), *overrides],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_one_stack_writes_the_run_dir(tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    proc = _evaluate("stacks=[lwf1_srsf1]", "seeds=[0]", f"out_dir={run_dir}")
    assert proc.returncode == 0, proc.stderr

    assert "| lwf1_srsf1 | LWF-1 + SRSF(1) | 0 |" in proc.stdout
    assert "paper s" in proc.stdout
    assert str(run_dir) in proc.stdout.strip().splitlines()[-1]

    with open(run_dir / "summary.csv", newline="") as f:
        summary = list(csv.DictReader(f))
    assert [row["stack"] for row in summary] == ["lwf1_srsf1"]
    assert float(summary[0]["avg_jct_s"]) > 0
    assert "lwf1_srsf1" in (run_dir / "summary.md").read_text()

    with open(run_dir / "jobs_lwf1_srsf1_seed0.csv", newline="") as f:
        jobs = list(csv.DictReader(f))
    assert len(jobs) == 160
    assert {"job_id", "jct_ms", "queue_ms"} <= set(jobs[0])

    png = run_dir / "jct_cdf.png"
    assert png.stat().st_size > 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    record = json.loads((run_dir / "run.json").read_text())
    assert record["git_commit"]
    assert "git_dirty" in record
    assert record["config"]["stacks"] == ["lwf1_srsf1"]
    assert record["config"]["mode"] == "correct"
    assert record["config"]["cluster"]["num_servers"] == 16
    assert record["seeds"] == [0]
    assert {"python", "numpy", "dlsched"} <= set(record["versions"])
    [run] = record["runs"]
    assert run["stack"] == "lwf1_srsf1" and run["seed"] == 0
    assert run["sim_config"]["seed"] == 0 and run["sim_config"]["fidelity"] == "full"
    assert (run_dir / ".hydra" / "config.yaml").exists()


def test_unknown_stack_is_a_clear_error(tmp_path: Path) -> None:
    proc = _evaluate("stacks=[nope_x]", f"out_dir={tmp_path / 'r'}")
    assert proc.returncode == 2
    assert "nope_x" in proc.stderr
    assert proc.stderr.startswith("error: ")
    assert "Traceback" not in proc.stderr


def test_unknown_mode_is_a_clear_error(tmp_path: Path) -> None:
    proc = _evaluate("mode=bogus", f"out_dir={tmp_path / 'r'}")
    assert proc.returncode == 2
    assert "bogus" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "r" / "summary.csv").exists()
