"""Watching processes through ``/proc`` (Linux): the watchdog of a local Ray, and the helpers
that tests and ``benchmarks/soak_signals.py`` use to count what a run left running.

The watchdog (:func:`agents.ray_setup.init_ray` starts it) runs as a script:
``python procwatch.py <driver pid>`` with a pipe from the driver on stdin.

While the driver lives, it records every process descending from the driver (the GCS, the
raylet, the dashboard and runtime-env agents the raylet starts, Ray's workers), with its start
time, twice a second.  When the pipe closes or the driver is gone (it ended, however:
``kill -9`` included), it kills every recorded process that is still the same process (same
start time), every process that carries the driver's environment mark, and every one the
driver reported as a raylet's child, and every Ray process (by its title) of the driver's
process group started after the driver, again until a pass finds none.  Ray's agents outlive a
killed driver otherwise (for minutes), and once they are orphans neither their parent nor
their environment (Ray's ``setproctitle`` overwrites it) says whose they were.  Standard
library only: it never imports the project.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time

OWNER_VAR = "DLSCHED_RAY_OWNER"


def _stat(pid: int) -> tuple[str, int, str] | None:
    """``(state, parent pid, start time)`` of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            rest = f.read().rsplit(b")", 1)[1].split()
        return rest[0].decode(), int(rest[1]), rest[19].decode()
    except (OSError, IndexError, ValueError):
        return None


def _group(pid: int) -> tuple[int, int] | None:
    """``(process group, start time)`` of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            rest = f.read().rsplit(b")", 1)[1].split()
        return int(rest[2]), int(rest[19])
    except (OSError, IndexError, ValueError):
        return None


def _ray_title(pid: int) -> bool:
    """Whether the process is one of Ray's (its command line: a ``ray::`` title, or a
    program of Ray's package: the GCS, the raylet, the agents, the workers)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read()
    except OSError:
        return False
    return cmd.startswith(b"ray::") or b"/ray/" in cmd


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def alive(pid: int) -> bool:
    """The process exists and runs (a zombie waiting for its reaper runs nothing)."""
    st = _stat(pid)
    return st is not None and st[0] != "Z"


def descendants(pid: int) -> set[int]:
    """Every living descendant of ``pid``."""
    seen: dict[int, str] = {}
    record(pid, seen)
    return set(seen)


def marked(owner: int) -> set[int]:
    """The processes carrying ``owner``'s environment mark (the Ray it started; Ray's
    ``setproctitle`` clears the mark in some of them, hence :func:`descendants` too)."""
    mark = f"{OWNER_VAR}={owner}".encode()
    out = set()
    for pid in _pids():
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if mark in f.read().split(b"\0"):
                    out.add(pid)
        except OSError:
            continue
    return out


def left_running(pids: set[int], within: float) -> set[int]:
    """Those of ``pids`` still running after waiting up to ``within`` seconds for them."""
    deadline = time.monotonic() + within
    left = {p for p in pids if alive(p)}
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = {p for p in left if alive(p)}
    return left


def record(owner: int, seen: dict[int, str]) -> None:
    """Add every living descendant of ``owner`` to ``seen`` (pid -> start time)."""
    kids: dict[int, list[tuple[int, str]]] = {}
    for pid in _pids():
        st = _stat(pid)
        if st is not None and st[0] != "Z":
            kids.setdefault(st[1], []).append((pid, st[2]))
    todo = [owner]
    while todo:
        for pid, start in kids.get(todo.pop(), []):
            if pid != os.getpid() and pid not in seen:
                seen[pid] = start
                todo.append(pid)


def adopt(seen: dict[int, str]) -> None:
    """Add to ``seen`` every living descendant of a process in ``seen`` (still the same
    process): what Ray started after the last :func:`record`.  Once the driver is gone its
    children are re-parented, but their own children are still theirs, so the raylet's newest
    workers (whose environment Ray's ``setproctitle`` may have overwritten) are found here."""
    kids: dict[int, list[tuple[int, str]]] = {}
    for pid in _pids():
        st = _stat(pid)
        if st is not None and st[0] != "Z":
            kids.setdefault(st[1], []).append((pid, st[2]))
    todo = [pid for pid, start in seen.items() if (st := _stat(pid)) is not None and st[2] == start]
    while todo:
        for pid, start in kids.get(todo.pop(), []):
            if pid != os.getpid() and pid not in seen:
                seen[pid] = start
                todo.append(pid)


def _targets(
    seen: dict[int, str], marks: set[bytes], group: tuple[int, int] | None = None
) -> set[int]:
    """The living processes of the driver: recorded (same start time), marked, or (``group``:
    the driver's process group and start time) a Ray process of the driver's group started
    after it: an agent its raylet started after the last record and that the raylet's death
    re-parented, with Ray's title in place of the mark."""
    out = set()
    for pid in _pids():
        if pid == os.getpid():
            continue
        st = _stat(pid)
        if st is None or st[0] == "Z":  # gone, or a zombie that runs nothing
            continue
        ours = seen.get(pid) == st[2]
        if not ours:
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    ours = bool(set(f.read().split(b"\0")) & marks)
            except OSError:
                ours = False
        if not ours and group is not None:
            g = _group(pid)
            ours = g is not None and g[0] == group[0] and g[1] >= group[1] and _ray_title(pid)
        if ours:
            out.add(pid)
    return out


def sweep(seen: dict[int, str], marks: set[bytes], group: tuple[int, int] | None = None) -> int:
    """Kill what is left of the driver's processes; how many were killed.  They are stopped
    first (SIGSTOP), their descendants gathered (:func:`adopt`) and stopped too until no new
    one appears, then all killed: a raylet killed before its children would have its agents
    re-parented (unfindable), and a running raylet may start an agent again."""
    stopped: set[int] = set()
    while True:
        adopt(seen)
        new = _targets(seen, marks, group) - stopped
        if not new:
            break
        for pid in new:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGSTOP)
        stopped |= new
    killed = 0
    for pid in stopped:
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except OSError:
            pass
    return killed


def main() -> None:
    owner = int(sys.argv[1])
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the pipe says when
    seen: dict[int, str] = {}
    reported = b""
    born = _stat(owner)
    group = _group(owner)  # (its process group, its start time), read while it lives
    while True:
        ready, _, _ = select.select([0], [], [], 0.5)
        if ready:
            data = os.read(0, 4096)
            if not data:
                break
            reported += data
        now = _stat(owner)  # also without EOF (a forked child may hold the pipe open)
        if born is None or now is None or now[0] == "Z" or now[2] != born[2]:
            break
        record(owner, seen)
    raylets = reported.split()
    marks = {f"{OWNER_VAR}={owner}".encode()} | {b"RAY_RAYLET_PID=" + p for p in raylets}
    for _ in range(20):  # again until a pass finds none: a dying raylet may still start one
        if not sweep(seen, marks, group):
            break
        time.sleep(0.2)


if __name__ == "__main__":
    main()
