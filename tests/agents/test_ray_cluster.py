"""The README's two-machine federated recipe, on one machine: a real two-node Ray cluster (a
head and a worker, ``ray start`` on 127.0.0.1, telemetry off, Ray's token authentication on as
in Ray >= 2.60) and ``train.py federated=ray federated.address=...`` joining it from a third
process.  The actors land on both nodes (SPREAD) and the run says which node steps which
cluster.  Only the processes started here are stopped, by their process groups."""

from __future__ import annotations

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
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RAY = Path(sys.executable).parent / "ray"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the group of a ``ray start --block`` we started (it stops its Ray
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


@pytest.fixture
def ray_cluster(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    if not RAY.is_file():
        pytest.skip("the ray command is not installed")
    # (another test's one-machine Ray sets RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 in this process:
    # not for these nodes, which must form a multi-node cluster)
    env = {
        **{k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"},
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": secrets.token_hex(16),
    }
    port = _free_port()
    address = f"127.0.0.1:{port}"
    common = ["--node-ip-address=127.0.0.1", "--num-cpus=1", "--block", "--disable-usage-stats"]
    started: list[subprocess.Popen[bytes]] = []
    temp = tempfile.mkdtemp(prefix="dlray")  # short: Ray's socket paths must fit 107 bytes

    def start(args: list[str], log: Path, what: str) -> None:
        """Start one node; wait until Ray says it runs (it failing or 60 s: the test fails)."""
        proc = subprocess.Popen(
            args, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT, start_new_session=True
        )
        started.append(proc)
        deadline = time.monotonic() + 60
        while "Ray runtime started" not in log.read_text(errors="replace"):
            assert proc.poll() is None, log.read_text(errors="replace")[-2000:]
            assert time.monotonic() < deadline, f"the Ray {what} did not start in 60 s"
            time.sleep(0.5)

    try:
        head = [str(RAY), "start", "--head", f"--port={port}", "--include-dashboard=false",
                f"--temp-dir={temp}", *common]  # fmt: skip
        start(head, tmp_path / "head.log", "head")
        start(
            [str(RAY), "start", f"--address={address}", *common], tmp_path / "worker.log", "worker"
        )
        yield address, env
    finally:
        for proc in reversed(started):
            _stop(proc)
        shutil.rmtree(temp, ignore_errors=True)


def test_federated_training_on_a_two_node_ray_cluster(ray_cluster, tmp_path: Path) -> None:
    address, env = ray_cluster
    out = subprocess.run(
        [
            sys.executable, "train.py", "+agent=a2c", "federated=ray",
            f"federated.address={address}", "federated.envs_per_actor=2",
            "pretrain=none", "total_timesteps=256", "agent.n_steps=64", "eval=quick",
            "progress_bar=false", f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    nodes = [ln for ln in out.stderr.splitlines() if ln.startswith("federated: clusters")]
    assert len(nodes) == 2  # 3 clusters, 2 per actor: 2 actors
    assert len({ln.split(" on node ")[1] for ln in nodes}) == 2  # one actor on each node
    assert (tmp_path / "run" / "summary.json").is_file()


def test_joining_without_the_token_is_one_clear_error(ray_cluster, tmp_path: Path) -> None:
    address, env = ray_cluster
    wrong = {**env, "RAY_AUTH_TOKEN": "0" * 32}
    out = subprocess.run(
        [
            sys.executable, "train.py", "+agent=a2c", "federated=ray",
            f"federated.address={address}", "pretrain=none", "total_timesteps=64",
            "progress_bar=false", f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=ROOT, env=wrong, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert out.returncode == 2, out.stdout[-2000:]
    assert f"train.py: cannot join the Ray cluster at {address}" in out.stderr
    assert "RAY_AUTH_MODE=token" in out.stderr
    assert "Traceback" not in out.stderr
