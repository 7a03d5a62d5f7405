"""Tiresias's discretised two-dimensional attained-service schedulers (NSDI'19 §3.2).

Attained service is executed time x GPUs (GPU-ms here; thresholds are configured in
GPU-seconds).  Jobs sit in ``K`` priority queues (``TiresiasConfig``):

- a new job enters the end of Q0; a job whose attained service reaches ``thresholds[q]``
  moves to the end of Q(q+1) — at the exact crossing time (the engine wakes us then);
- PROMOTEKNOB: a pending job below Q0 whose pending time since it last ran first (summed over
  its pending spells since its last promotion) reaches ``knob`` x its executed time since that
  promotion moves to the end of Q0, its attained service counted from zero again;
- each pass walks Q0, Q1, ... and inside a queue: **2D-LAS** in queue order, running jobs
  first (a running job is never preempted by an equal-priority waiter; the one it preempts
  goes to the front of its queue's waiting jobs); **2D-Gittins** by Gittins index, highest
  first, ties by submit time then arrival — a fixed tie-break, so equal indices never make
  jobs leapfrog each other.

These are the upstream code's semantics (SymbioticLab/Tiresias ``959f9b0``, read in the shared
reference note §1.2) except that demotion happens at the exact crossing time (upstream rounds
its jump time in mixed units and may notice a demotion late) and preemption may cost time
(``SimConfig.model.preemption_cost_ms``).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

from envs.sim.config import TiresiasConfig
from envs.sim.policies.base import JobView
from envs.sim.policies.gittins import GittinsIndex, builtin_distribution
from envs.sim.policies.preemptive import Key, PreemptiveBase

#: tolerance (ms) for a crossing time computed from a wake-up time
_EPS = 1e-6


def _due_bound(now: float) -> float:
    """Events due at or before this are due at ``now``: ``now`` plus the larger of
    :data:`_EPS` and a few units of the clock's float resolution at ``now`` (at ~1e9 ms a
    crossing a few ns away rounds to ``now`` itself; at ~1e12 ms ``now + _EPS == now``)."""
    return now + max(_EPS, 4.0 * math.ulp(now))


@dataclass
class _State:
    q: int = 0  # queue
    exec0: float = 0.0  # executed ms at the last promotion (service counts from here)
    lp: float = 0.0  # pending ms since it first ran after its last promotion, banked
    pend_since: float = math.nan  # start of the current pending spell (nan: not pending)
    ran: bool = False
    promo_ver: int = 0
    dem_ver: int = 0
    runseq: int = 0  # 2D-LAS: rank among the queue's running jobs
    demoted_key: Key | None = None  # 2D-LAS: key at the back of a new queue, this pass
    stop_key: Key | None = None  # 2D-LAS: pending key decided by a pass that dropped it


class _MLFQ(PreemptiveBase):
    """K queues, demotion, PROMOTEKNOB; subclasses order jobs inside a queue."""

    def __init__(
        self, cfg: TiresiasConfig, *, gpu_age: bool = True, quantum_ms: float | None = None
    ) -> None:
        super().__init__(quantum_ms)
        self.cfg = cfg
        self.limits = [x * 1000.0 for x in cfg.thresholds_gpu_s]  # GPU-ms
        self.knob = cfg.promote_knob
        self.gpu_age = gpu_age
        self._st: dict[int, _State] = {}
        self._promos: list[tuple[float, int, int]] = []  # (time, version, job id)
        self._demos: list[tuple[float, int, int]] = []  # running jobs' next demotion times
        self.demotions = 0
        self.promotions = 0

    @property
    def stats(self) -> dict[str, int]:
        return {"demotions": self.demotions, "promotions": self.promotions}

    def service(self, job: JobView) -> float:
        """Attained service since the last promotion: GPU-ms (2D) or ms (1D)."""
        st = self._st[job.spec.job_id]
        ex = job.executed_ms - st.exec0
        return ex * job.spec.num_gpus if self.gpu_age else ex

    def queue_of(self, job: JobView) -> int:
        return self._st[job.spec.job_id].q

    # ------------------------------------------------------------------ life cycle
    def add(self, job: JobView, now: float) -> None:
        self._st[job.spec.job_id] = _State()
        super().add(job, now)

    def remove(self, job: JobView, now: float) -> None:
        super().remove(job, now)
        self._st.pop(job.spec.job_id, None)

    def _started(self, job: JobView, now: float) -> None:
        st = self._st[job.spec.job_id]
        if st.ran and not math.isnan(st.pend_since):
            st.lp += now - st.pend_since
        st.ran = True
        st.pend_since = math.nan
        st.promo_ver += 1
        self._push_demotion(job, st, now)

    def _due(self, job: JobView, st: _State, now: float) -> float:
        """When a job running from ``now`` crosses its queue's limit (inf in the last queue)."""
        if st.q >= len(self.limits):
            return math.inf
        rate = job.spec.num_gpus if self.gpu_age else 1
        return now + (self.limits[st.q] - self.service(job)) / rate

    def _push_demotion(self, job: JobView, st: _State, now: float) -> None:
        """A running job's service grows at ``rate`` per ms: it crosses its queue's limit at a
        known time, kept in a heap (so a pass never scans the running jobs for it).  A job
        that starts with a restore accrues nothing meanwhile: it is checked when due."""
        st.dem_ver += 1
        due = self._due(job, st, now)
        if due < math.inf:
            heapq.heappush(self._demos, (due, st.dem_ver, job.spec.job_id))

    def _stopped(self, job: JobView, now: float) -> None:
        st = self._st[job.spec.job_id]
        st.dem_ver += 1
        st.pend_since = now
        if self.knob > 0 and st.q > 0:
            due = self.knob * (job.executed_ms - st.exec0) - st.lp
            heapq.heappush(self._promos, (now + max(due, 0.0), st.promo_ver, job.spec.job_id))

    # ------------------------------------------------------------------ a pass
    def _prepare(self, now: float) -> None:
        promos = self._promos
        while promos and promos[0][0] <= _due_bound(now):
            _, ver, jid = heapq.heappop(promos)
            st = self._st.get(jid)
            if st is None or st.promo_ver != ver or jid not in self._pkey:
                continue
            job = self._jobs[jid]
            st.q = 0
            st.exec0 = job.executed_ms
            st.lp = 0.0
            st.pend_since = now
            st.stop_key = None
            self.promotions += 1
            self._rekey(job, self._promoted_key(job, now))
        demos = self._demos
        bound = _due_bound(now)
        while demos and demos[0][0] <= bound:
            _, ver, jid = heapq.heappop(demos)
            st = self._st.get(jid)
            if st is None or st.dem_ver != ver or jid not in self._running:
                continue
            job = self._jobs[jid]
            if self._due(job, st, now) > bound:  # a restore delayed it: due later
                self._push_demotion(job, st, now)
                continue
            # the crossing is within the clock's resolution of now: demote (each pop either
            # demotes, at most K - 1 times per job, or re-pushes beyond ``bound``)
            st.q += 1
            self.demotions += 1
            self._demoted(job, st)
            self._push_demotion(job, st, now)

    def _wakeup(self, now: float) -> float:
        wake = math.inf
        demos = self._demos
        while demos:
            _, ver, jid = demos[0]
            st = self._st.get(jid)
            if st is not None and st.dem_ver == ver and jid in self._running:
                wake = demos[0][0]
                break
            heapq.heappop(demos)
        promos = self._promos
        while promos:
            _, ver, jid = promos[0]
            st = self._st.get(jid)
            if st is not None and st.promo_ver == ver and jid in self._pkey:
                return min(wake, promos[0][0])
            heapq.heappop(promos)
        return wake

    # ------------------------------------------------------------------ subclass hooks
    def _demoted(self, job: JobView, st: _State) -> None:
        pass

    def _promoted_key(self, job: JobView, now: float) -> Key:
        raise NotImplementedError


