"""The rewards of dlsched's three envs, in one registry: each reward a function ``(env, step)
-> float`` registered once by :func:`register_reward` with the env kinds it serves.

* ``"cluster"``: ``dlsched/Cluster-v0`` (``ClusterEnv(reward=...)``, ``EnvConfig.reward``,
  ``env.reward=<name>``), and through it ``dlsched/ClusterPlan-v0``, whose reward is the sum
  of its inner Cluster-v0's over the slots a step runs.  A reward is computed once per slot,
  when the slot closes, from a :class:`SlotStep`; the env returns it on the step that closed
  the slot and 0 on the other steps (DL²: the env returns the slot reward on the decision that
  closes it), with ``info["slot_ended"]`` True on that step so that an algorithm can credit
  every decision of the slot with it (DL²'s training rule), and ``info["slot_reward"]``
  repeating it for logging (the unwrapped value).  Empty slots have reward 0.
* ``"contention"``: ``dlsched/Contention-v0`` (``ContentionEnv(reward=...)``,
  ``ContentionConfig.reward``).  A reward is computed on every valid step from a
  :class:`DecisionStep`, the time from the previous valid step (or the reset) to now; an
  invalid action gets 0.

Every step says which interval it covers (``start``, ``end``, in the env's time unit: slots
or milliseconds) and which jobs finished in it (``finished``, job ids): a reward that reads
only those serves every kind.  A name is unique within a kind; the same name in two kinds
means the same quantity (``jct``: minus the time jobs spent in the system, whose episode sum
is minus their total JCT, scaled).  An unknown name is one :class:`ConfigError` listing that
env's rewards (:func:`reward_fn`).

Standard library only above ``envs.sim``: the rewards do not import the envs (an env passes
itself; what a Cluster-v0 reward reads of it is :class:`RewardEnv`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from envs.sim.elastic.allocators import JobState
from envs.sim.elastic.simulator import SlotRecord, SlotSimulator
from envs.sim.errors import ConfigError

__all__ = [
    "CLUSTER",
    "CONTENTION",
    "ENV_KINDS",
    "JCT_RETURN",
    "REWARDS",
    "DecisionStep",
    "RewardEnv",
    "RewardFn",
    "SlotStep",
    "contention_jct_reward",
    "dl2_reward",
    "jct_reward",
    "register_reward",
    "reward_fn",
]

CLUSTER = "cluster"
CONTENTION = "contention"
#: The env kinds a reward may serve, and the env ids each stands for.
ENV_KINDS: dict[str, str] = {
    CLUSTER: "dlsched/Cluster-v0 and dlsched/ClusterPlan-v0",
    CONTENTION: "dlsched/Contention-v0",
}


class RewardEnv(Protocol):
    """What a Cluster-v0 reward reads of the env (not the whole env: the rewards do not
    import it): its simulator and its options."""

    @property
    def sim(self) -> SlotSimulator | None: ...

    @property
    def jct_scale(self) -> float: ...


@dataclass(frozen=True, slots=True)
class SlotStep:
    """Cluster-v0's reward step: slot ``t`` just closed.  ``record``: the simulator's
    :class:`SlotRecord` of it; ``active``: the jobs that were active in it (the window and
    the jobs waiting beyond it)."""

    record: SlotRecord
    active: Sequence[JobState]
    t: int

    @property
    def start(self) -> float:
        """The slot's start, in slots."""
        return float(self.t)

    @property
    def end(self) -> float:
        """The slot's end, in slots."""
        return float(self.t + 1)

    @property
    def finished(self) -> tuple[int, ...]:
        """The jobs that completed in the slot."""
        return self.record.finished


@dataclass(frozen=True)
class DecisionStep:
    """Contention-v0's reward step: from the previous reward at ``start`` (ms; 0 at the
    reset) to now, ``end`` (ms).  ``area_before`` and ``area``: ``A(t)``, the time (ms) jobs have
    spent in the system up to ``t`` (finished: their JCT; others: ``t - submit``), at the two
    ends; ``num_jobs``: the episode's jobs; ``jobs``: the engine's jobs (read-only)."""

    start: float
    end: float
    area_before: float
    area: float
    num_jobs: int
    jobs: Sequence[Any]

    @functools.cached_property
    def finished(self) -> tuple[int, ...]:
        """The jobs that finished in ``(start, end]`` (computed when first asked)."""
        lo, hi = self.start, self.end
        return tuple(
            j.spec.job_id
            for j in self.jobs
            if not math.isnan(j.finish_ms) and lo < j.finish_ms <= hi
        )


#: ``reward(env, step)``: the env right after the step (for Cluster-v0 its simulator
#: ``env.sim`` and options such as ``env.jct_scale``: :class:`RewardEnv`) and the kind's step
#: (:class:`SlotStep`, :class:`DecisionStep`).
RewardFn = Callable[[Any, Any], float]

