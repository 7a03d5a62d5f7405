"""Federated (multi-cluster) training: one global policy learned from several clusters (issue 11).

DL² (§6.5) trains one global policy from several clusters at once, each with its own size and
workload, with a central learner that averages the clusters' gradients (synchronous A3C).  Here
every cluster is one environment of a vectorised env, and the learner is the unchanged
single-cluster one (:class:`agents.dl2.DL2A2C`, or any SB3 agent): it collects ``n_steps``
decisions from every cluster and takes one gradient step on the combined batch, i.e. on the
gradient averaged over the clusters' decisions.  Only *where the environments live* changes:

* ``federated=local`` (:class:`FederatedVecEnv`): all clusters in this process (a
  :class:`~agents.vec.LeanVecEnv`, one env per cluster);
* ``federated=ray`` (:class:`RayVecEnv`): the clusters in Ray actors (``envs_per_actor`` per
  actor; one batched remote call per actor per step), on this machine or on a Ray cluster.

Both give the same step results in the same order (env index order), so a run is identical
in both modes for the same seed (a test checks the trained parameters).  Why one policy fits
every cluster: :func:`check_clusters`; seeds: :class:`FederatedVecEnv`; a two-machine Ray run:
:class:`RayVecEnv`.  Details: docs/design/learning.md#federated-training-agentsfederatedpy
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from sb3_contrib.common.maskable.utils import get_action_masks
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import VecEnv
from stable_baselines3.common.vec_env.base_vec_env import (
    VecEnvIndices,
    VecEnvObs,
    VecEnvStepReturn,
)

from agents.ray_setup import blas_threads, init_ray
from agents.vec import LeanVecEnv
from envs.gym.factory import EnvConfig, coerce_env_config, make_env
from envs.sim.errors import ConfigError

__all__ = [
    "FEDERATED_MODES",
    "FederatedVecEnv",
    "RayVecEnv",
    "check_clusters",
    "cluster_configs",
    "federated_vec_env",
    "init_ray",
]

#: ``federated.mode`` values.
FEDERATED_MODES = ("none", "local", "ray")


# --------------------------------------------------------------------------------------------
# Clusters
# --------------------------------------------------------------------------------------------


def cluster_configs(config: Any) -> tuple[list[EnvConfig], list[int]]:
    """The env config and seed (``entry.seed``) of every cluster of a
    :class:`~training.config.FederatedConfig`; entries may be dataclasses or mappings."""
    entries = list(config.clusters or [])
    if not entries:
        raise ConfigError(
            f"federated mode {config.mode!r} needs a non-empty federated.clusters list"
        )
    configs, seeds = [], []
    for i, entry in enumerate(entries):
        env = entry["env"] if isinstance(entry, dict) else entry.env
        entry_seed = entry.get("seed", 0) if isinstance(entry, dict) else entry.seed
        try:
            configs.append(coerce_env_config(env))
        except (ConfigError, TypeError) as exc:
            raise ConfigError(f"federated.clusters[{i}].env: {exc}") from None
        seeds.append(int(entry_seed))
    return configs, seeds


def check_clusters(
    configs: Sequence[EnvConfig], reference: EnvConfig | None = None
) -> tuple[int, int]:
    """``(J, L)`` shared by every cluster (and by ``reference``, the run's top-level env used
    for pretraining, baselines and validation); :class:`ConfigError` listing each cluster's
    ``J`` and ``L`` when they differ.

    Why one policy is valid for every cluster: clusters may differ in nodes, number of jobs,
    arrival pattern, workload seed, caps, even come from a trace; the policy never sees those
    sizes directly.  Its observation is ``J`` rows (one per window job) of per-job features,
    each normalised by the job's *own cluster*: a one-hot type over the global job-type table
    (``L`` types), slots since arrival / 100, remaining epochs as a fraction, dominant-resource
    share of the cluster's own capacity, workers / the cluster's ``max_workers`` and PS /
    ``max_ps``.  The action is "add a worker / PS / bundle to window row ``j``" or void, so
    ``Discrete(3J + 1)``; which node a task lands on is the cluster's placement rule.  The input
    and output shapes therefore depend only on ``J`` and ``L``, which every cluster must share
    (checked here).  A cluster whose workload uses a job type no other cluster has (or that the
    policy has never been trained on) is a valid input (its type column exists; its weights are
    just untrained), not a crash; a type outside the table is rejected when the workload is
    built."""
    named = [(f"clusters[{i}] ({c.setting})", c) for i, c in enumerate(configs)]
    if reference is not None:
        named.append((f"env ({reference.setting})", reference))
    shapes = {}
    for name, c in named:
        env = make_env(c)
        shapes[name] = (env.J, env.L)
    if len(set(shapes.values())) > 1:
        listed = ", ".join(f"{n}: J={jl[0]}, L={jl[1]}" for n, jl in shapes.items())
        raise ConfigError(
            "federated clusters must share the window J and the job-type count L (one policy "
            f"reads J rows of L + 5 features and acts on 3J + 1 actions); got {listed}. "
            "Give every cluster (federated.clusters[i].env.overrides.J) and the top-level env "
            "(+env.overrides.J=<J> on the command line) one window J."
        )
    return next(iter(shapes.values()))


def _build(config: EnvConfig, seed: int, monitor: bool) -> gym.Env:
    env: gym.Env = make_env(config, seed=seed)
    return Monitor(env) if monitor else env


class FederatedVecEnv(LeanVecEnv):
    """One env per cluster in this process (each in SB3's ``Monitor`` unless ``monitor`` is
    false); the first reset of cluster ``i`` uses workload ``cluster_seeds[i] + seed``, and
    :meth:`seed` keeps that rule.

    Seeds: cluster ``i``'s first workload is ``clusters[i].seed + seed`` (the run's seed
    offsets every cluster); later episodes draw fresh workload seeds from the cluster env's own
    generator.  ``VecEnv.seed(s)`` (SB3 calls it with the agent's seed) keeps that rule
    (cluster seed + ``s``) instead of SB3's ``s + index``."""

    def __init__(
        self,
        configs: Sequence[EnvConfig],
        cluster_seeds: Sequence[int],
        *,
        seed: int = 0,
        monitor: bool = True,
    ) -> None:
        if len(configs) != len(cluster_seeds):
            raise ConfigError(f"{len(configs)} clusters but {len(cluster_seeds)} seeds")
        super().__init__(
            [
                functools.partial(_build, c, int(s) + int(seed), monitor)
                for c, s in zip(configs, cluster_seeds, strict=True)
            ]
        )
        self.cluster_seeds = [int(s) for s in cluster_seeds]

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """Next reset uses workload ``cluster_seeds[i] + seed`` (``None``: SB3's random)."""
        if seed is None:
            return super().seed(seed)
        self._seeds = [s + int(seed) for s in self.cluster_seeds]
        return self._seeds


def federated_vec_env(
    config: Any, seed: int, *, reference: EnvConfig | None = None
) -> tuple[VecEnv, list[EnvConfig]]:
    """The training env of a federated run (``config``: a
    :class:`~training.config.FederatedConfig`) and its clusters' env configs; ``reference``
    (the run's top-level env: pretraining, baselines, validation) must share ``J`` and ``L``
    with the clusters (:func:`check_clusters`)."""
    if config.mode not in FEDERATED_MODES or config.mode == "none":
        raise ConfigError(
            f"federated.mode must be one of {FEDERATED_MODES[1:]} here, got {config.mode!r}"
        )
    configs, cluster_seeds = cluster_configs(config)
    check_clusters(configs, reference)
    if config.mode == "local":
        return FederatedVecEnv(configs, cluster_seeds, seed=seed), configs
    started = init_ray(config.address)
    try:
        env = RayVecEnv(
            configs, cluster_seeds, seed=seed, envs_per_actor=int(config.envs_per_actor)
        )
    except BaseException:
        if started:
            import ray

            ray.shutdown()
        raise
    env.owns_ray = started
    return env, configs


# --------------------------------------------------------------------------------------------
# Ray (starting or joining it: agents.ray_setup)
# --------------------------------------------------------------------------------------------


class _EnvHost:
    """A Ray actor's envs: some clusters in a :class:`FederatedVecEnv` (so auto-reset and the
    ``terminal_observation`` / ``TimeLimit.truncated`` infos are exactly the local mode's);
    every call answers for all of them, with their action masks after a step or reset."""

    def __init__(
        self, configs: list[dict[str, Any]], cluster_seeds: list[int], seed: int, monitor: bool
    ) -> None:
        os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
        import torch as th

        th.set_num_threads(1)  # the actor only steps envs
        cfgs = [coerce_env_config(c) for c in configs]
        self.vec = FederatedVecEnv(cfgs, cluster_seeds, seed=seed, monitor=monitor)
        self.has_masks = all(hasattr(e.unwrapped, "action_masks") for e in self.vec.envs)

    def spaces(self) -> tuple[spaces.Space, spaces.Space]:
        return self.vec.observation_space, self.vec.action_space

    def node(self) -> str:
        """Where this actor runs: the node's IP address and Ray node id (first 8 digits)."""
        import ray

        ctx = ray.get_runtime_context()
        return f"{ray.util.get_node_ip_address()} ({ctx.get_node_id()[:8]})"

    def _masks(self) -> np.ndarray | None:
        return get_action_masks(self.vec) if self.has_masks else None

    def reset(self, seeds: list[int | None], options: list[dict[str, Any]]) -> tuple[Any, ...]:
        self.vec._seeds = list(seeds)
        self.vec._options = list(options)
        obs = self.vec.reset()
        return obs, list(self.vec.reset_infos), self._masks()

    def step(self, actions: np.ndarray) -> tuple[Any, ...]:
        obs, rews, dones, infos = self.vec.step(actions)
        return obs, rews, dones, infos, list(self.vec.reset_infos), self._masks()

    def get_attr(self, name: str, indices: list[int]) -> list[Any]:
        return self.vec.get_attr(name, indices)

    def set_attr(self, name: str, value: Any, indices: list[int]) -> None:
        self.vec.set_attr(name, value, indices)

    def env_method(self, name: str, args: tuple, kwargs: dict, indices: list[int]) -> list[Any]:
        return self.vec.env_method(name, *args, indices=indices, **kwargs)

    def env_is_wrapped(self, wrapper_class: type, indices: list[int]) -> list[bool]:
        return self.vec.env_is_wrapped(wrapper_class, indices)

    def close(self) -> None:
        self.vec.close()


class RayVecEnv(VecEnv):
    """SB3 ``VecEnv`` whose envs live in Ray actors, ``envs_per_actor`` consecutive clusters
    per actor (Ray must be initialised: :func:`init_ray`).

    ``step`` sends one call per actor with its envs' actions and gathers the answers in env
    index order (deterministic whatever order the actors finish in).  Semantics are
    :class:`~agents.vec.LeanVecEnv`'s (auto-reset, ``terminal_observation``,
    ``TimeLimit.truncated``, ``reset_infos``); cluster ``i``'s first workload is
    ``cluster_seeds[i] + seed``.  Each step and reset also brings back the envs'
    action masks, so ``env_method("action_masks")`` (what maskable learners call every step)
    needs no second round trip; any other ``env_method`` or ``set_attr`` drops that cache.
    ``seed`` keeps each cluster's own seed (as :class:`FederatedVecEnv`).  Not picklable
    (``picklable = False``: checkpoints skip it); ``close`` ends the actors, and Ray too when
    ``owns_ray`` (set by :func:`federated_vec_env` when it started Ray).

    Ray: :func:`init_ray` starts a local Ray (loopback only, no dashboard, usage statistics
    off: ``RAY_USAGE_STATS_ENABLED=0``) or connects to an existing cluster by ``address``.
    Every machine needs the same checkout and virtual environment (``pip install -e .``) at the
    same path: the actors import ``envs`` and ``agents`` from it.  A two-machine run::

        # every machine and the driver: one token (Ray >= 2.60 authenticates every node)
        export RAY_USAGE_STATS_ENABLED=0 RAY_AUTH_MODE=token RAY_AUTH_TOKEN=<the same hex token>
        # machine A (head; its IP e.g. 10.0.0.1), in the repository with the venv active
        ray start --head --port=6379 --include-dashboard=false
        # machine B (worker)
        ray start --address=10.0.0.1:6379
        # on A: the learner runs here, the cluster envs are spread over A and B
        python train.py +agent=a2c_increments federated=ray federated.address=10.0.0.1:6379
        # afterwards, on both machines
        ray stop

    The actors are placed with Ray's ``SPREAD`` strategy (one CPU each), so with two machines
    and two actors each machine hosts one.  A checkpoint of a Ray run holds no ``env.pkl``
    (actors do not pickle); resuming it starts the clusters' episodes afresh.
    """

    picklable = False

    def __init__(
        self,
        configs: Sequence[EnvConfig],
        cluster_seeds: Sequence[int],
        *,
        seed: int = 0,
        envs_per_actor: int = 2,
        monitor: bool = True,
        actor_cpus: float = 1.0,
    ) -> None:
        import ray

        if not ray.is_initialized():
            raise ConfigError("RayVecEnv needs Ray initialised first (agents.federated.init_ray)")
        if envs_per_actor < 1:
            raise ConfigError(f"federated.envs_per_actor must be >= 1, got {envs_per_actor}")
        if len(configs) != len(cluster_seeds) or not configs:
            raise ConfigError("RayVecEnv needs one seed per cluster and at least one cluster")
        n = len(configs)
        self._groups = [
            list(range(k, min(k + envs_per_actor, n))) for k in range(0, n, envs_per_actor)
        ]
        self._where = [(a, i - g[0]) for a, g in enumerate(self._groups) for i in g]
        host: Any = ray.remote(_EnvHost).options(
            num_cpus=actor_cpus,
            scheduling_strategy="SPREAD",
            runtime_env={"env_vars": blas_threads()},
        )
        self._actors: list[Any] = [
            host.remote(
                [asdict(configs[i]) for i in g], [int(cluster_seeds[i]) for i in g], seed, monitor
            )
            for g in self._groups
        ]
        self.cluster_seeds = [int(s) for s in cluster_seeds]
        self.owns_ray = False
        self._closed = False
        self._refs: list[Any] | None = None
        self._mask_cache: np.ndarray | None = None
        obs_space, act_space = ray.get(self._actors[0].spaces.remote())
        #: the node of each cluster's actor (printed: which machine steps which cluster)
        self.nodes: list[str] = ray.get([a.node.remote() for a in self._actors])
        for g, node in zip(self._groups, self.nodes, strict=True):
            print(f"federated: clusters {g} on node {node}", file=sys.stderr, flush=True)
        super().__init__(n, obs_space, act_space)

    # ------------------------------------------------------------------ stepping
    def reset(self) -> VecEnvObs:
        import ray

        refs = [
            a.reset.remote([self._seeds[i] for i in g], [self._options[i] for i in g])
            for a, g in zip(self._actors, self._groups, strict=True)
        ]
        parts = ray.get(refs)
        self.reset_infos = [info for p in parts for info in p[1]]
        self._set_masks([p[2] for p in parts])
        self._reset_seeds()
        self._reset_options()
        return np.concatenate([p[0] for p in parts])

    def step_async(self, actions: np.ndarray) -> None:
        actions = np.asarray(actions)
        self._refs = [
            a.step.remote(actions[g[0] : g[-1] + 1])
            for a, g in zip(self._actors, self._groups, strict=True)
        ]

    def step_wait(self) -> VecEnvStepReturn:
        import ray

        if self._refs is None:
            raise RuntimeError("step_wait without step_async")
        parts = ray.get(self._refs)
        self._refs = None
        self.reset_infos = [info for p in parts for info in p[4]]
        self._set_masks([p[5] for p in parts])
        obs = np.concatenate([p[0] for p in parts])
        rews = np.concatenate([p[1] for p in parts])
        dones = np.concatenate([p[2] for p in parts])
        infos = [info for p in parts for info in p[3]]
        return obs, rews, dones, infos

    def seed(self, seed: int | None = None) -> Sequence[int | None]:
        """Next reset uses workload ``cluster_seeds[i] + seed`` (``None``: SB3's random)."""
        if seed is None:
            return super().seed(seed)
        self._seeds = [s + int(seed) for s in self.cluster_seeds]
        return self._seeds

    def _set_masks(self, parts: list[np.ndarray | None]) -> None:
        ok = all(p is not None for p in parts)
        self._mask_cache = np.concatenate(parts) if ok else None  # type: ignore[arg-type]

    # ------------------------------------------------------------------ attributes, methods
    def _call(self, method: str, indices: VecEnvIndices, *args: Any) -> list[Any]:
        """``actor.method(*args, local_indices)`` on the actors owning ``indices``; answers in
        the order of ``indices``."""
        import ray

        idx = list(self._get_indices(indices))
        by_actor: dict[int, list[int]] = {}
        for i in idx:
            a, local = self._where[i]
            by_actor.setdefault(a, []).append(local)
        refs = {
            a: getattr(self._actors[a], method).remote(*args, locals_)
            for a, locals_ in by_actor.items()
        }
        answers = {a: ray.get(ref) for a, ref in refs.items()}
        pos = dict.fromkeys(by_actor, 0)
        out = []
        for i in idx:
            a = self._where[i][0]
            out.append(answers[a][pos[a]] if answers[a] is not None else None)
            pos[a] += 1
        return out

    def get_attr(self, attr_name: str, indices: VecEnvIndices = None) -> list[Any]:
        return self._call("get_attr", indices, attr_name)

    def set_attr(self, attr_name: str, value: Any, indices: VecEnvIndices = None) -> None:
        self._mask_cache = None
        self._call("set_attr", indices, attr_name, value)

    def env_method(
        self,
        method_name: str,
        *method_args: Any,
        indices: VecEnvIndices = None,
        **method_kwargs: Any,
    ) -> list[Any]:
        if method_name == "action_masks" and not method_args and not method_kwargs:
            if self._mask_cache is not None:
                return [self._mask_cache[i] for i in self._get_indices(indices)]
        else:
            self._mask_cache = None
        return self._call("env_method", indices, method_name, method_args, method_kwargs)

    def env_is_wrapped(self, wrapper_class: type, indices: VecEnvIndices = None) -> list[bool]:
        return self._call("env_is_wrapped", indices, wrapper_class)

    def get_images(self) -> Sequence[np.ndarray | None]:
        if self.render_mode != "rgb_array":
            return [None] * self.num_envs
        return self.env_method("render")

    def close(self) -> None:
        """End the actors (and Ray when this env started it); idempotent."""
        if self._closed:
            return
        import ray

        self._closed = True
        if ray.is_initialized():
            try:
                ray.get([a.close.remote() for a in self._actors])
            finally:
                for a in self._actors:
                    ray.kill(a)
                if self.owns_ray:
                    ray.shutdown()

    def __getstate__(self) -> dict[str, Any]:
        raise TypeError("a RayVecEnv (envs in Ray actors) cannot be pickled")
