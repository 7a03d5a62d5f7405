"""``train.py`` stopped by Ctrl-C (SIGINT to its process group, as a terminal sends it) or by
``kill`` (SIGTERM to it, or to its whole group): exit status 130, no traceback, one line
saying what was saved and how to resume, and no process of it left running (plan_pg's
rollout workers included).  A disk it cannot write to is one line, exit status 2."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="needs /proc")


def _stat(pid: int) -> tuple[int, str, str] | None:
    """``(ppid, state, start time)`` of process ``pid`` (``None``: no such process)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()
    return int(fields[1]), fields[0], fields[19]


def _descendants(pid: int) -> dict[int, str]:
    """Every live process below ``pid``: pid -> its start time (to tell a reused pid)."""
    parents: dict[int, int] = {}
    starts: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None and st[1] != "Z":
                parents[int(entry.name)], starts[int(entry.name)] = st[0], st[2]
    out: dict[int, str] = {}
    frontier = [pid]
    while frontier:
        p = frontier.pop()
        for child, parent in parents.items():
            if parent == p and child not in out:
                out[child] = starts[child]
                frontier.append(child)
    return out


def _still_running(procs: dict[int, str]) -> list[int]:
    alive = []
    for pid, start in procs.items():
        st = _stat(pid)
        if st is not None and st[2] == start and st[1] != "Z":
            alive.append(pid)
    return alive


