"""Build a learner from an :class:`~agents.config.AgentConfig`: the builders the registry
:data:`agents.learners.LEARNERS` names (``build``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch as th
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.vec_env import VecEnv

from agents.config import AgentConfig
from agents.dl2 import DL2A2C
from agents.learners import learner, resolve
from agents.policy import DL2Policy, policy_kwargs
from envs.sim.errors import ConfigError

__all__ = [
    "build_agent",
    "build_dl2",
    "build_group",
    "build_maskable_ppo",
    "build_ppo",
    "env_copies",
    "load_pretrained_weights",
]


def build_dl2(cfg: AgentConfig, env: VecEnv, kwargs: dict[str, Any], seed: int, tb: str | None):
    return DL2A2C(
        env=env,
        learning_rate=cfg.learning_rate,
        n_steps=cfg.n_steps,
        gamma=cfg.gamma,
        ent_coef=cfg.ent_coef,
        vf_coef=cfg.vf_coef,
        max_grad_norm=cfg.max_grad_norm,
        returns=cfg.returns,
        critic=cfg.critic,
        baseline_momentum=cfg.baseline_momentum,
        exploration=cfg.exploration,
        replay=cfg.replay,
        gradient_steps=cfg.gradient_steps,
        normalize_advantage=cfg.normalize_advantage,
        policy_kwargs=kwargs,
        tensorboard_log=tb,
        seed=seed,
    )


def build_group(cfg: AgentConfig, env: VecEnv, kwargs: dict[str, Any], seed: int, tb: str | None):
    from agents.group import GroupPPO

    return GroupPPO(
        env=env,
        learning_rate=cfg.learning_rate,
        gamma=cfg.gamma,
        ent_coef=cfg.ent_coef,
        vf_coef=cfg.vf_coef,
        max_grad_norm=cfg.max_grad_norm,
        group=cfg.group,
        normalize_advantage=cfg.normalize_advantage,
        policy_kwargs=kwargs,
        tensorboard_log=tb,
        seed=seed,
    )


def _ppo_kwargs(
    cfg: AgentConfig, kwargs: dict[str, Any], seed: int, tb: str | None
) -> dict[str, Any]:
    """Keyword arguments shared by PPO and MaskablePPO."""
    return {
        "learning_rate": cfg.learning_rate,
        "n_steps": cfg.n_steps,
        "batch_size": cfg.ppo.batch_size,
        "n_epochs": cfg.ppo.n_epochs,
        "gamma": cfg.gamma,
        "gae_lambda": cfg.ppo.gae_lambda,
        "clip_range": cfg.ppo.clip_range,
        "ent_coef": cfg.ent_coef,
        "vf_coef": cfg.vf_coef,
        "max_grad_norm": cfg.max_grad_norm,
        "policy_kwargs": kwargs,
        "tensorboard_log": tb,
        "seed": seed,
        "device": "cpu",
    }


def build_ppo(cfg: AgentConfig, env: VecEnv, kwargs: dict[str, Any], seed: int, tb: str | None):
    from stable_baselines3 import PPO

    if kwargs.get("per_job") is not None:
        raise ConfigError(
            "agent.algo ppo uses SB3's unmasked MlpPolicy; policy.arch per_job needs a "
            "DL2Policy learner: dl2_a2c or maskable_ppo (or set policy.arch=mlp)"
        )
    return PPO("MlpPolicy", env, **_ppo_kwargs(cfg, kwargs, seed, tb))


def build_maskable_ppo(
    cfg: AgentConfig, env: VecEnv, kwargs: dict[str, Any], seed: int, tb: str | None
):
    from sb3_contrib import MaskablePPO

    return MaskablePPO(DL2Policy, env, **_ppo_kwargs(cfg, kwargs, seed, tb))


def env_copies(agent: AgentConfig, n_envs: int = 1) -> int:
    """The env copies a run of ``agent`` steps: ``n_envs``, or ``groups x group_size`` for a
    learner whose entry says ``env_copies="groups"`` (the group learner; ``n_envs`` must then
    be 1 or that number)."""
    if learner(agent.algo).env_copies != "groups":
        return int(n_envs)
    n = agent.group.groups * agent.group.group_size
    agent.group.check(n)
    if n_envs not in (1, n):
        raise ConfigError(
            f"n_envs={n_envs} disagrees with agent.group: the group learner runs "
            f"groups x group_size = {n} env copies (leave n_envs at 1)"
        )
    return n


def build_agent(
    cfg: AgentConfig, env: VecEnv, J: int, seed: int, tensorboard_log: str | None = None
) -> BaseAlgorithm:
    """A fresh learner on ``env`` whose window is ``J`` jobs (a workload mixture is set
    afterwards: ``model.set_mixture``, the group learner only)."""
    entry = learner(cfg.algo)
    if entry.build is None:
        raise ConfigError(
            f"agent.algo {cfg.algo!r} is built by its {entry.pipeline!r} pipeline, not here"
        )
    if "n_steps" in entry.keys and cfg.n_steps < 1:  # (the group learner runs whole episodes)
        raise ConfigError(f"agent.n_steps must be >= 1 (decisions per update), got {cfg.n_steps}")
    build: Callable[..., BaseAlgorithm] = resolve(entry.build)
    return build(cfg, env, policy_kwargs(cfg.policy, J), seed, tensorboard_log)


def load_pretrained_weights(model: BaseAlgorithm, path: str | Path) -> None:
    """Load pretraining's ``policy.pt`` (a torch state dict), or the network of a
    ``Cluster-v0`` policy file ``policy.npz`` (the one format, :mod:`agents.policy_file`:
    fine-tuning a released policy), into ``model.policy`` (same class and shape)."""
    if Path(path).suffix == ".npz":
        from agents.policy_file import load

        loaded = load(path)
        if loaded.meta["net"].get("kind") != "dl2":
            raise ConfigError(
                f"pretrained weights {path}: a {loaded.env_id} policy, not a "
                "dlsched/Cluster-v0 network this learner can start from"
            )
        state = loaded.net.state_dict()
    else:
        state = th.load(Path(path))
    try:
        model.policy.load_state_dict(state)
    except RuntimeError as exc:
        raise ConfigError(
            f"pretrained weights {path} do not fit the agent's policy (different J or "
            f"network shape?): {exc}"
        ) from None
    sync = getattr(model, "_fast", None)
    if sync is not None:
        sync.sync()
