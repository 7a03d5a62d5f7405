"""Gymnasium environments of dlsched; importing this package registers their ids.

``import envs.gym`` then ``gymnasium.make("dlsched/Cluster-v0", **kwargs)``, or directly
``gymnasium.make("envs.gym:dlsched/Cluster-v0", **kwargs)`` (Gymnasium imports the module).
``envs.sim`` never imports this package (it must stay free of gymnasium).
"""

from __future__ import annotations

from gymnasium.envs.registration import register, registry

from envs.gym.cluster_env import ENV_ID, ClusterEnv
from envs.gym.heuristic import HeuristicDriver

__all__ = [
    "CONTENTION_ENV_ID",
    "ENV_ID",
    "PLAN_ENV_ID",
    "ClusterEnv",
    "ContentionEnv",
    "HeuristicDriver",
    "PlanEnv",
]

if ENV_ID not in registry:
    # the factory: the keys of the Hydra env config (any setting, speed mode, features), checked
    register(id=ENV_ID, entry_point="envs.gym.factory:gym_make")

from envs.gym.contention_env import CONTENTION_ENV_ID, ContentionEnv

if CONTENTION_ENV_ID not in registry:
    register(id=CONTENTION_ENV_ID, entry_point="envs.gym.contention_env:ContentionEnv")

from envs.gym.plan_env import PLAN_ENV_ID, PlanEnv

if PLAN_ENV_ID not in registry:
    # one action per slot: which allocator plans it (envs/gym/plan_env.py)
    register(id=PLAN_ENV_ID, entry_point="envs.gym.plan_env:PlanEnv")