class DiscretizedLAS(_MLFQ):
    """Discretised 2D-LAS: in a queue, FIFO by entry with running jobs first."""

    name = "dlas"

    def __init__(
        self, cfg: TiresiasConfig, *, gpu_age: bool = True, quantum_ms: float | None = None
    ) -> None:
        super().__init__(cfg, gpu_age=gpu_age, quantum_ms=quantum_ms)
        self._back = 0  # entry counter: the end of a queue
        self._front = 0  # decreasing: the front of a queue's waiting jobs
        self._runseq = 0

    def _back_key(self, q: int) -> Key:
        self._back += 1
        return (q, 1, self._back)

    def _arrival_key(self, job: JobView, now: float) -> Key:
        return self._back_key(0)

    def _promoted_key(self, job: JobView, now: float) -> Key:
        return self._back_key(0)

    def _demoted(self, job: JobView, st: _State) -> None:
        st.demoted_key = self._back_key(st.q)  # the end of its new queue, for this pass
        st.stop_key = None

    def _run_key(self, job: JobView, now: float) -> Key:
        st = self._st[job.spec.job_id]
        if st.stop_key is not None:  # dropped by an earlier pass, not yet at its boundary
            return st.stop_key
        if st.demoted_key is not None:
            return st.demoted_key
        return (st.q, 0, st.runseq)

    def _stop_key(self, job: JobView, now: float) -> Key:
        st = self._st[job.spec.job_id]
        key = st.stop_key
        if key is None:  # every evicted job was dropped by a pass; kept for safety
            self._front -= 1
            key = (st.q, 1, self._front)
        st.stop_key = None
        return key

    def _planned(self, now: float, selected: list[JobView], dropped: list[JobView]) -> None:
        for job in selected:  # the queues' running jobs, in walk order
            st = self._st[job.spec.job_id]
            self._runseq += 1
            st.runseq = self._runseq
            st.demoted_key = st.stop_key = None
        fronts = []
        for job in dropped:  # walk order
            st = self._st[job.spec.job_id]
            if st.stop_key is None:
                if st.demoted_key is not None:
                    st.stop_key = st.demoted_key  # it stays at the end of its new queue
                else:
                    fronts.append(st)
            st.demoted_key = None
        base = self._front - len(fronts)
        for i, st in enumerate(fronts):  # ahead of every waiting job, in walk order
            st.stop_key = (st.q, 1, base + i)
        self._front = base


