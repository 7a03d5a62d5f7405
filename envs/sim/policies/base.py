"""The small protocols every scheduling policy implements.

Policies see the simulator through narrow, read-only views (:class:`JobView`,
:class:`ClusterView`, :class:`NetView`) and never own the event loop.  Each implementation
is a class in its own module; :mod:`envs.sim.stacks` is the one registry that maps config
names to classes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from envs.sim.spec import ClusterSpec, JobSpec, NetworkSpec


class JobView(Protocol):
    """What a policy may read about a job (the engine's ``Job`` satisfies this)."""

    @property
    def spec(self) -> JobSpec: ...

    @property
    def remaining_compute_ms(self) -> float:
        """GPU-ms of forward/backward work left, summed over the job's workers."""
        ...

    @property
    def iterations_done(self) -> int: ...

    @property
    def placed_order(self) -> int:
        """Rank of the job in placement order (-1 while queued)."""
        ...

    @property
    def servers(self) -> Sequence[int]:
        """Distinct servers of the job, in the order of its GPUs."""
        ...

    @property
    def executed_ms(self) -> float:
        """Time the job has run on its GPUs, ms, summed over all its runs; a restore after a
        preemption is not counted (it is no service).  Brought up to date before every
        :meth:`PreemptiveOrder.plan`."""
        ...


class CommTaskView(Protocol):
    """A running all-reduce."""

    @property
    def job(self) -> JobView: ...

    @property
    def size_mb(self) -> float: ...


class ClusterView(Protocol):
    """Per-GPU state a placer may read; GPUs are numbered server-major."""

    @property
    def spec(self) -> ClusterSpec: ...

    @property
    def free_mem_mb(self) -> Sequence[float]: ...

    @property
    def load_ms(self) -> Sequence[float]:
        """LWF "makespan" per GPU: remaining compute plus communication estimate, ms."""
        ...

    @property
    def residents(self) -> Sequence[Sequence[tuple[Any, int]]]:
        """Per GPU, the ``(job, worker)`` pairs placed on it; a job's ``multi`` says whether
        it spans servers (its GPUs idle while it communicates)."""
        ...


class NetView(Protocol):
    """Per-server communication state a communication scheduler may read.

    Contract: a scheduler's answer for a job may depend only on the tasks running on the
    job's own servers and on their remaining sizes (which only shrink); the engine asks a
    waiting job again only when a task starts or ends on one of its servers.
    """

    @property
    def network(self) -> NetworkSpec: ...

    @property
    def nic_tasks(self) -> Sequence[Sequence[CommTaskView]]: ...

    def remaining_mb(self, task: CommTaskView) -> float:
        """Bytes (MB) the running task still has to move, as of now."""
        ...


class JobOrder(Protocol):
    """Orders jobs: the placement queue, a GPU's choice among its jobs, comm admission.

    ``priority`` returns a key, lower runs first; ties keep placement (or arrival) order.
    An order may set ``static_queue_key = True`` to declare that a queued job's key never
    changes while it waits (the engine then keys it once, on arrival, and can index the
    queue; SRSF and FIFO do).
    """

    name: str

    def priority(self, job: JobView) -> float: ...


class PreemptiveOrder(Protocol):
    """A job order that may preempt: it decides which jobs hold GPUs, running ones included.

    The engine tells it about arrivals (``add``), completions (``remove``) and the jobs that
    actually start or resume (``on_start``) or are evicted (``on_stop``).  At each decision
    point (an arrival, a completion, a preempted job reaching its iteration boundary, or the
    time returned by ``next_wakeup``) it calls ``plan``, which returns the jobs that should
    hold GPUs, in priority order; running jobs left out are preempted, the others are placed
    in that order (a job the placer cannot place stays pending).  Preempted jobs release their
    GPUs at their next iteration boundary and pay ``SimConfig.model.preemption_cost_ms`` on resume.
    """

    name: str
    #: always ``True``: tells the engine to run the preemptive scheduling pass
    preemptive: bool

    def priority(self, job: JobView) -> float:
        """Key among *running* jobs (GPU time-sharing, communication admission)."""
        ...

    def add(self, job: JobView, now: float) -> None: ...

    def remove(self, job: JobView, now: float) -> None: ...

    def on_start(self, job: JobView, now: float) -> None: ...

    def on_stop(self, job: JobView, now: float) -> None: ...

    def plan(self, now: float, num_gpus: int) -> list[JobView]:
        """Jobs that should hold GPUs now, highest priority first (at most ``num_gpus``
        GPUs in all)."""
        ...

    def next_wakeup(self, now: float) -> float:
        """Earliest time ``plan`` may answer differently without any other event (a demotion
        or promotion, a quantum); ``math.inf`` if none."""
        ...


class Placer(Protocol):
    """Chooses ``job.num_gpus`` distinct GPUs with enough free memory, or ``None``."""

    name: str
    #: ms per MB charged to a multi-server job's GPUs in the load estimate, ``None`` = the
    #: network's own ``b``.  Only load-aware placers read the load.
    comm_estimate_ms_per_mb: float | None
    #: whether ``place`` reads ``cluster.load_ms`` (the engine then brings it up to date)
    reads_load: bool
    #: whether ``place`` draws from the run's generator (its result is then not a function of
    #: the cluster state: callers that reuse earlier results must not, e.g. the elastic
    #: slot engine's exact slot reuse)
    randomised: bool

    def place(
        self, job: JobSpec, cluster: ClusterView, rng: np.random.Generator
    ) -> list[int] | None: ...


class FitIndexedPlacer(Placer, Protocol):
    """A placer that also says, without placing, whether a job can be placed now.

    The engine then keeps the non-preemptive placement queue in one sorted list per
    (per-GPU memory, GPU count) class and calls ``place`` only for jobs that fit, so an
    admission pass costs ``O(classes)`` per placement instead of one ``place`` call per queued
    job (see ``Simulator._allocate_indexed``).  Contract, for results identical to calling
    ``place`` on every queued job in order:

    - ``fits(job, cluster)`` is exactly whether ``place`` would return GPUs now; it has no
      side effects and depends only on ``job.num_gpus``, ``job.model.gpu_memory_mb`` and
      ``cluster.free_mem_mb``, monotonically (more free memory on every GPU never turns a
      fit into a refusal);
    - a ``place`` call that returns ``None`` changes the placer's state only if
      ``refusal_changes_state(job)``, and then exactly as ``refuse(cluster)`` does, for every
      such job alike; ``refuse`` is idempotent while the cluster does not change (the engine
      calls it once for a run of refusals with no placement in between).
    """

    def fits(self, job: JobSpec, cluster: ClusterView) -> bool: ...

    def refusal_changes_state(self, job: JobSpec) -> bool: ...

    def refuse(self, cluster: ClusterView) -> None: ...


class CommScheduler(Protocol):
    """Decides whether a ready all-reduce may start now (it is asked again on every change)."""

    name: str
    #: ``False`` if a task *starting* on a server can never turn this scheduler's "wait" into
    #: "start" (then a waiting job is asked again only when a task ends on one of its servers)
    reask_on_start: bool

    def admit(self, job: JobView, net: NetView) -> bool: ...


class BlockingCommScheduler(CommScheduler, Protocol):
    """A communication scheduler that can say what keeps a refused job waiting.

    ``blocker(job, net)``, asked right after ``admit(job, net)`` returned ``False``: a pair
    ``(server, k)`` such that ``admit`` keeps answering ``False``, without side effects (no
    ``remaining_mb`` probe), as long as that server of the job carries at least ``k`` tasks;
    ``None`` if there is none.  The engine then asks the job again only once a task end has
    left fewer than ``k`` tasks there, instead of after every change on its servers (outside
    the reference's probe mode, which walks every waiting job anyway)."""

    def blocker(self, job: JobView, net: NetView) -> tuple[int, int] | None: ...


def eligible_gpus(job: JobSpec, cluster: ClusterView) -> list[int]:
    """GPUs (index order) whose free memory can hold one of ``job``'s workers."""
    need = job.model.gpu_memory_mb
    return [g for g, free in enumerate(cluster.free_mem_mb) if free >= need]


def count_eligible(job: JobSpec, cluster: ClusterView) -> int:
    """Number of GPUs whose free memory can hold one of ``job``'s workers."""
    need = job.model.gpu_memory_mb
    return sum(1 for free in cluster.free_mem_mb if free >= need)
