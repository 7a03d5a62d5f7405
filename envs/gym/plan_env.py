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
:mod:`agents.episode_pg`) get the slot index.  :class:`PlanActor` acts the same way in a
plain ``Cluster-v0`` env (how trained plan policies are validated and evaluated, beside the
heuristics).  Design: docs/design/envs.md ("The slot's plan as one action").
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from envs.gym.cluster_env import ClusterEnv
from envs.gym.factory import EnvConfig, check_seed, coerce_env_config, gym_make, make_env
from envs.gym.heuristic import HeuristicDriver
from envs.sim.elastic import native_alloc
from envs.sim.elastic.allocators import (
    Allocator,
    allocator_label,
    make_allocator,
    parse_allocator_label,
)
from envs.sim.errors import ConfigError

__all__ = [
    "DEFAULT_PLANS",
    "GLOBAL_FEATURES",
    "PLAN_ENV_ID",
    "PlanActor",
    "PlanEnv",
    "SlotPlanner",
    "parse_plan",
    "plan_label",
    "plan_specs",
]

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
    """A short label: ``esrtf``, ``esrtf(efficiency=0.8)``, ...
    (:func:`~envs.sim.elastic.allocators.allocator_label`)."""
    return allocator_label(name, options)


def parse_plan(label: str) -> tuple[str, dict[str, Any]]:
    """The inverse of :func:`plan_label`: ``"esrtf(efficiency=0.8)"`` -> ``("esrtf",
    {"efficiency": 0.8})``, a bare name -> no options; anything else is a
    :class:`ConfigError` naming the label
    (:func:`~envs.sim.elastic.allocators.parse_allocator_label`)."""
    return parse_allocator_label(label, role="plan")


#: the EnvConfig keys PlanEnv takes as keyword arguments
_CONFIG_KEYS = frozenset(f.name for f in fields(EnvConfig))

PlanSpec = str | tuple[str, Mapping[str, Any]] | Sequence[Any]


def plan_specs(plans: Sequence[PlanSpec] | None) -> tuple[tuple[str, dict[str, Any]], ...]:
    """``plans`` (labels, names or ``(name, options)`` pairs; ``None``: :data:`DEFAULT_PLANS`)
    as ``(name, options)`` pairs, each checked by building its allocator; a malformed label,
    an unknown allocator, a bad option or two equal plans is a :class:`ConfigError`."""
    return _plan_allocators(plans)[0]


def _plan_allocators(
    plans: Sequence[PlanSpec] | None,
) -> tuple[tuple[tuple[str, dict[str, Any]], ...], list[Allocator]]:
    """:func:`plan_specs` and the allocator it built for each plan."""
    norm: list[tuple[str, dict[str, Any]]] = []
    for p in DEFAULT_PLANS if plans is None else plans:
        if isinstance(p, str):
            norm.append(parse_plan(p))
            continue
        if len(p) != 2 or not isinstance(p[0], str) or not isinstance(p[1], Mapping):
            raise ConfigError(f"a plan is a name or a (name, options) pair, got {p!r}")
        norm.append((p[0], dict(p[1])))
    if not norm:
        raise ConfigError("plans must name at least one allocator")
    labels = [plan_label(n, o) for n, o in norm]
    twice = sorted({lab for lab in labels if labels.count(lab) > 1})
    if twice:
        raise ConfigError(f"plans must differ; given more than once: {', '.join(twice)}")
    allocators = []
    for (n, o), label in zip(norm, labels, strict=True):
        try:
            allocators.append(make_allocator(n, o))
        except ConfigError as exc:
            raise ConfigError(f"plan {label!r}: {exc}") from None
    return tuple(norm), allocators


