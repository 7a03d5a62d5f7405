"""The one policy file format (``agents/policy_file.py``): every released policy is a file of
it, the older formats (``policy.pt`` + ``policy.json``, EpisodePG's ``dlsched.episode_pg/1``
``.npz``) still load, a conversion keeps the weights bit for bit (the same logits on
observations of a few env steps), and bad files and envs of another layout are one clear
``ConfigError``."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch as th

from agents.checkpoint import load_policy, save_policy_weights
from agents.episode_pg import MaskedMLP, load_episode_pg, save_episode_pg
from agents.policy import TorchPolicy, inference_policy
from agents.policy_file import (
    CLUSTER_ID,
    CONTENTION_ID,
    FORMAT,
    PLAN_ID,
    check_fits,
    convert,
    load,
    read_meta,
)
from envs.gym.factory import coerce_env_config, make_env
from envs.sim.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
RELEASED = sorted((ROOT / "policies").glob("*/policy.npz"))
#: released in the one format from the start: no older file to compare with
BORN_IN_FORMAT = {"contention_selector", "contention_search", "contention_known", "general_search"}
RESAVED = [p for p in RELEASED if p.parent.name not in BORN_IN_FORMAT]
#: the commit whose ``policies/`` still held the older formats (before the re-save)
OLD_COMMIT = "4bf034790690940df85db0a1add2ef01ccee1e77"
OLD_FILES = {"policy.pt", "policy.json"}


def _observations(meta: dict[str, Any], steps: int = 6) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(obs, mask)`` of the first ``steps`` decisions of validation workload 100 in the env
    the policy was trained in, each step the first valid action."""
    env: Any
    env_id = meta["layout"]["env_id"]
    if env_id == CLUSTER_ID:
        env = make_env(coerce_env_config(meta["env"]))
    elif env_id == PLAN_ID:
        from envs.gym.plan_env import PlanEnv

        layout = meta["env"]
        env = PlanEnv(config=layout["env"], plans=[(n, o) for n, o in layout["plans"]])
    else:
        from envs.gym.contention_env import ContentionEnv

        layout = meta["env"]
        env = ContentionEnv(J=layout["J"], placements=layout["placements"], comm=layout["comm"],
                            num_servers=layout["num_servers"],
                            gpus_per_server=layout["gpus_per_server"], num_jobs=40)  # fmt: skip
    obs, _ = env.reset(seed=100)
    out = []
    for _ in range(steps):
        mask = np.asarray(env.action_masks(), dtype=bool)
        out.append((np.asarray(obs, dtype=np.float32), mask))
        obs, _, term, trunc, _ = env.step(int(np.flatnonzero(mask)[0]))
        if term or trunc:
            break
    return out


def _logits(net: Any, obs: np.ndarray, mask: np.ndarray) -> np.ndarray:
    if isinstance(net, th.nn.Module) and hasattr(net, "logits_one"):
        return net.logits_one(obs, mask).numpy()
    return TorchPolicy(net).logits(obs, mask)


def _old_copy(path: Path, tmp: Path) -> Path | None:
    """The released directory ``path`` as it was at :data:`OLD_COMMIT` (older formats), in
    ``tmp``; ``None`` outside a git checkout holding that commit."""
    rel = path.relative_to(ROOT).as_posix()
    try:
        names = subprocess.run(["git", "ls-tree", "--name-only", OLD_COMMIT, f"{rel}/"],
                               cwd=ROOT, capture_output=True, text=True, check=True)  # fmt: skip
        for name in names.stdout.split():
            blob = subprocess.run(["git", "show", f"{OLD_COMMIT}:{name}"], cwd=ROOT,
                                  capture_output=True, check=True)  # fmt: skip
            (tmp / Path(name).name).write_bytes(blob.stdout)
    except (OSError, subprocess.CalledProcessError):
        return None
    return tmp if any(tmp.iterdir()) else None


def test_every_released_policy_is_one_file_of_the_format() -> None:
    assert len(RELEASED) == 12 and len(RESAVED) == 8
    for path in RELEASED:
        assert not {p.name for p in path.parent.iterdir()} & OLD_FILES, path.parent
        with np.load(path, allow_pickle=False) as data:  # no pickle anywhere in it
            meta = json.loads(str(data["__meta__"]))
        assert meta["format"] == FORMAT
        assert meta["layout"]["env_id"] in (CLUSTER_ID, PLAN_ID, CONTENTION_ID)
        assert meta["act"] in ("argmax", "sampled") and meta["masked"] is True
        assert {"kind", "activation"} <= set(meta["net"])
        for key in ("command", "git_commit", "versions", "seed"):
            assert meta["training"].get(key) is not None or key in meta["training"]["unknown"]


