"""``dlsched/Cluster-v0``: DL²'s scheduling problem as a Gymnasium environment, one module per
part:

* :mod:`~envs.gym.cluster.contract`: id, constants, spaces, action encoding, ``info``;
* :mod:`~envs.gym.cluster.observation`: the per-job feature rows;
* :mod:`~envs.gym.cluster.masks`: the action masks;
* :mod:`~envs.gym.cluster.rewards`: the rewards by name (re-exported from the one reward
  registry, :mod:`envs.gym.rewards`: add one there);
* :mod:`~envs.gym.cluster.render`: ``ansi`` and ``rgb_array`` pictures;
* :mod:`~envs.gym.cluster.env`: :class:`ClusterEnv`, the episode, slots and steps;
* :mod:`~envs.gym.cluster.engine`: :class:`EngineClusterEnv` (contention speed mode).

:mod:`envs.gym.cluster_env` re-exports the public names (the historical import path).
Design notes: docs/design/envs.md.
"""

from __future__ import annotations

from envs.gym.cluster.contract import (
    ACTION_ROLES,
    DEFAULT_MAX_SLOTS,
    ENV_ID,
    EXTENDED_FEATURES_PER_JOB,
    FEATURES_PER_JOB,
)
from envs.gym.cluster.engine import EngineClusterEnv
from envs.gym.cluster.env import ClusterEnv
from envs.gym.cluster.observation import REMAINING_SCALE, STAY_SCALE
from envs.gym.cluster.render import CELL_PX
from envs.gym.cluster.rewards import REWARDS

__all__ = [
    "ACTION_ROLES",
    "CELL_PX",
    "DEFAULT_MAX_SLOTS",
    "ENV_ID",
    "EXTENDED_FEATURES_PER_JOB",
    "FEATURES_PER_JOB",
    "REMAINING_SCALE",
    "REWARDS",
    "STAY_SCALE",
    "ClusterEnv",
    "EngineClusterEnv",
]
