"""Decision-time search over the slot's plan in ``dlsched/Cluster-v0``, on the known jobs.

A plan policy (:class:`~agents.plan_policy.PlanPolicy`) picks, at each slot's start, the
allocator that plans the slot.  :class:`SearchPlanActor` lets it look ahead before it acts, as
the contention world's ``search: known`` does (:mod:`agents.rule_search`) and as AlphaZero acts
with its network inside a search:

1. the network picks its plan ``k0`` (argmax);
2. every plan ``k`` is tried on a copy of the env that knows only the jobs that have arrived
   (:meth:`~envs.gym.cluster.env.ClusterEnv.lookahead`: the jobs still to come are
   forgotten, so nothing is read about the future), and the copy is run to the end of its
   jobs by the **base**: ``hold`` (the network's plan ``k0``, held for every later slot),
   ``policy`` (the network, slot by slot, on the copy's observations) or a plan label (that
   plan);
3. a plan's value is the total JCT of the known jobs (slots) its copy ends with; with
   ``also`` (plan labels), each plan is also continued by each of those plans held, and its
   value is the lowest of its continuations' (a rollout with several base heuristics, as in
   Bertsekas's rollout algorithms: the search then answers "which plan now, if later slots
   are planned by the best of these?");
4. the slot takes ``k0`` unless another plan is lower by more than ``tol`` (relative), then
   the lowest (ties: the lower plan index).

``base: planned`` (with ``blocks``, slot counts) is a receding-horizon search: the search keeps
its own **planned sequence** of plans for the slots ahead (at an episode's first slot, the
network's plan held).  At each slot every option "plan ``k`` for the next ``m`` slots" (``m``
of ``blocks``; ``0``: to the end) is tried on a known-jobs copy and continued by the planned
sequence; the option "the planned sequence from here" is valued alike.  The slot takes the
lowest (ties: the planned one), and a block taken is written into the planned sequence, so a
later slot continues with what this one valued.  Its cost is up to ``1 + K * len(blocks)``
rollouts a slot.  With ``boost`` (slot counts), it also tries, for every job of the window,
"the planned plan with this job served first for ``m`` slots" (``m`` of ``boost``), where the
planned plan is an :class:`~envs.sim.elastic.speed_aware.EfficientSRTF` (its ``first``
option: the job ahead of the order, at ``head_efficiency``, full speed by default): a choice
per job, not per plan (``J * len(boost)`` more rollouts a slot at most).

Plans whose tried slot leaves the run in the same state (the same progress, allocation and
slots run for every job) have the same value, so each such state is run once.  The search is
deterministic: the same policy, workload and settings give the same decisions.  Its cost is up
to ``K`` rollouts of the known jobs per slot (``K`` plans; docs/experiments/general-policy.md
has the measured figures).  ``future=True`` lets the copies keep the jobs still to arrive: a
clairvoyant search, for measuring what the future is worth, never a scheduler.

The allocators are shared with the actor (every allocator of
:data:`~envs.sim.elastic.allocators.ALLOCATORS` decides a slot from the slot's jobs alone; its
caches are memos), so the rollouts change nothing of the run's own.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from envs.gym.cluster_env import ClusterEnv
from envs.gym.heuristic import HeuristicDriver
from envs.gym.plan_env import PlanActor, PlanSpec, parse_plan, plan_label, plan_specs
from envs.sim.elastic.allocators import Allocator, make_allocator
from envs.sim.elastic.speed_aware import EfficientSRTF
from envs.sim.errors import ConfigError, check_number

__all__ = [
    "BASES",
    "PLANNED",
    "PlanSearch",
    "PlannedSequence",
    "SearchPlanActor",
    "block_totals",
    "plan_totals",
    "search_totals",
]

#: The continuations that are not a plan label.
BASES = ("hold", "policy")
#: The base of the receding-horizon search: its own planned sequence (with ``blocks``).
PLANNED = "planned"
#: A block of this many slots runs to the end of the episode.
TO_THE_END = 0


@dataclass(frozen=True)
class PlanSearch:
    """How a plan policy searches (module docstring): ``base`` (``hold``, ``policy`` or a plan
    label), ``also`` (plan labels whose held continuations a plan's value is the best of, with
    the base's), ``tol`` (relative margin a plan must beat the network's by) and ``future``
    (clairvoyant copies: for measurements only), ``blocks`` (``base: planned``'s block lengths)
    and ``extra`` (plan labels the search tries beside the policy's own plans: the network
    never picks them, a slot's search may) and ``boost`` (``base: planned``'s block lengths
    of the per-job options: the planned EfficientSRTF plan with one job served first)."""

    base: str = "hold"
    tol: float = 1e-9
    future: bool = False
    also: tuple[str, ...] = ()
    blocks: tuple[int, ...] = ()
    extra: tuple[str, ...] = ()
    boost: tuple[int, ...] = ()

    def check(self, labels: Sequence[str]) -> None:
        """One :class:`ConfigError` for a setting the search cannot run with (``labels``: the
        policy's own plans)."""
        if self.base not in BASES and self.base != PLANNED and self.base not in labels:
            raise ConfigError(
                f"search base {self.base!r} is neither one of {', '.join((*BASES, PLANNED))} "
                f"nor a plan of the policy ({', '.join(labels)})"
            )
        self._check_blocks()
        if isinstance(self.also, str) or not isinstance(self.also, tuple):
            raise ConfigError(f"search also must be a list of plan labels, got {self.also!r}")
        for label in self.also:
            if label not in labels:
                raise ConfigError(
                    f"search also: {label!r} is not a plan of the policy ({', '.join(labels)})"
                )
        if len(set(self.also)) != len(self.also):
            raise ConfigError(f"search also names a plan twice: {list(self.also)}")
        self.extra_plans(labels)
        if isinstance(self.tol, bool):
            raise ConfigError(f"search tol must be a number, got {self.tol!r}")
        if not check_number(self.tol, "search tol", ge=0.0) < 1.0:
            raise ConfigError(f"search tol must be in [0, 1), got {self.tol}")
        if not isinstance(self.future, bool):
            raise ConfigError(f"search future must be true or false, got {self.future!r}")

    def _check_blocks(self) -> None:
        _check_slot_counts("blocks", self.blocks)
        _check_slot_counts("boost", self.boost)
        if self.base == PLANNED:
            if not self.blocks:
                raise ConfigError(
                    "search base 'planned' needs blocks (slot counts, e.g. [1, 4, 16, 0])"
                )
            if self.also:
                raise ConfigError(
                    "search also continues held plans; base 'planned' continues with its own "
                    "planned sequence: use one or the other"
                )
            return
        for key, counts in (("blocks", self.blocks), ("boost", self.boost)):
            if counts:
                raise ConfigError(
                    f"search {key} {list(counts)}: for base 'planned' only, not {self.base!r}"
                )

    def extra_plans(self, labels: Sequence[str]) -> list[tuple[str, dict[str, Any]]]:
        """``extra`` as ``(allocator, options)`` pairs, after the policy's plans ``labels``; a
        label that is not an allocator, is one of the policy's plans or is named twice is a
        :class:`ConfigError` naming it."""
        if isinstance(self.extra, str) or not isinstance(self.extra, tuple):
            raise ConfigError(f"search extra must be a list of plan labels, got {self.extra!r}")
        out: list[tuple[str, dict[str, Any]]] = []
        seen = set(labels)
        for label in self.extra:
            if not isinstance(label, str):
                raise ConfigError(f"search extra: {label!r} is not a plan label")
            name, options = parse_plan(label)
            make_allocator(name, options)  # (an option the allocator refuses: its error)
            canonical = plan_label(name, options)
            if canonical in seen:
                raise ConfigError(
                    f"search extra: {label!r} is already a plan of the policy or named twice "
                    f"({', '.join(labels)})"
                )
            seen.add(canonical)
            out.append((name, options))
        return out

    def describe(self) -> dict[str, Any]:
        """What a policy file records (``meta["search"]``; ``also``, ``blocks``, ``extra`` and
        ``boost`` only when set, so files written before them read the same)."""
        out = asdict(self)
        for key in ("also", "blocks", "extra", "boost"):
            if out[key]:
                out[key] = list(out[key])
            else:
                del out[key]
        return out

    @classmethod
    def of(cls, spec: Mapping[str, Any]) -> PlanSearch:
        """The search a policy file's ``meta["search"]`` describes; an unknown key is a
        :class:`ConfigError` naming it."""
        if not isinstance(spec, Mapping):
            raise ConfigError(f"'search' must be a mapping, got {spec!r}")
        known = ("base", "tol", "future", "also", "blocks", "extra", "boost")
        unknown = sorted(set(spec) - set(known))
        if unknown:
            raise ConfigError(
                f"unknown search key(s) {', '.join(unknown)} (known: {', '.join(known)})"
            )
        fields = dict(spec)
        for key in ("also", "blocks", "extra", "boost"):
            if isinstance(fields.get(key), list):  # (JSON's lists; anything else: check says)
                fields[key] = tuple(fields[key])
        return cls(**fields)


def _check_slot_counts(key: str, counts: object) -> None:
    """One :class:`ConfigError` unless ``counts`` (the search's ``key``) is a tuple of
    distinct whole slot counts >= 0."""
    if isinstance(counts, str) or not isinstance(counts, tuple):
        raise ConfigError(f"search {key} must be a list of slot counts, got {counts!r}")
    for m in counts:
        if isinstance(m, bool) or not isinstance(m, int) or m < 0:
            raise ConfigError(
                f"search {key} must be whole slot counts >= 0 (0: to the end), got {m!r}"
            )
    if len(set(counts)) != len(counts):
        raise ConfigError(f"search {key} names a length twice: {list(counts)}")


Follow = Callable[[ClusterEnv, npt.NDArray[np.float32]], Allocator]


def plan_totals(
    env: ClusterEnv,
    allocators: Sequence[Allocator],
    follow: Follow,
    *,
    also: Sequence[Follow] = (),
    future: bool = False,
    observe: bool = True,
) -> npt.NDArray[np.float64]:
    """The total JCT (slots) of the known jobs (with ``future``: of every job) when each of
    ``allocators`` plans ``env``'s open slot (nothing placed yet) and ``follow`` plans
    every later slot (``follow(copy, observation) -> allocator``), each on its own
    :meth:`~envs.gym.cluster.env.ClusterEnv.lookahead` copy (``env`` is not stepped); with
    ``also``, each plan's total is the lowest over ``follow`` and each continuation of
    ``also``.  ``observe=False`` when no continuation reads an observation (the copies then
    write none)."""
    if not env.slot_untouched():
        raise ConfigError("a plan search needs an open slot with nothing placed yet")
    copies = env.lookahead(known_only=not future, observe=observe)
    continuations = [follow, *also]
    out = np.empty(len(allocators), dtype=np.float64)
    seen: dict[tuple[Any, ...], float] = {}
    for k, allocator in enumerate(allocators):
        tried = copies()
        obs, _, term, trunc, _, _ = tried.plan_slot(allocator)
        state = tried.state_key()
        copy: ClusterEnv | None = tried
        best = math.inf
        for c, continuation in enumerate(continuations):
            key = (c, state)
            if key not in seen:  # (the same state and continuation: the same total)
                if copy is None:  # (the last one was run on: a fresh one at the tried slot)
                    copy = copies()
                    obs, _, term, trunc, _, _ = copy.plan_slot(allocator)
                while not (term or trunc):
                    obs, _, term, trunc, _, _ = copy.plan_slot(continuation(copy, obs))
                seen[key] = float(sum(copy.episode_jcts()[0]))
                copy = None
            best = min(best, seen[key])
        out[k] = best
    return out


def _holding(allocator: Allocator) -> Follow:
    def by_plan(_copy: ClusterEnv, _obs: npt.NDArray[np.float32]) -> Allocator:
        return allocator

    return by_plan


def search_totals(
    env: ClusterEnv,
    allocators: Sequence[Allocator],
    labels: Sequence[str],
    search: PlanSearch,
    k0: int,
    by_policy: Follow | None = None,
) -> npt.NDArray[np.float64]:
    """Each plan's value under ``search`` at ``env``'s open slot (:func:`plan_totals`; lower
    is better), when the network's plan there is ``k0``: the base ``hold`` holds ``k0``,
    ``policy`` follows ``by_policy`` (needed then), a label holds that plan; each of ``also``
    is a further held continuation (less the base's own plan).  What
    :class:`SearchPlanActor` decides by, and what expert iteration's ``known`` teacher labels
    slots with (:mod:`agents.expert_iteration`)."""
    base = search.base
    if base == "policy":
        if by_policy is None:
            raise ConfigError("a search with base 'policy' needs the policy's continuation")
        follow, own = by_policy, None
    else:
        own = k0 if base == "hold" else list(labels).index(base)
        follow = _holding(allocators[own])
    also = [
        _holding(allocators[k])
        for k in (list(labels).index(label) for label in search.also)
        if k != own
    ]
    return plan_totals(
        env, allocators, follow, also=also, future=search.future, observe=base == "policy"
    )


class PlannedSequence:
    """The receding-horizon search's plan for the slots ahead: a plan index for every slot
    from ``start`` on, as segments (the plan of a slot is that of the last segment starting
    at or before it; the last one holds to the end)."""

    def __init__(self, start: int, plan: int) -> None:
        self._starts = [start]
        self._plans = [plan]

    @classmethod
    def of(cls, first: int, plans: Sequence[int]) -> PlannedSequence:
        """``plans[i]`` for slot ``first + i``, the last one held past the end."""
        out = cls(first, plans[0])
        out._starts = [first + i for i in range(len(plans))]
        out._plans = list(plans)
        return out

    def at(self, slot: int) -> int:
        """The plan of ``slot`` (a slot before the first segment: the first's plan)."""
        return self._plans[max(bisect.bisect_right(self._starts, slot) - 1, 0)]

    def write(self, first: int, last: int | None, plan: int) -> None:
        """``plan`` for the slots ``first`` to ``last`` (``None``: to the end), the later
        ones as before; the segments before ``first`` are dropped (the search only looks
        ahead)."""
        segments = [(first, plan)]
        if last is not None:
            segments.append((last + 1, self.at(last + 1)))
            segments += [(a, k) for a, k in self.segments() if a > last + 1]
        self._starts = [a for a, _ in segments]
        self._plans = [k for _, k in segments]

    def segments(self) -> list[tuple[int, int]]:
        """``(first slot, plan)`` of each segment, in order."""
        return list(zip(self._starts, self._plans, strict=True))


def block_totals(
    env: ClusterEnv,
    allocators: Sequence[Allocator],
    blocks: Sequence[int],
    planned: Callable[[int], int],
    *,
    future: bool = False,
    plans: int | None = None,
    more: Sequence[tuple[int, int]] = (),
) -> dict[tuple[int, int], tuple[float, int | None]]:
    """The receding-horizon search's options at ``env``'s open slot (nothing placed yet):
    for "the planned sequence from here" (key ``(planned(slot), 1)``) and each "plan ``k``
    for ``m`` slots" (``m`` of ``blocks``, :data:`TO_THE_END` = 0: to the end), the total JCT
    of the known jobs (``future``: of every job) when the copy is continued by ``planned``
    (slot -> plan index), and the last slot the block ran (``None`` when it ran to the end).
    The blocks are tried for the first ``plans`` allocators (``None``: all), then the options
    ``more`` (``(allocator index, m)``: the search's per-job options).  ``env`` is not
    stepped; states that coincide share one rollout."""
    if not env.slot_untouched():
        raise ConfigError("a plan search needs an open slot with nothing placed yet")
    copies = env.lookahead(known_only=not future, observe=False)
    s = env.slot
    n_plans = len(allocators) if plans is None else plans
    options = [(planned(s), 1), *((k, m) for m in blocks for k in range(n_plans)), *more]
    seen: dict[tuple[Any, ...], float] = {}
    out: dict[tuple[int, int], tuple[float, int | None]] = {}
    for k, m in options:
        if (k, m) in out:
            continue
        copy = copies()
        term = trunc = False
        n, last = 0, s
        while not (term or trunc) and (m == TO_THE_END or n < m):
            last = copy.slot
            _, _, term, trunc, _, _ = copy.plan_slot(allocators[k])
            n += 1
        state = copy.state_key()
        if state not in seen:  # (the same state, continued alike: the same total)
            while not (term or trunc):
                _, _, term, trunc, _, _ = copy.plan_slot(allocators[planned(copy.slot)])
            seen[state] = float(sum(copy.episode_jcts()[0]))
        out[(k, m)] = (seen[state], None if m == TO_THE_END else last)
    return out


class SearchPlanActor(PlanActor):
    """A plan policy that searches before each slot (module docstring); a
    :class:`~envs.gym.plan_env.PlanActor` in every other way.  Its plans are the policy's
    (``plans``, indices ``0..K-1``: what the network picks from), then the search's ``extra``
    plans.  :attr:`searched` counts the slots searched, :attr:`changed` those where the search
    overruled the network, :attr:`last_totals` the last slot's totals (slots of JCT, per
    plan).  With ``boost``, an episode's per-job options are further plans after those
    (indices from :attr:`n_plans` on, in :attr:`chosen` too; :meth:`boosted` says which job
    and plan), made as the search needs them and dropped when an episode starts."""

    def __init__(
        self,
        env: ClusterEnv,
        choose: Callable[[npt.NDArray[np.float32]], int],
        plans: Sequence[PlanSpec] | None,
        search: PlanSearch,
    ) -> None:
        own = plan_specs(plans)
        labels = [plan_label(n, o) for n, o in own]
        search.check(labels)
        super().__init__(env, choose, [*own, *search.extra_plans(labels)])
        #: the policy's own plans (the network picks among the first ``n_own``)
        self.n_own = len(own)
        self.search = search
        self.allocators = [d.allocator for d in self.planner.drivers]
        #: the policy's and the search's plans; later indices are an episode's per-job options
        self.n_plans = len(self.allocators)
        self._boosts: dict[tuple[int, int], int] = {}  # (plan, job id) -> index
        self._boosted: dict[int, tuple[int, int]] = {}  # index -> (plan, job id)
        self.searched = 0
        self.changed = 0
        self.last_totals: npt.NDArray[np.float64] | None = None
        #: ``base: planned``'s plan for the slots ahead (``None`` before an episode's first)
        self.planned: PlannedSequence | None = None
        #: ``base: planned``'s last slot: each option's (total, last slot of its block)
        self.last_values: dict[tuple[int, int], tuple[float, int | None]] = {}
        self._episode: tuple[Any, int] | None = None

    def reset(self, seed: int | None) -> None:
        super().reset(seed)
        self.planned = None

    def _by_policy(self, copy: ClusterEnv, obs: npt.NDArray[np.float32]) -> Allocator:
        """``base: policy``'s continuation: the network's plan on the copy's observation."""
        return self.allocators[int(self.choose(self.planner.observe(obs, copy)))]

    def plan_for(self, env: ClusterEnv, obs: npt.NDArray[np.float32]) -> int:
        k0 = super().plan_for(env, obs)
        if self.search.base == PLANNED:
            return self._receding(env, k0)
        totals = search_totals(
            env, self.allocators, self.planner.labels, self.search, k0, self._by_policy
        )
        self.last_totals = totals
        self.searched += 1
        best = int(np.argmin(totals))
        if totals[k0] - totals[best] > self.search.tol * abs(totals[best]):
            self.changed += 1
            return best
        return k0

    def _first_plan(self, env: ClusterEnv, k0: int) -> PlannedSequence:
        """An episode's first planned sequence: the network's plan ``k0`` held (a subclass
        may start from another, :class:`agents.plan_sequences.SequenceImprover`)."""
        return PlannedSequence(env.slot, k0)

    def _receding(self, env: ClusterEnv, k0: int) -> int:
        """``base: planned``: the lowest option of :func:`block_totals` (ties: the planned
        plan), written into :attr:`planned`; a new episode (another simulator, or the clock
        gone back) starts from the network's plan ``k0`` held."""
        episode = (env.simulator, env.slot)
        if (
            self.planned is None
            or self._episode is None
            or self._episode[0] is not episode[0]
            or episode[1] < self._episode[1]
        ):
            self._drop_boosts()
            self.planned = self._first_plan(env, k0)
        self._episode = episode
        planned = self.planned
        here = planned.at(env.slot)
        values = block_totals(
            env,
            self.allocators,
            self.search.blocks,
            planned.at,
            future=self.search.future,
            plans=self.n_plans,
            more=self._boost_options(env, here),
        )
        self.last_values = values
        base = values[(here, 1)][0]
        (k, _), (best, last) = min(
            values.items(),
            key=lambda kv: (kv[1][0], kv[0][1] == TO_THE_END, kv[0][1], kv[0][0]),
        )
        self.searched += 1
        self.last_totals = np.array(
            [min(v for (kk, _), (v, _) in values.items() if kk == j) for j in
             range(self.n_plans)]
        )  # fmt: skip
        if not base - best > self.search.tol * abs(best):
            return here
        self.changed += 1
        planned.write(env.slot, last, k)
        return k

    # ------------------------------------------------------------------ per-job options
    def boosted(self, k: int) -> tuple[int, int] | None:
        """``(plan, job id)`` of a per-job option's index ``k`` (``None``: a plan)."""
        return self._boosted.get(k)

    def _drop_boosts(self) -> None:
        del self.allocators[self.n_plans :]
        del self.planner.drivers[self.n_plans :]
        self._boosts.clear()
        self._boosted.clear()

    def _boost_options(self, env: ClusterEnv, here: int) -> list[tuple[int, int]]:
        """``boost``'s options at the open slot: for every job of the window, the planned
        plan ``here`` (of a per-job option: its plan) with that job first, for each block
        length of ``boost``; none unless that plan is an EfficientSRTF."""
        if not self.search.boost:
            return []
        plan = self._boosted.get(here, (here, -1))[0]
        base = self.allocators[plan]
        if type(base) is not EfficientSRTF:
            return []
        out = []
        for job in env.window_jobs:
            key = (plan, job.job_id)
            k = self._boosts.get(key)
            if k is None:
                allocator = base.with_first(job.job_id)
                k = len(self.allocators)
                self.allocators.append(allocator)
                self.planner.drivers.append(HeuristicDriver(allocator, self.planner.env))
                self._boosts[key] = k
                self._boosted[k] = key
            out += [(k, m) for m in self.search.boost]
        return out
