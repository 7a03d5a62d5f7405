"""``evaluate.py runner=ray`` on a real two-node Ray cluster (``tests/conftest.py``): the runs
are Ray tasks spread over both nodes, the per-job CSVs are the local pool's byte for byte, a
run's own error arrives as its one-line cause, and when the worker node dies mid-sweep its runs
run again on the head and every result is kept."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli import run_script

ROOT = Path(__file__).resolve().parents[2]
#: 2 stacks x 3 seeds of ~4 s each (invariants checked on every event keep the runs long enough
#: for the worker node to die while it runs one)
SWEEP = [
    "workload.iterations_scale=1", "check_invariants=true", "stacks=[lwf1_srsf1,ff_adasrsf]",
    "seeds=[0,1,2]", "plot=false",
]  # fmt: skip


def _job_csvs(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run_dir.glob("jobs_*.csv"))}


def test_runner_config_errors_are_one_line(tmp_path: Path) -> None:
    for args, msg in [
        (["runner.kind=slurm"], "runner.kind must be 'local' or 'ray', got 'slurm'"),
        (["runner=ray", "runner.max_retries=-1"], "runner.max_retries must be >= 0, got -1"),
        (["runner.address=10.0.0.1:6379"], "runner.address is for runner=ray"),
    ]:
        out = run_script("evaluate.py", *args, f"out_dir={tmp_path / 'run'}")
        assert out.returncode == 2, out.stderr[-2000:]
        assert f"error: {msg}" in out.stderr
        assert "Traceback" not in out.stderr
        assert not (tmp_path / "run").exists()


def test_ray_runner_matches_the_local_pool_and_survives_a_node_death(
    ray_cluster, tmp_path: Path
) -> None:
    if sys.platform != "linux":  # pragma: no cover
        pytest.skip("the two-node fixture is for Linux")
    ray_args = ["runner=ray", f"runner.address={ray_cluster.address}"]

    # a run's own error (its wall-clock budget) comes back as that error's line, per run
    failing = f"out_dir={tmp_path / 'failing'}"
    out = run_script(
        "evaluate.py", *SWEEP, *ray_args, "max_wall_s=1e-9", failing, env=ray_cluster.env
    )
    assert out.returncode == 2, out.stderr[-3000:]
    line = next(ln for ln in out.stderr.splitlines() if ln.startswith("error: "))
    assert line.startswith("error: 6 of 6 runs failed: lwf1_srsf1 seed 0: wall-clock budget")
    assert "RayTaskError" not in line
    assert "Traceback" not in out.stderr

    # the sweep; the worker node is killed once the first run has finished
    log = tmp_path / "ray.err"
    with log.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "evaluate.py", *SWEEP, *ray_args, f"out_dir={tmp_path / 'ray'}"],
            cwd=ROOT, env=ray_cluster.env, stdout=subprocess.PIPE, stderr=err, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 240
        while "1/6" not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")[-3000:]
            assert time.monotonic() < deadline, "no run finished in 240 s"
            time.sleep(0.2)
        ray_cluster.kill_worker()
        stdout, _ = proc.communicate(timeout=300)
    stderr = log.read_text(errors="replace")
    assert proc.returncode == 0, stderr[-3000:]
    assert "run dir:" in stdout
    assert "ray: 6 run(s) on" in stderr

    local = run_script("evaluate.py", *SWEEP, "workers=2", f"out_dir={tmp_path / 'local'}")
    assert local.returncode == 0, local.stderr[-3000:]
    ray_csvs, local_csvs = _job_csvs(tmp_path / "ray"), _job_csvs(tmp_path / "local")
    assert len(local_csvs) == 6
    assert ray_csvs == local_csvs
