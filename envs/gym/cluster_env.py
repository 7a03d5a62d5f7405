"""``dlsched/Cluster-v0``'s historical import path: the names of :mod:`envs.gym.cluster`.

The environment is split by part in the package :mod:`envs.gym.cluster` (contract,
observation, masks, rewards, render, env, contention); ``from envs.gym.cluster_env import
ClusterEnv`` and the other names below keep working.
"""

from __future__ import annotations

from envs.gym.cluster import (
    ACTION_ROLES,
    CELL_PX,
    DEFAULT_MAX_SLOTS,
    ENV_ID,
    EXTENDED_FEATURES_PER_JOB,
    FEATURES_PER_JOB,
    REMAINING_SCALE,
    STAY_SCALE,
    ClusterEnv,
    EngineClusterEnv,
)

__all__ = [
    "ACTION_ROLES",
    "CELL_PX",
    "DEFAULT_MAX_SLOTS",
    "ENV_ID",
    "EXTENDED_FEATURES_PER_JOB",
    "FEATURES_PER_JOB",
    "REMAINING_SCALE",
    "STAY_SCALE",
    "ClusterEnv",
    "EngineClusterEnv",
]
