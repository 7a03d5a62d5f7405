"""The slot loop of DL²'s elastic world (measured-speed mode, no network contention).

Why: DL²'s scheduler decides once per time slot, so its world is a slot loop rather than an
event engine: each slot admits arrivals, clears the cluster, asks the allocator for every
active job's ``(workers, ps)`` and advances each job by the speed model's epochs, finishing
jobs at the fraction of the slot they used.  The loop and its checks: :class:`SlotSimulator`;
JCT, makespan and utilisation conventions: :class:`ElasticResult`.
Details: docs/design/elastic.md#a-slot-loop-not-a-second-event-engine
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from envs.sim.elastic import native_alloc
from envs.sim.elastic.allocators import Allocator, JobState
from envs.sim.elastic.cluster import Placement, SlotCluster
from envs.sim.elastic.spec import ElasticCluster, ElasticJob, SpeedModel
from envs.sim.engine import SimulationError
from envs.sim.errors import ConfigError, WorkloadError, check_number

_COMPLETION_RTOL = 1e-9
#: what a completion's epochs must reach of the epochs it needs (``1 - _COMPLETION_RTOL``)
_COMPLETION_KEEP = 1.0 - _COMPLETION_RTOL
#: :class:`Heartbeat` reads the clock more rarely while the reads come closer than this (s)...
_HEARTBEAT_MIN_GAP_S = 0.001
#: ... and after every slot once they come farther apart than this (s); at least every this
#: many slots (a read costs ~0.1 us, an empty slot ~20 us: 1/16 of 0.5% at most)
_HEARTBEAT_MAX_GAP_S = 0.01
_HEARTBEAT_MAX_STRIDE = 16


class Heartbeat:
    """A slot loop's wall-clock heartbeat and budget, as the contention engine's
    (``RunOptions.progress_s`` / ``max_wall_s``, :mod:`envs.sim.engine.kernel`).

    Every ``progress_s`` wall-clock seconds a line on stderr says how far the run is
    (``<label>: <wall> s, slot <t>, <k> of <n> jobs finished``); past ``max_wall_s`` seconds
    the run stops with a :class:`~envs.sim.engine.SimulationError` saying the same.  The
    clock (``time.perf_counter``, since :meth:`restart`) is read once every ``stride``
    slots (1 to 16), the stride adapting so that reads fall about a millisecond apart: cheap
    slots (empty ones) are not slowed by the clock, slow slots (thousands of active jobs) are
    checked after every slot.  The owner counts ``left`` down once per slot and calls
    :meth:`check` when it reaches zero (see :meth:`SlotSimulator.end_slot`).  Nothing simulated
    depends on it.
    """

    __slots__ = ("_last", "_next_report", "label", "left", "max_wall_s", "progress_s",
                 "started", "stride")  # fmt: skip

    def __init__(
        self,
        label: str = "elastic run",
        *,
        max_wall_s: float | None = None,
        progress_s: float | None = None,
    ) -> None:
        if max_wall_s is not None:
            check_number(max_wall_s, "max_wall_s", gt=0)
        if progress_s is not None:
            check_number(progress_s, "progress_s", gt=0)
        self.label = label
        self.max_wall_s = None if max_wall_s is None else float(max_wall_s)
        self.progress_s = None if progress_s is None else float(progress_s)
        self.restart()

    @classmethod
    def of(cls, label: str, max_wall_s: float | None, progress_s: float | None) -> Heartbeat | None:
        """A heartbeat, or ``None`` when there is neither a budget nor a heartbeat to keep."""
        if max_wall_s is None and progress_s is None:
            return None
        return cls(label, max_wall_s=max_wall_s, progress_s=progress_s)

    def restart(self) -> None:
        """Start the clock now (the first check comes after the next slot)."""
        self.started = self._last = time.perf_counter()
        self._next_report = math.inf if self.progress_s is None else self.progress_s
        self.stride = self.left = 1

    def check(self, slot: int, finished: int, total: int) -> None:
        """Read the clock after slot ``slot``: a progress line when one is due, a
        :class:`~envs.sim.engine.SimulationError` when the budget is spent."""
        now = time.perf_counter()
        gap, self._last = now - self._last, now
        if gap < _HEARTBEAT_MIN_GAP_S and self.stride < _HEARTBEAT_MAX_STRIDE:
            self.stride *= 2
        elif gap > _HEARTBEAT_MAX_GAP_S:
            self.stride = 1
        self.left = self.stride
        spent = now - self.started
        done = f"{finished} of {total} jobs finished"
        if spent >= self._next_report:
            assert self.progress_s is not None
            print(f"{self.label}: {spent:.0f} s, slot {slot}, {done}", file=sys.stderr, flush=True)
            self._next_report = spent + self.progress_s
        if self.max_wall_s is not None and spent > self.max_wall_s:
            raise SimulationError(
                f"wall-clock budget of {self.max_wall_s:g} s spent at slot {slot}, {done}"
            )


@dataclass(frozen=True)
class ElasticJobRecord:
    """Outcome of one job; times in slots."""

    job_id: int
    arrival: int
    finish: float
    slots_run: int  # slots with any task allocated
    num_changes: int  # slots in which it ran with an allocation different from the slot before
    jct_slots: float = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "jct_slots", self.finish - self.arrival)

    @property
    def reference_end_time(self) -> float:
        """DL²'s ``end_time`` for this completion (``finish - 1``)."""
        return self.finish - 1.0

    @property
    def reference_jct_slots(self) -> float:
        """DL²'s ``end_time - arrival + 1``; equal to :attr:`jct_slots`."""
        return self.reference_end_time - self.arrival + 1.0


