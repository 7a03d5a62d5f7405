"""What every elastic allocator shares: the read-only job view (:class:`JobState`), the
:class:`Allocator` protocol, dominant shares, :class:`AllocatorBase` (the failure switch,
the counts being built and the decision log), :class:`InTurn` (jobs in a fixed order, each
up to its caps) and the registry (:data:`ALLOCATORS`, :data:`ALIASES`), filled by
:func:`register_allocator` where each allocator class is defined.  The allocators themselves
and the lookups by name are in :mod:`envs.sim.elastic.allocators`."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, Self, TypeVar

from envs.sim.elastic.cluster import Demand, SlotCluster
from envs.sim.elastic.spec import ElasticJob, SpeedModel
from envs.sim.errors import ConfigError

__all__ = [
    "ALIASES",
    "ALLOCATORS",
    "Allocator",
    "AllocatorBase",
    "Decision",
    "InTurn",
    "JobState",
    "below_caps",
    "dominant_share",
    "index_jobs",
    "register_allocator",
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
        """Begin a slot: an empty decision log, ``jobs`` by id (a job given twice is a
        :class:`ConfigError`) and every job's counts ``[workers, ps]`` at 0."""
        self.last_decisions = []
        by_id = index_jobs(jobs)
        return by_id, {jid: [0, 0] for jid in by_id}

    def _bundle(self, job: JobState, counts: list[int], cluster: SlotCluster) -> bool:
        """Place one worker + PS bundle of ``job`` (least-loaded node), count and log it;
        ``False`` when it does not fit."""
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
        """The counts as :meth:`allocate`'s answer, ``job_id -> (workers, ps)``."""
        return {jid: (c[0], c[1]) for jid, c in counts.items()}

    def __repr__(self) -> str:
        return f"{type(self).__name__}(stop_at_first_failure={self.stop_at_first_failure})"


class InTurn(AllocatorBase):
    """Jobs in a fixed order (:meth:`order_key`, smallest first), each given worker + PS bundles up
    to its caps before the next job; a bundle that does not fit ends the job's turn (with
    ``stop_at_first_failure``: the slot).  A new in-turn allocator is a subclass with its own
    ``order_key`` (e.g. :class:`~envs.sim.elastic.allocators.FIFO`, or the toy teacher of
    ``tests/pretrain/test_toy_teacher.py``)."""

    def order_key(self, job: JobState) -> tuple[float, ...]:
        """The job's place in the order (ties must be broken, e.g. by arrival and job id)."""
        raise NotImplementedError

    def allocate(
        self,
        jobs: Sequence[JobState],
        cluster: SlotCluster,
        speed: SpeedModel,
        slot_s: float,
    ) -> dict[int, tuple[int, int]]:
        by_id, counts = self._start(jobs)
        for job in sorted(by_id.values(), key=self.order_key):
            c = counts[job.job_id]
            while below_caps(job, c):
                if not self._bundle(job, c, cluster):
                    if self.stop_at_first_failure:
                        return self._result(counts)
                    break
        return self._result(counts)


#: Every elastic allocator class by registry name, in the order registered (each by
#: :func:`register_allocator` where it is defined; complete once :mod:`envs.sim.elastic` is
#: imported).  The table of names is in :mod:`envs.sim.elastic.allocators`.
ALLOCATORS: dict[str, type[AllocatorBase]] = {}
#: Other accepted spellings, alias -> registry name (each declared by the class's
#: :func:`register_allocator`; kept for the configs and runs that use them).
ALIASES: dict[str, str] = {}

_NAME = re.compile(r"[a-z_][a-z0-9_-]*")
_Cls = TypeVar("_Cls", bound=type[AllocatorBase])


def register_allocator(name: str, *, aliases: Sequence[str] = ()) -> Callable[[_Cls], _Cls]:
    """Register the decorated allocator class under ``name`` (its ``name`` attribute is set to
    it) and the other spellings ``aliases``: lower-case letters, digits, ``_`` and ``-``
    (lookups are case-insensitive).  A name or alias registered twice is one
    :class:`ConfigError`.  Every consumer of an allocator name then builds it
    (:func:`~envs.sim.elastic.allocators.make_allocator`): ``evaluate.py``'s
    ``elastic:<name>``, the behaviour-cloning teacher, ``train.py``'s ``eval.baselines`` and
    ``env.backlog``."""
    names = (name, *aliases)
    bad = [n for n in names if not isinstance(n, str) or _NAME.fullmatch(n) is None]
    if bad:
        raise ConfigError(
            f"allocator names {bad}: lower-case letters, digits, '_' and '-' only "
            "(starting with a letter or '_')"
        )
    if len(set(names)) != len(names):
        raise ConfigError(f"allocator {name!r}: a name given twice in {list(names)}")

    def register(cls: _Cls) -> _Cls:
        taken = [n for n in names if n in ALLOCATORS or n in ALIASES]
        if taken:
            owners = sorted({ALLOCATORS[ALIASES.get(n, n)].__name__ for n in taken})
            raise ConfigError(
                f"allocator {cls.__name__}: names {taken} are registered twice "
                f"(already by {', '.join(owners)})"
            )
        cls.name = name
        ALLOCATORS[name] = cls
        for alias in aliases:
            ALIASES[alias] = name
        return cls

    return register
