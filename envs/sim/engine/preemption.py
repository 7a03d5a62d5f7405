"""Who holds GPUs: the preemption strategy, chosen once from the stack's job order.

:class:`NonPreemptive` (every order but a ``PreemptiveOrder``): arrivals join the placement
queue, a placed job keeps its GPUs until it finishes, the queue gets a placement pass at each
event time with queued jobs and when a finished job frees memory (or, in decision-point mode,
the engine stops there for the caller to place).  :class:`Preemptive`: the order decides at
each decision point which jobs hold GPUs (:meth:`Preemptive.reschedule`).  A running job it
leaves out is evicted at once if nothing of its current iteration has run (or it is restoring,
or in JOB fidelity); otherwise it is marked and stops at its next iteration boundary (the
engine's ``_sync`` holds it there and asks for a new pass), so no partial iteration is ever
lost or double-counted.  Eviction frees its GPUs; on resumption it pays
``SimConfig.model.preemption_cost_ms`` with its GPUs held (``_hold_start``).

The engine calls the strategy only at arrivals, placement passes, placements and finishes
(never per task), so the choice costs the hot loop nothing.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

from envs.sim.engine.state import DONE, EV_RESCHED, FW_READY, Job
from envs.sim.errors import ConfigError, SimulationError
from envs.sim.policies.base import PreemptiveOrder

if TYPE_CHECKING:
    from envs.sim.engine.core import EngineCore


class Preemption:
    """The strategy's interface (see the module); ``sim`` is the engine."""

    preemptive = False

    def place(self, sim: EngineCore, t: float, arrivals: list[Job]) -> bool:
        """Phases 3-4 at time ``t``: take the arrivals, run a placement pass if one is due.
        True when the engine stops for the caller's placement (decision-point mode)."""
        raise NotImplementedError

    def replace(self, sim: EngineCore, t: float) -> bool:
        """Inside phase 5: a job finished (or reached the boundary where it is preempted):
        release it and place again.  True when the engine stops for the caller."""
        raise NotImplementedError

    def placed(self, job: Job, t: float) -> None:
        """``job`` was put on GPUs at ``t``."""

    def finished(self, sim: EngineCore, job: Job, t: float) -> None:
        """``job`` finished at ``t`` (its memory is released in phase 2 or 5)."""

    def woken(self, sim: EngineCore, version: int) -> None:
        """An ``EV_RESCHED`` event of this ``version`` is due."""

    def report(self, sim: EngineCore, extra: dict[str, Any]) -> None:
        """Add the run's preemption figures to the result's ``extra``."""


class NonPreemptive(Preemption):
    """A placed job keeps its GPUs; queued jobs are placed by the stack's placer."""

    def place(self, sim: EngineCore, t: float, arrivals: list[Job]) -> bool:
        if arrivals:
            sim._enqueue(arrivals)
        if sim.queue:
            if sim.external_placement:  # the caller decides (envs.sim.decisions)
                return self._stop(sim, t, bool(arrivals), 4)
            sim._allocate(t)
        return False

    def replace(self, sim: EngineCore, t: float) -> bool:
        if not sim.unreleased or sim.cfg.quirks.lagged_release:  # reference: released next tick
            return False
        # a job just finished: its memory is free now, place again
        sim._release(t)
        if sim.queue:
            if sim.external_placement:  # the caller decides (envs.sim.decisions)
                return self._stop(sim, t, False, 5)
            sim._allocate(t)
        return False

    @staticmethod
    def _stop(sim: EngineCore, t: float, arrived: bool, phase: int) -> bool:
        """Stop at ``t`` in ``phase`` for the caller (True), or pass over a quiet stop where the
        caller skips those (False: the event time goes on as after a stop where the caller
        started nothing)."""
        sim.stops += 1
        if sim.skip_quiet and not arrived and sim.mem_version == sim.seen_version:
            return False
        sim.paused_at = t
        sim.arrived_now = arrived
        sim.paused_phase = phase
        return True