class DiscretizedGittins(_MLFQ):
    """Discretised 2D-Gittins: in a queue, highest Gittins index of the attained service
    first; ties by submit time, then arrival.  With ``K = 1`` and a quantum it is the
    continuous 2D-Gittins policy.  ``samples``: the job-size distribution (GPU-seconds, or
    seconds with ``gpu_age=False``); default Tiresias's ``yarn-gput1000.csv``."""

    name = "dgittins"

    def __init__(
        self,
        cfg: TiresiasConfig,
        samples: list[float] | None = None,
        *,
        gpu_age: bool = True,
        quantum_ms: float | None = None,
    ) -> None:
        super().__init__(cfg, gpu_age=gpu_age, quantum_ms=quantum_ms)
        dist = builtin_distribution() if samples is None else samples
        self.index = GittinsIndex(dist, cfg.gittins_delta_gpu_s, cfg.gittins_formula)

    def _key(self, job: JobView) -> Key:
        st = self._st[job.spec.job_id]
        g = self.index(self.service(job) / 1000.0)
        return (st.q, -g, job.spec.submit_ms, self._rank[job.spec.job_id])

    def _arrival_key(self, job: JobView, now: float) -> Key:
        return self._key(job)

    def _run_key(self, job: JobView, now: float) -> Key:
        return self._key(job)

    def _promoted_key(self, job: JobView, now: float) -> Key:
        return self._key(job)