@dataclass(frozen=True)
class SlotRecord:
    """What happened in one slot (given to ``on_slot``)."""

    t: int
    allocation: Mapping[int, tuple[int, int]]  # every active job -> (workers, ps)
    epochs: Mapping[int, float]  # epochs trained in this slot by each allocated job
    finished: tuple[int, ...]  # jobs that completed in this slot
    used_cpu: int
    used_gpu: int
    reward: float  # DL²'s slot reward: sum of epochs / num_epochs over allocated jobs

    @classmethod
    def of(
        cls,
        t: int,
        allocation: Mapping[int, tuple[int, int]],
        epochs: Mapping[int, float],
        finished: tuple[int, ...],
        used_cpu: int,
        used_gpu: int,
        reward: float,
    ) -> SlotRecord:
        """``SlotRecord(...)`` without the frozen dataclass's per-field
        ``object.__setattr__`` calls (one record per slot; the fields are stored exactly as
        the constructor stores them)."""
        record = object.__new__(cls)
        record.__dict__.update(
            {
                "t": t,
                "allocation": allocation,
                "epochs": epochs,
                "finished": finished,
                "used_cpu": used_cpu,
                "used_gpu": used_gpu,
                "reward": reward,
            }
        )
        return record


@dataclass(frozen=True)
class ElasticResult:
    """A finished elastic run.

    **JCT conventions.**  Here ``JCT = finish - arrival`` slots.  DL²'s reference records
    ``end_time = t - 1 + fraction`` for the same completion and reports ``JCT = end_time -
    arrival + 1`` and ``makespan = max(end_time + 1)``; with its ``arrival`` equal to the slot of
    admission (as here) both give the same numbers: our ``finish`` is its ``end_time + 1``
    (:attr:`ElasticJobRecord.reference_end_time`).  Makespan is the largest ``finish`` (time 0 is
    the start of slot 0).

    Utilisation of slot ``t`` is used/total CPU (GPU) slots as allocated at its start; the
    means are over slots ``0 .. num_slots - 1``.
    """

    allocator: str
    speed_model: str
    slot_s: float
    num_slots: int
    jobs: tuple[ElasticJobRecord, ...]  # by job id
    cpu_util: tuple[float, ...]  # per slot
    gpu_util: tuple[float, ...]
    rewards: tuple[float, ...]  # per slot, DL²'s slot reward

    @property
    def avg_jct_slots(self) -> float:
        return sum(r.jct_slots for r in self.jobs) / len(self.jobs)

    @property
    def avg_jct_s(self) -> float:
        return self.avg_jct_slots * self.slot_s

    @property
    def makespan_slots(self) -> float:
        return max(r.finish for r in self.jobs)

    @property
    def mean_cpu_util(self) -> float:
        return sum(self.cpu_util) / len(self.cpu_util)

    @property
    def mean_gpu_util(self) -> float:
        return sum(self.gpu_util) / len(self.gpu_util)

    def summary(self) -> dict[str, Any]:
        return {
            "allocator": self.allocator,
            "speed_model": self.speed_model,
            "num_jobs": len(self.jobs),
            "avg_jct_slots": self.avg_jct_slots,
            "avg_jct_s": self.avg_jct_s,
            "makespan_slots": self.makespan_slots,
            "num_slots": self.num_slots,
            "mean_cpu_util": self.mean_cpu_util,
            "mean_gpu_util": self.mean_gpu_util,
            "mean_slot_reward": sum(self.rewards) / len(self.rewards),
        }


