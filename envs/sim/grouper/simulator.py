"""Event-driven fluid simulation of cojobs on a big-switch network.

Between two events every running job moves at a constant iteration rate (its per-flow level
from :func:`~envs.sim.grouper.network.allocate` divided by its flow size), so the next event is
computed in closed form: the earliest of a cojob arrival, a job reaching the end of its current
stage, and a policy wake-up. At each event, in this order: jobs that reach a stage end record it
(and stop after their ``max_stage``); cojobs arrive; cojob stages whose every participating job
has finished complete, and with the stage barrier (default) their surviving jobs start the next
stage; then the policy is asked for keys and rates are reallocated.

Iteration boundaries are not events: with no compute time between iterations a job's next
iteration has the same flows, so the rates would not change. With ``compute_ms > 0`` a job's
time-averaged rate is capped at its rate alone (iteration = compute + transfer at full speed),
a fluid approximation that lets other jobs use the port while it computes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from envs.sim.errors import ConfigError
from envs.sim.grouper.network import allocate, check_allocation, port_queues
from envs.sim.grouper.policies import CommPolicy, FairShare, make_policy
from envs.sim.grouper.results import CojobJobRecord, CojobStageRecord, GrouperResult
from envs.sim.grouper.spec import Cojob, CojobWorkload
from envs.sim.grouper.state import CojobSnapshot, JobStatus, WorkloadArrays


@dataclass(frozen=True)
class GrouperConfig:
    """Run options.

    Attributes:
        num_queues: priority queues ``q`` per port (>= 1); ``None`` = one per rank (unlimited).
        barrier: a cojob's surviving jobs start stage ``k+1`` only when the cojob's stage ``k``
            is complete (successive halving needs every result); ``False`` lets each job go on
            at once, as the upstream simulator does.
        slowdown: also run each cojob alone (FS) to report stage slowdowns.
        check_invariants: check every rate allocation (capacity, work conservation, priority).
        max_events: stop with an error after this many event times.
    """

    num_queues: int | None = None
    barrier: bool = True
    slowdown: bool = True
    check_invariants: bool = False
    max_events: int = 10_000_000

    def __post_init__(self) -> None:
        q = self.num_queues
        if q is not None and (isinstance(q, bool) or not isinstance(q, int) or q < 1):
            raise ConfigError(f"num_queues must be an integer >= 1 or None, got {q!r}")
        if self.max_events < 1:
            raise ConfigError(f"max_events must be >= 1, got {self.max_events}")


class CojobSimulator:
    """Run one workload under one policy; :meth:`run` returns a :class:`GrouperResult`."""

    def __init__(
        self,
        workload: CojobWorkload,
        policy: CommPolicy | str,
        config: GrouperConfig | None = None,
    ) -> None:
        self.workload = workload
        self.policy = make_policy(policy) if isinstance(policy, str) else policy
        self.config = config or GrouperConfig()
        self.arrays = WorkloadArrays.build(workload)

    def run(self) -> GrouperResult:
        a, cfg = self.arrays, self.config
        self.policy.reset()
        n_j, n_k = a.plan.shape
        n_g = a.members.shape[0]
        status = np.full(n_j, JobStatus.PENDING, dtype=np.int64)
        done = np.zeros(n_j)
        stage = np.zeros(n_j, dtype=np.int64)
        stage_start = np.zeros(n_j)
        stage_finish = np.full((n_j, n_k), np.nan)
        finish = np.full(n_j, np.nan)
        cojob_done = np.full((n_g, n_k), np.nan)
        cojob_cur = np.zeros(n_g, dtype=np.int64)
        n_stages = np.array([c.num_stages for c in self.workload.cojobs])
        arrival_order = np.argsort(a.arrival_ms, kind="stable")
        alone = a.alone_iteration_ms()
        with np.errstate(divide="ignore"):  # network-free jobs without compute: no cap
            caps = np.where(a.compute_ms > 0, a.flow_mb / alone, np.inf)
        next_arrival = 0
        finishing = np.zeros(0, dtype=np.int64)
        t = float(a.arrival_ms[arrival_order[0]])
        events = 0
        while True:
            events += 1
            if events > cfg.max_events:
                raise RuntimeError(f"cojob simulation exceeded max_events={cfg.max_events}")
            touched: set[int] = set()
            for j in finishing:
                k = int(stage[j])
                stage_finish[j, k] = t
                done[j] = a.plan[j, k]
                touched.add(int(a.cojob[j]))
                if k + 1 == a.max_stage[j]:
                    status[j], finish[j] = JobStatus.DONE, t
                elif cfg.barrier:
                    status[j] = JobStatus.WAITING
                else:
                    stage[j], stage_start[j] = k + 1, t
            while next_arrival < n_g and a.arrival_ms[arrival_order[next_arrival]] <= t:
                g = int(arrival_order[next_arrival])
                status[a.members[g]] = JobStatus.RUNNING
                stage_start[a.members[g]] = t
                next_arrival += 1
            for g in sorted(touched):
                while cojob_cur[g] < n_stages[g]:
                    k = int(cojob_cur[g])
                    part = a.members[g] & (a.max_stage > k)
                    if np.isnan(stage_finish[part, k]).any():
                        break
                    cojob_done[g, k] = stage_finish[part, k].max()  # t, with the barrier
                    cojob_cur[g] = k + 1
                    if cfg.barrier:
                        go = a.members[g] & (status == JobStatus.WAITING)
                        stage[go], stage_start[go], status[go] = k + 1, t, JobStatus.RUNNING
            if next_arrival == n_g and (status == JobStatus.DONE).all():
                break
            running = np.flatnonzero(status == JobStatus.RUNNING)
            x = self._rates(t, running, status, done, stage, stage_start, caps)
            rem = a.plan[running, stage[running]] - done[running]
            with np.errstate(divide="ignore", invalid="ignore"):
                t_fin = np.where(x > 0, rem / x, np.inf)
            t_fin[np.isinf(x)] = 0.0
            t_next = t + (float(t_fin.min()) if len(t_fin) else np.inf)
            if next_arrival < n_g:
                t_next = min(t_next, float(a.arrival_ms[arrival_order[next_arrival]]))
            wake = self.policy.next_wakeup(t)
            if wake is not None and wake > t:
                t_next = min(t_next, wake)
            if not np.isfinite(t_next):
                stuck = [int(j) for j in np.flatnonzero(status != JobStatus.DONE)][:10]
                raise RuntimeError(f"cojob simulation stuck at t={t} ms; unfinished jobs {stuck}")
            dt = t_next - t
            tol = 1e-9 * max(1.0, abs(t_next))
            finishing = running[t_fin <= dt + tol]
            finite = np.isfinite(x)
            done[running[finite]] += x[finite] * dt
            t = t_next
        return self._result(status, finish, stage_finish, cojob_done, n_stages, events)

    def _rates(
        self,
        t: float,
        running: np.ndarray,
        status: np.ndarray,
        done: np.ndarray,
        stage: np.ndarray,
        stage_start: np.ndarray,
        caps: np.ndarray,
    ) -> np.ndarray:
        """Iterations per ms of each running job."""
        a = self.arrays
        if len(running) == 0:
            return np.zeros(0)
        live = (status == JobStatus.RUNNING) | (status == JobStatus.WAITING)
        snap = CojobSnapshot(
            now=t,
            arrays=a,
            running=_ro(running),
            live=_ro(live),
            status=_ro(status.copy()),
            done=_ro(done.copy()),
            stage=_ro(stage.copy()),
            stage_start_ms=_ro(stage_start.copy()),
        )
        keys = np.asarray(self.policy.keys(snap), dtype=float)
        if keys.shape != running.shape:
            raise RuntimeError(
                f"policy {self.policy.name!r} returned {keys.shape} keys for {len(running)} jobs"
            )
        weights = a.flows[running]
        queues = port_queues(keys, weights > 0, self.config.num_queues)
        level = allocate(weights, queues, a.capacity, caps[running])
        if self.config.check_invariants:
            check_allocation(level, weights, queues, a.capacity, caps[running])
        return level / a.flow_mb[running]

    def _result(
        self,
        status: np.ndarray,
        finish: np.ndarray,
        stage_finish: np.ndarray,
        cojob_done: np.ndarray,
        n_stages: np.ndarray,
        events: int,
    ) -> GrouperResult:
        w, a = self.workload, self.arrays
        alone = alone_scts(w, self.config.barrier) if self.config.slowdown else {}
        jobs = []
        for idx, job in enumerate(w.jobs):
            g = int(a.cojob[idx])
            jobs.append(
                CojobJobRecord(
                    job_id=job.job_id,
                    cojob_id=w.cojobs[g].cojob_id,
                    arrival_ms=float(a.arrival_ms[g]),
                    finish_ms=float(finish[idx]),
                    max_stage=job.max_stage,
                    stage_finish_ms=tuple(float(x) for x in stage_finish[idx, : job.max_stage]),
                )
            )
        stages = [
            CojobStageRecord(
                cojob_id=c.cojob_id,
                stage=k + 1,
                arrival_ms=c.arrival_ms,
                complete_ms=float(cojob_done[g, k]),
                alone_sct_ms=alone.get((c.cojob_id, k + 1)),
            )
            for g, c in enumerate(w.cojobs)
            for k in range(int(n_stages[g]))
        ]
        return GrouperResult(
            policy=self.policy.name,
            workload=w.name,
            num_queues=self.config.num_queues,
            barrier=self.config.barrier,
            jobs=tuple(jobs),
            stages=tuple(stages),
            events=events,
        )


def _ro(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@functools.lru_cache(maxsize=8)
def alone_scts(workload: CojobWorkload, barrier: bool = True) -> dict[tuple[int, int], float]:
    """``{(cojob_id, stage): SCT ms}`` of every cojob run alone on the cluster under FS."""
    out: dict[tuple[int, int], float] = {}
    cfg = GrouperConfig(barrier=barrier, slowdown=False)
    for c in workload.cojobs:
        solo = CojobWorkload(
            (Cojob(c.cojob_id, 0.0, c.jobs),), workload.num_hosts, workload.link_mb_per_ms
        )
        res = CojobSimulator(solo, FairShare(), cfg).run()
        out.update(res.stage_times())
    return out


def simulate_cojobs(
    workload: CojobWorkload,
    policy: CommPolicy | str,
    config: GrouperConfig | None = None,
) -> GrouperResult:
    """Run ``workload`` under ``policy`` (an instance or a :data:`POLICIES` name)."""
    return CojobSimulator(workload, policy, config).run()