@pytest.mark.parametrize("path", RESAVED, ids=[p.parent.name for p in RESAVED])
def test_released_file_gives_the_old_files_logits(path: Path, tmp_path: Path) -> None:
    """The re-saved network against the older file it came from (at :data:`OLD_COMMIT`),
    loaded by the older loader: the same weights and the same logits, bit for bit, on
    observations of a few env steps."""
    old_dir = _old_copy(path.parent, tmp_path)
    if old_dir is None:
        pytest.skip("the older files are read from git history (not a git checkout)")
    new = load(path)
    if (old_dir / "policy.pt").is_file():
        old_net, _ = load_policy(old_dir / "policy.pt")  # the older loader (torch state dict)
        assert new.net.__class__ is old_net.__class__
        assert type(inference_policy(new.net)) is type(inference_policy(old_net))
    else:
        with np.load(old_dir / "policy.npz", allow_pickle=False) as data:
            old_meta = json.loads(str(data["__meta__"]))
            assert old_meta["format"] == "dlsched.episode_pg/1"
            state = new.net.state_dict()
            for k in data.files:
                if k != "__meta__":
                    assert np.array_equal(data[k], state[k].numpy()), k
        old_net, _ = load_episode_pg(old_dir / "policy.npz")
        assert new.meta["env"] == old_meta["env"] and new.meta["act"] == old_meta["act"]
    samples = _observations(new.meta)
    assert samples
    for obs, mask in samples:
        assert np.array_equal(_logits(new.net, obs, mask), _logits(old_net, obs, mask))


def _tiny_pt(tmp_path: Path) -> Path:
    """A ``policy.pt`` + ``policy.json`` of the older release format (a fresh network)."""
    from agents.policy import DL2Policy, PolicyConfig, policy_kwargs

    env_cfg = {"setting": "tiny"}
    env = make_env(coerce_env_config(env_cfg))
    th.manual_seed(0)
    kwargs = policy_kwargs(PolicyConfig(arch="mlp"), env.J)
    policy = DL2Policy(env.observation_space, env.action_space, lambda _: 1e-4, **kwargs)
    made = {"command": "python train.py +agent=gppo env=tiny", "seed": 3,
            "git": {"commit": "abc", "dirty": False}, "versions": {"x": "1"}}  # fmt: skip
    info = {"env": env_cfg, "policy": {"arch": "mlp"}, "agent": "gppo", "class": "GroupPPO",
            "num_timesteps": 10, "act": "sampled", "trained_with": made}  # fmt: skip
    return save_policy_weights(policy, tmp_path / "old" / "policy.pt", info)


def test_an_older_policy_pt_loads_and_converts_bit_for_bit(tmp_path: Path) -> None:
    pt = _tiny_pt(tmp_path)
    old = load(pt.parent)  # the directory: its policy.pt
    assert old.source == "policy.pt" and old.env_id == CLUSTER_ID and not old.deterministic
    assert old.meta["training"]["seed"] == 3 and old.meta["training"]["git_commit"] == "abc"
    assert old.meta["training"]["unknown"] == ["config"]  # the older file did not record it
    new_path = convert(pt, tmp_path / "new" / "policy.npz")
    new = load(new_path)
    assert new.source == FORMAT and new.meta["layout"] == old.meta["layout"]
    net, meta = load_policy(new_path.parent)  # the checkpoint loader takes the new file
    assert meta["env"] == {"setting": "tiny"} and meta["act"] == "sampled"
    for obs, mask in _observations(new.meta):
        assert np.array_equal(_logits(net, obs, mask), _logits(old.net, obs, mask))
    # the layout check: one line naming the file, what it expects and what the env gives
    size = new.meta["layout"]["obs_size"]
    with pytest.raises(ConfigError, match=rf"policy.npz: the policy expects {CLUSTER_ID}.*"
                       rf"{size} entries.*the env gives {PLAN_ID}"):  # fmt: skip
        check_fits(new.path, new.meta, PLAN_ID, size, 7)
    check_fits(new.path, new.meta, CLUSTER_ID, size, new.meta["layout"]["n_actions"])


def _old_episode_npz(path: Path, net: MaskedMLP, env: dict[str, Any]) -> Path:
    """A file of the older EpisodePG format (``dlsched.episode_pg/1``)."""
    meta = {"format": "dlsched.episode_pg/1", "obs_size": net.obs_size, "n_actions":
            net.n_actions, "hidden": 16, "act": "argmax", "env": env,
            "training": {"argv": ["x.py"], "seed": 1}}  # fmt: skip
    arrays = {k: v.numpy() for k, v in net.state_dict().items()}
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, __meta__=np.array(json.dumps(meta)), **arrays)
    return path


