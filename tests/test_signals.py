"""Ctrl-C, SIGTERM and ``kill -9`` stop ``evaluate.py`` on every runner: finished runs are
kept and resumable, a one-line message says so (no traceback), and no process of the run is
left behind (counted in ``/proc`` before and after the signal)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agents.procwatch import descendants, left_running, marked

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="counts processes in /proc")

#: 3 seeds x 4 stacks of paper-scale runs (~1 s each): long enough to interrupt mid-way
ARGS = ["workload=generated_paper_scale", "seeds=[0,1,2]", "plot=false"]
RUNS = 12


def _start(tmp_path: Path, *extra: str) -> tuple[subprocess.Popen[str], Path]:
    out = tmp_path / "run"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    proc = subprocess.Popen(
        [sys.executable, "evaluate.py", *ARGS, f"out_dir={out}", *extra],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,  # its own process group, as a terminal's job is
    )
    deadline = time.monotonic() + 240
    while not list((out / ".runs").glob("*.pkl")):  # wait until a run has finished
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() < deadline, "no run finished in 240 s"
        time.sleep(0.1)
    return proc, out


def _gone(pids: set[int], within: float = 30.0) -> set[int]:
    return left_running(pids, within)


def _check_interrupted(proc: subprocess.Popen[str], out: Path, sig: str, before: set[int]) -> None:
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    line = [x for x in err.splitlines() if "interrupted" in x]
    assert line and f"interrupted ({sig})" in line[-1], err[-2000:]
    assert "resume=true" in line[-1] and str(out) in line[-1]
    finished = len(list((out / ".runs").glob("*.pkl")))
    assert f"{finished} of {RUNS} runs finished" in line[-1]
    assert not (out / "summary.md").exists()  # an interrupted run has no summary
    assert _gone(before) == set()


@pytest.mark.parametrize(
    ("sig", "name", "group"),
    [(signal.SIGINT, "SIGINT", True), (signal.SIGINT, "SIGINT", False),
     (signal.SIGTERM, "SIGTERM", False)],
)  # fmt: skip
def test_pool_stops_at_once_and_keeps_what_finished(
    tmp_path: Path, sig: int, name: str, group: bool
) -> None:
    """``group``: Ctrl-C in a terminal signals the whole process group (workers too)."""
    proc, out = _start(tmp_path, "workers=2")
    before = descendants(proc.pid)
    assert len(before) >= 2  # the pool's workers
    (os.killpg if group else os.kill)(proc.pid, sig)
    _check_interrupted(proc, out, name, before)
    if not group:
        return
    # the resume runs only the rest, and ends with the whole table
    again = subprocess.run(
        [sys.executable, "evaluate.py", *ARGS, f"out_dir={out}", "resume=true", "workers=2"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert "runs already finished" in again.stderr
    assert len(list(out.glob("jobs_*.csv"))) == RUNS and (out / "summary.md").is_file()


def test_in_process_runner_stops_on_sigterm(tmp_path: Path) -> None:
    proc, out = _start(tmp_path, "workers=1")
    proc.send_signal(signal.SIGTERM)
    _check_interrupted(proc, out, "SIGTERM", descendants(proc.pid))


def test_kill_9_leaves_no_worker_running(tmp_path: Path) -> None:
    proc, out = _start(tmp_path, "workers=2")
    before = descendants(proc.pid)
    assert before
    proc.kill()
    proc.communicate(timeout=30)
    assert _gone(before) == set()  # the workers die with their parent (PR_SET_PDEATHSIG)
    again = subprocess.run(
        [sys.executable, "evaluate.py", *ARGS, f"out_dir={out}"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert again.returncode == 2 and "already holds files" in again.stderr  # never mixed


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_ray_runner_leaves_no_ray_process(tmp_path: Path, sig: int) -> None:
    """A local Ray's processes (GCS, raylet, workers, and the dashboard and runtime-env agents
    that Ray starts with an environment of their own) end with the driver, even ``kill -9``."""
    pytest.importorskip("ray")
    proc, out = _start(tmp_path, "runner=ray")
    before = descendants(proc.pid) | marked(proc.pid)
    assert len(before) >= 3
    os.killpg(proc.pid, sig) if sig == signal.SIGINT else proc.kill()
    if sig == signal.SIGINT:
        _check_interrupted(proc, out, "SIGINT", before)
    else:
        proc.communicate(timeout=60)
        assert _gone(before) == set()
    assert _gone(marked(proc.pid)) == set()