class Run:
    """``python train.py args`` in its own process group, output to files."""

    def __init__(self, tmp_path: Path, args: list[str]) -> None:
        self.out = tmp_path / "run"
        self.err_path, self.out_path = tmp_path / "stderr", tmp_path / "stdout"
        self.proc = subprocess.Popen(
            [sys.executable, "train.py", *args, f"hydra.run.dir={self.out}",
             "progress_bar=false"],
            cwd=ROOT,
            stdout=self.out_path.open("w"),
            stderr=self.err_path.open("w"),
            start_new_session=True,
            # a shell that backgrounds the tests makes children ignore SIGINT: restore it
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip

    @property
    def stderr(self) -> str:
        return self.err_path.read_text()

    def wait_for(self, ready: Callable[[], bool], what: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            assert self.proc.poll() is None, f"ended before {what}:\n{self.stderr[-3000:]}"
            assert time.monotonic() < deadline, f"no {what} in {timeout} s"
            time.sleep(0.2)

    def stop(self, sig: signal.Signals, group: bool) -> tuple[int, dict[int, str]]:
        """Send ``sig`` (to the process group, or to train.py alone); its exit status and the
        processes that were below it when the signal went."""
        below = _descendants(self.proc.pid)
        if group:
            os.killpg(self.proc.pid, sig)
        else:
            self.proc.send_signal(sig)
        return self.proc.wait(timeout=180), below

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Callable[[list[str]], Run]]:
    started: list[Run] = []

    def start(args: list[str]) -> Run:
        started.append(Run(tmp_path, args))
        return started[-1]

    yield start
    for r in started:
        r.kill()


def _assert_clean_stop(r: Run, rc: int, below: dict[int, str], words: str) -> str:
    """Exit 130, no traceback, exactly one ``train.py:`` line (containing ``words``), no
    process left of those that ran below it; that line."""
    err = r.stderr
    assert rc == 130, err[-3000:]
    assert "Traceback" not in err, err[-3000:]
    lines = [x for x in err.splitlines() if x.startswith("train.py:")]
    assert len(lines) == 1 and words in lines[0], err[-3000:]
    deadline = time.monotonic() + 10
    while _still_running(below) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _still_running(below), f"left running: {_still_running(below)}"
    leftovers = [p for p in r.out.rglob("*") if ".tmp" in p.name or p.name.endswith(".prev")]
    assert not leftovers, leftovers
    return lines[0]


PLAN = ["+agent=plan_pg", "env=tiny", "env.reward=jct", "pretrain=none",
        "agent.plan.iterations=100000", "agent.plan.val_every=1", "agent.plan.groups=2",
        "agent.plan.group_size=2", "agent.plan.hidden=16", "agent.plan.workers=2",
        "eval.seeds=[100,101]", "eval.baselines=[drf]"]  # fmt: skip


@pytest.mark.parametrize(
    ("sig", "group", "how"),
    [
        (signal.SIGINT, True, "interrupted (Ctrl-C)"),  # Ctrl-C in a terminal
        (signal.SIGTERM, False, "interrupted (SIGTERM)"),  # kill <pid>
        # kill -- -<pgid>, a job scheduler: the same handler as both above (slow: the default
        # suite keeps to 10 minutes on 2 cores)
        pytest.param(signal.SIGTERM, True, "interrupted (SIGTERM)", marks=pytest.mark.slow),
    ],
    ids=["ctrl-c", "kill-pid", "kill-group"],
)
def test_plan_pg_stops_cleanly_with_its_workers(
    run, sig: signal.Signals, group: bool, how: str
) -> None:
    r = run(PLAN)
    r.wait_for(lambda: "[plan_pg] iteration 2/" in r.stderr, "second iteration")
    rc, below = r.stop(sig, group)
    assert len(below) >= 2, below  # the rollout workers were running
    final = r.out / "checkpoints" / "final" / "policy.npz"
    line = _assert_clean_stop(r, rc, below, f"train.py: {how}; saved {final}")
    assert "resume with: python train.py +agent=plan_pg" in line and f"resume={r.out}" in line
    summary = json.loads((r.out / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["iterations"] >= 2
    state = json.loads((final.parent / "state.json").read_text())  # what resume= goes on from
    assert state["iteration"] == summary["iterations"]
    from agents.episode_pg import load_episode_pg

    _, meta = load_episode_pg(final)
    assert meta["training"]["iteration"] == summary["iterations"]


A2C = ["+agent=a2c_increments", "env=tiny", "eval=quick", "pretrain=none", "agent.n_steps=64",
       "checkpoint_every=128", "total_timesteps=100000000"]  # fmt: skip


def test_sigterm_during_learning_names_the_checkpoint_and_the_resume_command(
    run, tmp_path: Path
) -> None:
    """SIGTERM inside SB3's learn: the line names the newest complete checkpoint and the exact
    command that resumes it; that command resumes it, even after a save killed between its
    renames left only ``latest.prev`` (it says so)."""
    r = run(A2C)
    manifest = r.out / "checkpoints" / "latest" / "manifest.json"
    r.wait_for(manifest.is_file, "first checkpoint")
    rc, below = r.stop(signal.SIGTERM, group=False)
    line = _assert_clean_stop(r, rc, below, "train.py: interrupted (SIGTERM); the newest")
    latest = r.out / "checkpoints" / "latest"
    decisions = json.loads((latest / "manifest.json").read_text())["num_timesteps"]
    assert f"the newest complete checkpoint is {latest} ({decisions} decisions)" in line
    command = shlex.split(line.split("resume with: ", 1)[1])
    assert command[:2] == ["python", "train.py"] and command[-1] == f"resume={latest}"
    assert command[2:-1] == [*A2C, "progress_bar=false"]
    # a save killed between its two renames: no ``latest``, a complete ``latest.prev``
    latest.rename(latest.with_name("latest.prev"))
    again = [a for a in command[2:] if not a.startswith("total_timesteps=")]
    proc = subprocess.run(
        [sys.executable, "train.py", *again, f"total_timesteps={decisions + 64}",
         f"hydra.run.dir={tmp_path / 'resumed'}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resuming from {latest.with_name('latest.prev')} ({decisions} decisions)" in proc.stderr
    summary = json.loads((tmp_path / "resumed" / "summary.json").read_text())
    assert summary["resumed_at"] == decisions and summary["timesteps"] >= decisions + 64


def test_ctrl_c_during_pretraining_says_nothing_was_saved(run) -> None:
    r = run(["+agent=a2c_increments", "env=tiny", "eval=quick", "pretrain=drf",
             "pretrain.num_workloads=2", "pretrain.bc.steps=100000000", "pretrain_cache=null",
             "total_timesteps=256"])  # fmt: skip
    r.wait_for((r.out / "pretrain" / "dataset.npz").is_file, "teacher dataset")
    time.sleep(1)  # into behaviour cloning
    rc, below = r.stop(signal.SIGINT, group=True)
    line = _assert_clean_stop(r, rc, below, "train.py: interrupted (Ctrl-C) before the first")
    assert "nothing was saved; start again with: python train.py +agent=a2c_increments" in line


def test_a_checkpoint_directory_that_cannot_be_written_is_one_line(tmp_path: Path) -> None:
    out = tmp_path / "run"
    out.mkdir()
    (out / "checkpoints").write_text("a file where the checkpoints directory should be")
    proc = subprocess.run(
        [sys.executable, "train.py", "+agent=a2c_increments", "env=tiny", "eval=quick",
         "pretrain=none",
         "agent.n_steps=64", "checkpoint_every=64", "total_timesteps=256",
         "progress_bar=false", f"hydra.run.dir={out}"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert f"train.py: cannot write {out / 'checkpoints' / 'latest'}: " in proc.stderr