#: The rewards by env kind, then name, in the order registered.
REWARDS_BY_KIND: dict[str, dict[str, RewardFn]] = {kind: {} for kind in ENV_KINDS}
#: Cluster-v0's rewards by name (``ClusterEnv(reward=name)``, ``EnvConfig.reward``): the
#: ``"cluster"`` entry of :data:`REWARDS_BY_KIND`.
REWARDS: dict[str, RewardFn] = REWARDS_BY_KIND[CLUSTER]
#: The rewards whose episode return is minus the total JCT (over a scale): what a learner
#: that minimises average JCT needs (``plan_pg`` checks it); filled by
#: ``register_reward(..., jct_return=True)``.
JCT_RETURN: set[str] = set()

_Fn = TypeVar("_Fn", bound=Callable[..., float])


def register_reward(
    name: str, *, kinds: Sequence[str], jct_return: bool = False
) -> Callable[[_Fn], _Fn]:
    """Register the decorated ``reward(env, step) -> float`` under ``name`` (letters, digits
    and ``_``) for each env kind of ``kinds`` (:data:`ENV_KINDS`); ``jct_return``: its
    episode return is minus the total JCT (:data:`JCT_RETURN`).  A name registered twice for
    a kind, or an unknown kind, is one :class:`ConfigError`."""
    if not name.replace("_", "").isalnum() or not name[:1].isalpha():
        raise ConfigError(f"reward name {name!r}: letters, digits and '_' only")
    unknown = [k for k in kinds if k not in ENV_KINDS]
    if unknown or not kinds:
        raise ConfigError(f"reward {name!r}: kinds {list(kinds)}; known: {list(ENV_KINDS)}")

    def register(fn: _Fn) -> _Fn:
        taken = [k for k in kinds if name in REWARDS_BY_KIND[k]]
        if taken:
            raise ConfigError(f"reward {name!r} is registered twice for {taken}")
        for kind in kinds:
            REWARDS_BY_KIND[kind][name] = fn
        if jct_return:
            JCT_RETURN.add(name)
        return fn

    return register


def reward_fn(kind: str, name: str) -> RewardFn:
    """The reward ``name`` of env kind ``kind``; an unknown name is one :class:`ConfigError`
    listing that env's rewards."""
    rewards = REWARDS_BY_KIND[kind]
    if name not in rewards:
        names = " or ".join(repr(n) for n in rewards)
        raise ConfigError(f"reward must be {names} for {ENV_KINDS[kind]}, got {name!r}")
    return rewards[name]


@register_reward("dl2", kinds=(CLUSTER,))
def dl2_reward(env: RewardEnv, step: SlotStep) -> float:
    """``"dl2"`` (Cluster-v0's default; ``gymnasium.make`` defaults to ``"jct"``): DL²'s slot
    reward, the sum over jobs that ran in the slot of epochs trained / declared
    ``num_epochs`` (:attr:`SlotRecord.reward`).  Over a complete episode it sums to the number
    of jobs (each job's fractions add up to 1), whatever the policy: learners that maximise
    the return see no difference between policies, only DL²'s per-slot credit rule gives it a
    signal."""
    return float(step.record.reward)


@register_reward("jct", kinds=(CLUSTER,), jct_return=True)
def jct_reward(env: RewardEnv, step: SlotStep) -> float:
    """``"jct"``: minus the job-time spent in the system during the slot, ``-sum over active
    jobs (in the window or waiting beyond it) of (min(finish, t + 1) - t)`` divided by
    ``jct_scale`` (default 1): 1 slot for a job that does not finish, the used fraction of the
    slot for one that does.  Over a complete episode the sum is exactly ``-(sum of JCTs in
    slots) / jct_scale`` with the simulator's fractional finish times."""
    sim = env.sim
    assert sim is not None  # the slot just closed in it
    active, t = step.active, step.t
    if not step.record.finished:
        # Every job active in the slot was unfinished when it began (the simulator's active
        # jobs), so with no job finished in it each counts 1 slot: the loop below would add
        # 1.0 once per job, which is exactly float(len(active)).
        return -float(len(active)) / env.jct_scale
    in_system = 0.0
    for view in active:
        finish = sim.finish_time(view.job_id)
        in_system += 1.0 if finish is None else finish - t
    return -in_system / env.jct_scale


@register_reward("jct", kinds=(CONTENTION,), jct_return=True)
def contention_jct_reward(env: Any, step: DecisionStep) -> float:
    """``"jct"`` (Contention-v0's default): ``-(A(t') - A(t)) / (1000 N)`` over the step's
    interval, ``N`` jobs: the episode's return is exactly ``-avg JCT`` in seconds."""
    return -(step.area - step.area_before) / (1000.0 * step.num_jobs)
