"""DL² jobs as the contention engine's parameter-server jobs, and their uncontended speed.

**Units of work.**  One DL² *batch* is a reference per-worker batch: ``iterations_per_epoch``
of them make an epoch and one takes ``local_comp_time_s`` to compute.  A job keeps its
**global batch** fixed at ``G = global_batch_workers`` reference batches (DL² §3.1): with
``W`` workers each computes ``G / W`` batches per iteration, and every iteration advances the
job by ``G`` batches, whatever ``W`` is (:func:`engine_job`).

**Network.**  The engine has one ``b`` (ms/MB) for every NIC; each job type's own inter-node
bandwidth (``inter_bw_mb_s``) is kept by scaling its exchanged volume to
``model_size_mb * (1000 / inter_bw_mb_s) / b`` "equivalent MB" (x 2 with ``half_duplex``,
DL²'s accounting where a push and a pull share one link), so a job alone with every task on
its own node iterates in ``G/W * local_comp_time_s + t_inter``, exactly the analytical
model's ``t_inter = 2 (M/P) max(P, W) / inter_bw``.  At ``W = G`` without co-location the
contention model equals :class:`~envs.sim.elastic.speed.AnalyticalSpeed` for a job alone
(tested); it differs by co-location (a bundle's PS next to a worker: less traffic), other
jobs' traffic on shared NICs, DL²'s intra-node term (free here) and the global batch.
:class:`ContentionSpeed` is the uncontended, fully spread speed allocators plan with.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from envs.sim.elastic.spec import ElasticCluster, JobType
from envs.sim.errors import ConfigError
from envs.sim.policies.base import ClusterView
from envs.sim.spec import CommArch, JobSpec, ModelProfile, NetworkSpec
from envs.sim.stacks import make_stack

__all__ = [
    "ContentionConfig",
    "ContentionSpeed",
    "FixedPlacer",
    "devices_per_node",
    "engine_job",
    "solo_iteration_s",
]

#: reference per-worker batch in samples (only its ratio to the per-worker batch matters)
_REF_BATCH = 100


@dataclass(frozen=True)
class ContentionConfig:
    """How a slot is simulated in the contention engine (see the module docstring).

    - ``network``: the NICs' ``b`` and contention penalty ``η`` (ms/MB); default the
      Ada-SRSF constants (η / b = 0.27).
    - ``global_batch_workers`` (``G``): the fixed global batch in reference batches.
    - ``half_duplex``: count push and pull on one link (DL²'s accounting; x 2 volume).
    - ``comm``: the engine's communication scheduler (``"fs"`` fair share = no admission
      control, ``"srsf<n>"``, ``"adasrsf"``); ``order``: the engine's job order (priority of
      exchanges and of placement inside a slot).
    - ``min_steps_per_slot``: time compression (``None`` = every iteration simulated).
    - ``seed``: the engine's generator (RAND placement).
    - ``reuse_slots``: exact reuse of a simulated slot when the next slot's engine state is
      the same but for the iteration counts and no job can finish (module docstring).
    - ``measure_fraction``: steady-state window (an approximation; ``None`` = the whole slot):
      simulate the first ``f * slot_s`` and carry each job's mean rate to the slot end, unless
      a job finishes or may finish in the slot, or has not completed a step (then the rest of
      the slot is simulated too).
    """

    network: NetworkSpec = field(default_factory=NetworkSpec)
    global_batch_workers: int = 8
    half_duplex: bool = True
    comm: str = "fs"
    order: str = "srsf"
    min_steps_per_slot: int | None = 50
    seed: int = 0
    reuse_slots: bool = True
    measure_fraction: float | None = None

    def __post_init__(self) -> None:
        f = self.measure_fraction
        if f is not None and not (isinstance(f, int | float) and 0.0 < f <= 1.0):
            raise ConfigError(f"measure_fraction must be in (0, 1] or None, got {f!r}")
        if isinstance(self.global_batch_workers, bool) or self.global_batch_workers < 1:
            raise ConfigError(
                f"global_batch_workers must be an integer >= 1, got {self.global_batch_workers!r}"
            )
        if self.min_steps_per_slot is not None and self.min_steps_per_slot < 1:
            raise ConfigError(
                f"min_steps_per_slot must be >= 1 or None, got {self.min_steps_per_slot}"
            )
        make_stack(f"{self.order}:ff_{self.comm}")  # raises ConfigError naming a bad part


def _volume_scale(job_type: JobType, cfg: ContentionConfig) -> float:
    """Engine MB per real MB of ``job_type``'s exchange (its own bandwidth under one ``b``)."""
    scale = (1000.0 / job_type.inter_bw_mb_s) / cfg.network.b_ms_per_mb
    return 2.0 * scale if cfg.half_duplex else scale


