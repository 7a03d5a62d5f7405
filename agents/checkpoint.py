"""Checkpoints of learned schedulers, and loading a policy for evaluation.

A checkpoint is a directory:

==================  =========================================================================
``model.zip``       SB3's ``save`` (weights, optimizer state, hyperparameters, counters, the
                    agent's own run-time state: its numpy generator, pending slot decisions)
``replay.npz``      the replay buffer (DL²'s agents; SB3 never saves it in ``model.zip``)
``env.pkl``         the vectorised training env, mid-episode (``ClusterEnv`` pickles), so that
                    training resumes exactly where it stopped (not written for an env that
                    says ``picklable = False``: a federated ``RayVecEnv``)
``rng.pt``          torch's global RNG state
``global_rng.pkl``  numpy's and Python's global RNG states (SB3's PPO shuffles with numpy's)
``meta.json``       agent name and class, env config(s), timesteps, policy config
==================  =========================================================================

:func:`load_checkpoint` restores all of it (``learn(..., reset_num_timesteps=False)`` then
continues identically: a test checks it).  :func:`load_policy` returns just the policy network
and the metadata, for evaluation; it also accepts a bare ``model.zip`` or a pretraining
``policy.pt`` (with its ``policy.json``).
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import random
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.base_class import BaseAlgorithm

from envs.sim.errors import ConfigError

__all__ = [
    "load_checkpoint",
    "load_policy",
    "read_meta",
    "save_checkpoint",
    "save_policy_weights",
]

PathLike = str | os.PathLike[str]


def _agent_classes() -> dict[str, type[BaseAlgorithm]]:
    from sb3_contrib import MaskablePPO
    from stable_baselines3 import A2C, PPO

    from agents.dl2 import DL2A2C
    from agents.group import GroupPPO

    return {
        "DL2A2C": DL2A2C,
        "GroupPPO": GroupPPO,
        "PPO": PPO,
        "MaskablePPO": MaskablePPO,
        "A2C": A2C,
    }


def save_checkpoint(model: BaseAlgorithm, directory: PathLike, meta: dict[str, Any]) -> Path:
    """Write ``model`` (and its replay, env and RNG state) to ``directory``."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    model.save(d / "model.zip")
    replay = getattr(model, "replay", None)
    if replay is not None and replay.enabled:
        replay.save(d / "replay.npz")
    env = model.get_env()
    if env is not None and getattr(env, "picklable", True):  # not a RayVecEnv (actors)
        import cloudpickle

        (d / "env.pkl").write_bytes(cloudpickle.dumps(env))
    th.save(th.get_rng_state(), d / "rng.pt")
    # SB3's rollout buffer shuffles with numpy's global RNG (PPO, MaskablePPO), exploration
    # code may use Python's: both states, so that a resumed run continues identically
    (d / "global_rng.pkl").write_bytes(pickle.dumps({"numpy": np.random.get_state(),
                                                     "python": random.getstate()}))  # fmt: skip
    info = dict(meta)
    info.update({"class": type(model).__name__, "num_timesteps": int(model.num_timesteps)})
    (d / "meta.json").write_text(json.dumps(info, indent=2, default=str))
    return d


@contextlib.contextmanager
def _reading(path: Path, what: str) -> Iterator[None]:
    """Turn a truncated or corrupt checkpoint file's low-level error into one that names it."""
    try:
        yield
    except ConfigError:
        raise
    except (
        zipfile.BadZipFile,
        EOFError,
        pickle.UnpicklingError,
        OSError,
        RuntimeError,
        ValueError,
        KeyError,
        AttributeError,
        TypeError,
        IndexError,
        AssertionError,  # SB3's "No data found in the saved file"
    ) as exc:
        raise ConfigError(
            f"{path}: cannot read {what}: the file is corrupt, truncated or from an "
            f"incompatible setup ({type(exc).__name__}: {str(exc)[:300]})"
        ) from None


def read_meta(d: Path) -> dict[str, Any]:
    """A checkpoint directory's ``meta.json`` (``{}`` without one; a corrupt one is a
    :class:`ConfigError` naming it)."""
    p = d / "meta.json"
    if not p.is_file():
        return {}
    with _reading(p, "the checkpoint's metadata"):
        meta = json.loads(p.read_text())
    if not isinstance(meta, dict):
        raise ConfigError(f"{p}: expected a JSON object")
    return meta


