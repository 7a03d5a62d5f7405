"""The event kernel: the heap of events, one event time's phases, ``run`` and ``run_until``.

One event heap ordered by ``(time, sequence)``; all events at one time are handled together,
in the phase order of the package docstring (completions, release, arrivals, placement,
communication, NIC rates, compute starts).  The kernel only sequences: each phase is a part's
method (:mod:`~envs.sim.engine.compute`, :mod:`~envs.sim.engine.network`, ...), arrivals and
placement go through the preemption strategy.  Stale events (a rescheduled all-reduce, a void
compute window, restore or job-level end) carry a version number and are dropped here.
"""

from __future__ import annotations

import heapq
import math
import sys
import time as _time

from envs.sim.engine.core import EngineCore
from envs.sim.engine.state import (
    EV_ARRIVAL,
    EV_COMM,
    EV_JOBEND,
    EV_RESCHED,
    EV_RESTORE,
    EV_SYNC,
    EV_TASK,
    EV_WINDOW,
    CommTask,
    Job,
)
from envs.sim.errors import SimulationError
from envs.sim.results import SimResult


class Kernel(EngineCore):
    """The event loop and the per-event-time phase sequence."""

    def run(self) -> SimResult:
        if self._ran:
            raise SimulationError("a Simulator runs once; build a new one for another run")
        self._ran = True
        wall = _time.perf_counter()
        self._start()
        self._loop(math.inf)
        self._wall += _time.perf_counter() - wall
        if self.finished != len(self.jobs):
            stuck = [j.spec.job_id for j in self.jobs if math.isnan(j.finish_ms)]
            raise SimulationError(
                f"no events left but {len(stuck)} jobs never finished (first ids {stuck[:10]}); "
                f"queued={len(self.queue)} waiting-comm={len(self.waiting)}"
            )
        return self._result(self._wall)

    def run_until(self, until_ms: float) -> None:
        """Handle every event at times ``<= until_ms``, then stop with ``now = until_ms``.

        Resumable: later ``run_until`` calls with larger times, and finally ``run()``, give
        exactly what one ``run()`` gives (the loop only pauses between event times).  Jobs not
        finished by then keep their state (``iterations_done``, ``last_sync_ms``); nothing is
        reported stuck.  Used by the elastic slot loop to simulate one time slot."""
        if self._ran:
            raise SimulationError("run_until() after run(): the simulation is over")
        if not until_ms >= self.now:
            raise SimulationError(f"run_until({until_ms}) is before now={self.now}")
        wall = _time.perf_counter()
        self._start()
        self._loop(until_ms)
        self.now = until_ms
        self._wall += _time.perf_counter() - wall

    def _start(self) -> None:
        """Queue the arrivals, once."""
        if self._started:
            return
        self._started = True
        for job in self.jobs:
            self._push(job.spec.submit_ms, EV_ARRIVAL, job)

    def _loop(self, until_ms: float) -> None:  # noqa: C901
        heap = self.heap
        pop = heapq.heappop
        budget, every = self.cfg.run.max_wall_s, self.cfg.run.progress_s
        watch = budget is not None or every is not None
        entered = _time.perf_counter()
        next_report = self._wall + (every or 0.0)
        steps = 0
        check = self.cfg.run.check_invariants
        end_window = self._end_window
        while heap and heap[0][0] <= until_ms:
            t = heap[0][0]
            if watch:
                steps += 1
                if not steps & 0xFFF:
                    spent = self._wall + _time.perf_counter() - entered
                    done = f"{self.finished} of {len(self.jobs)} jobs finished"
                    if every is not None and spent >= next_report:
                        print(
                            f"{self.workload.name} under {self.stack.name}: {spent:.0f} s, "
                            f"simulated time {t:.6g} ms, {done}",
                            file=sys.stderr,
                            flush=True,
                        )
                        next_report = spent + every
                    if budget is not None and spent > budget:
                        raise SimulationError(
                            f"wall-clock budget of {budget:g} s spent at simulated time "
                            f"{t:.6g} ms, {done}"
                        )
            if t < self.now:
                raise SimulationError(f"time went backwards: {t} < {self.now}")
            self.now = t
            windows: list[Job] = []
            task_ends: list[int] = []
            comm_ends: list[CommTask] = []
            syncs: list[Job] = []
            arrivals: list[Job] = []
            while heap and heap[0][0] == t:
                _, _, kind, obj, version = pop(heap)
                self.events += 1
                # the commonest kinds first (the kinds are exclusive: the order is only speed)
                if kind == EV_WINDOW:
                    if obj.window_ver == version:
                        windows.append(obj)
                elif kind == EV_TASK:
                    task_ends.append(obj)
                elif kind == EV_COMM:
                    if obj.version == version and obj.job.comm is obj:
                        comm_ends.append(obj)
                elif kind == EV_SYNC:
                    syncs.append(obj)
                elif kind == EV_ARRIVAL:
                    arrivals.append(obj)
                elif kind == EV_RESTORE:
                    if obj.aux_ver == version:
                        obj.restoring = False
                        self._begin_iteration(obj)
                elif kind == EV_JOBEND:
                    if obj.aux_ver == version:
                        self._job_level_end(obj, t)
                elif kind == EV_RESCHED:
                    self.preemption.woken(self, version)
            for job in windows:
                end_window(job)
            self._step(t, task_ends, comm_ends, syncs, arrivals)
            if self.paused_at is not None:  # a decision is due (envs.sim.decisions)
                return
            if check:
                self.check_invariants()

    def _step(
        self,
        t: float,
        task_ends: list[int],
        comm_ends: list[CommTask],
        syncs: list[Job],
        arrivals: list[Job],
    ) -> None:
        # 1. completions
        for g in task_ends:
            self._finish_task(g)
        for task in comm_ends:
            self._finish_comm(task, t)
        for job in syncs:
            self._sync(job, t)
        # 2. release finished jobs' memory
        if self.unreleased:
            self._release(t)
        # 3. arrivals, 4. placement (True: stopped for the caller's placement pass)
        if (arrivals or self.resched or self.queue) and self.preemption.place(self, t, arrivals):
            return
        self._after_placement(t)

    def _after_placement(self, t: float) -> None:
        """Phases 5-7 of an event time."""
        # 5. communication
        busy = self.ready or self.force_pass or (self.nic_dirty and self._waiting_touched())
        if busy and self._communicate(t):
            return  # stopped for the caller's placement pass (envs.sim.decisions)
        self._after_communication(t)

    def _after_communication(self, t: float) -> None:
        """Phases 6-7 of an event time."""
        # 6. rates of affected all-reduces
        if self.changed_servers or self.touched:
            self._retime(t)
        # 7. start compute tasks
        if self.dirty_gpus:
            self._start_tasks(t)
