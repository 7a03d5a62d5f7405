"""Fixed-demand (gang) allocators in the elastic world: :class:`FixedDemand` (each job its
requested workers, all or nothing), :class:`UniformDemand` (every job the same request), and
the named stacks built on them: ``bundle`` (:class:`OneBundleEach`, DL²'s ``ASSIGN_BUNDLE``),
``adasrsf`` (:class:`AdaSRSF`) and ``tiresias`` (:class:`TiresiasLAS`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from envs.sim.elastic import native_alloc
from envs.sim.elastic.allocator_base import AllocatorBase, Decision, JobState, register_allocator
from envs.sim.elastic.cluster import SlotCluster
from envs.sim.elastic.spec import SpeedModel
from envs.sim.errors import ConfigError

__all__ = [
    "DEFAULT_FIXED_WORKERS",
    "AdaSRSF",
    "FixedDemand",
    "OneBundleEach",
    "TiresiasLAS",
    "UniformDemand",
]

#: Default per-job demand of the fixed-demand stacks ``adasrsf`` and ``tiresias`` (workers;
#: PS as many, capped).
DEFAULT_FIXED_WORKERS = 4


@register_allocator("fixed")
class FixedDemand(AllocatorBase):
    """A fixed-demand (gang) scheduler in the elastic world.

    In arrival order (then id) each job gets exactly ``n = min(requested, max_workers)``
    workers and ``min(n, max_ps)`` PS, placed as bundles (a worker and a PS on one node;
    workers beyond the PS cap alone), all or nothing: if any task does not fit, the job's
    tasks are released and it gets ``(0, 0)`` this slot.  ``requested`` maps job id to
    workers; a job not in it requests ``max_workers``.  This is how fixed-demand stacks such
    as Ada-SRSF enter the elastic world.  ``stop_at_first_failure``: strict FIFO (nothing
    after the first job that does not fit); default: backfill with later jobs that fit.
    """

    #: Job orders: ``"fifo"`` arrival (then id); ``"srsf"`` least remaining service first
    #: (remaining declared epochs x requested workers, ties by arrival, id; Ada-SRSF's order);
    #: ``"las"`` least attained service first (slots run x requested workers = GPU-slots
    #: attained under a fixed demand, ties by arrival, id; Tiresias's 2D-LAS, undiscretised).
    ORDERS = ("fifo", "srsf", "las")

    def __init__(
        self,
        requested: Mapping[int, int] | None = None,
        *,
        stop_at_first_failure: bool = False,
        order: str = "fifo",
    ) -> None:
        super().__init__(stop_at_first_failure=stop_at_first_failure)
        if order not in self.ORDERS:
            raise ConfigError(f"FixedDemand: unknown order {order!r}; known: {self.ORDERS}")
        self.order = order
        self.requested = dict(requested or {})
        for jid, n in self.requested.items():
            if int(n) != n or n < 1:
                raise ConfigError(f"FixedDemand: job {jid} requests {n} workers; needs >= 1")

    def __repr__(self) -> str:
        return (
            f"FixedDemand({len(self.requested)} requests, order={self.order!r}, "
            f"stop_at_first_failure={self.stop_at_first_failure})"
        )

    def _demand(self, job: JobState) -> int:
        return min(self.requested.get(job.job_id, job.spec.max_workers), job.spec.max_workers)

    def _key(self, job: JobState) -> tuple[float, int, int]:
        if self.order == "srsf":
            return (job.remaining_epochs * self._demand(job), job.arrival, job.job_id)
        if self.order == "las":
            return (float(job.slots_run * self._demand(job)), job.arrival, job.job_id)
        return (0.0, job.arrival, job.job_id)

    def _native_params(self) -> tuple[bool, int, int] | None:
        """``(stop_at_first_failure, order code, workers)`` for the native slot (workers -1:
        each job its ``max_workers``), or ``None`` where it does not apply (per-job requests,
        a subclass of another demand)."""
        order = self.ORDERS.index(self.order)
        if type(self) is FixedDemand:
            return None if self.requested else (self.stop_at_first_failure, order, -1)
        if type(self) in _UNIFORM:
            return (self.stop_at_first_failure, order, self.workers)  # type: ignore[attr-defined]
        return None

    def allocate(
        self,
        jobs: Sequence[JobState],
        cluster: SlotCluster,
        speed: SpeedModel,
        slot_s: float,
    ) -> dict[int, tuple[int, int]]:
        native = self._native_params()
        if native is not None:  # the native slot, where built (envs.sim.elastic.native_alloc)
            out = native_alloc.allocate(
                self, native_alloc.KIND_FIXED, native, jobs, cluster, speed, slot_s
            )
            if out is not None:
                return out
        by_id, counts = self._start(jobs)
        for job in sorted(by_id.values(), key=self._key):
            n = self._demand(job)
            n_ps = min(n, job.spec.max_ps)
            done: list[Decision] = []
            ok = True
            for k in range(n):
                if k < n_ps:
                    node = cluster.place_bundle(job.worker_demand, job.ps_demand)
                    role = "bundle"
                else:
                    node = cluster.place_least_loaded(*job.worker_demand)
                    role = "worker"
                if node is None:
                    ok = False
                    break
                done.append((job.job_id, role, node))
            if ok:
                counts[job.job_id] = [n, n_ps]
                self.last_decisions.extend(done)
                continue
            for _, role, node in done:  # all or nothing
                cluster.release(*job.worker_demand, node)
                if role == "bundle":
                    cluster.release(*job.ps_demand, node)
            if self.stop_at_first_failure:
                break
        return self._result(counts)


class UniformDemand(FixedDemand):
    """:class:`FixedDemand` where every job asks for the same ``workers`` (capped per job)."""

    def __init__(
        self, workers: int, *, order: str = "srsf", stop_at_first_failure: bool = False
    ) -> None:
        if int(workers) != workers or workers < 1:
            raise ConfigError(f"fixed-demand teacher: workers must be an int >= 1, got {workers}")
        super().__init__(order=order, stop_at_first_failure=stop_at_first_failure)
        self.workers = int(workers)

    def _demand(self, job: JobState) -> int:
        return min(self.workers, job.spec.max_workers)

    def __repr__(self) -> str:
        return f"UniformDemand(workers={self.workers}, order={self.order!r})"


@register_allocator("bundle")
class OneBundleEach(UniformDemand):
    """Every job one worker and one PS on one node (DL²'s ``ASSIGN_BUNDLE``), in arrival
    order (then id), while bundles fit (a job whose bundle does not fit gets nothing; later
    ones are still tried).  Used for the jobs beyond the env's window (``env.backlog``)."""

    def __init__(self, *, stop_at_first_failure: bool = False) -> None:
        super().__init__(1, order="fifo", stop_at_first_failure=stop_at_first_failure)

    def __repr__(self) -> str:
        return f"OneBundleEach(stop_at_first_failure={self.stop_at_first_failure})"


@register_allocator("adasrsf", aliases=("ada_srsf", "ada-srsf"))
class AdaSRSF(UniformDemand):
    """The fixed-demand Ada-SRSF stack in the elastic world: every job asks for ``workers``
    workers (and as many PS, bundled), all or nothing, least remaining service first
    (remaining declared epochs x demand: the SRSF order of the contention stacks).  The
    core's LWF placement and AdaDUAL have no counterpart in the slot world (one placement
    rule, no NIC model)."""

    def __init__(
        self, workers: int = DEFAULT_FIXED_WORKERS, *, stop_at_first_failure: bool = False
    ) -> None:
        super().__init__(workers, order="srsf", stop_at_first_failure=stop_at_first_failure)


@register_allocator("tiresias")
class TiresiasLAS(UniformDemand):
    """The fixed-demand Tiresias stack in the elastic world: the same demand as
    :class:`AdaSRSF`, least attained service first (2D-LAS on GPU-slots attained,
    undiscretised)."""

    def __init__(
        self, workers: int = DEFAULT_FIXED_WORKERS, *, stop_at_first_failure: bool = False
    ) -> None:
        super().__init__(workers, order="las", stop_at_first_failure=stop_at_first_failure)


#: the uniform-demand classes whose slot the native allocator runs (subclasses with their own
#: ``_demand`` or ``_key`` run in Python)
_UNIFORM = (UniformDemand, OneBundleEach, AdaSRSF, TiresiasLAS)
