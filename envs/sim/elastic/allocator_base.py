"""What every elastic allocator shares: the read-only job view (:class:`JobState`), the
:class:`Allocator` protocol, dominant shares and :class:`AllocatorBase` (the failure switch,
the counts being built and the decision log).  The allocators themselves and their registry
are in :mod:`envs.sim.elastic.allocators`."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, Self

from envs.sim.elastic.cluster import Demand, SlotCluster
from envs.sim.elastic.spec import ElasticJob, SpeedModel
from envs.sim.errors import ConfigError

__all__ = [
    "Allocator",
    "AllocatorBase",
    "Decision",
    "JobState",
    "below_caps",
    "dominant_share",
    "index_jobs",
]

Decision = tuple[int, str, int]  # (job_id, "worker" | "ps" | "bundle", node)


@dataclass(frozen=True)
class JobState:
    """Read-only view of an active job at the start of a slot.

    ``progress_epochs`` counts trained epochs (completion is at ``spec.real_num_epochs``);
    ``workers``/``ps`` is the job's allocation in the previous slot (``(0, 0)`` if it did not
    run then); ``slots_run`` the number of earlier slots in which it had any task.
    """

    spec: ElasticJob
    progress_epochs: float = 0.0
    workers: int = 0
    ps: int = 0
    slots_run: int = 0

    @classmethod
    def of(
        cls, spec: ElasticJob, progress_epochs: float, workers: int, ps: int, slots_run: int
    ) -> JobState:
        """``JobState(spec, progress_epochs, workers, ps, slots_run)`` without the frozen
        dataclass's per-field ``object.__setattr__`` calls (the simulator makes one view per
        job that ran, every slot; the fields are stored exactly as the constructor would)."""
        view = object.__new__(cls)
        view.__dict__.update(
            {
                "spec": spec,
                "progress_epochs": progress_epochs,
                "workers": workers,
                "ps": ps,
                "slots_run": slots_run,
            }
        )
        return view

    @property
    def job_id(self) -> int:
        return self.spec.job_id

    @property
    def arrival(self) -> int:
        return self.spec.arrival_slot

    @property
    def remaining_epochs(self) -> float:
        """Declared epochs left, ``max(num_epochs - progress, 0)`` (what schedulers see)."""
        return max(self.spec.num_epochs - self.progress_epochs, 0.0)

    @property
    def remaining_fraction(self) -> float:
        """DL²'s ``1 - progress / num_epochs``, clamped at 0."""
        return max(1.0 - self.progress_epochs / self.spec.num_epochs, 0.0)

    # cached: allocators ask for the demands once per task they place (the view is frozen)
    @functools.cached_property
    def worker_demand(self) -> Demand:
        return (self.spec.type.worker_cpu, self.spec.type.worker_gpu)

    @functools.cached_property
    def ps_demand(self) -> Demand:
        return (self.spec.type.ps_cpu, self.spec.type.ps_gpu)


class Allocator(Protocol):
    """Decides every active job's ``(workers, ps)`` for one slot, placing each task.

    An allocator is asked once per time slot, with the cluster empty, how many workers and
    parameter servers (PS) every active job gets in this slot.  It places every task through
    the :class:`~envs.sim.elastic.cluster.SlotCluster` while deciding (placement is part of the
    decision: a task that does not fit is not allocated), and returns ``job_id -> (workers,
    ps)`` for *every* job it was given (``(0, 0)`` for a job that gets nothing).  That dict is
    the per-job target pretraining imitates; ``last_decisions`` additionally lists the
    increments in the order they were made, ``(job_id, role, node)`` with role ``"worker"``,
    ``"ps"`` or ``"bundle"`` (a worker and a PS on one node).
    """

    name: str

    def allocate(
        self,
        jobs: Sequence[JobState],
        cluster: SlotCluster,
        speed: SpeedModel,
        slot_s: float,
    ) -> dict[int, tuple[int, int]]:
        """``job_id -> (workers, ps)`` for every job in ``jobs``; ``cluster`` starts empty and
        holds exactly these tasks afterwards."""
        ...