@dataclass(eq=False, slots=True)
class _Run:
    """Mutable run-time state of one job (the simulator's own; allocators see ``JobState``).

    ``view()`` is cached until the state changes (``touch()``); ``rates`` caches epochs per
    second by ``(workers, ps)`` (the speed model is a pure function of the allocation).
    Slots: the native slot (:func:`~envs.sim.elastic.native_alloc.end_slot`) reads and
    writes the fields at their offsets, as their descriptors do."""

    spec: ElasticJob
    progress: float = 0.0
    alloc: tuple[int, int] = (0, 0)  # allocation in the previous slot
    slots_run: int = 0
    num_changes: int = 0
    finish: float | None = None
    rates: dict[tuple[int, int], float] = field(default_factory=dict)
    _view: JobState | None = None

    def view(self) -> JobState:
        v = self._view
        if v is None:
            v = self._view = JobState.of(
                self.spec, self.progress, self.alloc[0], self.alloc[1], self.slots_run
            )
        return v

    def touch(self) -> None:
        """Forget the cached view (progress, allocation or slots run changed)."""
        self._view = None


class SlotSimulator:
    """Runs ``jobs`` on ``cluster`` under ``allocator`` and ``speed`` slot by slot.

    ``strict_reference_placement`` makes the cluster's least-loaded placement try only the
    least-loaded node (DL²'s reference; see :class:`~envs.sim.elastic.cluster.Placement`);
    ``placement`` picks any :class:`~envs.sim.elastic.cluster.Placement` rule of the cluster.

    Per time slot ``t = 0, 1, ...`` (slot ``t`` spans ``[t, t + 1)`` in slot units):

    1. jobs with ``arrival_slot == t`` become active;
    2. the cluster is cleared and the allocator decides every active job's ``(workers, ps)``,
       placing each task (:mod:`envs.sim.elastic.allocators`);
    3. every allocated job trains ``speed(type, ps, workers) * speed_factor * (slot_s -
       overhead) / iterations_per_epoch`` epochs, where ``overhead = scaling_overhead_s`` if the
       job ran before and its allocation differs from its allocation in slot ``t - 1`` (a job
       that got nothing in ``t - 1`` and runs again pays it too), else 0;
    4. a job reaching ``real_num_epochs`` finishes inside the slot at the fraction of the slot it
       used (DL²'s ``FINE_GRAIN_JCT``): ``finish = t + (overhead + needed / rate) / slot_s``.

    Completion uses a relative tolerance of 1e-9 on the epochs (so float accumulation cannot add
    a spurious near-empty slot).  The run stops with
    :class:`~envs.sim.engine.SimulationError` naming the unfinished jobs if it needs more than
    ``max_slots`` slots; every slot checks that no node is over capacity, that the cluster holds
    exactly the allocated tasks, that allocations respect the caps and go only to active jobs,
    that progress never decreases and that each job finishes once.

    ``heartbeat`` (a :class:`Heartbeat`, also settable as the attribute of that name; its
    clock restarts with :meth:`reset`): a progress line on stderr every ``progress_s``
    wall-clock seconds and a :class:`~envs.sim.engine.SimulationError` past ``max_wall_s``;
    it changes nothing simulated.
    """

    def __init__(
        self,
        cluster: ElasticCluster,
        jobs: Sequence[ElasticJob],
        allocator: Allocator | None,
        speed: SpeedModel,
        *,
        scaling_overhead_s: float = 0.0,
        max_slots: int = 100_000,
        on_slot: Callable[[SlotRecord], None] | None = None,
        strict_reference_placement: bool = False,
        placement: str | Placement | None = None,
        heartbeat: Heartbeat | None = None,
    ) -> None:
        if not jobs:
            raise WorkloadError("elastic simulation needs at least one job")
        if not 0.0 <= scaling_overhead_s < cluster.slot_s:
            raise ConfigError(
                f"scaling_overhead_s must be in [0, slot_s={cluster.slot_s}), "
                f"got {scaling_overhead_s}"
            )
        if max_slots < 1:
            raise ConfigError(f"max_slots must be >= 1, got {max_slots}")
        seen: set[int] = set()
        for job in jobs:
            if job.job_id in seen:
                raise WorkloadError(f"job id {job.job_id} appears twice")
            seen.add(job.job_id)
            t = job.type
            for role, cpu, gpu in (
                ("worker", t.worker_cpu, t.worker_gpu),
                ("PS", t.ps_cpu, t.ps_gpu),
            ):
                if cpu > cluster.cpu_slots or gpu > cluster.gpu_slots:
                    raise WorkloadError(
                        f"job {job.job_id} ({t.model}): a {role} needs ({cpu} CPU, {gpu} GPU) "
                        f"slots, a node has ({cluster.cpu_slots}, {cluster.gpu_slots})"
                    )
        self.spec = cluster
        self.jobs = sorted(jobs, key=lambda j: (j.arrival_slot, j.job_id))
        self.allocator = allocator
        self.speed = speed
        self.scaling_overhead_s = float(scaling_overhead_s)
        self.max_slots = max_slots
        self.on_slot = on_slot
        self.heartbeat = heartbeat
        self.cluster = SlotCluster(
            cluster, strict_reference=strict_reference_placement, placement=placement
        )
        # the slot transition in C (native_alloc.end_slot) where no subclass changes a step
        # of it: the slot, its checks, its rates or a job's rate
        cls = type(self)
        self._native_slot = (
            cls._run_slot is SlotSimulator._run_slot
            and cls._check_slot is SlotSimulator._check_slot
            and cls._slot_rates is SlotSimulator._slot_rates
            and cls._rate is SlotSimulator._rate
        )
        self._plain_views = cls.active_jobs is SlotSimulator.active_jobs  # (not overridden)
        self.reset()

    # ------------------------------------------------------------------ stepping API
    # ``run()`` is ``reset(); while not done: views = begin_slot(); end_slot(allocate(...))``.
    # An interactive decision maker (the Gymnasium environment) drives the same three calls,
    # placing tasks through ``self.cluster`` between ``begin_slot`` and ``end_slot``.

    def reset(self) -> None:
        """Back to slot 0 with no job started."""
        self.cluster.release_all()
        self._runs = {j.job_id: _Run(j) for j in self.jobs}
        self._next_arrival = 0
        self._active: list[_Run] = []
        self._active_ids: list[int] = []  # job ids of ``_active``, same order
        self._cpu_util: list[float] = []
        self._gpu_util: list[float] = []
        self._rewards: list[float] = []
        self._done = 0
        self.t = 0
        self._in_slot = False
        if self.heartbeat is not None:
            self.heartbeat.restart()

    @property
    def utilisation(self) -> tuple[list[float], list[float]]:
        """Per slot simulated so far, the CPU and the GPU utilisation (copies)."""
        return list(self._cpu_util), list(self._gpu_util)

    @property
    def last_utilisation(self) -> tuple[float, float] | None:
        """``(cpu, gpu)`` utilisation of the last simulated slot (``None`` before the first)."""
        if not self._cpu_util:
            return None
        return self._cpu_util[-1], self._gpu_util[-1]

    @property
    def done(self) -> bool:
        """Every job has finished."""
        return self._done == len(self._runs)

    def forget_future(self) -> int:
        """Forget the jobs that have not arrived yet (those arriving in a later slot; this
        slot's arrivals are admitted by :meth:`begin_slot`): the run then knows what a
        scheduler knows at this point, the jobs in the system and the past.  The number of
        jobs forgotten.  For a copy that looks ahead (a decision-time search's rollouts,
        :mod:`agents.plan_search`); the run itself is never given it."""
        future = self.jobs[self._next_arrival :]
        if future:
            self.jobs = self.jobs[: self._next_arrival]
            for job in future:
                del self._runs[job.job_id]
        return len(future)

    def finish_time(self, job_id: int) -> float | None:
        """When job ``job_id`` finished (in slots, fractional), or ``None`` while it runs."""
        return self._runs[job_id].finish

    @property
    def active_jobs(self) -> list[JobState]:
        """Views of the jobs active in the current slot, by arrival then id."""
        native = native_alloc.views(self._active)
        if native is not None:
            return native
        # r.view() inlined (JobState.of's steps): the jobs that ran in the last slot need a
        # new view every slot; the others keep theirs
        views = []
        new = object.__new__
        for r in self._active:
            v = r._view
            if v is None:
                v = r._view = new(JobState)
                alloc = r.alloc
                v.__dict__.update(
                    {
                        "spec": r.spec,
                        "progress_epochs": r.progress,
                        "workers": alloc[0],
                        "ps": alloc[1],
                        "slots_run": r.slots_run,
                    }
                )
            views.append(v)
        return views

    def begin_slot(self) -> list[JobState]:
        """Admit this slot's arrivals, clear the cluster; the active jobs to allocate."""
        if self._in_slot:
            raise SimulationError(f"slot {self.t} already begun")
        if self.done:
            raise SimulationError("every job has finished; reset() to run again")
        if self.t >= self.max_slots:
            left = [r for r in self._runs.values() if r.finish is None]
            names = ", ".join(
                f"job {r.spec.job_id} ({r.progress:.6g}/{r.spec.real_num_epochs:.6g} epochs)"
                for r in left[:20]
            )
            more = f" and {len(left) - 20} more" if len(left) > 20 else ""
            raise SimulationError(
                f"elastic run exceeded max_slots={self.max_slots} with {len(left)} "
                f"unfinished job(s): {names}{more}"
            )
        pending = self.jobs
        while (
            self._next_arrival < len(pending) and pending[self._next_arrival].arrival_slot == self.t
        ):
            jid = pending[self._next_arrival].job_id
            self._active.append(self._runs[jid])
            self._active_ids.append(jid)
            self._next_arrival += 1
        self.cluster.release_all()
        self._in_slot = True
        if self._plain_views:  # active_jobs' native views, without the property call
            native = native_alloc.views(self._active)
            if native is not None:
                return native
        return self.active_jobs

    def end_slot(self, decided: Mapping[int, tuple[int, int]]) -> SlotRecord:
        """Check the slot's allocation (the cluster must hold exactly its tasks), train every
        allocated job for the slot, finish those that complete; the slot's record."""
        if not self._in_slot:
            raise SimulationError("end_slot() without begin_slot()")
        t = self.t
        active = self._active
        # the slot in C where built (native_alloc.end_slot: the same operations, bit for
        # bit); the Python code decides otherwise
        record = (
            native_alloc.end_slot(self, t, decided, _COMPLETION_KEEP, SlotRecord)
            if self._native_slot
            else None
        )
        if record is None:
            record = self._run_slot(t, decided)
        if self.on_slot is not None:
            self.on_slot(record)
        if record.finished:
            self._active = [r for r in active if r.finish is None]
            self._active_ids = [r.spec.job_id for r in self._active]
        self.t += 1
        self._in_slot = False
        beat = self.heartbeat
        if beat is not None:  # the clock is read every beat.stride slots only
            beat.left -= 1
            if not beat.left:
                beat.check(t, self._done, len(self._runs))
        return record

    def _run_slot(self, t: int, decided: Mapping[int, tuple[int, int]]) -> SlotRecord:
        """:meth:`end_slot` up to ``on_slot`` in Python (the specification of
        :func:`~envs.sim.elastic.native_alloc.end_slot`): check the allocation, train every
        allocated job, record the utilisation and the reward; the slot's record."""
        slot_s = self.spec.slot_s
        active = self._active
        allocation, used_cpu, used_gpu = self._check_slot(t, decided)
        slot_rates = self._slot_rates(t, allocation)
        epochs_done: dict[int, float] = {}
        finished: list[int] = []
        reward = 0.0
        idle = (0, 0)
        scaling_overhead_s = self.scaling_overhead_s
        # ``allocation`` lists every active job in active order (_check_slot); touch() is
        # inlined (``_view = None``): this loop runs for every active job of every slot.
        for r, new in zip(active, allocation.values(), strict=True):
            if new == idle:
                if r.alloc != idle:
                    r.alloc = idle
                    r._view = None
                continue
            r._view = None
            spec = r.spec
            overhead = 0.0
            if r.slots_run > 0 and new != r.alloc:
                overhead = scaling_overhead_s
                r.num_changes += 1
            r.alloc = new
            r.slots_run += 1
            if slot_rates is not None:  # a subclass's slot-specific rates (contention)
                rate = slot_rates[spec.job_id]
            else:
                cached = r.rates.get(new)  # epochs per second
                if cached is None:
                    cached = r.rates[new] = self._rate(r, new)
                rate = cached
            epochs = rate * (slot_s - overhead)
            if not epochs >= 0:  # progress is monotone
                raise SimulationError(f"slot {t}: job {spec.job_id} trained {epochs} epochs")
            need = spec.real_num_epochs - r.progress
            if epochs > 0 and epochs >= need * (1.0 - _COMPLETION_RTOL):
                used_s = overhead + min(need / rate, slot_s - overhead)
                if r.finish is not None:
                    raise SimulationError(f"job {spec.job_id} finished twice")
                r.finish = t + used_s / slot_s
                epochs = need
                r.progress = spec.real_num_epochs
                finished.append(spec.job_id)
                self._done += 1
            else:
                r.progress += epochs
            epochs_done[spec.job_id] = epochs
            reward += epochs / spec.num_epochs

        cluster = self.cluster
        self._cpu_util.append(used_cpu / cluster.total_cpu)
        self._gpu_util.append(used_gpu / cluster.total_gpu if cluster.total_gpu else 0.0)
        self._rewards.append(reward)
        return SlotRecord.of(
            t, allocation, epochs_done, tuple(finished), used_cpu, used_gpu, reward
        )

    def result(self) -> ElasticResult:
        """Per-job records and summary of a finished run."""
        if not self.done:
            raise SimulationError("result() before every job finished")
        records = []
        for jid in sorted(self._runs):
            r = self._runs[jid]
            assert r.finish is not None
            records.append(
                ElasticJobRecord(jid, r.spec.arrival_slot, r.finish, r.slots_run, r.num_changes)
            )
        return ElasticResult(
            allocator=(
                "interactive"
                if self.allocator is None
                else getattr(self.allocator, "name", type(self.allocator).__name__)
            ),
            speed_model=getattr(self.speed, "name", type(self.speed).__name__),
            slot_s=self.spec.slot_s,
            num_slots=self.t,
            jobs=tuple(records),
            cpu_util=tuple(self._cpu_util),
            gpu_util=tuple(self._gpu_util),
            rewards=tuple(self._rewards),
        )

    def run(self) -> ElasticResult:
        """Run every slot with the allocator until every job has finished."""
        if self.allocator is None:
            raise ConfigError("run() needs an allocator; without one, drive begin/end_slot")
        self.reset()
        while not self.done:
            views = self.begin_slot()
            decided: Mapping[int, tuple[int, int]] = {}
            if views:
                decided = self.allocator.allocate(views, self.cluster, self.speed, self.spec.slot_s)
            self.end_slot(decided)
        return self.result()

    def _slot_rates(
        self, t: int, allocation: Mapping[int, tuple[int, int]]
    ) -> Mapping[int, float] | None:
        """Hook for subclasses whose speed depends on the whole slot (placement, other jobs'
        traffic): epochs per second of every allocated job over the part of slot ``t`` after
        its scaling overhead, or ``None`` to use the speed model (called before any job's
        state changes, so ``_Run.alloc`` is still the previous slot's allocation)."""
        return None

    def _rate(self, r: _Run, alloc: tuple[int, int]) -> float:
        """Epochs per second of ``r`` under ``(workers, ps)``."""
        workers, ps = alloc
        its = float(self.speed.speed(r.spec.type, ps, workers))
        if not (math.isfinite(its) and its >= 0):
            raise SimulationError(
                f"speed model {getattr(self.speed, 'name', '?')!r} gave {its} it/s for job "
                f"{r.spec.job_id} ({r.spec.type.model}) at {ps} PS, {workers} workers"
            )
        return its * r.spec.speed_factor / r.spec.type.iterations_per_epoch

    def _check_slot(
        self, t: int, decided: Mapping[int, tuple[int, int]]
    ) -> tuple[dict[int, tuple[int, int]], int, int]:
        """Validate the allocator's answer against the cluster; the full allocation (every
        active job, in active order) and the used CPU and GPU slots."""
        cluster = self.cluster
        # every node within its capacity (SlotCluster.check) and the used totals: in C, one
        # pass, where built; the Python check decides (and names the node) otherwise
        used = native_alloc.used_totals(cluster)
        if used is None:
            cluster.check()
            used = (cluster.used_cpu_total, cluster.used_gpu_total)
        allocation: dict[int, tuple[int, int]] = dict.fromkeys(self._active_ids, (0, 0))
        if not decided.keys() <= allocation.keys():
            stray = sorted({jid for jid in decided if jid not in allocation})
            raise SimulationError(f"slot {t}: allocation for inactive job(s) {stray}")
        cpu = gpu = 0
        runs = self._runs
        for jid, (workers, ps) in decided.items():
            if type(workers) is int and type(ps) is int:  # the usual case: no conversion
                if not (workers or ps):
                    continue  # nothing to check (the common "no allocation")
                r = runs[jid]
                spec = r.spec
                if not (0 <= workers <= spec.max_workers and 0 <= ps <= spec.max_ps):
                    raise SimulationError(
                        f"slot {t}: job {jid} got {workers} workers / {ps} PS, caps "
                        f"{spec.max_workers} / {spec.max_ps}"
                    )
                if r.progress > spec.real_num_epochs or r.finish is not None:
                    raise SimulationError(f"slot {t}: job {jid} is active but finished")
                ty = spec.type
                cpu += workers * ty.worker_cpu + ps * ty.ps_cpu
                gpu += workers * ty.worker_gpu + ps * ty.ps_gpu
                allocation[jid] = (workers, ps)
                continue
            r = runs[jid]
            if int(workers) != workers or int(ps) != ps:
                raise SimulationError(f"slot {t}: job {jid} got non-integer ({workers}, {ps})")
            workers, ps = int(workers), int(ps)
            if not (0 <= workers <= r.spec.max_workers and 0 <= ps <= r.spec.max_ps):
                raise SimulationError(
                    f"slot {t}: job {jid} got {workers} workers / {ps} PS, caps "
                    f"{r.spec.max_workers} / {r.spec.max_ps}"
                )
            if r.progress > r.spec.real_num_epochs or r.finish is not None:
                raise SimulationError(f"slot {t}: job {jid} is active but finished")
            ty = r.spec.type
            cpu += workers * ty.worker_cpu + ps * ty.ps_cpu
            gpu += workers * ty.worker_gpu + ps * ty.ps_gpu
            allocation[jid] = (workers, ps)
        if used != (cpu, gpu):
            raise SimulationError(
                f"slot {t}: the allocation needs ({cpu} CPU, {gpu} GPU) slots but the cluster "
                f"holds {used}: every task must be placed through the cluster, once"
            )
        return allocation, used[0], used[1]
