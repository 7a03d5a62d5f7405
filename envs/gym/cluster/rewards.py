"""The rewards of ``dlsched/Cluster-v0`` (``reward=``): the ``"cluster"`` entries of the one
reward registry, :mod:`envs.gym.rewards`, re-exported here (the historical import path).  A
new reward is one function decorated ``@register_reward(name, kinds=("cluster", ...))``
there or anywhere imported before the env is built."""

from __future__ import annotations

from envs.gym.rewards import (
    JCT_RETURN,
    REWARDS,
    RewardEnv,
    RewardFn,
    SlotStep,
    dl2_reward,
    jct_reward,
    register_reward,
)

__all__ = [
    "JCT_RETURN",
    "REWARDS",
    "RewardEnv",
    "RewardFn",
    "SlotStep",
    "dl2_reward",
    "jct_reward",
    "register_reward",
]
