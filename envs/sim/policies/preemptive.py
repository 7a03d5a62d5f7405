"""Preemptive job orders: a shared priority structure, preemptive SRSF and continuous 2D-LAS.

A preemptive order decides at each decision point which jobs hold GPUs (the engine's
``Preemptive.reschedule`` in :mod:`envs.sim.engine.preemption`; protocol
:class:`envs.sim.policies.base.PreemptiveOrder`).  The pass is
Tiresias's: walk all jobs, running and pending, in priority order; a job runs (or keeps
running) if its GPU count fits in what is left of the cluster, otherwise it is skipped
(and preempted if it was running).  Non-blocking, so smaller jobs further down backfill.

Cost.  A pending job's key cannot change while it waits (it attains no service), so pending
jobs sit in one sorted list per GPU count, keyed once; only running jobs (at most one per
GPU) are keyed afresh at each pass.  The walk merges the sorted running jobs with the heads
of the per-size lists that still fit, so a pass costs ``O((running + started) x sizes)`` plus
``O(log n)`` per job that starts or stops, whatever the length of the queue.
"""

from __future__ import annotations

import bisect
import math
from operator import itemgetter
from typing import Any

from envs.sim.errors import ConfigError
from envs.sim.policies.base import JobView

#: a priority key: lower runs first; the last element is unique per job (arrival rank)
Key = tuple[Any, ...]


class PreemptiveBase:
    """The shared structure.  Subclasses define the keys:

    - ``_arrival_key(job, now)``: key of a job that just arrived (pending);
    - ``_run_key(job, now)``: key of a running job at this pass;
    - ``_stop_key(job, now)``: pending key of a job that was just evicted;
    and may hook ``_prepare`` (before the walk), ``_planned`` (after it), ``_started``,
    ``_stopped`` and ``_wakeup``.

    ``quantum_ms``: if given, re-rank every ``quantum_ms`` while jobs are pending (the
    continuous-priority variants); ``None`` re-ranks only at events.
    """

    preemptive = True
    name = "preemptive"
    #: whether keys read ``remaining_compute_ms`` (JOB fidelity then updates it every pass)
    reads_remaining = False

    def __init__(self, quantum_ms: float | None = None) -> None:
        if quantum_ms is not None and not (quantum_ms > 0 and math.isfinite(quantum_ms)):
            raise ConfigError(f"quantum_ms must be a finite number > 0 or None, got {quantum_ms}")
        self.quantum_ms = quantum_ms
        self._pending: dict[int, list[tuple[Key, int]]] = {}  # GPU count -> sorted (key, id)
        self._pkey: dict[int, Key] = {}  # job id -> its key in _pending
        self._jobs: dict[int, JobView] = {}  # job id -> view, pending or running
        self._running: dict[int, JobView] = {}
        self._rank: dict[int, int] = {}  # job id -> arrival rank (unique tie-break)
        #: cost accounting (tests): passes, the most candidates one pass compared, the
        #: longest queue a pass saw
        self.passes = 0
        self.max_compared = 0
        self.max_pending = 0

    # ------------------------------------------------------------------ engine callbacks
    def priority(self, job: JobView) -> float:
        """Among running jobs (GPU sharing, all-reduce admission): placement order."""
        return 0.0

    def add(self, job: JobView, now: float) -> None:
        jid = job.spec.job_id
        self._rank[jid] = len(self._rank)
        self._jobs[jid] = job
        self._push(jid, job.spec.num_gpus, self._arrival_key(job, now))

    def remove(self, job: JobView, now: float) -> None:
        jid = job.spec.job_id
        self._running.pop(jid, None)
        if jid in self._pkey:
            self._pop(jid, job.spec.num_gpus)
        self._jobs.pop(jid, None)

    def on_start(self, job: JobView, now: float) -> None:
        jid = job.spec.job_id
        self._pop(jid, job.spec.num_gpus)
        self._running[jid] = job
        self._started(job, now)

    def on_stop(self, job: JobView, now: float) -> None:
        jid = job.spec.job_id
        del self._running[jid]
        self._push(jid, job.spec.num_gpus, self._stop_key(job, now))
        self._stopped(job, now)

    def plan(self, now: float, num_gpus: int) -> list[JobView]:
        self._prepare(now)
        run_key = self._run_key
        run = [(run_key(j, now), j) for j in self._running.values()]
        run.sort(key=itemgetter(0))
        selected: list[JobView] = []
        dropped: list[JobView] = []
        free = num_gpus
        # per GPU count with jobs waiting, ascending: [head key, size, head index, list]
        heads: list[list[Any]] = [
            [lst[0][0], s, 0, lst] for s, lst in sorted(self._pending.items()) if lst
        ]
        ri, nrun = 0, len(run)
        compared = nrun
        while free > 0:
            while ri < nrun and run[ri][1].spec.num_gpus > free:
                dropped.append(run[ri][1])  # skipped in the walk: preempted
                ri += 1
            best: Key | None = run[ri][0] if ri < nrun else None
            bh: list[Any] | None = None
            for hd in heads:
                if hd[1] > free:
                    break
                compared += 1
                if hd[0] is not None and (best is None or hd[0] < best):
                    best, bh = hd[0], hd
            if best is None:
                break
            if bh is None:
                job = run[ri][1]
                ri += 1
            else:
                lst, h = bh[3], bh[2]
                job = self._jobs[lst[h][1]]
                h += 1
                bh[2] = h
                bh[0] = lst[h][0] if h < len(lst) else None
            selected.append(job)
            free -= job.spec.num_gpus
        dropped.extend(j for _, j in run[ri:])
        self._planned(now, selected, dropped)
        self.passes += 1
        self.max_compared = max(self.max_compared, compared)
        self.max_pending = max(self.max_pending, len(self._pkey))
        return selected

    def next_wakeup(self, now: float) -> float:
        wake = self._wakeup(now)
        if self.quantum_ms is not None and self._pkey:
            wake = min(wake, now + self.quantum_ms)
        return wake

    # ------------------------------------------------------------------ helpers
    def _push(self, jid: int, size: int, key: Key) -> None:
        self._pkey[jid] = key
        bisect.insort(self._pending.setdefault(size, []), (key, jid))

    def _pop(self, jid: int, size: int) -> None:
        key = self._pkey.pop(jid)
        lst = self._pending[size]
        i = bisect.bisect_left(lst, (key, jid))
        if i == len(lst) or lst[i][1] != jid:
            raise AssertionError(f"{self.name}: job {jid} missing from its pending list")
        del lst[i]

    def _rekey(self, job: JobView, key: Key) -> None:
        """Give a pending job a new key (e.g. a promotion)."""
        jid = job.spec.job_id
        self._pop(jid, job.spec.num_gpus)
        self._push(jid, job.spec.num_gpus, key)

    def pending_jobs(self) -> list[JobView]:
        """Pending jobs, best first (for tests and inspection; O(n log n))."""
        items = sorted((k, jid) for jid, k in self._pkey.items())
        return [self._jobs[jid] for _, jid in items]

    # ------------------------------------------------------------------ hooks
    def _arrival_key(self, job: JobView, now: float) -> Key:
        raise NotImplementedError

    def _run_key(self, job: JobView, now: float) -> Key:
        raise NotImplementedError

    def _stop_key(self, job: JobView, now: float) -> Key:
        return self._run_key(job, now)

    def _prepare(self, now: float) -> None:
        pass

    def _planned(self, now: float, selected: list[JobView], dropped: list[JobView]) -> None:
        pass

    def _started(self, job: JobView, now: float) -> None:
        pass

    def _stopped(self, job: JobView, now: float) -> None:
        pass

    def _wakeup(self, now: float) -> float:
        return math.inf


