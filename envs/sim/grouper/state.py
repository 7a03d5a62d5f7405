"""Array views of a cojob workload and the read-only snapshot policies see.

Jobs are indexed ``0..J-1`` in workload order (cojob by cojob); stages are 0-based inside the
arrays and 1-based in records and messages.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from envs.sim.grouper.spec import CojobWorkload


class JobStatus(IntEnum):
    """Where a job is: not yet arrived, moving data, waiting at its cojob's stage barrier, done."""

    PENDING = 0
    RUNNING = 1
    WAITING = 2
    DONE = 3


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@dataclass(frozen=True)
class WorkloadArrays:
    """Static per-job arrays of a :class:`CojobWorkload` (all read-only).

    ``plan[j, k]`` is the cumulative iteration count at the end of stage ``k`` (padded with the
    last value); ``flows[j, p]`` the job's flows through port ``p`` per iteration;
    ``demand[j, p] = flows[j, p] * flow_mb[j]`` its MB per iteration on ``p``.
    """

    workload: CojobWorkload
    cojob: np.ndarray  # (J,) cojob index 0..G-1
    arrival_ms: np.ndarray  # (G,)
    plan: np.ndarray  # (J, K) int
    plan_len: np.ndarray  # (J,)
    max_stage: np.ndarray  # (J,) 1-based
    flow_mb: np.ndarray  # (J,)
    compute_ms: np.ndarray  # (J,)
    flows: np.ndarray  # (J, P)
    demand: np.ndarray  # (J, P)
    capacity: np.ndarray  # (P,)
    members: np.ndarray  # (G, J) bool

    @classmethod
    def build(cls, w: CojobWorkload) -> WorkloadArrays:
        jobs = w.jobs
        n_k = max(len(j.stage_plan) for j in jobs)
        plan = np.array(
            [j.stage_plan + (j.stage_plan[-1],) * (n_k - len(j.stage_plan)) for j in jobs]
        )
        cojob = np.array([g for g, c in enumerate(w.cojobs) for _ in c.jobs])
        flows = np.array([j.port_flows(w.num_hosts) for j in jobs])
        flow_mb = np.array([j.flow_mb for j in jobs])
        members = cojob[None, :] == np.arange(len(w.cojobs))[:, None]
        arrays = cls(
            workload=w,
            cojob=cojob,
            arrival_ms=np.array([c.arrival_ms for c in w.cojobs], dtype=float),
            plan=plan,
            plan_len=np.array([len(j.stage_plan) for j in jobs]),
            max_stage=np.array([j.max_stage for j in jobs]),
            flow_mb=flow_mb,
            compute_ms=np.array([j.compute_ms for j in jobs], dtype=float),
            flows=flows,
            demand=flows * flow_mb[:, None],
            capacity=np.full(w.num_ports, float(w.link_mb_per_ms)),
            members=members,
        )
        for a in vars(arrays).values():
            if isinstance(a, np.ndarray):
                _frozen(a)
        return arrays

    @property
    def num_jobs(self) -> int:
        return int(self.cojob.shape[0])

    def stage_iterations(self) -> np.ndarray:
        """``(J, K)`` iterations inside each stage (``plan[k] - plan[k-1]``)."""
        prev = np.concatenate(
            [np.zeros((self.num_jobs, 1), dtype=self.plan.dtype), self.plan[:, :-1]], axis=1
        )
        return self.plan - prev

    def alone_iteration_ms(self) -> np.ndarray:
        """``(J,)`` time of one iteration with the network to itself: compute plus the most
        loaded port's bytes at full capacity (every flow of a port shares it equally)."""
        return self.compute_ms + (self.demand / self.capacity[None, :]).max(axis=1)


@dataclass(frozen=True)
class CojobSnapshot:
    """What a communication policy may read at one decision time (arrays are read-only).

    ``running`` lists the jobs that move data now (status RUNNING), in job order; a policy
    returns one priority key per entry. ``done`` is iterations completed, ``stage`` the 0-based
    stage each job is in (for a WAITING job: the stage it finished), ``stage_start_ms`` when that
    stage started for the job.
    """

    now: float
    arrays: WorkloadArrays
    running: np.ndarray
    live: np.ndarray  # arrived and not DONE, bool (J,)
    status: np.ndarray
    done: np.ndarray
    stage: np.ndarray
    stage_start_ms: np.ndarray
