"""Grouper's primal-dual stage permutation (PDA, Algorithm 1), as the upstream code runs it.

Input: chains of stages (one chain per cojob, its unfinished stages in order), each stage with a
load on every port and a weight. PDA fills the permutation from the *last* position backwards:

1. ``b`` = the port with the largest total load of the unscheduled stages (the bottleneck),
   among ports where some tail has load (otherwise no stage could be placed there);
2. candidates = chains whose *tail* (last unscheduled stage) has load on ``b`` — only a tail
   can go last, which keeps each cojob's stages in order;
3. the candidate with the least weight per load ``w / L_b`` goes last; ``ρ`` is that ratio;
4. every candidate chain's unscheduled weights drop by ``ρ · L_b(its tail)`` (floored at 0);
   the chosen stage's load leaves every port.

This is Sincronia's BSSI order applied to cojob stages with a chain constraint; with chains of
length one and unit weights it *is* Sincronia's order, which :mod:`.policies` reuses.

Deterministic tie rules (upstream's, documented): the bottleneck is the lowest port index among
equal loads; among equal ratios the chain listed first goes last. If no tail has load on any
port that still carries load (all remaining tails are network-free), the first live chain's
tail goes last with ``ρ = 0``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: ratios (and weights relative to their start) this close count as equal
_REL_TOL = 1e-9


def upstream_stage_weight(stage: np.ndarray) -> np.ndarray:
    """Grouper's fixed stage weight ``1 + 0.5**stage`` for 1-based ``stage`` (1.5, 1.25, ...).

    The upstream code writes ``1 + 0.5**(k+1)`` with 0-based ``k``. The paper's Algorithm 1
    (``w = 1 + α_{k+1} - α_k`` with ``α_k = 1 - 0.5**k``) gives ``1 + 0.5**(k+1)`` for 1-based
    ``k``, i.e. one stage lower; on the Fig. 3 example both give the same order.
    """
    return 1.0 + 0.5 ** np.asarray(stage, dtype=float)


@dataclass(frozen=True)
class PdaStep:
    """One backward step: ``position`` (0-based, filled last to first), the bottleneck ``port``,
    the candidates as ``(chain, stage, weight, load_on_port)``, the ``chosen`` (chain, stage),
    ``rho`` and every chain's weights after the update (unscheduled stages only)."""

    position: int
    port: int
    candidates: tuple[tuple[int, int, float, float], ...]
    chosen: tuple[int, int]
    rho: float
    weights_after: tuple[tuple[float, ...], ...]


@dataclass(frozen=True)
class PdaResult:
    """``order``: (chain, stage) from first served to last; ``trace`` when requested."""

    order: tuple[tuple[int, int], ...]
    trace: tuple[PdaStep, ...] = ()


def pda_order(
    loads: np.ndarray,
    lengths: np.ndarray,
    weights: np.ndarray,
    *,
    record: bool = False,
) -> PdaResult:
    """Permute stages of ``C`` chains.

    Args:
        loads: ``(C, K, P)`` load of stage ``k`` of chain ``c`` on port ``p`` (MB or any unit).
        lengths: ``(C,)`` number of stages of each chain (stages ``0..lengths[c]-1`` are used).
        weights: ``(C, K)`` initial stage weights.
        record: keep a :class:`PdaStep` per position (for tests and debugging).
    """
    n_chains, n_k, _ = loads.shape
    w0 = np.asarray(weights, dtype=float)
    tail = np.asarray(lengths, dtype=np.int64) - 1
    rows = np.arange(n_chains)
    live = tail >= 0
    stage_used = np.arange(n_k)[None, :] <= tail[:, None]
    port_load = (loads * stage_used[:, :, None]).sum(axis=(0, 1))
    safe = np.maximum(tail, 0)
    tails = np.ascontiguousarray((loads[rows, safe] * live[:, None]).T)  # (P, C): tail loads
    reach = (tails > 0).sum(axis=1)  # live tails with load on each port
    w0_tail = w0[rows, safe]
    # Weights only ever drop by the same amount for all of a chain's stages and are floored at
    # 0, so stage k's weight is max(w0[k] - drop[c], 0): one number per chain.
    drop = np.zeros(n_chains)
    total = int(tail.sum() + n_chains)
    order: list[tuple[int, int]] = []
    trace: list[PdaStep] = []
    for position in range(total - 1, -1, -1):
        if reach.any():
            port = int(np.where(reach > 0, port_load, -np.inf).argmax())
            tl_all = tails[port]
            idx = (tl_all > 0).nonzero()[0]
            tl = tl_all[idx]
            w0c = w0_tail[idx]
            wt = w0c - drop[idx]
            wt[wt <= _REL_TOL * w0c] = 0.0  # rounding must not decide ties
            ratio = wt / tl
            best = ratio.min()
            pick = int((ratio <= best * (1 + _REL_TOL)).argmax())  # first of the (near) ties
            chosen, rho = int(idx[pick]), float(ratio[pick])
            drop[idx] += rho * tl
        else:  # every remaining tail is network-free
            port, chosen, rho = -1, int(np.flatnonzero(live)[0]), 0.0
            idx, tl, wt = np.array([chosen]), np.zeros(1), np.zeros(1)
        k = int(tail[chosen])
        port_load -= loads[chosen, k]
        if record:
            cands = tuple(
                (int(c), int(tail[c]), float(x), float(y))
                for c, x, y in zip(idx, wt, tl, strict=True)
            )
            after = tuple(
                tuple(
                    float(max(x - drop[c], 0.0))
                    for x in w0[c, : tail[c] + (0 if c == chosen else 1)]
                )
                for c in range(n_chains)
            )
            trace.append(PdaStep(position, port, cands, (chosen, k), rho, after))
        order.append((chosen, k))
        tail[chosen] = k - 1
        reach -= tails[:, chosen] > 0
        if k > 0:
            nxt = loads[chosen, k - 1]
            tails[:, chosen] = nxt
            w0_tail[chosen] = w0[chosen, k - 1]
            reach += nxt > 0
        else:
            tails[:, chosen] = 0.0
            live[chosen] = False
    order.reverse()
    return PdaResult(tuple(order), tuple(trace))