class Preemptive(Preemption):
    """A ``PreemptiveOrder`` plans which jobs hold GPUs at every decision point."""

    preemptive = True

    def __init__(self, order: PreemptiveOrder, tick: float | None) -> None:
        if tick is not None:
            raise ConfigError(
                f"preemptive job order {order.name!r} needs continuous time (tick_ms=None)"
            )
        self.order = order
        self.spans: dict[int, list[list[float]]] = {}  # job id -> [start, end] on GPUs, ms
        self.resumes = 0
        self.passes = 0
        # the order's next wake-up (an EV_RESCHED event of version wake_ver), and how many
        # passes in a row it asked for one at once
        self.wake_at = math.inf
        self.wake_ver = 0
        self.wake_repeats = 0

    def place(self, sim: EngineCore, t: float, arrivals: list[Job]) -> bool:
        for job in arrivals:
            self.order.add(job, t)
            sim.resched = True
        if sim.resched:
            self.reschedule(sim, t)
        return False

    def replace(self, sim: EngineCore, t: float) -> bool:
        if sim.unreleased:
            sim._release(t)
        if sim.resched:
            self.reschedule(sim, t)
        return False

    def placed(self, job: Job, t: float) -> None:
        self.spans.setdefault(job.spec.job_id, []).append([t, math.nan])

    def finished(self, sim: EngineCore, job: Job, t: float) -> None:
        sim._bank(job, t)
        self.spans[job.spec.job_id][-1][1] = t
        self.order.remove(job, t)
        sim.resched = True

    def woken(self, sim: EngineCore, version: int) -> None:
        if version == self.wake_ver:
            self.wake_at = math.inf
            sim.resched = True

    def reschedule(self, sim: EngineCore, t: float) -> None:  # noqa: C901
        """The order's decision pass: its plan holds GPUs, others are evicted or marked."""
        sim.resched = False
        for job in sim.running:  # executed time up to now (what the order reads)
            if t > job.run_since:  # not while restoring
                job.executed_ms += t - job.run_since
                job.run_since = t
        if sim.job_level and sim.order_reads_remaining:
            for job in sim.running:
                sim._bank(job, t)
        plan = cast(list[Job], self.order.plan(t, sim.cluster.num_gpus))  # our own Jobs
        self.passes += 1
        mark = self.passes
        for job in plan:
            job.planned = mark
        for job in list(sim.running):
            if job.planned == mark:
                if job.preempt_pending:  # reprieved before it reached its boundary
                    job.preempt_pending = False
                    if job.held:
                        job.held = False
                        sim._begin_iteration(job)
            elif (
                sim.job_level or job.held or job.restoring or all(s == FW_READY for s in job.wstate)
            ):
                self.evict(sim, job, t)
            else:
                job.preempt_pending = True
        if sim.placer_reads_load:
            sim._settle_window_loads()
        for job in plan:
            if job.on_gpus:
                continue
            gpus = sim.placer.place(job.spec, sim, sim.rng)
            if gpus is None:
                continue  # stays pending; asked again at the next decision point
            if job.preemptions:
                self.resumes += 1
            sim._place(job, gpus, t)
            self.order.on_start(job, t)
        wake = self.order.next_wakeup(t)
        if wake <= t:
            self.wake_repeats += 1
            if self.wake_repeats > 1000:
                raise SimulationError(
                    f"job order {self.order.name} keeps asking for a pass at t={t} ms"
                )
        else:
            self.wake_repeats = 0
        if wake < math.inf and wake != self.wake_at:
            self.wake_at = wake
            self.wake_ver += 1
            sim._push(max(wake, t), EV_RESCHED, None, self.wake_ver)

    def evict(self, sim: EngineCore, job: Job, t: float) -> None:
        """Take ``job`` off its GPUs (it has nothing of an iteration in flight)."""
        sim._bank(job, t)
        job.aux_ver += 1  # its restore or job-level end event is void
        self.spans[job.spec.job_id][-1][1] = t
        job.restoring = job.held = job.preempt_pending = job.on_gpus = False
        job.run_since = math.nan
        spec = job.spec
        left = spec.iterations - job.iterations_done
        load = spec.model.compute_ms * left + job.comm_est_once * left
        mem = spec.model.gpu_memory_mb
        sim.mem_version += 1
        for g in job.gpus:
            sim.free_mem_mb[g] += mem
            sim.load_ms[g] -= load
            sim.residents[g] = [rw for rw in sim.residents[g] if rw[0] is not job]
            sim.gpu_ready[g] = [rw for rw in sim.gpu_ready[g] if rw[0] is not job]
        job.wstate = [DONE] * len(job.gpus)
        job.pending = 0
        sim.running.remove(job)
        sim.dirty_gpus.update(job.gpus)
        job.preemptions += 1
        self.order.on_stop(job, t)

    def report(self, sim: EngineCore, extra: dict[str, Any]) -> None:
        jobs = sim.jobs
        extra["preemptions"] = sum(j.preemptions for j in jobs)
        extra["resumes"] = self.resumes
        extra["preemptions_by_job"] = {j.spec.job_id: j.preemptions for j in jobs}
        extra["run_spans_ms"] = {k: [tuple(s) for s in v] for k, v in self.spans.items()}
        stats = getattr(self.order, "stats", None)
        if stats:
            extra["order_stats"] = dict(stats)
