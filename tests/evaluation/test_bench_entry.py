"""``evaluate.py bench=v1``: the benchmark through evaluate.py's config is
``python -m evaluation.bench`` with the same arguments."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from envs.sim.errors import ConfigError
from evaluation.bench.__main__ import main as bench_main
from evaluation.bench.entry import bench_argv, check_overrides
from evaluation.bench.scenarios import V1, suite_version
from evaluation.config import BenchConfig, EvaluateConfig, RunnerConfig
from evaluation.rundir import RECORDS
from tests.cli import run_script


def test_the_config_becomes_the_commands_arguments() -> None:
    cfg = EvaluateConfig(bench=BenchConfig(suite="v1"))
    cfg.workers = 0
    assert bench_argv(cfg) == [
        "--suite", "v1", "--out", "runs/bench", "--workers", str(os.cpu_count() or 1),
        "--runner", "local",
    ]  # fmt: skip
    cfg = EvaluateConfig(
        bench=BenchConfig(
            suite="v1",
            only=["tiresias-60", "philly-slice"],
            exclude=["philly-slice"],
            world="contention",
            schedulers=["lwf1_adasrsf", "drf"],
            imports=["mysched"],
            out="b",
        ),
        runner=RunnerConfig(kind="ray", address="10.0.0.1:6379"),
        plot=False,
    )
    cfg.workers = 3
    assert bench_argv(cfg) == [
        "--suite", "v1", "--out", "b", "--workers", "3", "--runner", "ray",
        "--address", "10.0.0.1:6379", "--only", "tiresias-60", "philly-slice",
        "--exclude", "philly-slice", "--import", "mysched",
        "--schedulers", "lwf1_adasrsf", "drf", "--world", "contention", "--no-plot",
    ]  # fmt: skip


def test_bad_selections_are_named_by_the_configs_keys() -> None:
    with pytest.raises(ConfigError, match=r"^bench\.only: unknown scenario\(s\) nope in suite"):
        bench_argv(EvaluateConfig(bench=BenchConfig(suite="v1", only=["nope"])))
    with pytest.raises(ConfigError, match=r"^bench\.exclude: unknown scenario"):
        bench_argv(EvaluateConfig(bench=BenchConfig(suite="v1", exclude=["nope"])))
    with pytest.raises(ConfigError, match=r"^bench: unknown suite 'v9'; known: v1"):
        bench_argv(EvaluateConfig(bench=BenchConfig(suite="v9")))
    with pytest.raises(ConfigError, match=r"bench\.schedulers is empty"):
        bench_argv(EvaluateConfig(bench=BenchConfig(suite="v1", schedulers=[])))
    with pytest.raises(ConfigError, match=r"bench\.suite is not set"):
        bench_argv(EvaluateConfig())


@pytest.mark.parametrize(
    "override", ["seeds=[1,2]", "stacks=[drf]", "+workload.trace.max_jobs=5", "cluster=dl2_small",
                 "workload=philly", "out_dir=x", "mode=reference"],
)  # fmt: skip
def test_keys_a_benchmark_does_not_use_are_refused(override: str) -> None:
    key = override.lstrip("+").split("=")[0]
    with pytest.raises(ConfigError, match=rf"^{key}: not used with bench="):
        check_overrides(["bench=v1", override])


def test_the_keys_it_uses_pass() -> None:
    check_overrides(["bench=v1", "bench.only=[tiresias-60]", "workers=2", "runner=ray",
                     "runner.address=1.2.3.4:6379", "plot=false", "bench.out=x"])  # fmt: skip


def test_evaluate_py_bench_equals_the_module_command(tmp_path: Path) -> None:
    picks = ["--only", "tiresias-60", "--schedulers", "lwf1_adasrsf", "ff_adasrsf"]
    assert bench_main(["--out", str(tmp_path / "m"), "--workers", "1", "--no-plot", *picks]) == 0
    done = run_script(
        "evaluate.py",
        "bench=v1",
        "bench.only=[tiresias-60]",
        "bench.schedulers=[lwf1_adasrsf,ff_adasrsf]",
        f"bench.out={tmp_path / 'h'}",
        "workers=1",
        "plot=false",
    )
    assert done.returncode == 0, done.stderr
    version = f"v1-{suite_version(V1)}"
    (m_code,) = (tmp_path / "m" / version).iterdir()
    (h_code,) = (tmp_path / "h" / version).iterdir()
    assert m_code.name == h_code.name  # the same code version
    board = (h_code / "board.csv").read_text()
    assert board == (m_code / "board.csv").read_text() and "lwf1_adasrsf" in board
    assert "[1/1] tiresias-60: 2 ok, 0 n/a, 0 failed; runs 6/6 (6 run now)" in done.stdout

    def per_job(code: Path) -> list[Path]:  # (summary.csv also holds each run's wall time)
        found = (code / "tiresias-60").rglob("*.csv")
        return sorted(p.relative_to(code) for p in found if p.name.startswith("jobs_"))

    mine = per_job(m_code)
    assert len(mine) == 6 and per_job(h_code) == mine  # 2 schedulers x 3 seeds
    for rel in mine:  # every per-job CSV byte for byte
        assert (m_code / rel).read_bytes() == (h_code / rel).read_bytes()


def test_a_refused_key_exits_2_with_one_line_and_leaves_no_run_dir(tmp_path: Path) -> None:
    done = run_script("evaluate.py", "bench=v1", "seeds=[1]", f"hydra.run.dir={tmp_path / 'r'}")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].startswith("error: seeds: not used with bench=")
    assert not (tmp_path / "r").exists()


def test_a_board_killed_midway_resumes_to_the_same_cells(tmp_path: Path) -> None:
    """``kill -9`` of the command's whole process group once some runs are on disk; the same
    command again makes only the missing runs, and the board and per-job CSVs are those of an
    uninterrupted board."""
    picks = ["--only", "tiresias-60", "--schedulers", "lwf1_adasrsf", "ff_adasrsf",
             "--workers", "1", "--no-plot"]  # fmt: skip
    whole = tmp_path / "whole"
    assert bench_main(["--out", str(whole), *picks]) == 0
    killed = tmp_path / "killed"
    cmd = [sys.executable, "-m", "evaluation.bench", "--out", str(killed), *picks]
    root = Path(__file__).resolve().parents[2]
    proc = subprocess.Popen(cmd, cwd=root, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 120
    while not list(killed.glob("*/*/*/*/jobs_*.csv")):  # a run finished
        assert proc.poll() is None, "the board finished before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    # a run is kept when its record is on disk (its per-job CSV is written just before: a
    # kill between the two makes it again, with the same bytes)
    kept = len(list(killed.glob(f"*/*/*/*/{RECORDS}/*.pkl")))
    assert kept < 6  # (0 when the kill came between the first CSV and its record)
    again = run_script("-m", "evaluation.bench", "--out", str(killed), *picks)
    assert again.returncode == 0, again.stderr
    made = sum(int(n) for n in re.findall(r"\((\d+) run now\)", again.stdout))
    assert made == 6 - kept  # only the missing runs

    def files(out: Path) -> dict[str, bytes]:
        (code,) = (out / f"v1-{suite_version(V1)}").iterdir()
        keep = [*code.glob("*/*/jobs_*.csv"), code / "board.csv"]
        return {str(p.relative_to(code)): p.read_bytes() for p in keep}

    assert files(killed) == files(whole) and len(files(whole)) == 1 + 6
