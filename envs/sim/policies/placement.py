"""Placement policies: RAND, FF (first fit), LS (list scheduling) and LWF-κ.

All are all-or-nothing over ``num_gpus`` distinct GPUs and only take GPUs with enough free
memory for one worker (GPUs are time-shared, Ada-SRSF §III).
"""

from __future__ import annotations

import numpy as np

from envs.sim.errors import ConfigError
from envs.sim.policies.base import ClusterView, eligible_gpus
from envs.sim.spec import JobSpec


class RandomPlacer:
    """RAND: ``num_gpus`` GPUs drawn uniformly from those with room (seeded generator)."""

    name = "rand"
    comm_estimate_ms_per_mb: float | None = None
    reads_load = False

    def place(
        self, job: JobSpec, cluster: ClusterView, rng: np.random.Generator
    ) -> list[int] | None:
        avail = eligible_gpus(job, cluster)
        if len(avail) < job.num_gpus:
            return None
        # Python-2 ``random.shuffle`` semantics on the generator's doubles, so that a
        # generator seeded like the reference's ``random.seed(0)`` reproduces its draws.
        for i in range(len(avail) - 1, 0, -1):
            j = int(rng.random() * (i + 1))
            avail[i], avail[j] = avail[j], avail[i]
        return avail[: job.num_gpus] if len(avail) >= job.num_gpus else None


class FirstFit:
    """FF: the first ``num_gpus`` GPUs with room, in (server, GPU) index order."""

    name = "ff"
    comm_estimate_ms_per_mb: float | None = None
    reads_load = False

    def place(
        self, job: JobSpec, cluster: ClusterView, rng: np.random.Generator
    ) -> list[int] | None:
        avail = eligible_gpus(job, cluster)
        return avail[: job.num_gpus] if len(avail) >= job.num_gpus else None


class LWF:
    """LWF-κ (Ada-SRSF Algorithm 1): least workload first, consolidated above κ GPUs.

    A GPU's workload is the remaining compute of the jobs assigned to it plus, for jobs that
    span servers, an estimate of their communication (``comm_estimate_ms_per_mb`` x model
    size x iterations; ``None`` uses the network's own ``b``).
    - ``num_gpus <= κ``: the ``num_gpus`` GPUs with least workload (ties: lower server, then
      lower GPU index).
    - ``num_gpus > κ``: servers sorted by mean GPU workload (a *stable* sort of a persistent
      server order, as the reference does in place), then each server's GPUs with room by
      workload; take the first ``num_gpus`` of that concatenation.  This packs the job onto
      the fewest least-loaded servers.
    LS (list scheduling) is LWF with κ at least the job size: least-loaded GPUs for every job.
    """

    comm_estimate_ms_per_mb: float | None
    reads_load = True

    def __init__(self, kappa: int, comm_estimate_ms_per_mb: float | None = None) -> None:
        if kappa < 1:
            raise ConfigError(f"LWF-κ needs κ >= 1, got {kappa}")
        self.kappa = kappa
        self.name = f"lwf{kappa}"
        self.comm_estimate_ms_per_mb = comm_estimate_ms_per_mb
        self._server_order: list[int] | None = None

    def place(
        self, job: JobSpec, cluster: ClusterView, rng: np.random.Generator
    ) -> list[int] | None:
        need = job.model.gpu_memory_mb
        free, load = cluster.free_mem_mb, cluster.load_ms
        n = job.num_gpus
        if n <= self.kappa:
            avail = [g for g, f in enumerate(free) if f >= need]
            if len(avail) < n:
                return None
            # GPU index order already breaks ties by (server, GPU); sort is stable.
            avail.sort(key=load.__getitem__)
            return avail[:n]
        per = cluster.spec.gpus_per_server
        if self._server_order is None:
            self._server_order = list(range(cluster.spec.num_servers))
        self._server_order.sort(key=lambda s: sum(load[s * per : (s + 1) * per]) / per)
        chosen: list[int] = []
        for s in self._server_order:
            gpus = [g for g in range(s * per, (s + 1) * per) if free[g] >= need]
            gpus.sort(key=load.__getitem__)
            chosen.extend(gpus)
            if len(chosen) >= n:
                return chosen[:n]
        return None


class ListScheduling(LWF):
    """LS: least-loaded GPUs for every job (LWF with κ = ∞; the reference runs ``lwf32``)."""

    def __init__(self, comm_estimate_ms_per_mb: float | None = None) -> None:
        super().__init__(kappa=1 << 30, comm_estimate_ms_per_mb=comm_estimate_ms_per_mb)
        self.name = "ls"