def engine_job(
    job_id: int,
    job_type: JobType,
    workers: int,
    ps: int,
    iterations: int,
    cfg: ContentionConfig,
    *,
    submit_ms: float = 0.0,
    chunk: int = 1,
) -> JobSpec:
    """The engine's PS job for ``job_type`` at ``(workers, ps)``: per-worker batch
    ``G / workers`` reference batches (global batch fixed), compute ``local_comp_time_s``
    per reference batch (split 1/3 forward, 2/3 backward), exchanged volume scaled to the
    type's bandwidth; ``chunk`` iterations merged into one engine iteration."""
    if workers < 1 or ps < 1:
        raise ConfigError(f"an engine PS job needs >= 1 worker and >= 1 PS, got ({workers}, {ps})")
    if chunk < 1 or iterations < 1:
        raise ConfigError(f"chunk and iterations must be >= 1, got {chunk}, {iterations}")
    comp_ms = job_type.local_comp_time_s * 1000.0
    base = ModelProfile(
        name=job_type.model,
        model_size_mb=job_type.model_size_mb * _volume_scale(job_type, cfg),
        gpu_memory_mb=1.0,  # one worker per device (exclusive devices)
        batch_size=_REF_BATCH,
        forward_ms=comp_ms / 3.0,
        backward_ms=comp_ms * 2.0 / 3.0,
    )
    m = base.with_batch(_REF_BATCH * cfg.global_batch_workers / workers)
    if chunk > 1:
        m = ModelProfile(
            m.name,
            m.model_size_mb * chunk,
            m.gpu_memory_mb,
            m.batch_size,
            m.forward_ms * chunk,
            m.backward_ms * chunk,
        )
    return JobSpec(
        job_id=job_id,
        submit_ms=submit_ms,
        model=m,
        iterations=iterations,
        num_gpus=workers,
        comm=CommArch.PS,
        name=job_type.model,
        num_ps=ps,
    )


def solo_iteration_s(job_type: JobType, workers: int, ps: int, cfg: ContentionConfig) -> float:
    """Seconds per iteration of a job alone with every task on its own node."""
    compute = job_type.local_comp_time_s * cfg.global_batch_workers / workers
    volume = job_type.model_size_mb * _volume_scale(job_type, cfg) * max(ps, workers) / ps
    return compute + volume * cfg.network.b_ms_per_mb / 1000.0


class ContentionSpeed:
    """The contention model's uncontended speed (every task on its own node, no other job):
    ``G / solo_iteration_s`` reference batches per second; 0 without a worker or a PS."""

    name = "contention"

    def __init__(self, cfg: ContentionConfig | None = None) -> None:
        self.cfg = cfg or ContentionConfig()

    def speed(self, job_type: JobType, num_ps: int, num_workers: int) -> float:
        if num_ps < 0 or num_workers < 0:
            raise ConfigError(f"num_ps and num_workers must be >= 0, got ({num_ps}, {num_workers})")
        if num_ps == 0 or num_workers == 0:
            return 0.0
        g = self.cfg.global_batch_workers
        return g / solo_iteration_s(job_type, num_workers, num_ps, self.cfg)


class FixedPlacer:
    """A core :class:`~envs.sim.policies.base.Placer` that returns devices chosen beforehand
    (the allocator's nodes); ``None`` for a job it was not given."""

    name = "slot"
    comm_estimate_ms_per_mb: float | None = None
    reads_load = False
    randomised = False

    def __init__(self, devices: Mapping[int, list[int]]) -> None:
        self.devices = dict(devices)

    def place(
        self, job: JobSpec, cluster: ClusterView, rng: np.random.Generator
    ) -> list[int] | None:
        return self.devices.get(job.job_id)


def devices_per_node(cluster: ElasticCluster, types: Sequence[JobType]) -> int:
    """Most workers of any of ``types`` one node can hold (its engine devices)."""
    best = 1
    for t in types:
        fits = [cluster.cpu_slots // t.worker_cpu if t.worker_cpu else None]
        fits.append(cluster.gpu_slots // t.worker_gpu if t.worker_gpu else None)
        known = [f for f in fits if f is not None]
        best = max(best, min(known) if known else cluster.cpu_slots)
    return best
