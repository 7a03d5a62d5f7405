"""Placement policies: RAND, FF (first fit), LS (list scheduling), LWF-κ and OVL (overlap
compute with other jobs' communication).

All are all-or-nothing over ``num_gpus`` distinct GPUs and only take GPUs with enough free
memory for one worker (GPUs are time-shared, Ada-SRSF §III).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat
from operator import truediv
from typing import Any

import numpy as np

from envs.sim.errors import ConfigError
from envs.sim.policies.base import ClusterView, count_eligible, eligible_gpus
from envs.sim.spec import JobSpec


class CountFit:
    """``fits`` for placers that succeed exactly when enough GPUs have room for one worker
    and whose refusals change nothing (:class:`~envs.sim.policies.base.FitIndexedPlacer`)."""

    randomised = False  # RAND says otherwise

    def fits(self, job: JobSpec, cluster: ClusterView) -> bool:
        return count_eligible(job, cluster) >= job.num_gpus

    def refusal_changes_state(self, job: JobSpec) -> bool:
        return False

    def refuse(self, cluster: ClusterView) -> None:
        return None


class RandomPlacer(CountFit):
    """RAND: ``num_gpus`` GPUs drawn uniformly from those with room (seeded generator).
    A refusal draws nothing."""

    name = "rand"
    comm_estimate_ms_per_mb: float | None = None
    reads_load = False
    randomised = True

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


class FirstFit(CountFit):
    """FF: the first ``num_gpus`` GPUs with room, in (server, GPU) index order."""

    name = "ff"
    comm_estimate_ms_per_mb: float | None = None
    reads_load = False

    def place(
        self, job: JobSpec, cluster: ClusterView, rng: np.random.Generator
    ) -> list[int] | None:
        avail = eligible_gpus(job, cluster)
        return avail[: job.num_gpus] if len(avail) >= job.num_gpus else None


class LWF(CountFit):
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

    A job above κ re-sorts the server order even when it is refused (the reference sorts in
    place before it looks for room): ``refuse`` is that sort, for the engine's indexed queue.
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
        self._slices: list[slice] = []  # each server's GPUs, for the mean workload
        self._per = 1
        # loads of refusals whose server-order sort is not applied yet (see ``refuse``)
        self._pending: list[list[float]] = []

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
        if count_eligible(job, cluster) < n:
            self.refuse(cluster)  # the reference sorts the servers even then
            return None
        per = cluster.spec.gpus_per_server
        order = self.server_order(cluster)
        chosen: list[int] = []
        for s in order:
            gpus = [g for g in range(s * per, (s + 1) * per) if free[g] >= need]
            gpus.sort(key=load.__getitem__)
            chosen.extend(gpus)
            if len(chosen) >= n:
                break
        return chosen[:n]

    def server_order(self, cluster: ClusterView) -> list[int]:
        """The persistent server order, stably sorted (in place) by mean GPU workload now,
        after the sorts of earlier refusals."""
        self._init(cluster)
        self._apply_pending()
        mean = self._means(cluster.load_ms)
        assert self._server_order is not None
        self._server_order.sort(key=mean.__getitem__)
        return self._server_order

    def refusal_changes_state(self, job: JobSpec) -> bool:
        return job.num_gpus > self.kappa

    def refuse(self, cluster: ClusterView) -> None:
        """What refusing a job above κ does: sort the server order by the current loads.

        Deferred: the loads are kept and the sorts applied when the order is next read.
        Sorting stably by key ``L2`` an order sorted by ``L1`` orders by ``(L2, L1)``, so
        a sort whose keys are all distinct makes every earlier one irrelevant: of a run of
        deferred sorts only those from the last all-distinct one on are done (usually one)."""
        self._init(cluster)
        self._pending.append(list(cluster.load_ms))
        if len(self._pending) >= 256:  # bounded memory
            self._apply_pending()

    def _init(self, cluster: ClusterView) -> None:
        if self._server_order is None:
            num, per = cluster.spec.num_servers, cluster.spec.gpus_per_server
            self._server_order = list(range(num))
            self._slices = [slice(s * per, (s + 1) * per) for s in range(num)]
            self._per = per

    def _means(self, load: Sequence[float]) -> list[float]:
        # sum(load[s * per : (s + 1) * per]) / per for every server s, without a Python loop
        return list(map(truediv, map(sum, map(load.__getitem__, self._slices)), repeat(self._per)))

    def _apply_pending(self) -> None:
        pending = self._pending
        if not pending:
            return
        assert self._server_order is not None
        means: dict[int, list[float]] = {}
        first = 0
        for i in range(len(pending) - 1, -1, -1):
            m = means[i] = self._means(pending[i])
            if len(set(m)) == len(m):  # all distinct: the order before it does not matter
                first = i
                break
        for i in range(first, len(pending)):
            m = means[i] if i in means else self._means(pending[i])
            self._server_order.sort(key=m.__getitem__)
        pending.clear()

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (and compared) with the deferred sorts applied."""
        self._apply_pending()
        return self.__dict__.copy()


