"""Placement: jobs onto GPUs (the placer's pass over the queue) and memory released.

Phase 2 releases finished jobs' GPU memory; phase 4 offers queued jobs to the stack's
:class:`~envs.sim.policies.base.Placer` in job-order priority.  A static-key order with a
fit-indexed placer uses the :class:`~envs.sim.engine.fitqueue.FitQueue` (same outcome as the
generic pass, asking ``place`` only of jobs that fit).  Which jobs are offered when is the
preemption strategy's decision (:mod:`~envs.sim.engine.preemption`); ``_place`` puts one job
on its GPUs for either.
"""

from __future__ import annotations

import math
from typing import cast

from envs.sim.engine.core import EngineCore
from envs.sim.engine.fitqueue import _BEFORE_ALL, FitQueue, QKey
from envs.sim.engine.state import DONE, FW_READY, Job
from envs.sim.errors import SimulationError
from envs.sim.spec import CommArch


class Placement(EngineCore):
    """Phases 2 (release) and 4 (the placement pass) and placing one job."""

    def _release(self, t: float) -> None:
        """Phase 2: finished jobs free their GPU memory (in tick mode, maybe a tick late)."""
        if self.quirks is not None:
            out = self.quirks.released(self, t)
        else:
            out, self.unreleased = self.unreleased, []
        gone = {id(j) for j in out}
        self.running = [j for j in self.running if id(j) not in gone]
        for job in out:
            job.on_gpus = False
            mem = job.spec.model.gpu_memory_mb
            for g in job.gpus:
                self.free_mem_mb[g] += mem
                self.residents[g] = [rw for rw in self.residents[g] if rw[0] is not job]
        if out:
            self.mem_version += 1

    def _enqueue(self, arrivals: list[Job]) -> None:
        fitq = self.fitq
        if fitq is None:
            cast(list[Job], self.queue).extend(arrivals)
            return
        order, placer = self.order, self.fplacer
        for job in arrivals:
            job.prio = order.priority(job)  # static while it waits
            fitq.add(job, job.prio, placer)

    def _allocate(self, t: float) -> None:
        if self.fitq is not None:
            self._allocate_indexed(self.fitq, t)
            return
        order = self.order
        assert isinstance(self.queue, list)
        for job in self.queue:
            job.prio = order.priority(job)
        queue = sorted(self.queue, key=lambda j: j.prio)  # stable: arrival order on ties
        remaining: list[Job] = []
        skip = False
        skipped = False
        if self.placer_reads_load:
            self._settle_window_loads()  # nothing else changes loads during this loop
        for job in queue:
            if skip:
                skip = False
                skipped = True
                remaining.append(job)
                continue
            self.place_calls += 1
            gpus = self.placer.place(job.spec, self, self.rng)
            if gpus is None:
                remaining.append(job)
                continue
            self._place(job, gpus, t)
            skip = self.cfg.quirks.skip_after_place
        self.queue = remaining
        if skipped and self.tick is not None:  # the skipped job is tried at the next tick
            self._wake_next_tick(t)

    def _allocate_indexed(self, q: FitQueue, t: float) -> None:
        """The generic pass (``_allocate``: every queued job in key order asked to ``place``,
        the one after a placed job skipped with ``skip_after_place``) with the same outcome,
        asking ``place`` only of jobs that fit (:class:`FitIndexedPlacer` contract).

        A pass walks positions in key order.  From the current position, the classes are
        taken by their next job's key, and ``fits`` is asked of each until one fits: the
        jobs of the classes before it would be refused there (their refusals, if they change
        the placer, are replayed by one ``refuse``), and the fitting job is placed.  Free
        memory changes only at placements, so ``fits`` is asked once per class per stretch
        between placements.  If free memory has not changed and no job has arrived since a
        pass that refused every queued job, this pass refuses them all again without looking.
        """
        if self.placer_reads_load:
            self._settle_window_loads()  # nothing else changes loads during this pass
        placer = self.fplacer
        if q.fresh == 0 and q.refused_at == self.mem_version:
            self.quick_passes += 1
            if q.effect_jobs:
                placer.refuse(self)
            return
        self.alloc_passes += 1
        q.fresh = 0
        skip = self.cfg.quirks.skip_after_place
        skipped = False
        pos = _BEFORE_ALL
        while True:
            best: tuple[QKey, tuple[float, int], int] | None = None
            refused_effect = False
            for head in q.heads_after(pos):
                cls, i = head[1], head[2]
                self.fit_checks += 1
                if placer.fits(q.classes[cls][1][i].spec, self):
                    best = head
                    break
                refused_effect = refused_effect or q.effect[cls]
            if refused_effect:
                placer.refuse(self)
            if best is None:
                break
            key, cls, i = best
            job = q.classes[cls][1][i]
            self.place_calls += 1
            gpus = placer.place(job.spec, self, self.rng)
            if gpus is None:
                raise SimulationError(
                    f"placer {placer.name} refused job {job.spec.job_id} although its fits() "
                    "said it fits (FitIndexedPlacer contract)"
                )
            q.pop(cls, i)
            self._place(job, gpus, t)
            pos = key
            if skip:
                heads = q.heads_after(pos)
                if heads:  # the next job in order is not tried at this tick
                    skipped = True
                    pos = heads[0][0]
        q.refused_at = -1 if skipped else self.mem_version
        if skipped and self.tick is not None:  # the skipped job is tried at the next tick
            self._wake_next_tick(t)

    def _place(self, job: Job, gpus: list[int], t: float) -> None:
        spec = job.spec
        if len(set(gpus)) != spec.num_gpus:
            raise SimulationError(
                f"placer {self.placer.name} gave job {spec.job_id} GPUs {gpus}; "
                f"needs {spec.num_gpus} distinct GPUs"
            )
        per = self.cluster.gpus_per_server
        servers: list[int] = []
        for g in gpus:
            s = g // per
            if s not in servers:
                servers.append(s)
        job.gpus = list(gpus)
        job.servers = servers
        job.multi = len(servers) > 1
        if spec.comm is CommArch.PS:
            self._ps_traffic(job)
        m = spec.model
        est = job.comm_mb * self.comm_est if job.multi else 0.0
        job.comm_est_once = est
        left = spec.iterations - job.iterations_done  # all of them unless resumed
        load = m.compute_ms * left + est * left
        mem = m.gpu_memory_mb
        # JOB fidelity and restoring resumptions compute nothing per task yet
        hold = self.job_level or (job.preemptions > 0 and self.cfg.model.preemption_cost_ms > 0)
        for w, g in enumerate(gpus):
            if self.free_mem_mb[g] < mem:
                raise SimulationError(
                    f"placer {self.placer.name} put job {spec.job_id} on GPU {g} without memory"
                )
            if self.job_level and self.residents[g]:
                raise SimulationError(
                    f"JOB fidelity needs exclusive GPUs, but placer {self.placer.name} put job "
                    f"{spec.job_id} on GPU {g} next to job {self.residents[g][0][0].spec.job_id}"
                )
            self.free_mem_mb[g] -= mem
            self.load_ms[g] += load
            self.residents[g].append((job, w))
            if not hold:
                self._make_ready(job, w, g)
        self.mem_version += 1
        if hold:
            job.wstate = [DONE] * len(gpus)
            job.pending = 0
        else:
            job.wstate = [FW_READY] * len(gpus)
            job.pending = len(gpus)
        if self.chunk_max > 1:
            self._set_chunk(job)
        job.placed_order = self.placed_count
        self.placed_count += 1
        if math.isnan(job.start_ms):
            job.start_ms = t
        job.on_gpus = True
        job.run_since = t
        self.preemption.placed(job, t)
        self.running.append(job)
        self.dirty_gpus.update(gpus)
        if hold:
            self._hold_start(job, t)