class SlotPlanner:
    """The plans of one :class:`ClusterEnv` and the plan observation: what
    :class:`PlanEnv` steps through and what :class:`PlanActor` acts with in the plain env.

    ``drivers[k]`` is a :class:`HeuristicDriver` of plan ``k`` on ``env``; :meth:`observe`
    is the inner observation plus :data:`GLOBAL_FEATURES`, read from the env's state at the
    slot's start."""

    def __init__(self, env: ClusterEnv, plans: Sequence[PlanSpec] | None = None) -> None:
        self.env = env
        self.plans, allocators = _plan_allocators(plans)
        self.labels = tuple(plan_label(n, o) for n, o in self.plans)
        self.drivers = [HeuristicDriver(a, env) for a in allocators]
        self.K = len(self.plans)
        self.inner_size = int(np.prod(env.observation_space.shape))  # type: ignore[arg-type]
        self.obs_size = self.inner_size + len(GLOBAL_FEATURES)
        # the observation in C where built (native_alloc.plan_obs), unless the env's class
        # says otherwise how it finds its simulator
        self._native = type(env)._require_sim is ClusterEnv._require_sim

    def observe(
        self, inner_obs: npt.NDArray[np.float32], env: ClusterEnv | None = None
    ) -> npt.NDArray[np.float32]:
        """The plan observation of the planner's env (or of ``env``, a copy of it) at the
        slot that opened with ``inner_obs``."""
        env = self.env if env is None else env
        if self._native:  # (the code below, in C where built: native_alloc.plan_obs)
            out = np.empty(self.obs_size, dtype=np.float32)
            if native_alloc.plan_obs(out, inner_obs, env):
                return out
        J = env.J
        n_jobs = max(env._num_jobs, 1)
        window = len(env._window)
        beyond = len(env._views) - window
        t = float(env._t)
        last = env._require_sim().last_utilisation
        free_cpu, free_gpu = (1.0, 1.0) if last is None else (1.0 - last[0], 1.0 - last[1])
        feats = (
            window / J,
            min(1.0, beyond / J),
            free_gpu,
            free_cpu,
            t / (t + 100.0),
            env._finished / n_jobs,
        )
        n = inner_obs.shape[0]
        out = np.empty(self.obs_size, dtype=np.float32)
        out[:n] = inner_obs
        # clipped to [0, 1] in Python floats, then rounded to float32 by the item writes (the
        # memoryview's C cast, numpy's for a list: the same values): the same values as
        # rounding first and clipping in float32 (the clip is monotone and its bounds are
        # float32 values)
        mv: Any = out.data  # (typeshed types a memoryview's items as int; this one's are "f")
        for x in feats:
            mv[n] = 0.0 if x < 0.0 else 1.0 if x > 1.0 else x
            n += 1
        return out


class PlanActor:
    """A plan policy acting in the plain :class:`ClusterEnv` (one inner step per call):
    at each slot's start ``choose(plan observation)`` picks the plan, whose driver then acts
    until the slot closes, exactly as :class:`PlanEnv` steps.  An
    :class:`~envs.gym.episode.Actor` (a slot planner), also in the older ``(env, obs) ->
    action`` form; make one per episode."""

    def __init__(
        self,
        env: ClusterEnv,
        choose: Callable[[npt.NDArray[np.float32]], int],
        plans: Sequence[PlanSpec] | None = None,
    ) -> None:
        self.planner = SlotPlanner(env, plans)
        self.choose = choose
        self.chosen: list[int] = []  # the plan of every slot so far
        self._slot: tuple[Any, int] | None = None

    def reset(self, seed: int | None) -> None:
        """A new episode (:class:`~envs.gym.episode.Actor`): its first decision chooses a plan
        (:attr:`chosen` keeps every episode's choices)."""
        self._slot = None

    def act(self, obs: npt.NDArray[np.float32], view: ClusterEnv) -> int:
        """:class:`~envs.gym.episode.Actor`'s form of ``self(view, obs)``."""
        return self(view, obs)

    def slot_allocator(self, obs: npt.NDArray[np.float32], view: ClusterEnv) -> Allocator:
        """:class:`~envs.gym.episode.SlotPlanningActor`'s form of
        ``self.allocator_for(view, obs)``."""
        return self.allocator_for(view, obs)

    def allocator_for(self, env: ClusterEnv, obs: npt.NDArray[np.float32]) -> Allocator:
        """As a slot planner (the slot applied in one call, ``ClusterEnv.plan_slot``): the
        allocator of the plan chosen for the slot that opens with ``obs``."""
        k = self.plan_for(env, obs)
        self.chosen.append(k)
        self._slot = (env.sim, env._t)
        return self.planner.drivers[k].allocator

    def plan_for(self, env: ClusterEnv, obs: npt.NDArray[np.float32]) -> int:
        """The plan of the slot that opens in ``env`` with ``obs`` (nothing placed yet):
        ``choose(plan observation)``, checked.  A subclass may decide otherwise (a
        decision-time search: :class:`agents.plan_search.SearchPlanActor`)."""
        k = int(self.choose(self.planner.observe(obs)))
        if not 0 <= k < self.planner.K:
            raise ConfigError(f"plan {k} out of range [0, {self.planner.K})")
        return k

    def __call__(self, env: ClusterEnv, obs: npt.NDArray[np.float32]) -> int:
        slot = (env.sim, env._t)
        if self._slot is None or slot[0] is not self._slot[0] or slot[1] != self._slot[1]:
            self.chosen.append(self.plan_for(env, obs))
            self._slot = slot
        return self.planner.drivers[self.chosen[-1]].act()


