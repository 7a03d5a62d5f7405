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


def test_an_orphaned_ray_process_of_the_drivers_group_is_found_by_its_title() -> None:
    """The rule for what no record holds (a raylet's agent started after the last record and
    re-parented when the raylet died): a process titled ``ray::...`` in the driver's process
    group and started after the driver is the driver's; one of another title, or of another
    group, is not."""
    import time

    from agents.procwatch import _group, _targets, descendants

    other = subprocess.Popen(["bash", "-c", "exec -a ray::Elder sleep 60"], start_new_session=True)
    script = "(exec -a ray::DashboardAgent sleep 60) & (exec -a tee sleep 60) & wait"
    driver = subprocess.Popen(["bash", "-c", script], start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(descendants(driver.pid)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(0.2)  # (the titles are set by exec)
        titles = {}
        for pid in descendants(driver.pid):
            titles[Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]] = pid
        agent, tee = titles[b"ray::DashboardAgent"], titles[b"tee"]
        group = _group(driver.pid)
        assert group is not None and group[0] == driver.pid
        found = _targets({}, set(), group)
        assert agent in found  # a Ray title, the driver's group, started after it
        assert tee not in found and driver.pid not in found  # other programs of the group
        assert other.pid not in found  # a Ray process of another group
        assert agent not in _targets({}, set(), None)  # without the group rule: not found
    finally:
        for p in (other, driver):
            p.kill()
            p.wait()
        subprocess.run(["pkill", "-9", "-g", str(driver.pid)], check=False)
