"""Phase 5: which waiting all-reduces start, as the communication scheduler decides.

A multi-server job whose workers all finished their backward waits for its all-reduce (one
server: the exchange is free, the barrier passes at once).  The stack's
:class:`~envs.sim.policies.base.CommScheduler` admits waiting jobs in job-order priority.  An
answer can change only when a task starts or ends on one of the job's servers (the
``CommScheduler`` contract), so only those jobs are asked again: the per-server index
(``waiting_by``, and ``held_by`` for jobs a ``BlockingCommScheduler`` refused until a server
carries fewer tasks) replaces a walk of the whole waiting list, which is kept for short lists,
for the reference's probes and to cross-check the index (``scan_waiting``).
"""

from __future__ import annotations

import bisect
import heapq
import operator

from envs.sim.engine.core import EngineCore
from envs.sim.engine.state import CommTask, Job


class Admission(EngineCore):
    """The communication phase (5): waiting all-reduces asked and started."""

    def _communicate(self, t: float) -> bool:
        """Phase 5: all-reduces become ready, finished jobs release their memory (and the
        queue gets a placement pass), waiting all-reduces are admitted.  True when it stopped
        before admitting, for the caller's placement pass (decision-point mode)."""
        ready, self.ready = self.ready, []
        if len(ready) > 1:
            ready.sort(key=_placed_order)
        for job in ready:
            if job.multi:
                job.fresh = True
                job.wait_key = (job.prio, job.placed_order)
                bisect.insort(self.waiting, job, key=_waiting_key)
                self._fresh.append(job)
                for s in job.servers:
                    self.waiting_on[s] += 1
                    self.waiting_by[s].add(job)
            else:
                self._sync(job, t)  # one server: the all-reduce is free
        # a job finished (or reached the boundary where it is preempted): place again
        if (self.unreleased or self.resched) and self.preemption.replace(self, t):
            return True
        self._admit_waiting(t)
        return False

    def _waiting_touched(self) -> bool:
        on = self.waiting_on
        if any(on[s] for s in self.nic_dirty):
            return True
        self.nic_dirty.clear()
        self.nic_ended.clear()
        return False

    def _admit_waiting(self, t: float) -> None:
        """Phase 5's admission of waiting all-reduces (the communication scheduler's pass)."""
        if not self.waiting:
            self.nic_dirty.clear()
            self.nic_ended.clear()
            return
        quirks = self.quirks
        self.force_pass = False
        while True:
            # A waiting job's answer can change only when a task starts or ends on one of its
            # servers (the CommScheduler contract), so only those jobs are asked again.
            dirty, self.nic_dirty = self.nic_dirty, set()
            ended, self.nic_ended = self.nic_ended, set()
            self._pass_dirty = dirty
            if quirks is not None:
                quirks.start_round(self)
            admitted: list[Job] = []
            if self.scan_waiting:
                self._ask_all(dirty, admitted, t)
            else:
                self._ask_touched(dirty, ended, admitted, t)
            self._fresh.clear()
            if admitted:
                waiting = self.waiting
                for job in admitted:
                    del waiting[bisect.bisect_left(waiting, job.wait_key, key=_waiting_key)]
                    for s in job.servers:
                        self.waiting_on[s] -= 1
                        self.waiting_by[s].discard(job)
                    if job.hold is not None:
                        self.held_by[job.hold[0]][job.hold[1]].discard(job)
                        job.hold = None
            if quirks is not None:
                quirks.end_round(self)
            if not admitted or not self.waiting:
                break
            if quirks is not None:  # the reference: the rest at the next tick
                quirks.admitted(self, t)
                break

    def _ask_all(self, dirty: set[int], admitted: list[Job], t: float) -> None:
        """One round of the admission pass walking the whole waiting list: each job that is
        fresh or has a server in ``dirty`` is asked (the reference's probes need the walk)."""
        self.waiting_visits += len(self.waiting)
        quirks = self.quirks
        reprobe = quirks is not None and quirks.probe_side_effect
        for job in self.waiting:
            if job.fresh or not dirty.isdisjoint(job.servers):
                if self._ask(job, t):
                    admitted.append(job)
            elif reprobe and job.probe_target is not None:
                # same servers, same answer; the reference still probes every tick
                target = job.probe_target
                if target.job.comm is target:
                    self.remaining_mb(target)

    def _ask(self, job: Job, t: float) -> bool:
        """Ask the communication scheduler whether ``job`` may start its transfer now
        (counted; the job is no longer fresh and forgets its probe target)."""
        self.comm_asks += 1
        job.fresh = False
        job.probe_target = None
        self._asking = job
        started = self._try_start(job, t)
        self._asking = None
        return started

    def _ask_touched(self, dirty: set[int], ended: set[int], admitted: list[Job], t: float) -> None:  # noqa: C901
        """One round of the admission pass without probes: the waiting jobs that are fresh
        or have a server in ``dirty`` are asked, in waiting order.  ``dirty`` grows when an
        admission starts a task and the scheduler re-asks on starts; jobs after the admitted
        one on its servers are then asked too.  The same jobs, in the same order, as walking
        the whole waiting list and testing each, at the cost of the jobs asked, except that a
        job the scheduler holds (``blocker`` (s, k)) is asked only once a task end (``ended``)
        has left fewer than k tasks on s: until then it would be refused, with no side
        effect.  A list of at most ``_SCAN_UP_TO`` jobs is walked instead."""
        waiting_by, held_by = self.waiting_by, self.held_by
        nic = self.nic_tasks
        freed: set[Job] = set()  # held jobs whose blocking server has fewer tasks now
        for s in ended:
            c = len(nic[s])
            for k, held in held_by[s].items():
                if c < k:
                    freed.update(held)
        if len(self.waiting) <= self.scan_up_to:
            # a short list: walk it (cheaper than the index); no new holds
            for job in self.waiting:
                if job.hold is not None:
                    if job not in freed:
                        continue
                    self._hold(job, None)  # asked on every change again
                elif not (job.fresh or not dirty.isdisjoint(job.servers)):
                    continue
                if self._ask(job, t):
                    admitted.append(job)
            return
        cand: list[tuple[tuple[float, int], Job]] = [(j.wait_key, j) for j in self._fresh]
        seen = set(self._fresh)
        for s in dirty:
            for job in waiting_by[s]:
                if job not in seen:
                    seen.add(job)
                    cand.append((job.wait_key, job))
        for job in freed:
            if job not in seen:
                seen.add(job)
                cand.append((job.wait_key, job))
        heapq.heapify(cand)
        reask = self.reask_on_start
        blocker = self.blocker
        while cand:
            key, job = heapq.heappop(cand)
            started = self._ask(job, t)
            if not started:
                if blocker is not None:
                    self._hold(job, blocker(job, self))
                continue
            admitted.append(job)
            if reask:  # its servers are dirty now: later jobs on them are asked too
                for s in job.servers:
                    for other in waiting_by[s]:
                        if other not in seen and other.wait_key > key:
                            seen.add(other)
                            heapq.heappush(cand, (other.wait_key, other))

    def _hold(self, job: Job, hold: tuple[int, int] | None) -> None:
        """File a waiting job under its blocker ``(server, k)``, or (``None``) under all of
        its servers, to be asked again on any change there."""
        old = job.hold
        if old == hold:
            return
        if old is None:
            for s in job.servers:
                self.waiting_by[s].discard(job)
        else:
            self.held_by[old[0]][old[1]].discard(job)
        job.hold = hold
        if hold is None:
            for s in job.servers:
                self.waiting_by[s].add(job)
        else:
            self.held_by[hold[0]].setdefault(hold[1], set()).add(job)

    def _try_start(self, job: Job, t: float) -> bool:
        if not self.commsched.admit(job, self):
            return False
        task = CommTask(job, t)
        job.comm = task
        for s in job.servers:
            self.nic_tasks[s].append(task)
        if self.overlap is not None and job.factors is not None:
            task.size_mb *= self.overlap.fraction(job.spec, job.comm_mb, self._speed(task))
        self.changed_servers.update(job.servers)
        if self.reask_on_start:
            self.nic_dirty.update(job.servers)
            self._pass_dirty.update(job.servers)
        self.touched.add(task)
        return True


_placed_order = operator.attrgetter("placed_order")


def _waiting_key(job: Job) -> tuple[float, int]:
    return job.wait_key
