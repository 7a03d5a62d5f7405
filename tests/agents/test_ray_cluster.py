"""The README's two-machine federated recipe, on one machine: a real two-node Ray cluster (a
head and a worker, ``ray start`` on 127.0.0.1, telemetry off, Ray's token authentication on as
in Ray >= 2.60) and ``train.py federated=ray federated.address=...`` joining it from a third
process.  The actors land on both nodes (SPREAD) and the run says which node steps which
cluster.  Only the processes started here are stopped, by their process groups."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_federated_training_on_a_two_node_ray_cluster(ray_cluster, tmp_path: Path) -> None:
    address, env = ray_cluster.address, ray_cluster.env
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
    address, env = ray_cluster.address, ray_cluster.env
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