@dataclass(frozen=True)
class _Clock:
    now: float


class PlanEnv(gym.Env[npt.NDArray[np.float32], np.int64]):
    """One step per slot: ``Discrete(K)`` over ``plans`` (see the module docstring).

    The inner :class:`ClusterEnv`: ``env``, or ``config`` (an
    :class:`~envs.gym.factory.EnvConfig` or a mapping of its fields), or ``setting`` and
    ``env_kwargs`` (``gymnasium.make("dlsched/Cluster-v0", setting=setting, seed=seed,
    **env_kwargs)``'s, ``reward="jct"`` by default).  ``plans``: ``(name, options)`` pairs
    for :func:`~envs.sim.elastic.allocators.make_allocator` (a bare name means no options).
    ``reset(seed=s)`` uses workload seed ``s``, as the inner env does.  An action that is not
    an integer in ``[0, K)`` raises :class:`ConfigError`.  :attr:`config` is the inner env's
    config when it is known (not for ``env=``): :meth:`policy_layout` records it with a
    saved policy.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012

    def __init__(
        self,
        setting: str = "small",
        *,
        seed: int = 0,
        plans: Sequence[PlanSpec] | None = None,
        env: ClusterEnv | None = None,
        config: EnvConfig | Mapping[str, Any] | None = None,
        **env_kwargs: Any,
    ) -> None:
        self.config: EnvConfig | None = None
        if (env is not None) + (config is not None) + bool(env_kwargs) > 1:
            raise ConfigError(
                "give one of env=, config= or env keyword arguments, not several: "
                f"{sorted(env_kwargs)}"
            )
        if config is not None:
            self.config = coerce_env_config(config)
            env = make_env(self.config, seed)
        elif env is None:
            if isinstance(setting, str) and set(env_kwargs) <= _CONFIG_KEYS:
                self.config = coerce_env_config({"setting": setting, "reward": "jct", **env_kwargs})
                env = make_env(self.config, seed)
            else:
                env = gym_make(setting, seed=seed, **env_kwargs)
        base = env.unwrapped if isinstance(env, gym.Env) else env
        if not isinstance(base, ClusterEnv):
            raise ConfigError(f"PlanEnv wraps a ClusterEnv, got {type(base).__name__}")
        self.inner: ClusterEnv = base
        self.planner = SlotPlanner(base, plans)
        self.plans, self.labels, self.K = self.planner.plans, self.planner.labels, self.planner.K
        self.drivers = self.planner.drivers
        self.obs_size = self.planner.obs_size
        self.action_space = spaces.Discrete(self.K)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(self.obs_size,), dtype=np.float32)
        self._masks = np.ones(self.K, dtype=bool)
        #: whether a step plans its slot in one call (``ClusterEnv.plan_slot``, the default)
        #: or replays the plan's increments through the inner env's ``step`` (the reference
        #: path; the same results, tested bit for bit)
        self.slot_at_once = True
        self._ended = True
        self.slots = 0  # decisions (slots planned) in this episode

    # ------------------------------------------------------------------ helpers
    @property
    def sim(self) -> _Clock:
        """The decision clock for learners that read ``env.sim.now``: the inner slot index."""
        return _Clock(float(self.inner._t))

    @property
    def row_width(self) -> int:
        """Features per window job row of the observation (``L + 5``, or ``L + 7`` with the
        extended features): the inner observation is ``J`` such rows, the plan observation
        adds :data:`GLOBAL_FEATURES`."""
        return self.planner.inner_size // self.inner.J

    def replica(self) -> PlanEnv:
        """An independent copy (same inner env options and jobs, same plans): how side-by-side
        rollouts (:func:`agents.episode_pg.run_lockstep`) get their envs."""
        out = PlanEnv(env=self.inner.replica(), plans=self.plans)
        out.config = self.config
        out.slot_at_once = self.slot_at_once
        return out

    def action_masks(self) -> npt.NDArray[np.bool_]:
        """Every plan is always valid (all true, ``K`` entries)."""
        return self._masks.copy()

    def policy_layout(self) -> dict[str, Any]:
        """What a saved policy of this env needs to act again: the env id, the inner env's
        config (:meth:`EnvConfig.as_dict`) and the plans."""
        if self.config is None:
            raise ConfigError(
                "this PlanEnv wraps a given env= whose config is unknown; build it with config= "
                "(or a setting and EnvConfig keys) to save a policy of it"
            )
        return {
            "id": PLAN_ENV_ID,
            "env": self.config.as_dict(),
            "plans": [[n, dict(o)] for n, o in self.plans],
        }

    def _refuse(self, k: int, slot: int, what: str) -> None:
        """A plan that could not be applied whole: an error, never a silent partial slot."""
        self._ended = True
        raise ConfigError(
            f"plan {self.labels[k]!r} could not be applied whole in slot {slot}: {what} fit on "
            f"no node under the env's {self.inner.placement.value!r} placement (the allocator "
            "placed them on nodes of its own); the episode is over, call reset()"
        )

    # ------------------------------------------------------------------ Gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[npt.NDArray[np.float32], dict[str, Any]]:
        if seed is not None:  # any integer >= 0, as the inner env's
            seed = check_seed(seed, f"{PLAN_ENV_ID} reset seed", None)
        super().reset(seed=seed)
        obs, info = self.inner.reset(seed=seed, options=options)
        self._ended = False
        self.slots = 0
        return self.planner.observe(obs), info

    def step(
        self, action: Any
    ) -> tuple[npt.NDArray[np.float32], float, bool, bool, dict[str, Any]]:
        if self._ended:
            if self.inner.sim is None:
                raise gym.error.ResetNeeded("call reset() before step()")
            raise gym.error.ResetNeeded("the episode has ended; call reset()")
        if type(action) is not int:  # (the usual case skips the checks of other types)
            if isinstance(action, np.ndarray) and action.shape == ():
                action = action.item()
            if isinstance(action, bool | np.bool_) or not isinstance(action, numbers.Integral):
                raise ConfigError(f"action must be an integer in [0, {self.K}), got {action!r}")
        k = int(action)
        if not 0 <= k < self.K:
            raise ConfigError(f"action {k} out of range [0, {self.K}) ({', '.join(self.labels)})")
        env = self.inner
        if self.slot_at_once and env._slot_open and not env._placed:  # (slot_untouched())
            obs, total, term, trunc, info, steps = env.plan_slot(self.drivers[k].allocator)
            if env.last_shortfalls:
                jid, role, cpu, gpu = env.last_shortfalls[0]
                what = f"job {jid}'s {role} ({cpu} CPU, {gpu} GPU slots)"
                self._refuse(k, info["closed_slot"], what)
        else:  # the plan's increments one env step at a time (the reference path)
            driver = self.drivers[k]
            short = driver.shortfalls
            total = 0.0
            steps = 0
            while True:
                obs, r, term, trunc, info = env.step(driver.act())
                total += float(r)
                steps += 1
                if term or trunc or info["slot_ended"]:
                    break
            if driver.shortfalls != short:
                what = f"{driver.shortfalls - short} of its increments"
                self._refuse(k, info["closed_slot"], what)
        self.slots += 1
        self._ended = bool(term or trunc)
        info["plan"] = self.labels[k]  # (a fresh dict: the inner env's info of this step)
        info["inner_steps"] = steps
        return self.planner.observe(obs), total, bool(term), bool(trunc), info
