"""``dlsched/ClusterPlan-v0``: one decision per time slot, which allocator plans the slot.

Why: on ``medium`` a rollout search that picks, per slot, which allocator (or EfficientSRTF
efficiency) plans the slot finds ~9% lower avg JCT than EfficientSRTF, but cloning its
per-increment decisions lost all of it (docs/experiments/against-heuristics.md).
:class:`PlanEnv` makes the slot's plan ONE action: action ``k`` runs :data:`DEFAULT_PLANS`
(or ``plans=``) entry ``k`` through a :class:`~envs.gym.heuristic.HeuristicDriver` on the
wrapped :class:`~envs.gym.cluster_env.ClusterEnv` until the slot closes (the inner env then
opens the next slot with an active job).  The reward is the sum of the inner rewards of those
steps, so an episode's return is the inner env's for the same increments; always action 0
(EfficientSRTF) reproduces EfficientSRTF through the env exactly.  Observation: the inner
observation at the slot's start plus :data:`GLOBAL_FEATURES` (in [0, 1]); every action is
always valid (``action_masks()`` is all true).  Learners that read ``env.sim.now`` (e.g.
:mod:`agents.episode_pg`) get the slot index.  Design: docs/design/envs.md ("The slot's plan
as one action").
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from envs.gym.cluster_env import ClusterEnv
from envs.gym.heuristic import HeuristicDriver
from envs.sim.elastic.allocators import make_allocator
from envs.sim.elastic.simulator import SlotRecord
from envs.sim.errors import ConfigError

__all__ = ["DEFAULT_PLANS", "GLOBAL_FEATURES", "PLAN_ENV_ID", "PlanEnv", "plan_label"]

PLAN_ENV_ID = "dlsched/ClusterPlan-v0"

#: ``(allocator name, options)`` per action: 0 is EfficientSRTF at its default efficiency
#: 0.92 (the clone's action), then the rollout search's strongest alternatives.
DEFAULT_PLANS: tuple[tuple[str, Mapping[str, Any]], ...] = (
    ("esrtf", {}),
    ("esrtf", {"efficiency": 1.0}),
    ("esrtf", {"efficiency": 0.8}),
    ("esrtf", {"efficiency": 0.7}),
    ("optimus", {}),
    ("drf", {}),
)

#: The global features appended to the inner observation (each in [0, 1]): window jobs / J;
#: min(1, jobs beyond the window / J); free GPU and CPU fractions of the cluster in the
#: previous slot (1 before the first); slot / (slot + 100); finished jobs / jobs.
GLOBAL_FEATURES = ("window_jobs", "backlog_jobs", "free_gpu", "free_cpu", "slot", "finished")


def plan_label(name: str, options: Mapping[str, Any]) -> str:
    """A short label: ``esrtf``, ``esrtf(efficiency=0.8)``, ..."""
    if not options:
        return name
    return f"{name}({', '.join(f'{k}={v}' for k, v in sorted(options.items()))})"


@dataclass(frozen=True)
class _Clock:
    now: float


class PlanEnv(gym.Env[npt.NDArray[np.float32], np.int64]):
    """One step per slot: ``Discrete(K)`` over ``plans`` (see the module docstring).

    ``env``: the inner :class:`ClusterEnv` (default: ``gymnasium.make("dlsched/Cluster-v0",
    setting=setting, seed=seed, **env_kwargs)``'s, i.e. :func:`envs.gym.factory.gym_make`,
    ``reward="jct"`` by default); ``plans``: ``(name, options)`` pairs for
    :func:`~envs.sim.elastic.allocators.make_allocator` (a bare name means no options).
    ``reset(seed=s)`` uses workload seed ``s``, as the inner env does.  An action that is not
    an integer in ``[0, K)`` raises :class:`ConfigError`.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012

    def __init__(
        self,
        setting: str = "small",
        *,
        seed: int = 0,
        plans: Sequence[str | tuple[str, Mapping[str, Any]]] | None = None,
        env: ClusterEnv | None = None,
        **env_kwargs: Any,
    ) -> None:
        if env is None:
            from envs.gym.factory import gym_make

            env = gym_make(setting, seed=seed, **env_kwargs)
        elif env_kwargs:
            raise ConfigError(f"give env= or env keyword arguments, not both: {sorted(env_kwargs)}")
        base = env.unwrapped if isinstance(env, gym.Env) else env
        if not isinstance(base, ClusterEnv):
            raise ConfigError(f"PlanEnv wraps a ClusterEnv, got {type(base).__name__}")
        self.inner: ClusterEnv = base
        norm: list[tuple[str, dict[str, Any]]] = []
        for p in DEFAULT_PLANS if plans is None else plans:
            name, opts = (p, {}) if isinstance(p, str) else (p[0], dict(p[1]))
            norm.append((str(name), opts))
        if not norm:
            raise ConfigError("plans must name at least one allocator")
        self.plans = tuple(norm)
        self.labels = tuple(plan_label(n, o) for n, o in self.plans)
        self.drivers = [HeuristicDriver(make_allocator(n, o), base) for n, o in self.plans]
        self.K = len(self.plans)
        self.action_space = spaces.Discrete(self.K)
        inner_n = int(np.prod(base.observation_space.shape))  # type: ignore[arg-type]
        self.observation_space = spaces.Box(
            0.0, 1.0, shape=(inner_n + len(GLOBAL_FEATURES),), dtype=np.float32
        )
        self._masks = np.ones(self.K, dtype=bool)
        self.obs_size = inner_n + len(GLOBAL_FEATURES)
        self._last_free = (1.0, 1.0)
        self._ended = True
        self.slots = 0  # decisions (slots planned) in this episode

    # ------------------------------------------------------------------ helpers
    @property
    def sim(self) -> _Clock:
        """The decision clock for learners that read ``env.sim.now``: the inner slot index."""
        return _Clock(float(self.inner._t))

    def action_masks(self) -> npt.NDArray[np.bool_]:
        """Every plan is always valid (all true, ``K`` entries)."""
        return self._masks.copy()

    def _on_slot(self, record: SlotRecord) -> None:
        spec = self.inner.cluster_spec
        gpus = spec.num_nodes * spec.gpu_slots
        cpus = spec.num_nodes * spec.cpu_slots
        self._last_free = (
            1.0 - record.used_gpu / gpus if gpus else 0.0,
            1.0 - record.used_cpu / cpus if cpus else 0.0,
        )

    def _observe(self, inner_obs: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        env = self.inner
        J = env.J
        n_jobs = max(env._num_jobs, 1)
        window = len(env._window)
        beyond = len(env._views) - window
        t = float(env._t)
        feats = (
            window / J,
            min(1.0, beyond / J),
            self._last_free[0],
            self._last_free[1],
            t / (t + 100.0),
            env._finished / n_jobs,
        )
        out = np.empty(self.obs_size, dtype=np.float32)
        n = inner_obs.shape[0]
        out[:n] = inner_obs
        out[n:] = np.clip(feats, 0.0, 1.0)
        return out

    # ------------------------------------------------------------------ Gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[npt.NDArray[np.float32], dict[str, Any]]:
        super().reset(seed=seed)
        obs, info = self.inner.reset(seed=seed, options=options)
        sim = self.inner._require_sim()
        sim.on_slot = self._on_slot
        self._last_free = (1.0, 1.0)
        self._ended = False
        self.slots = 0
        return self._observe(obs), info

    def step(
        self, action: Any
    ) -> tuple[npt.NDArray[np.float32], float, bool, bool, dict[str, Any]]:
        if self._ended:
            if self.inner.sim is None:
                raise gym.error.ResetNeeded("call reset() before step()")
            raise gym.error.ResetNeeded("the episode has ended; call reset()")
        if isinstance(action, np.ndarray) and action.shape == ():
            action = action.item()
        if isinstance(action, bool | np.bool_) or not isinstance(action, numbers.Integral):
            raise ConfigError(f"action must be an integer in [0, {self.K}), got {action!r}")
        k = int(action)
        if not 0 <= k < self.K:
            raise ConfigError(f"action {k} out of range [0, {self.K}) ({', '.join(self.labels)})")
        env, driver = self.inner, self.drivers[k]
        total = 0.0
        steps = 0
        while True:
            obs, r, term, trunc, info = env.step(driver.act())
            total += float(r)
            steps += 1
            if term or trunc or info["slot_ended"]:
                break
        self.slots += 1
        self._ended = bool(term or trunc)
        info = {**info, "plan": self.labels[k], "inner_steps": steps}
        return self._observe(obs), total, bool(term), bool(trunc), info