def test_an_older_episode_pg_file_loads_and_converts(tmp_path: Path) -> None:
    from envs.gym.contention_env import ContentionEnv

    env = ContentionEnv(J=4, num_jobs=8)
    th.manual_seed(1)
    net = MaskedMLP(env.obs_size, int(env.action_space.n), hidden=16)
    from agents.episode_pg import contention_env_layout

    old_path = _old_episode_npz(tmp_path / "old.npz", net, contention_env_layout(env))
    old = load(old_path)
    assert old.source == "dlsched.episode_pg/1" and old.env_id == CONTENTION_ID
    assert old.meta["training"]["unknown"] == ["config", "git_commit", "versions"]
    new = load(convert(old_path, tmp_path / "new.npz"))
    assert new.source == FORMAT and new.meta["layout"]["J"] == 4
    obs, _ = env.reset(seed=0)
    mask = np.asarray(env.action_masks(), dtype=bool)
    assert th.equal(new.net.logits_one(obs, mask), net.logits_one(obs, mask))
    # the writer: save_episode_pg writes the one format
    saved = save_episode_pg(tmp_path / "w" / "policy.npz", net, env, {"seed": 2})
    assert read_meta(saved)["format"] == FORMAT
    assert load_episode_pg(saved)[1]["layout"]["env_id"] == CONTENTION_ID


def test_bad_files_are_one_config_error(tmp_path: Path) -> None:
    from envs.gym.contention_env import ContentionEnv

    env = ContentionEnv(J=4, num_jobs=8)
    net = MaskedMLP(env.obs_size, int(env.action_space.n), hidden=8)
    with th.no_grad():
        net.net[0].weight[0, 0] = float("nan")
    with pytest.raises(ConfigError, match="non-finite"):
        save_episode_pg(tmp_path / "nan.npz", net, env, {})
    # a file written with a non-finite weight by other means is refused on loading
    bad = _old_episode_npz(tmp_path / "bad.npz", net, {"J": 4, "placements": ["ff"]})
    with pytest.raises(ConfigError, match=r"bad\.npz: weight 'net\.0\.weight' holds non-finite"):
        load(bad)
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match=r"junk\.npz: cannot read the saved policy"):
        load(tmp_path / "junk.npz")
    np.savez(tmp_path / "other.npz", __meta__=np.array(json.dumps({"format": "x/9"})))
    with pytest.raises(ConfigError, match=r"other\.npz: format 'x/9' is not"):
        load(tmp_path / "other.npz")
    with pytest.raises(ConfigError, match="no policy file"):
        load(tmp_path)
    # a Cluster-v0 network is not an EpisodePG one (and the reverse)
    pt = _tiny_pt(tmp_path)
    converted = convert(pt, tmp_path / "c" / "policy.npz")
    with pytest.raises(ConfigError, match="not an EpisodePG one: evaluate it as policy:<path>"):
        load_episode_pg(converted)
    plain = MaskedMLP(env.obs_size, int(env.action_space.n), hidden=8)
    episode = save_episode_pg(tmp_path / "w" / "policy.npz", plain, env, {})
    with pytest.raises(ConfigError, match="not a dlsched/Cluster-v0 network"):
        load_policy(episode)


def test_a_cluster_policy_file_starts_a_learner_and_acts_through_dlsched(tmp_path: Path) -> None:
    """Fine-tuning from a released-style file (``agents.build.load_pretrained_weights``) takes
    its weights as they are; ``dlsched.load_policy`` acts with it and refuses an env of another
    layout in one line naming the file."""
    from types import SimpleNamespace

    from agents.build import load_pretrained_weights
    from agents.policy import DL2Policy, PolicyConfig, policy_kwargs
    from dlsched.policies import load_policy as load_public

    saved = convert(_tiny_pt(tmp_path), tmp_path / "new" / "policy.npz")
    source = load(saved).net
    env = make_env(coerce_env_config({"setting": "tiny"}))
    th.manual_seed(9)
    kwargs = policy_kwargs(PolicyConfig(arch="mlp"), env.J)
    fresh = DL2Policy(env.observation_space, env.action_space, lambda _: 1e-4, **kwargs)
    load_pretrained_weights(SimpleNamespace(policy=fresh), saved)  # type: ignore[arg-type]
    for k, v in source.state_dict().items():
        assert th.equal(fresh.state_dict()[k], v), k

    policy = load_public(saved.parent)
    assert policy.kind == "network" and policy.env == {"setting": "tiny"}
    obs, _ = env.reset(seed=0)
    assert env.action_masks()[policy.act(env, obs)]
    other = make_env(coerce_env_config({"setting": "small"}))
    other.reset(seed=0)
    want = r"new: the policy expects dlsched/Cluster-v0, observations of 104 .*gives .* 260 "
    with pytest.raises(ConfigError, match=want):
        policy.act(other, other.reset(seed=0)[0])