def attained(job: JobView, gpu_age: bool = True) -> float:
    """Attained service, ms: GPU-ms (executed time x GPUs) for 2D ages, ms for 1D."""
    return job.executed_ms * job.spec.num_gpus if gpu_age else job.executed_ms


class PreemptiveSRSF(PreemptiveBase):
    """Preemptive shortest remaining service first (Tiresias's ``shortest-gpu``): key
    ``(remaining GPU compute ms, arrival)``; a job needs its size known in advance."""

    name = "psrsf"
    reads_remaining = True

    def _arrival_key(self, job: JobView, now: float) -> Key:
        return (job.remaining_compute_ms, self._rank[job.spec.job_id])

    _run_key = _arrival_key


class LAS2D(PreemptiveBase):
    """Continuous 2D-LAS: least attained service first, key ``(attained, arrival)``,
    re-ranked every ``quantum_ms`` (a continuous priority needs a quantum; the discretised
    form is :class:`envs.sim.policies.tiresias.DiscretizedLAS`).  ``gpu_age=False`` is 1D LAS
    (executed time only)."""

    name = "las"

    def __init__(self, quantum_ms: float, gpu_age: bool = True) -> None:
        super().__init__(quantum_ms)
        self.gpu_age = gpu_age

    def _arrival_key(self, job: JobView, now: float) -> Key:
        return (attained(job, self.gpu_age), self._rank[job.spec.job_id])

    _run_key = _arrival_key