def dominant_share(job: JobState, workers: int, ps: int, cluster: SlotCluster) -> float:
    """``max_r (workers * w_r + ps * p_r) / cluster capacity_r`` over CPU and GPU (resources
    the cluster does not have are skipped)."""
    (wc, wg), (pc, pg) = job.worker_demand, job.ps_demand
    share = 0.0
    if cluster.total_cpu > 0:
        share = (workers * wc + ps * pc) / cluster.total_cpu
    if cluster.total_gpu > 0:
        gpu_share = (workers * wg + ps * pg) / cluster.total_gpu
        if gpu_share > share:  # max(share, gpu_share) without the builtin's call cost
            share = gpu_share
    return share


def index_jobs(jobs: Sequence[JobState]) -> dict[int, JobState]:
    by_id: dict[int, JobState] = {}
    for job in jobs:
        if job.job_id in by_id:
            raise ConfigError(f"job {job.job_id} given twice to an allocator")
        by_id[job.job_id] = job
    return by_id


def below_caps(job: JobState, counts: list[int]) -> bool:
    return counts[0] < job.spec.max_workers and counts[1] < job.spec.max_ps


class AllocatorBase:
    """Shared state: the failure switch, the counts being built and the decision log.

    The five heuristics (DRF, FIFO, SRTF, Tetris, Optimus) follow DL²'s reference code
    (pengyanghua/DL2 ``*_env.py``, as described in the team's reference notes ``dl2.md`` §9)
    with its flaws fixed by default; a switch reproduces each flaw (``Cls.reference()`` turns
    them all on; Tetris's ``reference_sign`` is documented at
    :class:`~envs.sim.elastic.allocators.Tetris`).

    ``stop_at_first_failure`` (every allocator; default ``False``): the reference ends the
    whole slot at the first placement that fails, even when other jobs' (smaller) tasks would
    still fit.  By default the job (or, for Optimus, the job's role) whose task did not fit is
    skipped for the rest of the slot and filling goes on with the others.  For Tetris, which
    fills node by node, the reference's failure rule is "give up on this node after its
    best-scoring job does not fit there"; by default the next-best job that fits is tried
    before moving on.  For FixedDemand ``True`` means strict FIFO (head-of-line blocking) and
    ``False`` backfilling.

    Ties are never broken by object identity (the reference's Python 2 fallback): every order
    is completed by arrival slot, then job id.  Without a switch (a documented difference):
    remaining work is clamped at 0 once a job has trained its *declared* epochs (possible when
    ``real_num_epochs > num_epochs``); and an Optimus job whose preferred role is at its cap is
    offered its other role instead of being dropped.

    Caps: a job never gets more than ``max_workers`` workers or ``max_ps`` PS; bundle
    allocators add a bundle only while both counts are below their caps.  Dominant shares are
    over the cluster's total capacity.
    """

    name: str = ""

    def __init__(self, *, stop_at_first_failure: bool = False) -> None:
        self.stop_at_first_failure = stop_at_first_failure
        self.last_decisions: list[Decision] = []

    def _start(self, jobs: Sequence[JobState]) -> tuple[dict[int, JobState], dict[int, list[int]]]:
        self.last_decisions = []
        by_id = index_jobs(jobs)
        return by_id, {jid: [0, 0] for jid in by_id}

    def _bundle(self, job: JobState, counts: list[int], cluster: SlotCluster) -> bool:
        node = cluster.place_bundle(job.worker_demand, job.ps_demand)
        if node is None:
            return False
        counts[0] += 1
        counts[1] += 1
        self.last_decisions.append((job.job_id, "bundle", node))
        return True

    def allocate(
        self,
        jobs: Sequence[JobState],
        cluster: SlotCluster,
        speed: SpeedModel,
        slot_s: float,
    ) -> dict[int, tuple[int, int]]:
        """See :class:`Allocator` (each subclass decides)."""
        raise NotImplementedError

    @classmethod
    def reference(cls) -> Self:
        """The allocator with every switch set to DL²'s reference behaviour."""
        return cls(stop_at_first_failure=True)

    @staticmethod
    def _result(counts: dict[int, list[int]]) -> dict[int, tuple[int, int]]:
        return {jid: (c[0], c[1]) for jid, c in counts.items()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(stop_at_first_failure={self.stop_at_first_failure})"
