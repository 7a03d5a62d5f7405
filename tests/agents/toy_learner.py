"""A learner a newcomer might add (docs/index.md, newcomer path (d)): Stable-Baselines3's stock
A2C on its unmasked MLP policy, built from the run's ``agent`` block.  Registered by
``tests/agents/test_learners.py`` only, to show that one registry entry and this builder make
it a ``train.py`` learner."""

from __future__ import annotations

from typing import Any

from stable_baselines3 import A2C
from stable_baselines3.common.vec_env import VecEnv

from agents.config import AgentConfig


def build(cfg: AgentConfig, env: VecEnv, kwargs: dict[str, Any], seed: int, tb: str | None) -> A2C:
    """The builder the registry names (``(cfg, env, policy_kwargs, seed, tensorboard_log)``);
    the stock MLP takes none of DL²'s policy options, so ``kwargs`` is not used."""
    return A2C(
        "MlpPolicy",
        env,
        learning_rate=cfg.learning_rate,
        n_steps=cfg.n_steps,
        gamma=cfg.gamma,
        ent_coef=cfg.ent_coef,
        vf_coef=cfg.vf_coef,
        max_grad_norm=cfg.max_grad_norm,
        tensorboard_log=tb,
        seed=seed,
        device="cpu",
    )
