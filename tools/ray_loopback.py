"""``ray start`` whose node stays on 127.0.0.1: ``python tools/ray_loopback.py start ...`` runs
Ray's own command line with the same arguments (the tests' ``ray_cluster`` fixture and
``benchmarks/bench_board_ray.py`` start their head and worker so).

On Linux, Ray 2.60's ``ray start`` turns ``--node-ip-address=127.0.0.1`` (and the head's
address ``127.0.0.1:port`` a worker joins) into the machine's network address
(``ray._private.services.resolve_ip_for_localhost``): every node would advertise, and its
servers listen on, that address.  Ray's single-machine mode (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER
=0``) keeps 127.0.0.1 but refuses to start a second node, so this script keeps loopback
addresses as given instead, and nothing else changes.

Importing it (no Ray import, no patch: those happen only when it runs as a script) gives
:func:`two_nodes`, a local two-node cluster of such nodes, for the tests' ``ray_cluster``
fixture and ``benchmarks/bench_board_ray.py``."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

__all__ = ["LocalCluster", "stop_node", "two_nodes"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_node(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the group of a ``ray start --block`` started here (it stops its Ray
    processes), then SIGKILL whatever is left of that group."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=20)
            return
        except subprocess.TimeoutExpired:
            continue


@dataclass
class LocalCluster:
    """A running two-node cluster: its head's address, the environment every driver needs
    (telemetry off, the token) and the two nodes' ``ray start`` processes (head, worker), each
    the leader of its own session."""

    address: str
    env: dict[str, str]
    nodes: list[subprocess.Popen[bytes]]


@contextlib.contextmanager
def two_nodes(log_dir: Path, start_timeout_s: float = 60) -> Iterator[LocalCluster]:
    """A Ray head and a Ray worker node on 127.0.0.1, one CPU each, token authentication on,
    telemetry off, logs ``head.log`` / ``worker.log`` in ``log_dir``; stopped (their process
    groups, nothing else) on exit.  A node that fails or does not start in
    ``start_timeout_s`` is a :class:`RuntimeError` with its log's tail."""
    # (a one-machine Ray sets RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 in its process: not for these
    # nodes, which must form a multi-node cluster; the token is this cluster's)
    from agents.ray_setup import WORKER_NICENESS  # (here: importing this module stays light)

    drop = ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_AUTH_TOKEN_PATH")
    env = {
        **{k: v for k, v in os.environ.items() if k not in drop},
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(16),
        # on SIGTERM a node drains first, for up to 30 s (Ray 2.60): nothing to drain here
        "RAY_GRACEFUL_SHUTDOWN_DRAIN_TIMEOUT_S": "0",
        # the nodes' workers at the driver's priority, as init_ray's (Ray's default: nice 15)
        "RAY_worker_niceness": str(WORKER_NICENESS),
    }
    port = _free_port()
    address = f"127.0.0.1:{port}"
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--block", "--disable-usage-stats"]
    started: list[subprocess.Popen[bytes]] = []
    temp = tempfile.mkdtemp(prefix="dlray")  # short: Ray's socket paths must fit 107 bytes

    def start(args: list[str], log: Path, what: str) -> None:
        proc = subprocess.Popen(
            args, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
        )
        started.append(proc)
        deadline = time.monotonic() + start_timeout_s
        while "Ray runtime started" not in log.read_text(errors="replace"):
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the Ray {what} did not start ({log}):\n{tail}")
            time.sleep(0.5)

    try:
        ray = [sys.executable, str(Path(__file__).resolve()), "start"]
        head = [*ray, "--head", f"--port={port}", "--include-dashboard=false",
                f"--temp-dir={temp}", *common]  # fmt: skip
        start(head, log_dir / "head.log", "head")
        start([*ray, f"--address={address}", *common], log_dir / "worker.log", "worker")
        yield LocalCluster(address, env, list(started))
    finally:
        for proc in reversed(started):
            stop_node(proc)
        shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    from ray._private import services
    from ray.scripts.scripts import main

    services.resolve_ip_for_localhost = lambda host: host  # 127.0.0.1 stays 127.0.0.1
    sys.exit(main())