class ListScheduling(LWF):
    """LS: least-loaded GPUs for every job (LWF with κ = ∞; the reference runs ``lwf32``)."""

    def __init__(self, comm_estimate_ms_per_mb: float | None = None) -> None:
        super().__init__(kappa=1 << 30, comm_estimate_ms_per_mb=comm_estimate_ms_per_mb)
        self.name = "ls"


#: :class:`Overlap`'s ranks of a GPU with room: nothing placed on it; only jobs that span
#: servers (their all-reduces leave it idle); a job that stays on one server (it computes
#: back to back)
IDLE, COMM_ONLY, BUSY = 0, 1, 2


def gpu_rank(cluster: ClusterView, g: int) -> int:
    """:data:`IDLE`, :data:`COMM_ONLY` or :data:`BUSY`: what GPU ``g`` already holds."""
    res = cluster.residents[g]
    if not res:
        return IDLE
    return COMM_ONLY if all(job.multi for job, _ in res) else BUSY


class Overlap(CountFit):
    """OVL: overlap a job's compute with other jobs' communication.

    A job that fits one server goes to the server whose GPUs with room are best for it, each
    GPU ranked by :func:`gpu_rank` (idle first, then GPUs held only by jobs that span servers,
    whose GPUs idle while they all-reduce, then the rest), then by workload; of each server's
    best ``num_gpus`` GPUs, the server whose worst rank is lowest wins, then the lowest sum of
    ranks, then the lowest workload, then the lowest index.  So it takes idle GPUs on one
    server when there are, and otherwise time-shares with communicating jobs rather than with
    computing ones, and never makes the job itself communicate.  A larger job (or one that no
    single server has room for) takes the servers with the most idle GPUs with room first
    (fewest servers), each server's GPUs by rank and workload.  Stateless: a refusal changes
    nothing.
    """

    name = "ovl"
    reads_load = True

    def __init__(self, comm_estimate_ms_per_mb: float | None = None) -> None:
        self.comm_estimate_ms_per_mb = comm_estimate_ms_per_mb

    def choose(self, job: JobSpec, cluster: ClusterView) -> tuple[list[int], int] | None:
        """``(GPUs, the worst rank among them)`` or ``None`` when fewer GPUs have room."""
        need = job.model.gpu_memory_mb
        free, load = cluster.free_mem_mb, cluster.load_ms
        n, per = job.num_gpus, cluster.spec.gpus_per_server
        servers = []
        for s in range(cluster.spec.num_servers):
            room = [g for g in range(s * per, (s + 1) * per) if free[g] >= need]
            ranked = sorted((gpu_rank(cluster, g), load[g], g) for g in room)
            servers.append(ranked)
        best: tuple[int, int, float, int] | None = None
        if n <= per:
            for s, ranked in enumerate(servers):
                if len(ranked) >= n:
                    top = ranked[:n]
                    key = (top[-1][0], sum(r for r, _, _ in top), sum(w for _, w, _ in top), s)
                    best = key if best is None or key < best else best
        if best is not None:
            take = servers[best[3]][:n]
        else:
            if sum(map(len, servers)) < n:
                return None
            order = sorted(
                range(len(servers)),
                key=lambda s: (-sum(r == IDLE for r, _, _ in servers[s]), s),
            )
            take = [x for s in order for x in servers[s]][:n]
        return [g for _, _, g in take], max(r for r, _, _ in take)

    def place(
        self, job: JobSpec, cluster: ClusterView, rng: np.random.Generator
    ) -> list[int] | None:
        got = self.choose(job, cluster)
        return None if got is None else got[0]
