"""The contention engine driven one placement decision at a time, from outside.

:class:`DecisionSimulator` runs the contention engine (:class:`~envs.sim.engine.Simulator`)
until it would place queued jobs, stops there, and lets the caller look at the cluster and start
queued jobs on GPUs of its choice; :meth:`advance` then finishes that event time and runs on to
the next stop.  The engine places at two points of an event time, so it stops at both: before
placement (phase 4), and inside communication (phase 5) when a job whose last all-reduce was
free (one server) finishes and releases its memory.  The stack's job
order does not pick jobs and its placer is not consulted; the order still ranks running jobs'
all-reduces (SRSF: remaining compute) and its communication scheduler (AdaDUAL, SRSF(n), fair
share) admits them.  Non-preemptive orders only (a preemptive order decides which
jobs hold GPUs itself).

:func:`drive` runs a stack's own order and placer through this API, exactly as the engine's
placement pass does (every queued job in key order asked to ``place``; the tests check that
every Table IV/V stack gives ``simulate()``'s per-job results), and is the template for a
learned scheduler: :mod:`envs.gym.contention_env` is one.

A stop can be *quiet*: nothing arrived and no memory changed since the last stop, so no
queued job fits that did not fit before (placers fit by memory only).  Stacks still see those
stops (LWF-κ's refusals re-sort its server order); a learner may skip them
(:attr:`DecisionSimulator.changed`), or have the engine pass over them without returning
(:attr:`DecisionSimulator.skip_quiet`, the same run at less cost).
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Sequence

from envs.sim.config import Fidelity, SimConfig
from envs.sim.engine import EV_ARRIVAL, Job, Simulator, resolve_stack
from envs.sim.errors import ConfigError, SimulationError
from envs.sim.results import SimResult
from envs.sim.spec import ClusterSpec, JobSpec, Workload
from envs.sim.stacks import SchedulerStack

__all__ = ["DecisionError", "DecisionSimulator", "drive", "simulate_decisions"]


class DecisionError(SimulationError):
    """A decision the engine cannot take (the job is not queued, a GPU is out of range or
    lacks memory, ...); nothing was changed."""


class DecisionSimulator(Simulator):
    """:class:`Simulator` stopping at each event time with queued jobs (see the module)."""

    def __init__(
        self,
        cluster: ClusterSpec,
        workload: Workload,
        stack: SchedulerStack,
        config: SimConfig | None = None,
    ) -> None:
        super().__init__(cluster, workload, stack, config)
        if self.preemptive:
            raise ConfigError(
                f"decision points need a non-preemptive job order; {self.porder.name!r} is "
                "preemptive"
            )
        self.external_placement = True
        self.fitq = None  # a plain queue, in arrival order
        self.queue = []
        # skip_quiet (set it before the first advance): advance() returns only at stops that
        # are not quiet (``changed``); ``stops`` still counts the quiet ones

    # ------------------------------------------------------------------ driving
    def advance(self) -> bool:
        """Run to the next stop: True there (jobs are queued at :attr:`now`), False once no
        events are left (then :meth:`result`)."""
        if self._ran:
            raise SimulationError("the simulation is over")
        wall = time.perf_counter()
        try:
            if self.paused_at is not None:
                t, self.paused_at = self.paused_at, None
                self.seen_version = self.mem_version
                if self.paused_phase == 4:
                    self._after_placement(t)  # may stop again, in phase 5
                else:  # stopped inside phase 5, after a finished job's release
                    self._admit_waiting(t)
                    self._after_communication(t)
                if self.paused_at is None and self.cfg.run.check_invariants:
                    self.check_invariants()
            if self.paused_at is None:
                self._start()
                self._loop(math.inf)
        finally:
            self._wall += time.perf_counter() - wall
        return self.paused_at is not None

    @property
    def changed(self) -> bool:
        """Whether a job arrived or GPU memory changed since the last stop (else no queued
        job fits now that did not fit then)."""
        return self.arrived_now or self.mem_version != self.seen_version

    @property
    def queued(self) -> Sequence[Job]:
        """The queued jobs, in arrival order (read-only)."""
        return tuple(self.queue)

    def settle_loads(self) -> None:
        """Bring ``load_ms`` up to date (what a load-reading placer sees)."""
        self._settle_window_loads()

    def start(self, job: Job, gpus: Sequence[int]) -> None:
        """Start queued ``job`` on ``gpus`` now; :class:`DecisionError` (nothing changed)
        unless the engine is stopped, the job is queued, and the GPUs are ``num_gpus``
        distinct GPUs of the cluster, each with room for one worker."""
        if self.paused_at is None:
            raise DecisionError("no decision is due: call advance() first")
        queue = self.queue
        assert isinstance(queue, list)
        if not any(j is job for j in queue):
            raise DecisionError(f"job {getattr(job.spec, 'job_id', job)} is not queued")
        spec = job.spec
        try:
            chosen = [int(g) for g in gpus]
        except (TypeError, ValueError):
            raise DecisionError(f"job {spec.job_id}: GPUs must be integers, got {gpus!r}") from None
        if len(chosen) != spec.num_gpus or len(set(chosen)) != len(chosen):
            raise DecisionError(
                f"job {spec.job_id} needs {spec.num_gpus} distinct GPUs, got {chosen}"
            )
        n = self.cluster.num_gpus
        for g in chosen:
            if not 0 <= g < n:
                raise DecisionError(
                    f"job {spec.job_id}: GPU {g} is not in the cluster (0..{n - 1})"
                )
            if self.free_mem_mb[g] < spec.model.gpu_memory_mb:
                raise DecisionError(
                    f"job {spec.job_id}: GPU {g} has {self.free_mem_mb[g]:.0f} MB free, the "
                    f"worker needs {spec.model.gpu_memory_mb:.0f} MB"
                )
        queue.remove(job)
        # the stack's order still ranks the jobs' all-reduces (the engine's placement pass
        # sets this key on every queued job)
        job.prio = self.order.priority(job)
        self._place(job, chosen, self.paused_at)

    def forget_arrivals(self) -> int:
        """Drop the jobs that have not arrived yet (their arrival events and the jobs): the
        run goes on with the jobs it has seen only, and :meth:`result` covers those.  For a
        model that must not see the future (a search on a copy); the number dropped."""
        heap = self.heap
        later = {id(ev[3]) for ev in heap if ev[2] == EV_ARRIVAL}
        if not later:
            return 0
        heap[:] = [ev for ev in heap if ev[2] != EV_ARRIVAL]
        heapq.heapify(heap)
        self.jobs = [j for j in self.jobs if id(j) not in later]
        return len(later)

    def fast_factor(self) -> int:
        """``K``, the iterations a FAST run of this run's jobs merges into one step (what
        :meth:`coarsen` would set): from the shortest job the run has, so after
        :meth:`forget_arrivals` from the jobs it has seen only."""
        return self._iterations_per_step(self.cfg.override(fidelity=Fidelity.FAST.value))

    def coarsen(self) -> int:
        """Go on in FAST fidelity (:class:`~envs.sim.config.Fidelity`) from now on: every
        job's iterations after the one under way run merged ``K`` at a time
        (:meth:`fast_factor`: ``K`` from the shortest of the run's jobs, as a FAST run of them
        has it; an iteration under way ends as it began).  For a search's copy whose model
        is cheaper than the FULL run it acts in (forget the jobs still to arrive first: ``K``
        then reads none of them); coarsened before its first iteration, a run is the FAST
        run of its workload (tested).  ``K``; a run that is not FULL in continuous time is a
        :class:`ConfigError`."""
        if self.cfg.fidelity.level is not Fidelity.FULL or self.tick is not None:
            raise ConfigError(
                "only a FULL-fidelity run in continuous time can go on in FAST fidelity; this "
                f"one is {self.cfg.fidelity.level.value!r} with tick_ms={self.tick}"
            )
        self.cfg = self.cfg.override(fidelity=Fidelity.FAST.value)
        self.chunk_max = self._iterations_per_step()
        return self.chunk_max

    def add_arrivals(self, specs: Sequence[JobSpec]) -> int:
        """Queue jobs that arrive later (their arrival events): for a search's copy that
        replaces the jobs still to arrive by a guess at them (:meth:`forget_arrivals` first);
        :class:`DecisionError` (nothing changed) for an arrival before :attr:`now` or a job id
        the run already has.  The number added."""
        have = {j.spec.job_id for j in self.jobs}
        for s in specs:
            if not s.submit_ms >= self.now:
                raise DecisionError(
                    f"job {s.job_id} would arrive at {s.submit_ms} ms, before now ({self.now} ms)"
                )
            if s.job_id in have:
                raise DecisionError(f"job id {s.job_id} is already in the run")
            have.add(s.job_id)
        if self._started:
            for s in specs:
                job = Job(s)
                self.jobs.append(job)
                self._push(s.submit_ms, EV_ARRIVAL, job)
        else:
            self.jobs.extend(Job(s) for s in specs)  # _start queues them with the others
        return len(specs)

    def result(self) -> SimResult:
        """The run's result once :meth:`advance` has returned False."""
        if self.paused_at is not None:
            raise SimulationError("the simulation stopped at a decision; advance() first")
        self._ran = True
        if self.finished != len(self.jobs):
            stuck = [j.spec.job_id for j in self.jobs if math.isnan(j.finish_ms)]
            raise SimulationError(
                f"no events left but {len(stuck)} jobs never finished (first ids {stuck[:10]}): "
                "queued jobs were never started"
            )
        return self._result(self._wall)