def load_checkpoint(directory: PathLike, env: Any = None) -> BaseAlgorithm:
    """The model saved in ``directory``, with its replay buffer, env (unless ``env`` is given)
    and torch RNG state restored."""
    d = Path(directory)
    if not (d / "model.zip").is_file():
        raise ConfigError(f"no checkpoint in {d} (model.zip missing)")
    meta = read_meta(d)
    classes = _agent_classes()
    name = meta.get("class", "DL2A2C")
    if name not in classes:
        raise ConfigError(f"{d}: unknown agent class {name!r}; known: {sorted(classes)}")
    restored_env = env is None and (d / "env.pkl").is_file()
    if restored_env:
        with _reading(d / "env.pkl", "the saved training env"):
            env = pickle.loads((d / "env.pkl").read_bytes())
    # with the saved env, keep the saved last observation (SB3 would reset the env)
    with _reading(d / "model.zip", "the model"):
        model = classes[name].load(
            d / "model.zip", env=env, device="cpu", force_reset=not restored_env
        )
    replay = getattr(model, "replay", None)
    if replay is not None and replay.enabled and (d / "replay.npz").is_file():
        with _reading(d / "replay.npz", "the replay buffer"):
            replay.load(d / "replay.npz")
    if (d / "rng.pt").is_file():
        with _reading(d / "rng.pt", "torch's RNG state"):
            th.set_rng_state(th.load(d / "rng.pt"))
    if (d / "global_rng.pkl").is_file():
        with _reading(d / "global_rng.pkl", "numpy's and Python's RNG states"):
            states = pickle.loads((d / "global_rng.pkl").read_bytes())
            np.random.set_state(states["numpy"])
            random.setstate(states["python"])
    return model


def save_policy_weights(policy: th.nn.Module, path: PathLike, meta: dict[str, Any]) -> Path:
    """A pretrained policy: ``policy.pt`` (state dict) and ``policy.json`` (how to rebuild)."""
    p = Path(path).with_suffix(".pt")
    p.parent.mkdir(parents=True, exist_ok=True)
    th.save(policy.state_dict(), p)
    p.with_suffix(".json").write_text(json.dumps(meta, indent=2, default=str))
    return p


def load_policy(path: PathLike) -> tuple[Any, dict[str, Any]]:
    """``(policy, meta)`` from a checkpoint directory, a ``model.zip`` or a ``policy.pt``.

    ``meta["env"]`` is the env config the policy was trained with (when recorded)."""
    p = Path(path)
    if p.is_dir():
        if (p / "model.zip").is_file():
            meta = read_meta(p)
            classes = _agent_classes()
            cls = classes.get(meta.get("class", "DL2A2C"), classes["DL2A2C"])
            with _reading(p / "model.zip", "the model"):
                return cls.load(p / "model.zip", device="cpu").policy, meta
        if (p / "policy.pt").is_file():
            p = p / "policy.pt"
        else:
            raise ConfigError(f"{p}: neither a checkpoint (model.zip) nor pretrained weights")
    if p.suffix == ".zip":
        meta = read_meta(p.parent)
        classes = _agent_classes()
        cls = classes.get(meta.get("class", "DL2A2C"), classes["DL2A2C"])
        with _reading(p, "the model"):
            return cls.load(p, device="cpu").policy, meta
    if p.suffix == ".pt":
        return _load_pretrained(p)
    raise ConfigError(f"{p}: expected a checkpoint directory, model.zip or policy.pt")


def _load_pretrained(p: Path) -> tuple[Any, dict[str, Any]]:
    from agents.policy import DL2Policy, PolicyConfig, policy_kwargs
    from envs.gym.factory import coerce_env_config, make_env

    meta_path = p.with_suffix(".json")
    if not meta_path.is_file():
        raise ConfigError(f"{p}: its {meta_path.name} (how to rebuild the policy) is missing")
    with _reading(meta_path, "the policy's metadata"):
        meta = json.loads(meta_path.read_text())
        env = make_env(coerce_env_config(meta["env"]))
    # weights saved before ``policy.arch`` existed are MLPs, whatever the default is now
    kwargs = policy_kwargs(PolicyConfig(**{"arch": "mlp", **meta.get("policy", {})}), env.J)
    policy = DL2Policy(env.observation_space, env.action_space, lambda _: 1e-4, **kwargs)
    with _reading(p, f"the weights (for the network {meta_path.name} describes)"):
        policy.load_state_dict(th.load(p))
    policy.set_training_mode(False)
    return policy, meta
