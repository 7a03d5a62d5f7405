"""Elastic allocators that plan with the speed model: :class:`Optimus` (DL²'s reference
``optimus_env.py``) and dlsched's :class:`EfficientSRTF`, with the slot arithmetic they share
(:func:`slots_to_finish`, :func:`optimus_utility`), and :class:`LoadAwareESRTF`, EfficientSRTF
with an efficiency that depends on the number of active jobs.  Each registered by name where
it is defined (:func:`~envs.sim.elastic.allocator_base.register_allocator`)."""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence

from envs.sim.elastic import native_alloc
from envs.sim.elastic.allocator_base import AllocatorBase, Decision, JobState, register_allocator
from envs.sim.elastic.cluster import SlotCluster
from envs.sim.elastic.spec import SpeedModel
from envs.sim.errors import ConfigError

__all__ = [
    "EfficientSRTF",
    "LoadAwareESRTF",
    "Optimus",
    "grow_towards",
    "optimus_utility",
    "slots_to_finish",
]


def slots_to_finish(remaining_epochs: float, epochs_per_slot: float) -> float:
    """``remaining / epochs_per_slot``; 0 when nothing remains, ``inf`` at speed 0."""
    if remaining_epochs <= 0:
        return 0.0
    if epochs_per_slot <= 0:
        return math.inf
    return remaining_epochs / epochs_per_slot


def _estimated_epochs_per_slot(job: JobState, its: float, slot_s: float, oracle: bool) -> float:
    """Epochs per slot at ``its`` iterations/s as a scheduler estimates them: without the
    job's ``speed_factor`` unless ``oracle`` (DL² §6.4's speed variation)."""
    if oracle:
        its *= job.spec.speed_factor
    return its * slot_s / job.spec.type.iterations_per_epoch


def optimus_utility(remaining_epochs: float, eps_now: float, eps_next: float) -> float:
    """Slots saved by going from ``eps_now`` to ``eps_next`` epochs per slot.

    A speed-0 point takes infinitely many slots, consistently: leaving one for a positive
    speed saves ``+inf`` slots, entering one from a positive speed saves ``-inf``, and moving
    between two speed-0 points (or with nothing left to train) saves 0.
    """
    now = slots_to_finish(remaining_epochs, eps_now)
    nxt = slots_to_finish(remaining_epochs, eps_next)
    if now == nxt:  # also inf == inf: no slot saved, never NaN
        return 0.0
    return now - nxt


def _check_efficiency(owner: str, key: str, value: object) -> None:
    """An EfficientSRTF efficiency: a finite number in (0, 1], else a :class:`ConfigError`."""
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0.0 < value <= 1.0
    ):
        raise ConfigError(f"{owner}: {key} must be in (0, 1], got {value!r}")