def drive(sim: DecisionSimulator) -> SimResult:
    """Run ``sim`` with its stack's own job order and placer deciding at every stop, as the
    engine's placement pass does (same per-job results as :func:`~envs.sim.simulate`)."""
    order, placer = sim.stack.order, sim.stack.placer
    reads_load = getattr(placer, "reads_load", True)
    skip_after = sim.cfg.quirks.skip_after_place
    while sim.advance():
        queued = sim.queued
        for job in queued:
            job.prio = order.priority(job)
        if reads_load:
            sim.settle_loads()
        skip = skipped = False
        for job in sorted(queued, key=lambda j: j.prio):  # stable: arrival order on ties
            if skip:
                skip, skipped = False, True
                continue
            gpus = placer.place(job.spec, sim, sim.rng)
            if gpus is not None:
                sim.start(job, gpus)
                skip = skip_after
        if skipped and sim.tick is not None:
            sim._wake_next_tick(sim.now)
    return sim.result()


def simulate_decisions(
    cluster: ClusterSpec,
    workload: Workload,
    stack: str | SchedulerStack,
    config: SimConfig | None = None,
) -> SimResult:
    """:func:`~envs.sim.simulate` through the decision API (:func:`drive`)."""
    cfg = config or SimConfig()
    return drive(DecisionSimulator(cluster, workload, resolve_stack(stack, cfg), cfg))
