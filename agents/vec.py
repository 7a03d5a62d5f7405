"""Vectorised envs for training: SB3's ``DummyVecEnv`` without its per-step deep copies.

``DummyVecEnv.step_wait`` deep-copies the observation buffer and every info dict on every
step (about a third of a decision's cost here).  :class:`LeanVecEnv` returns a plain copy of
the observation array and the info dicts themselves (each env builds a fresh dict per step, so
nothing is shared).  Same semantics otherwise (auto-reset, ``terminal_observation``,
``TimeLimit.truncated``).  Action masks of every env: sb3-contrib's ``get_action_masks(vec)``
(each env's ``action_masks()`` through its wrappers, stacked: ``(n_envs, n_actions)``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import gymnasium as gym
import numpy as np
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv
from stable_baselines3.common.vec_env.base_vec_env import VecEnvStepReturn

from envs.gym.factory import EnvConfig, make_env

__all__ = ["LeanVecEnv", "make_training_vec_env"]


class LeanVecEnv(DummyVecEnv):
    """:class:`DummyVecEnv` for flat ``Box`` observations, without deep copies.  Rewards are
    kept in float64 (SB3's buffer is float32): learners that credit the returned reward (DL²'s
    slot rule) see exactly the value the env computed."""

    def __init__(self, env_fns: list[Callable[[], gym.Env]]) -> None:
        super().__init__(env_fns)
        self.buf_rews = np.zeros((self.num_envs,), dtype=np.float64)

    def step_wait(self) -> VecEnvStepReturn:
        buf = self.buf_obs[None]  # type: ignore[index]  # flat Box: the one key is None
        for i, env in enumerate(self.envs):
            obs, rew, terminated, truncated, info = env.step(self.actions[i])
            self.buf_rews[i] = rew
            done = terminated or truncated
            self.buf_dones[i] = done
            info["TimeLimit.truncated"] = truncated and not terminated
            if done:
                info["terminal_observation"] = obs
                obs, self.reset_infos[i] = env.reset()
            buf[i] = obs
            self.buf_infos[i] = info
        return buf.copy(), self.buf_rews.copy(), self.buf_dones.copy(), list(self.buf_infos)


def make_training_vec_env(
    configs: Sequence[EnvConfig], seeds: Sequence[int], *, monitor: bool = True
) -> LeanVecEnv:
    """One env per ``(config, seed)`` (each wrapped in SB3's ``Monitor``) in a
    :class:`LeanVecEnv`."""

    def factory(config: EnvConfig, seed: int) -> Callable[[], gym.Env]:
        def build() -> gym.Env:
            env: gym.Env = make_env(config, seed=seed)
            return Monitor(env) if monitor else env

        return build

    return LeanVecEnv([factory(c, int(s)) for c, s in zip(configs, seeds, strict=True)])
