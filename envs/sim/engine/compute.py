"""Compute: the GPUs' forward/backward tasks, time-sharing, iteration barriers, windows.

Each GPU runs one compute task at a time; the ready worker of the highest-priority job placed
on it goes first (GPU time-sharing, phase 7).  A job's iteration ends at its all-reduce's
barrier (:meth:`Compute._sync`).  Compute windows replace an undisturbed iteration's 2n task
events by one (exact; turned back into per-task state the moment another job needs one of
its GPUs).  JOB fidelity runs a placed job without per-iteration events (``_hold_start``).
"""

from __future__ import annotations

import heapq
import math

from envs.sim.engine.core import EngineCore
from envs.sim.engine.state import (
    BW_READY,
    DONE,
    EV_JOBEND,
    EV_RESTORE,
    EV_TASK,
    EV_WINDOW,
    FW_READY,
    RUNNING,
    WINDOW,
    Job,
)
from envs.sim.errors import SimulationError


class Compute(EngineCore):
    """Phases 1 (task ends, barriers) and 7 (task starts) and the compute windows."""

    # ------------------------------------------------------------------ phase 1
    def _finish_task(self, g: int) -> None:
        job, w, kind = self.gpu_task[g]  # type: ignore[misc]
        self.gpu_task[g] = None
        self.dirty_gpus.add(g)
        dur = job.fw if kind == FW_READY else job.bw
        job.remaining_compute_ms -= dur
        self.load_ms[g] -= dur
        job.prio = job.remaining_compute_ms if self.prio_is_remaining else self.order.priority(job)
        if kind == FW_READY:
            job.wstate[w] = BW_READY
            self.gpu_ready[g].append((job, w))
        else:
            job.wstate[w] = DONE
            job.pending -= 1
            if job.pending == 0:
                self.ready.append(job)

    def _sync(self, job: Job, t: float) -> None:
        """The all-reduce of the current iteration is done (barrier passed)."""
        job.iterations_done += job.chunk
        job.last_sync_ms = t
        if job.comm_est_once:
            est = job.comm_est_once * job.chunk
            load = self.load_ms
            for g in job.gpus:
                load[g] -= est
        if job.iterations_done >= job.spec.iterations:
            self._finish_job(job, t)
            return
        if job.preempt_pending:
            # preempted: it stops at this iteration boundary and the next pass evicts it
            job.held = True
            self.resched = True
            return
        self._begin_iteration(job)

    def _begin_iteration(self, job: Job) -> None:
        """Every worker of ``job`` has its next forward ready."""
        if self.chunk_max > 1:  # FAST: also for a job placed before the run went FAST
            self._set_chunk(job)
        gpus = job.gpus
        n = len(gpus)
        job.wstate = [FW_READY] * n
        job.pending = n
        gpu_window, gpu_ready = self.gpu_window, self.gpu_ready
        for w, g in enumerate(gpus):
            # _make_ready(job, w, g), inlined (hot path)
            other = gpu_window[g]
            if other is not None:
                self._materialise(other)
            gpu_ready[g].append((job, w))
        self.dirty_gpus.update(gpus)

    def _make_ready(self, job: Job, w: int, g: int) -> None:
        """Worker ``w`` of ``job`` has its next forward ready on GPU ``g``; a compute window
        holding ``g`` is split first, since another job now competes for the GPU."""
        other = self.gpu_window[g]
        if other is not None:
            self._materialise(other)
        self.gpu_ready[g].append((job, w))

    def _set_chunk(self, job: Job) -> None:
        """FAST fidelity: the next ``chunk`` iterations run as one step whose forward,
        backward and all-reduce are ``chunk`` times as long (identical iterations merged)."""
        c = min(self.chunk_max, job.spec.iterations - job.iterations_done)
        m = job.spec.model
        job.chunk = c
        job.fw = m.forward_ms * c
        job.bw = m.backward_ms * c

    def _finish_job(self, job: Job, t: float) -> None:
        if not math.isnan(job.finish_ms):
            raise SimulationError(f"job {job.spec.job_id} finished twice (t={t})")
        job.finish_ms = t
        self.finished += 1
        self.unreleased.append(job)
        self.preemption.finished(self, job, t)
        if self.quirks is not None:
            self.quirks.job_finished(self, t)

    # ------------------------------------------------------------------ phase 7
    def _start_tasks(self, t: float) -> None:
        gpu_task = self.gpu_task
        gpu_ready = self.gpu_ready
        heap = self.heap
        push = heapq.heappush
        if self.windows:
            self._open_windows(t)
        seq = self.seq
        for g in self.dirty_gpus:
            if gpu_task[g] is not None:
                continue
            ready = gpu_ready[g]
            if not ready:
                continue
            # highest priority first; ties: earlier placement
            k = 0
            if len(ready) > 1:
                bp = math.inf
                bo = 0
                for i, (job, _) in enumerate(ready):
                    p = job.prio
                    if p < bp or (p == bp and job.placed_order < bo):
                        k, bp, bo = i, p, job.placed_order
            best, bw = ready.pop(k)
            kind = best.wstate[bw]
            dur = best.fw if kind == FW_READY else best.bw
            best.wstate[bw] = RUNNING
            gpu_task[g] = (best, bw, kind)
            seq += 1
            push(heap, (t + dur, seq, EV_TASK, g, 0))
        self.seq = seq
        self.dirty_gpus.clear()

    # ------------------------------------------------------------------ compute windows
    # A job whose iteration starts while every one of its GPUs is idle with nothing else ready
    # runs forward then backward on all workers undisturbed unless another job becomes ready
    # on one of those GPUs.  Such an iteration's 2n task events are replaced by one window
    # event; if another job does become ready there (its sync or placement), the window is
    # turned back into the exact per-task state at that moment (``_materialise``).  Nothing
    # else reads a windowed job's per-task state: its GPUs are busy, it is not waiting for
    # communication, and LWF's loads are brought up to date before every placement.

    def _open_windows(self, t: float) -> None:
        gpu_task, gpu_ready, gpu_window = self.gpu_task, self.gpu_ready, self.gpu_window
        for g in self.dirty_gpus:
            ready = gpu_ready[g]
            if gpu_task[g] is not None or len(ready) != 1:
                continue
            job = ready[0][0]
            gpus = job.gpus
            n = len(gpus)
            if job.pending != n or job.window_t == job.window_t:  # not NaN: a window is open
                continue
            # every GPU of the job idle with only this job ready (a plain loop, not any() over
            # a generator: hot path)
            for h in gpus:
                if gpu_task[h] is not None:
                    break
                r = gpu_ready[h]
                if len(r) != 1 or r[0][0] is not job:
                    break
            else:
                wstate = job.wstate
                if wstate.count(FW_READY) != len(wstate):
                    continue
                for w, h in enumerate(gpus):
                    gpu_ready[h].clear()
                    gpu_task[h] = (job, w, WINDOW)
                    gpu_window[h] = job
                job.wstate = [RUNNING] * n
                job.window_t = t
                job.window_fw_done = False
                self.unsettled[job] = None
                ver = job.window_ver + 1
                job.window_ver = ver
                self._push(t + job.fw + job.bw, EV_WINDOW, job, ver)

    def _window_forward_done(self, job: Job) -> None:
        # one subtraction per worker, in the same order as per-task ends (locals: hot path)
        gpus, fw = job.gpus, job.fw
        rem = job.remaining_compute_ms
        for _ in gpus:
            rem -= fw
        job.remaining_compute_ms = rem
        load = self.load_ms
        for g in gpus:
            load[g] -= fw
        job.window_fw_done = True
        del self.unsettled[job]

    def _end_window(self, job: Job) -> None:
        gpus, bw = job.gpus, job.bw
        n = len(gpus)
        if not job.window_fw_done:
            self._window_forward_done(job)
        rem = job.remaining_compute_ms
        for _ in gpus:
            rem -= bw
        job.remaining_compute_ms = rem
        load, gpu_task, gpu_window = self.load_ms, self.gpu_task, self.gpu_window
        for g in gpus:
            load[g] -= bw
            gpu_task[g] = None
            gpu_window[g] = None
        self.dirty_gpus.update(gpus)
        job.prio = job.remaining_compute_ms if self.prio_is_remaining else self.order.priority(job)
        job.wstate = [DONE] * n
        job.pending = 0
        job.window_t = math.nan
        self.ready.append(job)

    def _materialise(self, job: Job) -> None:
        """Turn ``job``'s compute window into the per-task state it stands for at ``now``."""
        t0, fw, bw = job.window_t, job.fw, job.bw
        elapsed = self.now - t0
        job.window_ver += 1  # the window's end event is void
        job.window_t = math.nan
        fw_done = elapsed >= fw
        if fw_done and not job.window_fw_done:
            self._window_forward_done(job)
        self.unsettled.pop(job, None)
        for w, g in enumerate(job.gpus):
            self.gpu_window[g] = None
            if not fw_done:
                self.gpu_task[g] = (job, w, FW_READY)
                self._push(t0 + fw, EV_TASK, g)
            elif elapsed == fw:  # forward just ended: the GPU chooses again now
                self.gpu_task[g] = None
                job.wstate[w] = BW_READY
                self.gpu_ready[g].append((job, w))
                self.dirty_gpus.add(g)
            else:
                self.gpu_task[g] = (job, w, BW_READY)
                self._push(t0 + fw + bw, EV_TASK, g)
        job.prio = job.remaining_compute_ms if self.prio_is_remaining else self.order.priority(job)

    def _settle_window_loads(self) -> None:
        """Before a load-reading placement: count the forward part of open windows that ran."""
        now = self.now
        # open windows whose forward is not counted yet (windows hold disjoint GPUs, so the
        # order does not matter)
        for job in [j for j in self.unsettled if now - j.window_t >= j.fw]:
            self._window_forward_done(job)

    # ------------------------------------------------------------------ JOB fidelity and restores
    def _hold_start(self, job: Job, t: float) -> None:
        """A job placed in JOB fidelity, or resumed with a restore cost: schedule the end of
        its run (JOB) or of its restore."""
        cost = self.cfg.model.preemption_cost_ms if job.preemptions else 0.0
        job.aux_ver += 1
        job.run_since = t + cost  # a restore is not service: orders see no progress
        if not self.job_level:
            job.restoring = True
            self._push(t + cost, EV_RESTORE, job, job.aux_ver)
            return
        m = job.spec.model
        comm = self.network.a_ms + job.comm_mb * self.network.b_ms_per_mb if job.multi else 0.0
        job.jl_iter = m.compute_ms + comm
        job.jl_since = t + cost
        self._push(job.jl_since + job.jl_left * job.jl_iter, EV_JOBEND, job, job.aux_ver)

    def _job_level_end(self, job: Job, t: float) -> None:
        job.jl_left = 0.0
        job.iterations_done = job.spec.iterations
        job.remaining_compute_ms = 0.0
        self._finish_job(job, t)

    def _bank(self, job: Job, t: float) -> None:
        """Bring ``job``'s executed time (and, in JOB fidelity, its progress) up to ``t``."""
        if not job.on_gpus:
            return
        if t > job.run_since:  # not while restoring
            job.executed_ms += t - job.run_since
            job.run_since = t
        if self.job_level and t > job.jl_since:
            job.jl_left = max(0.0, job.jl_left - (t - job.jl_since) / job.jl_iter)
            job.jl_since = t
            job.remaining_compute_ms = job.jl_left * job.spec.model.compute_ms * len(job.gpus)
