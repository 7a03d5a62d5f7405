"""The Ray watchdog's sweep (``agents/procwatch.py``) kills the processes it recorded and
every descendant they started after its last record (found by parentage, before any is
killed), and never a process that is not the one it recorded."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agents.procwatch import _stat, left_running, sweep

pytestmark = pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")

#: a parent that starts a child, prints the child's pid and waits
TREE = (
    "import subprocess, sys, time\n"
    "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "print(p.pid, flush=True)\n"
    "time.sleep(120)\n"
)


def _tree() -> tuple[subprocess.Popen[str], int]:
    parent = subprocess.Popen([sys.executable, "-c", TREE], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    return parent, int(parent.stdout.readline())


def test_sweep_kills_the_children_started_after_the_last_record() -> None:
    parent, child = _tree()
    try:
        st = _stat(parent.pid)
        assert st is not None
        seen = {parent.pid: st[2]}  # recorded before the child existed, as a 0.5 s poll may
        assert sweep(seen, set()) == 2 and child in seen
        parent.wait(timeout=30)
        assert left_running({parent.pid, child}, 30.0) == set()
    finally:
        parent.kill()
        parent.wait(timeout=30)


def test_sweep_spares_a_process_that_is_not_the_recorded_one() -> None:
    parent, child = _tree()
    try:
        seen = {parent.pid: "0"}  # a recorded pid now reused by another process (start time)
        assert sweep(seen, set()) == 0
        assert left_running({parent.pid, child}, 0.0) == {parent.pid, child}
    finally:
        parent.kill()
        parent.wait(timeout=30)
        subprocess.run(["kill", "-9", str(child)], check=False)
