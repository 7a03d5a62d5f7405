"""Flow-level rate allocation on the ports of a big switch: strict priority across levels,
max-min fairness within a level, per port.

The unit of allocation is a *bundle*: the flows of one job's current iteration. All flows of a
job have the same size (``model_mb / S``) and the iteration ends when the last one ends, so in
the fluid model they move together at one per-flow rate ``level`` (MB/ms); the bundle then uses
``weights[u, p] * level[u]`` MB/ms on port ``p``, where ``weights[u, p]`` is the number of its
flows through ``p``. Equal levels for all flows through a port is per-flow fair sharing; a flow
that would finish early on an idle port only waits for its iteration's slowest flow, so the
time-averaged rates are those of this coupled model (see ``docs`` notes in the package
``__init__``).  The algorithm (priority progressive filling) and its known limit:
:func:`allocate`.
"""

from __future__ import annotations

import numpy as np

#: relative tolerance under which a port counts as saturated
SAT_TOL = 1e-12
_NO_QUEUE = np.iinfo(np.int64).max


def allocate(
    weights: np.ndarray,
    queues: np.ndarray,
    capacity: np.ndarray,
    cap: np.ndarray | None = None,
) -> np.ndarray:
    """Per-flow level (MB/ms) of each bundle.

    Args:
        weights: ``(U, P)`` flows of bundle ``u`` through port ``p`` (>= 0).
        queues: ``(U, P)`` integer queue of bundle ``u`` at port ``p`` (0 = highest priority);
            read only where ``weights > 0``.
        capacity: ``(P,)`` port capacities, MB/ms (> 0).
        cap: ``(U,)`` optional upper bound on each level (``inf`` = none).

    Returns:
        ``(U,)`` levels; ``inf`` for a bundle that uses no port and has no cap.

    Algorithm (priority progressive filling), deterministic and O(bundles) rounds:

    1. each port serves its best (lowest) queue that still holds an unfrozen bundle;
    2. a bundle is *eligible* when it sits in the served queue of every port it uses;
    3. eligible bundles raise their level together until a port saturates or a bundle
       reaches its cap; bundles at a saturated port (eligible or not) and capped bundles freeze.

    With one level this is textbook weighted max-min progressive filling (per-flow fair share).
    Priorities derived from one global order stay acyclic, so some bundle is always eligible.
    Known limit: two bundles in the same queue of a port that become eligible at different
    rounds (because one waited behind higher-priority traffic at its *other* port) are not
    equalised: the later one starts from zero. This needs a clamped queue or two jobs of one
    cojob stage whose other ports differ; FS and every oracle here are exact.
    """
    n_units = weights.shape[0]
    level = np.zeros(n_units)
    caps = np.full(n_units, np.inf) if cap is None else np.asarray(cap, dtype=float)
    uses = np.asarray(weights > 0, dtype=bool)
    frozen = ~uses.any(axis=1)
    level[frozen] = caps[frozen]
    if frozen.all():
        return level
    resid = np.asarray(capacity, dtype=float).copy()
    q = np.where(uses, queues, _NO_QUEUE)
    for _ in range(n_units + 1):
        live = np.logical_not(frozen)
        if not live.any():
            return level
        live_uses = uses & live[:, None]
        serving = np.where(live_uses, q, _NO_QUEUE).min(axis=0)
        blocked = (live_uses & (q > serving[None, :])).any(axis=1)
        elig = live & ~blocked
        if not elig.any():  # impossible for priorities from one global order
            raise RuntimeError("rate allocation: every unfrozen bundle is blocked (priority cycle)")
        slope = weights[elig].sum(axis=0)
        busy = slope > 0
        step = np.min(resid[busy] / slope[busy]) if busy.any() else np.inf
        head = caps[elig] - level[elig]
        step = min(step, float(head.min()))
        level[elig] += step
        resid -= slope * step
        saturated = busy & (resid <= SAT_TOL * capacity)
        resid[saturated] = 0.0
        frozen |= (uses[:, saturated]).any(axis=1)
        capped = elig & (level >= caps * (1 - SAT_TOL))
        frozen |= capped
    raise RuntimeError("rate allocation did not converge")  # pragma: no cover


def port_queues(keys: np.ndarray, uses: np.ndarray, num_queues: int | None) -> np.ndarray:
    """Map global priority keys onto per-port queues (Grouper §IV-B).

    At each port the bundles present are ranked densely by key (equal keys share a queue,
    lower key = higher priority) and ranks past the last queue are clamped into queue
    ``num_queues - 1``. With ``num_queues=None`` (unlimited queues) the dense global rank is
    used at every port, which orders every port exactly as the per-port ranking would.

    Returns an ``(U, P)`` integer array (entries where ``uses`` is False are meaningless).
    """
    rank = np.unique(keys, return_inverse=True)[1].reshape(-1).astype(np.int64)
    queues = np.broadcast_to(rank[:, None], uses.shape).copy()
    if num_queues is None:
        return queues
    for p in range(uses.shape[1]):
        at = uses[:, p]
        if at.any():
            local = np.unique(rank[at], return_inverse=True)[1].reshape(-1)
            queues[at, p] = np.minimum(local, num_queues - 1)
    return queues


def check_allocation(
    level: np.ndarray,
    weights: np.ndarray,
    queues: np.ndarray,
    capacity: np.ndarray,
    cap: np.ndarray | None = None,
    tol: float = 1e-9,
) -> None:
    """Raise ``AssertionError`` unless the allocation is feasible and work-conserving.

    Checks: no port over capacity; every bundle is at its cap or uses a saturated port;
    at a port, a bundle of a lower-priority queue gets rate only if every bundle of a
    higher-priority queue there is itself at its cap or at a saturated port (strict priority).
    """
    caps = np.full(level.shape, np.inf) if cap is None else cap
    uses = weights > 0
    finite = np.isfinite(level)
    load = (weights[finite] * level[finite, None]).sum(axis=0)
    assert np.all(load <= capacity * (1 + tol)), f"port over capacity: {load} > {capacity}"
    saturated = load >= capacity * (1 - 1e-7)
    done = (level >= caps * (1 - 1e-9)) | (uses & saturated[None, :]).any(axis=1)
    assert np.all(done | ~uses.any(axis=1)), "a bundle could get more rate (not work-conserving)"
    for p in range(weights.shape[1]):
        at = np.flatnonzero(uses[:, p])
        for u in at:
            if level[u] <= 0:
                continue
            better = at[queues[at, p] < queues[u, p]]
            assert np.all(done[better]), f"port {p}: a lower queue got rate before a higher one"
