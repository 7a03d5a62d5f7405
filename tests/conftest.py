"""Shared fixtures: ``ray_cluster``, a real two-node Ray cluster on 127.0.0.1 (a head and a
worker, ``ray start`` through ``tools/ray_loopback.py`` so that both nodes advertise and listen
on 127.0.0.1 only, one CPU each, telemetry off, Ray's token authentication on as in Ray >=
2.60, the token in the nodes' environment).  Only the processes started here are stopped, by
their process groups.

``_home_ray_untouched`` (session, autouse): the suite must leave ``~/.ray`` as it found it (Ray
writes its token to ``~/.ray/auth_token`` when a local Ray starts without one); a test run that
adds, changes or removes anything there ends with an error naming it."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from envs.numerics import use_portable
from tools.ray_loopback import two_nodes

# what train.py and evaluate.py set: tests that train in this process get their bits
use_portable()

RAY = Path(sys.executable).parent / "ray"


def ray_home_state(home: Path) -> dict[str, tuple[int, int]]:
    """What ``home/.ray`` holds: each path in it (``"."``: the folder itself) with its size and
    modification time (ns); empty when there is no such folder."""
    root = home / ".ray"
    if not root.is_dir():
        return {}
    state = {".": (0, root.stat().st_mtime_ns)}
    for path in root.rglob("*"):
        st = path.lstat()
        state[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return state


@pytest.fixture(scope="session", autouse=True)
def _home_ray_untouched() -> Iterator[None]:
    """The suite leaves ``$HOME/.ray`` as it found it: checked once, after the last test."""
    home = Path.home()
    before = ray_home_state(home)
    yield
    after = ray_home_state(home)
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, f"the tests changed {home / '.ray'}: {', '.join(changed)}"


@dataclass
class RayNodes:
    """A running two-node cluster: its head's address, the environment every driver needs
    (telemetry off, the token), and the worker node's process (to stop it mid-run)."""

    address: str
    env: dict[str, str]
    worker: subprocess.Popen[bytes]

    def kill_worker(self) -> None:
        """The worker node dies: SIGKILL to its whole process group (raylet and workers)."""
        try:
            os.killpg(self.worker.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        self.worker.wait(timeout=20)


@pytest.fixture
def ray_init_forbidden(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Ray, with ``ray.init`` failing the test if called: for errors that must come before it
    (skipped without Ray, or where this process has already initialised it)."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        pytest.skip("Ray is already initialised in this process")

    def no_init(*args: object, **kwargs: object) -> None:
        raise AssertionError("ray.init was called")

    monkeypatch.setattr(ray, "init", no_init)
    return ray


@pytest.fixture
def ray_cluster(tmp_path: Path) -> Iterator[RayNodes]:
    """A two-node cluster of the test's own (a test may kill its worker)."""
    with two_node_cluster(tmp_path) as nodes:
        yield nodes


@pytest.fixture(scope="module")
def shared_ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RayNodes]:
    """One two-node cluster for a module's tests that leave it as they found it (none may
    kill its worker): each start costs 10-20 s on 2 cores."""
    with two_node_cluster(tmp_path_factory.mktemp("ray")) as nodes:
        yield nodes


@contextlib.contextmanager
def two_node_cluster(tmp_path: Path) -> Iterator[RayNodes]:
    """Head and worker ``ray start`` on 127.0.0.1, one CPU each, logs under ``tmp_path``
    (:func:`tools.ray_loopback.two_nodes`); stopped (their process groups) on exit."""
    if not RAY.is_file():
        pytest.skip("the ray command is not installed")
    with two_nodes(tmp_path) as cluster:
        yield RayNodes(cluster.address, cluster.env, cluster.nodes[1])
