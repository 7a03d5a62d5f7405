"""TicTac's transfer orders: TIC, TAC and the random baseline (Hashemi et al., SysML 2019, §4).

Why: TicTac orders a worker's parameter transfers (recvs) so that the compute they unblock
can start as early as possible.  From the recv properties ``M``, ``P``, ``M+`` of the paper's
Algorithm 1 (:class:`Properties`), TIC (:func:`tic_priorities`) and TAC (:func:`tac_order`,
comparator :func:`before`) derive an order; an order is enforced as a priority per recv, with
equal priorities in random order per worker and iteration (:func:`order_from_priorities`,
§3.1); :func:`random_order` is the baseline.
Details: docs/design/network-models.md#tic--tac-orderpy
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from envs.sim.tictac.graph import OpGraph


@dataclass(frozen=True)
class Properties:
    """``P``, ``M``, ``M+`` per recv (arrays of length R; entries of completed recvs unused).

    Properties of a recv ``r`` given the set ``R`` of outstanding recvs (the paper's Algorithm 1),
    for every compute op ``c`` with ``D = dep(c) ∩ R`` (``dep`` = the recvs ``c`` depends on,
    directly or transitively):

    - ``M(r)``  = Time(r), its transfer time;
    - ``P(r)``  = sum of Time(c) over the ops with ``D = {r}`` (the compute ``r`` alone unblocks);
    - ``M+(r)`` = min over the ops with ``r ∈ D`` and ``|D| > 1`` of ``sum_{r' ∈ D} Time(r')``
      (the cheapest transfer load that unblocks an op needing ``r`` and others), ``+inf`` if none.
    """

    P: np.ndarray
    M: np.ndarray
    M_plus: np.ndarray


class DepIndex:
    """Each compute op's transitive recv dependencies, with ops of identical dependency sets
    merged into one row (their times summed): properties only need the distinct sets."""

    def __init__(self, graph: OpGraph) -> None:
        self.graph = graph
        R, n = graph.num_recvs, graph.num_ops
        masks: list[int] = [0] * n
        done = [False] * n
        # iterative post-order DFS over op deps (the paper's FindDependencies)
        for root in range(n):
            if done[root]:
                continue
            stack = [(root, False)]
            while stack:
                j, expanded = stack.pop()
                if done[j]:
                    continue
                if expanded:
                    m = 0
                    for d in graph.op_deps[j]:
                        m |= (1 << d) if d < R else masks[d - R]
                    masks[j] = m
                    done[j] = True
                    continue
                stack.append((j, True))
                stack.extend((d - R, False) for d in graph.op_deps[j] if d >= R and not done[d - R])
        self.op_masks = masks
        rows: dict[int, int] = {}
        for m in masks:
            rows.setdefault(m, len(rows))
        self.row_of_op = np.array([rows[m] for m in masks], dtype=np.int64)
        dense = np.zeros((len(rows), R), dtype=bool)
        for m, k in rows.items():
            bits = [i for i in range(R) if (m >> i) & 1]
            dense[k, bits] = True
        self.rows = dense  # (groups, R): recv i in group k's dep set

    def row_time(self, op_time: np.ndarray) -> np.ndarray:
        """Summed compute time per dependency group."""
        return np.bincount(self.row_of_op, weights=op_time, minlength=self.rows.shape[0])

    @cached_property
    def unit_row_time(self) -> np.ndarray:
        return np.zeros(self.rows.shape[0])

    def properties(
        self,
        outstanding: np.ndarray,
        recv_time: np.ndarray,
        row_time: np.ndarray,
        *,
        sole_counts: bool = False,
    ) -> Properties:
        """Algorithm 1 over the ``outstanding`` recvs (bool mask).  ``sole_counts`` also lets
        an op with a single outstanding dep ``r`` bound ``M+(r)`` (by ``M(r)``)."""
        rows = self.rows & outstanding  # D per group
        cnt = rows.sum(axis=1)
        load = rows @ recv_time  # sum of Time over D
        R = rows.shape[1]
        single = cnt == 1
        P = np.zeros(R)
        if single.any():
            which = rows[single].argmax(axis=1)
            P = np.bincount(which, weights=row_time[single], minlength=R).astype(float)
        multi = cnt >= 1 if sole_counts else cnt > 1
        cand = np.where(rows & multi[:, None], load[:, None], np.inf)
        M_plus = cand.min(axis=0) if cand.shape[0] else np.full(R, np.inf)
        return Properties(P, recv_time.astype(float), M_plus)


def before(a: int, b: int, props: Properties) -> bool:
    """TAC's comparator: True iff recv ``a`` goes strictly before recv ``b``."""
    P, M, Mp = props.P, props.M, props.M_plus
    x = min(P[b], M[a])
    y = min(P[a], M[b])
    if x != y:
        return bool(x < y)
    return bool(Mp[a] < Mp[b])


def tic_priorities(index: DepIndex, *, upstream_ties: bool = False) -> np.ndarray:
    """TIC's priority per recv (lower = earlier): ``M+`` under the unit time oracle, written
    as the upstream code numbers it (equal ``M+`` share the rank of the first of their group
    in sorted order, so priorities run 0..R-1 with gaps after ties).

    **TIC** assigns every recv priority ``M+`` under the unit oracle (recv = 1, compute = 0),
    computed once with every recv outstanding; equal ``M+`` share a priority.  As Algorithm 1 is
    written (and as the upstream code runs it), an op whose only outstanding dep is ``r`` does
    not lower ``M+(r)``, so on the paper's Fig. 1 graph both recvs get ``M+ = 2`` and TIC cannot
    tell the good order from the bad one.  By default we let such an op count too (``|D| >= 1``:
    ``M+(r) = M(r)`` when ``r`` alone unblocks an op), which makes TIC order a chain
    layer by layer; ``upstream_ties=True`` restores Algorithm 1 as written.
    """
    R = index.graph.num_recvs
    props = index.properties(
        np.ones(R, dtype=bool), np.ones(R), index.unit_row_time, sole_counts=not upstream_ties
    )
    key = props.M_plus
    order = np.argsort(key, kind="stable")
    prio = np.empty(R, dtype=np.int64)
    first = 0
    for pos, r in enumerate(order):
        if pos > 0 and key[r] != key[order[pos - 1]]:
            first = pos
        prio[r] = first
    return prio


def tac_order(index: DepIndex, recv_ms: np.ndarray) -> np.ndarray:
    """TAC's order of recv ids (Algorithm 3) with recv times ``recv_ms`` and the graph's op
    times as the time oracle.

    **TAC** repeatedly takes, among the outstanding recvs, the minimum under the comparator
    (Johnson's rule for the two-stage flow shop link -> GPU, the paper's Eq. 2):
    ``A before B  iff  min(P_B, M_A) < min(P_A, M_B)``; on equality the smaller ``M+`` first;
    remaining ties keep graph order (the recv with the smaller id).  Properties are recomputed
    over the outstanding set after every pick (Algorithm 3).
    """
    g = index.graph
    R = g.num_recvs
    row_time = index.row_time(np.asarray(g.op_ms, dtype=float))
    outstanding = np.ones(R, dtype=bool)
    out = np.empty(R, dtype=np.int64)
    recv_ms = np.asarray(recv_ms, dtype=float)
    for k in range(R):
        props = index.properties(outstanding, recv_ms, row_time)
        P, M, Mp = props.P.tolist(), props.M.tolist(), props.M_plus.tolist()
        left = np.flatnonzero(outstanding).tolist()
        best = left[0]
        for r in left[1:]:  # before(r, best), inlined: this loop is TAC's hot path
            x, y = min(P[best], M[r]), min(P[r], M[best])
            if x < y or (x == y and Mp[r] < Mp[best]):
                best = r
        out[k] = best
        outstanding[best] = False
    return out


def order_from_priorities(prio: np.ndarray, rng: np.random.Generator | None) -> np.ndarray:
    """Recv ids sorted by priority; equal priorities in random order (``rng``), or in id
    order when ``rng`` is None.

    **Enforcement** (§3.1): an order is a priority per recv; among recvs of equal priority the
    transfer order is random, drawn per worker and iteration (:func:`order_from_priorities`).
    """
    R = len(prio)
    if rng is None:
        return np.argsort(prio, kind="stable")
    return np.lexsort((rng.random(R), prio))


def random_order(num_recvs: int, rng: np.random.Generator) -> np.ndarray:
    """The baseline: a uniformly random order of the recvs.  Every recv is a root of the
    worker DAG, so every permutation is a topological order."""
    return rng.permutation(num_recvs)