def _check_job_count(owner: str, key: str, value: object) -> None:
    """A job count: an integer >= 0, else a :class:`ConfigError`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"{owner}: {key} must be an integer >= 0 (a job count), got {value!r}")


@register_allocator("optimus")
class Optimus(AllocatorBase):
    """Optimus' marginal-gain greedy on the speed model (DL² reference ``optimus_env.py``).

    A job with no worker gets a worker, then a job with no PS a PS, before anything else
    (in arrival, id order).  Otherwise a job's utility for one more worker (PS) is the number
    of slots it saves, :func:`optimus_utility` with ``rem = max(num_epochs - progress, 0)``
    (declared epochs) and ``epochs_per_slot(p, w) = speed(type, p, w) * slot_s /
    iterations_per_epoch``; its better role (ties: PS, as in the reference) is queued.  The
    largest utility (ties: arrival, id) gets its task on the least-loaded node and the job is
    re-scored; allocation stops when the best utility is <= 0 or nothing is left.  A job's
    role at its cap is not offered.  Jobs with infinite utility (leaving a speed-0 point) come
    after the first-worker/first-PS tier.

    The model is Optimus' estimate: it does not know a job's ``speed_factor`` unless
    ``oracle_speed_factor`` (DL² §6.4's speed variation is what Optimus cannot model).

    Failures: ``stop_at_first_failure`` ends the slot (reference).  By default the failed role
    is dropped for this job and the others go on; if it was the job's first worker or first
    PS the job cannot run, so its tasks are released and it is dropped.
    """

    def __init__(self, *, oracle_speed_factor: bool = False, stop_at_first_failure: bool = False):
        super().__init__(stop_at_first_failure=stop_at_first_failure)
        self.oracle_speed_factor = oracle_speed_factor

    def __repr__(self) -> str:
        return (
            f"Optimus(oracle_speed_factor={self.oracle_speed_factor}, "
            f"stop_at_first_failure={self.stop_at_first_failure})"
        )

    def epochs_per_slot(
        self, job: JobState, speed: SpeedModel, slot_s: float, ps: int, workers: int
    ) -> float:
        if ps <= 0 or workers <= 0:
            return 0.0
        rate = float(speed.speed(job.spec.type, ps, workers))
        return _estimated_epochs_per_slot(job, rate, slot_s, self.oracle_speed_factor)

    def allocate(
        self,
        jobs: Sequence[JobState],
        cluster: SlotCluster,
        speed: SpeedModel,
        slot_s: float,
    ) -> dict[int, tuple[int, int]]:
        if type(self) is Optimus:  # the native slot, where built (envs.sim.elastic.native_alloc)
            params = (self.stop_at_first_failure, self.oracle_speed_factor)
            out = native_alloc.allocate(
                self, native_alloc.KIND_OPTIMUS, params, jobs, cluster, speed, slot_s
            )
            if out is not None:
                return out
        by_id, counts = self._start(jobs)
        self.fill(by_id, counts, cluster, speed, slot_s)
        return self._result(counts)

    def fill_after(
        self,
        owner: AllocatorBase,
        by_id: dict[int, JobState],
        counts: dict[int, list[int]],
        cluster: SlotCluster,
        speed: SpeedModel,
        slot_s: float,
    ) -> None:
        """:meth:`fill` after ``owner``'s own tasks of the slot, its decision log continued
        (EfficientSRTF's ``backfill``)."""
        self.last_decisions = owner.last_decisions
        self.fill(by_id, counts, cluster, speed, slot_s)
        owner.last_decisions = self.last_decisions

    def fill(
        self,
        by_id: dict[int, JobState],
        counts: dict[int, list[int]],
        cluster: SlotCluster,
        speed: SpeedModel,
        slot_s: float,
    ) -> None:
        """The greedy from ``counts`` (``job_id -> [workers, ps]``, tasks already placed in
        ``cluster``; updated in place), appending to ``last_decisions``: from all-zero counts
        it is :meth:`allocate`; from another allocator's counts it hands out what that
        allocator left free (:class:`EfficientSRTF`'s ``backfill``).  Only tasks placed here
        are released when a job's first worker or PS does not fit."""
        dropped: set[tuple[int, str]] = set()
        placed: dict[int, list[tuple[int, int, int]]] = {jid: [] for jid in by_id}
        # Heap entries: (tier, -utility, arrival, job_id, role); tier 0 = first worker/PS.
        heap: list[tuple[int, float, int, int, str]] = []

        def push(job: JobState) -> None:
            w, p = counts[job.job_id]
            can_w = w < job.spec.max_workers and (job.job_id, "worker") not in dropped
            can_p = p < job.spec.max_ps and (job.job_id, "ps") not in dropped
            if w == 0 or p == 0:
                role = "worker" if w == 0 else "ps"
                if can_w if role == "worker" else can_p:
                    heapq.heappush(heap, (0, -math.inf, job.arrival, job.job_id, role))
                return
            rem = job.remaining_epochs
            now = self.epochs_per_slot(job, speed, slot_s, p, w)
            u_w = (
                optimus_utility(rem, now, self.epochs_per_slot(job, speed, slot_s, p, w + 1))
                if can_w
                else -math.inf
            )
            u_p = (
                optimus_utility(rem, now, self.epochs_per_slot(job, speed, slot_s, p + 1, w))
                if can_p
                else -math.inf
            )
            if not (can_w or can_p):
                return
            role, util = ("ps", u_p) if u_p >= u_w else ("worker", u_w)
            heapq.heappush(heap, (1, -util, job.arrival, job.job_id, role))

        for job in sorted(by_id.values(), key=lambda j: (j.arrival, j.job_id)):
            push(job)
        while heap:
            tier, neg_util, _, jid, role = heapq.heappop(heap)
            if tier == 1 and -neg_util <= 0:
                break
            job, c = by_id[jid], counts[jid]
            cpu, gpu = job.worker_demand if role == "worker" else job.ps_demand
            node = cluster.place_least_loaded(cpu, gpu)
            if node is None:
                if self.stop_at_first_failure:
                    break
                dropped.add((jid, role))
                if tier == 0:  # no first worker / first PS: the job cannot run this slot
                    for t_cpu, t_gpu, t_node in placed[jid]:
                        cluster.release(t_cpu, t_gpu, t_node)
                    placed[jid].clear()
                    c[0] = c[1] = 0
                    self.last_decisions = [d for d in self.last_decisions if d[0] != jid]
                    continue
                push(job)
                continue
            placed[jid].append((cpu, gpu, node))
            c[0 if role == "worker" else 1] += 1
            self.last_decisions.append((jid, role, node))
            push(job)


@register_allocator("esrtf")
class EfficientSRTF(AllocatorBase):
    """Shortest remaining time first at an efficient allocation (dlsched's own heuristic, not
    from the literature; added as a stronger baseline than Optimus on DL²'s settings).

    Each job's *target* is the smallest allocation (fewest tasks; ties: faster, then fewer
    workers) within its caps whose speed is at least ``efficiency`` times the best speed over
    its caps (the measured table has diminishing and even negative returns, so the last few
    percent of speed cost many tasks).  Jobs are served in order of their estimated
    remaining slots at the target (``remaining_epochs / epochs_per_slot``, declared epochs,
    ``speed_factor`` unknown unless ``oracle_speed_factor``, as for :class:`Optimus`; ties:
    arrival, id); each gets workers and PSs towards its target, the role further behind its
    target share first (ties: worker), each on the least-loaded node.  A task that does not
    fit ends the job's growth; a job left without a worker or a PS releases its tasks.
    ``stop_at_first_failure`` ends the slot at the first task that does not fit.  ``head``
    (default 0): the first ``head`` jobs of that order get their target at
    ``head_efficiency`` instead (e.g. the shortest job at full speed, the rest efficient: SRTF's
    argument for finishing the shortest first, with the cluster's throughput kept for the
    others); the order itself stays the one at ``efficiency``.  ``first`` (a job id, default
    ``None``): that job is served before the order, with its target at ``head_efficiency``
    (``head`` then counts the jobs after it); a job the slot does not have changes nothing.
    It is how a search gives one job priority for a few slots (``agents.plan_search``'s
    ``boost``); as a fixed option it means one job id of one workload.  ``backfill`` (default
    ``False``): what the targets leave free is then handed out by :class:`Optimus`'s
    marginal-gain greedy (:meth:`Optimus.fill`, from these counts), so that a lightly loaded
    cluster is not left idle (the targets alone are not work-conserving: with few jobs they
    stop at ``efficiency`` of the best speed with the rest of the cluster free).

    ``efficiency = 0.92`` was chosen on the pretraining workloads of DL²'s small setting
    (seeds 1000-1005, through the env: 0.80 / 0.85 / 0.90 / 0.92 / 0.95 / 0.97 give avg JCT
    92.4 / 88.8 / 85.4 / 82.6 / 86.6 / 91.3 slots; DRF 134.6, Optimus 99.8).
    """

    def __init__(
        self,
        efficiency: float = 0.92,
        *,
        head: int = 0,
        head_efficiency: float = 1.0,
        backfill: bool = False,
        first: int | None = None,
        oracle_speed_factor: bool = False,
        stop_at_first_failure: bool = False,
    ) -> None:
        super().__init__(stop_at_first_failure=stop_at_first_failure)
        if first is not None and (isinstance(first, bool) or not isinstance(first, int)
                                  or first < 0):  # fmt: skip
            raise ConfigError(f"EfficientSRTF: first must be a job id (an int >= 0), got {first!r}")
        if not isinstance(backfill, bool):
            raise ConfigError(f"EfficientSRTF: backfill must be true or false, got {backfill!r}")
        _check_efficiency("EfficientSRTF", "efficiency", efficiency)
        _check_efficiency("EfficientSRTF", "head_efficiency", head_efficiency)
        _check_job_count("EfficientSRTF", "head", head)
        self.efficiency = float(efficiency)
        self.head = int(head)
        self.head_efficiency = float(head_efficiency)
        self.oracle_speed_factor = oracle_speed_factor
        self.backfill = backfill
        self.first = first
        self._filler = (
            Optimus(
                oracle_speed_factor=oracle_speed_factor,
                stop_at_first_failure=stop_at_first_failure,
            )
            if backfill
            else None
        )
        self._targets: dict[tuple[object, int, int], tuple[float, int, int]] = {}
        self._targets_of: SpeedModel | None = None  # the speed model the cache is for
        # the targets of the first ``head`` jobs and of ``first`` (same order, another
        # efficiency)
        self._head = (
            EfficientSRTF(head_efficiency, oracle_speed_factor=oracle_speed_factor)
            if head or first is not None
            else None
        )

    def __repr__(self) -> str:
        head = f"head={self.head}, head_efficiency={self.head_efficiency}, " if self.head else ""
        if self.first is not None:
            head += f"first={self.first}, "
            if not self.head:
                head += f"head_efficiency={self.head_efficiency}, "
        if self.backfill:
            head += "backfill=True, "
        return (
            f"EfficientSRTF(efficiency={self.efficiency}, {head}"
            f"oracle_speed_factor={self.oracle_speed_factor}, "
            f"stop_at_first_failure={self.stop_at_first_failure})"
        )

    def with_first(self, job_id: int) -> EfficientSRTF:
        """This rule with ``first = job_id`` (every other option the same)."""
        return EfficientSRTF(
            self.efficiency,
            head=self.head,
            head_efficiency=self.head_efficiency,
            backfill=self.backfill,
            first=job_id,
            oracle_speed_factor=self.oracle_speed_factor,
            stop_at_first_failure=self.stop_at_first_failure,
        )

    def target(self, job: JobState, speed: SpeedModel) -> tuple[float, int, int]:
        """``(iterations/s, workers, ps)`` of ``job``'s target allocation (cached per type,
        caps and speed model)."""
        spec = job.spec
        if speed is not self._targets_of:
            self._targets, self._targets_of = {}, speed
        # keyed by the type itself: two types may share an index (a trace's types, or types
        # built by hand) and still differ in speed
        key = (spec.type, spec.max_workers, spec.max_ps)
        got = self._targets.get(key)
        if got is None:
            ty = spec.type
            grid = [
                (float(speed.speed(ty, p, w)), w, p)
                for w in range(1, spec.max_workers + 1)
                for p in range(1, spec.max_ps + 1)
            ]
            top = max(g[0] for g in grid)
            if top <= 0:
                got = (0.0, 1, 1)
            else:
                ok = [g for g in grid if g[0] >= self.efficiency * top]
                got = min(ok, key=lambda g: (g[1] + g[2], -g[0], g[1]))
            self._targets[key] = got
        return got

    def allocate(
        self,
        jobs: Sequence[JobState],
        cluster: SlotCluster,
        speed: SpeedModel,
        slot_s: float,
    ) -> dict[int, tuple[int, int]]:
        if type(self) is EfficientSRTF:  # the native slot, where built (native_alloc)
            params = (self.efficiency, self.head, self.head_efficiency, self.backfill,
                      self.oracle_speed_factor, self.stop_at_first_failure,
                      -1 if self.first is None else self.first)  # fmt: skip
            out = native_alloc.allocate(
                self, native_alloc.KIND_ESRTF, params, jobs, cluster, speed, slot_s
            )
            if out is not None:
                return out
        by_id, counts = self._start(jobs)

        def remaining_slots(job: JobState) -> float:
            its = self.target(job, speed)[0]
            per_slot = _estimated_epochs_per_slot(job, its, slot_s, self.oracle_speed_factor)
            return slots_to_finish(job.remaining_epochs, per_slot)

        first = self.first
        order = sorted(
            by_id.values(),
            key=lambda j: (j.job_id != first, remaining_slots(j), j.arrival, j.job_id),
        )
        shift = int(first is not None and bool(order) and order[0].job_id == first)
        for rank, job in enumerate(order):
            plan = (
                self._head
                if self._head is not None and (rank < shift or rank - shift < self.head)
                else self
            )
            _, tw, tp = plan.target(job, speed)
            failed = grow_towards(self, job, counts[job.job_id], tw, tp, cluster)
            if failed and self.stop_at_first_failure:
                break
        if self._filler is not None:
            self._filler.fill_after(self, by_id, counts, cluster, speed, slot_s)
        return self._result(counts)


def grow_towards(
    owner: AllocatorBase,
    job: JobState,
    counts: list[int],
    workers: int,
    ps: int,
    cluster: SlotCluster,
) -> bool:
    """One job's turn in :class:`EfficientSRTF`'s slot: workers and PSs (``counts`` =
    ``[workers, ps]``, updated in place) towards ``(workers, ps)``, the role further behind its
    target share first (ties: worker), each on the least-loaded node, until a task does not
    fit.  The tasks are logged in ``owner.last_decisions`` if the job has a worker and a PS;
    otherwise it cannot run and they are released (its counts back to 0).  ``True`` when the
    job fell short of its target."""
    placed: list[Decision] = []
    while counts[0] < workers or counts[1] < ps:
        worker = counts[1] >= ps or (counts[0] < workers and counts[0] * ps <= counts[1] * workers)
        role = "worker" if worker else "ps"
        node = cluster.place_least_loaded(*(job.worker_demand if worker else job.ps_demand))
        if node is None:
            break
        counts[0 if worker else 1] += 1
        placed.append((job.job_id, role, node))
    failed = counts[0] < workers or counts[1] < ps
    if counts[0] and counts[1]:
        owner.last_decisions.extend(placed)
    else:  # no worker or no PS: the job cannot run, its tasks are released
        for _, role, node in placed:
            cluster.release(*(job.worker_demand if role == "worker" else job.ps_demand), node)
        counts[0] = counts[1] = 0
    return failed


@register_allocator("esrtf_load")
class LoadAwareESRTF(AllocatorBase):
    """:class:`EfficientSRTF` whose efficiency depends on how many jobs it allocates for.

    With ``n = len(jobs)`` active jobs in the slot: efficiency ``eff_light`` if
    ``n <= light``, EfficientSRTF's default (0.92) if ``light < n <= heavy``, ``eff_heavy``
    above; the slot is then exactly that EfficientSRTF's (allocation, placement, decision
    log).  Few jobs leave room to run each at its best speed; many compete for the cluster, and
    smaller allocations finish the queue sooner.

    The rule and its defaults (3, 5, 1.0, 0.7) come from a rollout search over EfficientSRTF on
    DL²'s ``medium`` setting (``experiments/dl2_search.py``): the thresholds were read off the
    search's choices on *training* seeds 2000-2007 (-9.0% avg JCT there, -9.3% on validation
    seeds 100-109); the test workloads were never used.  The job counts are absolute, tuned
    to ``medium``'s cluster: on other settings they are untuned
    (docs/experiments/against-heuristics.md, headroom section).
    """

    def __init__(
        self,
        light: int = 3,
        heavy: int = 5,
        eff_light: float = 1.0,
        eff_heavy: float = 0.7,
        *,
        oracle_speed_factor: bool = False,
        stop_at_first_failure: bool = False,
    ) -> None:
        super().__init__(stop_at_first_failure=stop_at_first_failure)
        _check_job_count("LoadAwareESRTF", "light", light)
        _check_job_count("LoadAwareESRTF", "heavy", heavy)
        if light > heavy:
            raise ConfigError(f"LoadAwareESRTF: light ({light}) must be <= heavy ({heavy})")
        _check_efficiency("LoadAwareESRTF", "eff_light", eff_light)
        _check_efficiency("LoadAwareESRTF", "eff_heavy", eff_heavy)
        self.light, self.heavy = int(light), int(heavy)
        self.oracle_speed_factor = oracle_speed_factor

        def esrtf(*eff: float) -> EfficientSRTF:
            return EfficientSRTF(
                *eff,
                oracle_speed_factor=oracle_speed_factor,
                stop_at_first_failure=stop_at_first_failure,
            )

        self.by_load = (esrtf(float(eff_light)), esrtf(), esrtf(float(eff_heavy)))

    def __repr__(self) -> str:
        lo, mid, hi = (a.efficiency for a in self.by_load)
        return (
            f"LoadAwareESRTF(light={self.light}, heavy={self.heavy}, eff_light={lo}, "
            f"eff_mid={mid}, eff_heavy={hi}, oracle_speed_factor={self.oracle_speed_factor}, "
            f"stop_at_first_failure={self.stop_at_first_failure})"
        )

    def for_load(self, n: int) -> EfficientSRTF:
        """The EfficientSRTF that plans a slot with ``n`` active jobs."""
        return self.by_load[0 if n <= self.light else 1 if n <= self.heavy else 2]

    def allocate(
        self,
        jobs: Sequence[JobState],
        cluster: SlotCluster,
        speed: SpeedModel,
        slot_s: float,
    ) -> dict[int, tuple[int, int]]:
        inner = self.for_load(len(jobs))
        out = inner.allocate(jobs, cluster, speed, slot_s)
        self.last_decisions = list(inner.last_decisions)
        return out
