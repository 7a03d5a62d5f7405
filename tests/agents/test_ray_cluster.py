"""The README's two-machine federated recipe, on one machine: a real two-node Ray cluster (a
head and a worker, ``ray start`` on 127.0.0.1, telemetry off, Ray's token authentication on as
in Ray >= 2.60) and ``train.py federated=ray federated.address=...`` joining it from a third
process.  The actors land on both nodes (SPREAD) and the run says which node steps which
cluster.  Both nodes are on 127.0.0.1 only, with one CPU each; a driver with a wrong or no
token gets one error line before ``ray.init`` is called.  Only the processes started here are
stopped, by their process groups."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agents.ray_setup import check_cluster, init_ray
from envs.sim.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


@pytest.fixture
def ray_cluster(shared_ray_cluster):
    """The module's tests share one cluster: none stops a node, each driver leaves with its
    actors."""
    return shared_ray_cluster


def test_the_cluster_is_two_loopback_nodes_of_one_cpu_each(ray_cluster) -> None:
    """Joined through ``init_ray`` in a driver process: every node advertises 127.0.0.1 and
    declares one CPU (2 in all: no more than this machine has), its workers run at the
    driver's nice level, and neither the head's port
    nor a raylet's answers on the machine's network address."""
    code = (
        "import json, os, ray, sys\n"
        "from agents.ray_setup import init_ray\n"
        "assert init_ray(sys.argv[1])\n"
        "nodes = [(n['NodeManagerAddress'], n['NodeManagerPort'], n['Alive'],\n"
        "          n['Resources'].get('CPU')) for n in ray.nodes()]\n"
        "nice = ray.get(ray.remote(lambda: os.nice(0)).remote()) - os.nice(0)\n"
        "print(json.dumps({'nodes': nodes, 'cpus': ray.cluster_resources().get('CPU'),\n"
        "                  'nice': nice}))\n"
        "ray.shutdown()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, ray_cluster.address], cwd=ROOT, env=ray_cluster.env,
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert sorted((ip, alive, cpus) for ip, _, alive, cpus in got["nodes"]) == [
        ("127.0.0.1", True, 1.0),
        ("127.0.0.1", True, 1.0),
    ]
    assert got["cpus"] == 2.0 <= (os.cpu_count() or 1)
    assert got["nice"] == 0  # the nodes' workers at the driver's priority, not Ray's nice 15
    from ray._common.network_utils import node_ip_address_from_perspective

    external = node_ip_address_from_perspective()  # the address Ray would have advertised
    if external.startswith("127."):
        pytest.skip("this machine has no network address besides loopback")
    ports = [int(ray_cluster.address.rsplit(":", 1)[1])] + [n[1] for n in got["nodes"]]
    for port in ports:
        with pytest.raises(OSError):  # refused: they listen on 127.0.0.1 only
            socket.create_connection((external, port), timeout=5).close()


@pytest.mark.usefixtures("ray_init_forbidden")
def test_a_wrong_or_missing_token_fails_before_ray_init(
    ray_cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``init_ray(address)`` asks the head first: each way of lacking the head's token is one
    line naming the variable or file, raised before ``ray.init`` (which would take ~20 s and
    three warnings to fail) is called; the right token, from any source, passes."""
    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))  # no user's ~/.ray/auth_token in play
    for var in AUTH_VARS:
        monkeypatch.delenv(var, raising=False)
    address, right = ray_cluster.address, ray_cluster.env["RAY_AUTH_TOKEN"]
    settings = "set RAY_AUTH_MODE=token and the head's token in RAY_AUTH_TOKEN"

    def error() -> str:
        with pytest.raises(ConfigError) as err:
            init_ray(address)
        msg = str(err.value)
        assert msg.startswith(f"cannot join the Ray cluster at {address}: ") and "\n" not in msg
        return msg.split(": ", 1)[1]

    assert error().startswith(
        f"the head requires Ray's token authentication and this driver sends no token: {settings}"
    )
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert error().startswith("RAY_AUTH_MODE=token but no Ray token is set: put the head's token")
    default = home / ".ray" / "auth_token"
    default.write_text("0" * 32)
    assert error().startswith(f"the head rejects this driver's Ray token (from the file {default})")
    named = tmp_path / "token"
    named.write_text("1" * 32)
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(named))
    assert error().startswith(
        f"the head rejects this driver's Ray token (from RAY_AUTH_TOKEN_PATH={named})"
    )
    monkeypatch.setenv("RAY_AUTH_TOKEN", "2" * 32)
    assert error().startswith(
        f"the head rejects this driver's Ray token (from RAY_AUTH_TOKEN): {settings}"
    )
    monkeypatch.setenv("RAY_AUTH_TOKEN", right)
    assert check_cluster(address) is True  # let through; every node is on 127.0.0.1
    with pytest.raises(AssertionError, match=r"ray\.init was called"):
        init_ray(address)  # the check passed: ray.init came next
    monkeypatch.delenv("RAY_AUTH_TOKEN")
    named.write_text(right + "\n")
    assert check_cluster(address) is True  # the same token from RAY_AUTH_TOKEN_PATH


def test_federated_training_on_a_two_node_ray_cluster(ray_cluster, tmp_path: Path) -> None:
    address, env = ray_cluster.address, ray_cluster.env
    out = subprocess.run(
        [
            sys.executable, "train.py", "+agent=a2c_increments", "federated=ray",
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
    """``train.py`` with a wrong token, then with none (an empty $HOME: no ~/.ray/auth_token):
    exit 2 and one line naming what to set, before Ray says anything (no Ray warning)."""
    address, env = ray_cluster.address, ray_cluster.env
    home = tmp_path / "home"
    home.mkdir()
    wrong = {**env, "RAY_AUTH_TOKEN": "0" * 32}
    none = {**{k: v for k, v in env.items() if k not in AUTH_VARS}, "HOME": str(home)}
    for run_env, why in [
        (wrong, "the head rejects this driver's Ray token (from RAY_AUTH_TOKEN)"),
        (none, "the head requires Ray's token authentication and this driver sends no token"),
    ]:
        out = subprocess.run(
            [
                sys.executable, "train.py", "+agent=a2c_increments", "federated=ray",
                f"federated.address={address}", "pretrain=none", "total_timesteps=64",
                "progress_bar=false", f"hydra.run.dir={tmp_path / 'run'}",
            ],
            cwd=ROOT, env=run_env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert out.returncode == 2, out.stdout[-2000:]
        line = f"train.py: cannot join the Ray cluster at {address}: {why}: set RAY_AUTH_MODE=token"
        assert line in out.stderr, out.stderr[-3000:]
        assert "RAY_AUTH_TOKEN" in out.stderr.split(why, 1)[1]
        assert "Traceback" not in out.stderr
        assert "WARNING" not in out.stderr and "Failed to connect" not in out.stderr
    assert list(home.iterdir()) == []
