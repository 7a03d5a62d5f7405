"""``agents.ray_setup`` without a cluster: where a joining driver's Ray token comes from (and
the one-line errors when it cannot), a head that is not there failing before ``ray.init``, and
a local Ray that stays on 127.0.0.1, declares its CPUs and writes nothing to ``$HOME``.
The checks against a real head (a wrong or missing token) are in ``test_ray_cluster.py``."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agents.ray_setup import check_cluster, driver_token, init_ray
from envs.sim.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
AUTH_VARS = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty $HOME and no Ray token variable: Ray's default token file is home/.ray."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in AUTH_VARS:
        monkeypatch.delenv(var, raising=False)
    return home


def test_the_token_comes_from_the_variable_then_the_named_file_then_home(
    home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    default = home / ".ray" / "auth_token"
    default.parent.mkdir()
    default.write_text("from-home\n")
    assert driver_token() is None  # RAY_AUTH_MODE unset: Ray sends no token to an address
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    assert driver_token() is None
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert driver_token() == ("from-home", f"the file {default}")
    named = tmp_path / "tok"
    named.write_text("  from-path \n")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(named))
    assert driver_token() == ("from-path", f"RAY_AUTH_TOKEN_PATH={named}")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "from-var")
    assert driver_token() == ("from-var", "RAY_AUTH_TOKEN")


def test_no_token_is_one_line_naming_where_to_put_it(
    home: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    with pytest.raises(ConfigError) as err:
        driver_token()
    assert str(err.value) == (
        "RAY_AUTH_MODE=token but no Ray token is set: put the head's token in RAY_AUTH_TOKEN, "
        f"or in a file named by RAY_AUTH_TOKEN_PATH, or in {home / '.ray' / 'auth_token'}"
    )
    missing = tmp_path / "nope"
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(missing))
    with pytest.raises(ConfigError) as err:
        driver_token()
    assert str(err.value) == (
        f"RAY_AUTH_TOKEN_PATH={missing}: cannot read the Ray token there (No such file or "
        "directory)"
    )
    missing.write_text("\n")
    with pytest.raises(ConfigError, match=r"RAY_AUTH_TOKEN_PATH=.*: the file is empty"):
        driver_token()
    assert not (home / ".ray").exists()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when this returns


@pytest.mark.usefixtures("ray_init_forbidden")
def test_no_head_at_the_address_fails_before_ray_init(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    address = f"127.0.0.1:{_closed_port()}"
    with pytest.raises(ConfigError) as err:
        init_ray(address)
    msg = str(err.value)
    assert msg.startswith(f"cannot join the Ray cluster at {address}: no Ray head answers there")
    assert "UNAVAILABLE" in msg and "`ray start --head`" in msg and "\n" not in msg
    # a missing token is found before the head is asked
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    with pytest.raises(ConfigError, match="RAY_AUTH_MODE=token but no Ray token is set"):
        init_ray(address)


def test_addresses_the_probe_leaves_to_ray() -> None:
    for address in ("auto", "ray://10.0.0.1:10001", "10.0.0.1"):
        assert check_cluster(address) is False  # nothing asked: no network, no error


def test_a_local_ray_is_on_loopback_declares_its_cpus_and_leaves_home_alone(
    tmp_path: Path,
) -> None:
    """In a fresh process with an empty $HOME and no token given: Ray 2.60 would write
    ``$HOME/.ray/auth_token``; ``init_ray`` gives its Ray a token in the environment instead.
    Its workers run at the driver's nice level."""
    pytest.importorskip("ray")
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in AUTH_VARS}
    env.update(HOME=str(home), RAY_USAGE_STATS_ENABLED="0")
    code = (
        "import json, os, ray\n"
        "from agents.ray_setup import init_ray\n"
        "assert init_ray(None, num_cpus=1)\n"
        "nodes = [(n['NodeManagerAddress'], n['Resources'].get('CPU')) for n in ray.nodes()]\n"
        "nice = ray.get(ray.remote(lambda: os.nice(0)).remote())\n"
        "out = {'nodes': nodes, 'cpus': ray.cluster_resources().get('CPU'),\n"
        "       'token': len(os.environ.get('RAY_AUTH_TOKEN', '')), 'nice': nice - os.nice(0)}\n"
        "print(json.dumps(out))\n"
        "ray.shutdown()\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
        timeout=180,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    # its workers at the driver's priority (Ray's default: nice 15, starved by any busy process)
    assert got == {"nodes": [["127.0.0.1", 1.0]], "cpus": 1.0, "token": 64, "nice": 0}
    assert list(home.iterdir()) == []  # no .ray/auth_token (nor anything else)
