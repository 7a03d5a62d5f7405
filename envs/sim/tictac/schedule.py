"""One worker's iteration as a two-resource list schedule: the link and the GPU.

The link carries the recvs one after another in the given order, recv ``i`` taking
``recv_mb[i] * ms_per_mb`` ms (TicTac enforces the order at the sender, one transfer at a
time per channel, §5.1).  The GPU runs one compute op at a time, never idles while an op is
ready (all its deps finished), and among ready ops starts the one with the smallest id (the
graph's order; list scheduling with the graph order as the priority list).  The iteration
time ``T`` is the finish of the last op.

Metrics (§3.2): ``N`` = total transfer time, ``C`` = total compute time,
``alpha = (N + C - T) / min(N, C)`` (overlap coefficient, in [0, 1]),
``rho = N / C``, ``U = C / T = 1 / (1 + rho - alpha * min(rho, 1))`` (GPU utilisation).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from envs.sim.tictac.graph import OpGraph, OpGraphError


@dataclass(frozen=True)
class IterationStats:
    """``T``, ``N``, ``C`` in ms and the derived overlap metrics of one iteration."""

    T: float
    N: float
    C: float

    @property
    def alpha(self) -> float:
        m = min(self.N, self.C)
        return (self.N + self.C - self.T) / m if m > 0 else 1.0

    @property
    def rho(self) -> float:
        return self.N / self.C if self.C > 0 else math.inf

    @property
    def U(self) -> float:
        return self.C / self.T if self.T > 0 else 1.0

    @property
    def exposed_fraction(self) -> float:
        """Share of the transfer time not hidden behind compute: ``(T - C) / N``."""
        return (self.T - self.C) / self.N if self.N > 0 else 0.0


class ListScheduler:
    """A graph compiled for repeated list schedules (successor lists, in-degrees)."""

    def __init__(self, graph: OpGraph) -> None:
        R, n = graph.num_recvs, graph.num_ops
        self.graph = graph
        self.num_recvs = R
        self.recv_mb = np.asarray(graph.recv_mb, dtype=float)
        self.op_ms = list(graph.op_ms)
        self.C = math.fsum(self.op_ms)
        self.succ: list[list[int]] = [[] for _ in range(n)]
        self.consumers: list[list[int]] = [[] for _ in range(R)]
        self.indeg = [0] * n
        for j, deps in enumerate(graph.op_deps):
            for d in set(deps):
                self.indeg[j] += 1
                if d < R:
                    self.consumers[d].append(j)
                else:
                    self.succ[d - R].append(j)
        self.roots = [j for j in range(n) if self.indeg[j] == 0]

    def run(
        self, order: Sequence[int] | np.ndarray, ms_per_mb: float, compute_scale: float = 1.0
    ) -> IterationStats:
        """Schedule one iteration with the recvs sent in ``order`` (a permutation of recv ids)
        at ``ms_per_mb`` per MB, compute times multiplied by ``compute_scale``."""
        R = self.num_recvs
        order = np.asarray(order, dtype=np.int64)
        if order.shape != (R,) or not np.array_equal(np.sort(order), np.arange(R)):
            raise OpGraphError(
                f"op graph {self.graph.name!r}: an order must be a permutation of its {R} recvs"
            )
        if not (ms_per_mb >= 0 and math.isfinite(ms_per_mb)):
            raise OpGraphError(f"ms_per_mb must be finite and >= 0, got {ms_per_mb}")
        finish = np.cumsum(self.recv_mb[order] * ms_per_mb).tolist()
        N = finish[-1]
        ms = self.op_ms if compute_scale == 1.0 else [t * compute_scale for t in self.op_ms]
        C = self.C * compute_scale
        order_l = order.tolist()
        left = self.indeg.copy()
        consumers, succ = self.consumers, self.succ
        ready = list(self.roots)
        heapq.heapify(ready)
        push, pop = heapq.heappush, heapq.heappop
        t = 0.0
        done_ms = 0.0
        k = 0
        while k < R:
            # deliver every recv finished by now
            while k < R and finish[k] <= t:
                for j in consumers[order_l[k]]:
                    left[j] -= 1
                    if left[j] == 0:
                        push(ready, j)
                k += 1
            if not ready:
                t = finish[k]  # the GPU waits for the link
                continue
            j = pop(ready)
            t += ms[j]
            done_ms += ms[j]
            for s in succ[j]:
                left[s] -= 1
                if left[s] == 0:
                    push(ready, s)
        # Every recv has arrived: from here on the GPU is never idle (some op is always
        # ready in a DAG), so the rest of the compute runs back to back.
        T = t + max(C - done_ms, 0.0)
        return IterationStats(T, N, C)
