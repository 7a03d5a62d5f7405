"""A lower bound on the sum (so the mean) of completion times that counts the cluster's capacity.

The per-job bounds (each job alone on the empty cluster: ``bound:solo``,
:func:`envs.sim.elastic.bounds.solo_bounds`) ignore that jobs compete, so under load they sit far
below every schedule and cannot say how much a better scheduler could still gain.  This module
adds the competition, as a linear programme over a relaxation of every schedule: the
*mean-busy-time* relaxation of preemptive scheduling with release dates (Goemans, Queyranne,
Schulz, Skutella and Wang, "Single machine scheduling with release dates", SIAM J. Discrete
Math. 15(2), 2002), with a rate cap per job and one capacity per resource.

The relaxation.  Job ``j`` arrives at ``release[j]`` and needs ``work[j]`` units of progress.
In any schedule of the simulators it progresses at a rate of at most ``rate_cap[j]`` units per
time, and while it progresses at rate ``x`` it holds at least ``x * use[j, r]`` of resource
``r`` (or a convex function of ``x``, below), whose cluster-wide capacity is
``capacity[r]``.  Let ``M_j`` be the mean time at which its progress happens (the centre of
mass of its progress over time).  Because progress is spread at no more than ``rate_cap[j]``
per unit of time, at least ``work[j] / rate_cap[j]`` time lies between the start of its
progress and its completion, and the centre of mass is at least half of that before the end:
``C_j >= M_j + work[j] / (2 rate_cap[j])``.  The programme chooses progress per time interval
(intervals start at every release and grow geometrically, :func:`intervals`), each unit
counted at its interval's *start* (so a lower value of ``M_j`` than the true one), subject to
the rate caps and the capacities, and minimises ``sum_j C_j`` with ``C_j >= M_j + work / (2
cap)``, ``C_j >= release + floor`` (a per-job bound the caller has, e.g. the job alone at its
best placement) and ``C_j >= earliest + work / cap`` (when it can first progress, e.g. its
entry into the env's window).  Every real schedule gives a feasible point of the programme
with the same or a larger objective, so the optimum is a lower bound on every schedule's sum
of completion times.

What it leaves out (why real schedules stay above it): jobs in it are preemptible and
divisible across time at no cost, and a job's resources need not sit on one server or come
in whole GPUs (gangs, fragmentation and placement are relaxed away).

A resource's holding need not be linear in the rate: where speed-ups are concave (the elastic
world) a job running fast holds more per unit of progress than one running slowly.  Each job's
least holding of each resource is then the lower convex envelope of its allocations'
``(rate, holding)`` points with ``(0, 0)`` (:func:`lower_envelope`); over an interval, a job
that mixes allocations (or idles) holds on average at least the envelope at its average rate
(the average of points lies in their convex hull), so the programme stays a relaxation.

Solved with HiGHS (``scipy.optimize.linprog``); 160 jobs take about a second.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from envs.sim.errors import ConfigError

__all__ = ["CapacityBound", "Pieces", "capacity_bound", "intervals", "lower_envelope"]

#: A job's least holding of one resource as a function of its progress rate ``x``: the
#: maximum of the affine pieces ``alpha * x + beta`` (a convex function, 0 at rate 0).
Pieces = Sequence[tuple[float, float]]

#: Interval growth: an interval starting at ``t`` (time since the first release) is at most
#: ``REL_STEP * t`` long (and at least the caller's ``min_step``).  Counting an interval's
#: progress at its start loses at most its length per unit, so this bounds the slack the
#: discretisation adds to about 1% of the time elapsed.
REL_STEP = 0.01


@dataclass(frozen=True)
class CapacityBound:
    """The programme's optimum.  ``completion`` is each job's ``C_j`` at the optimum: only
    their sum is a bound (one job may finish later than its ``C_j`` in every schedule while
    another finishes earlier); ``mean_response`` is ``mean(C_j - release_j)``, no schedule's
    mean response time (JCT) is lower."""

    completion: npt.NDArray[np.float64]
    release: npt.NDArray[np.float64]
    intervals: int

    @property
    def mean_response(self) -> float:
        return float(np.mean(self.completion - self.release))


def intervals(
    release: npt.NDArray[np.float64], horizon: float, min_step: float
) -> npt.NDArray[np.float64]:
    """Interval boundaries from the first release to at least ``horizon``: every release is a
    boundary, and an interval starting ``t`` after the first release is ``max(min_step,
    REL_STEP * t)`` long at most."""
    t0 = float(release.min())
    pts = [t0]
    while pts[-1] < horizon:
        pts.append(pts[-1] + max(min_step, REL_STEP * (pts[-1] - t0)))
    return np.unique(np.concatenate([np.asarray(pts), release]))


def _array(values: Sequence[float] | npt.ArrayLike, key: str, n: int | None) -> np.ndarray:
    a = np.array(values, dtype=float)  # a copy: the rate caps are lowered in place
    if a.ndim != 1 or (n is not None and a.size != n):
        raise ConfigError(
            f"{key}: expected {n if n is not None else 'a list of'} numbers, got shape {a.shape}"
        )
    bad = np.flatnonzero(~np.isfinite(a))
    if bad.size:
        raise ConfigError(f"{key}[{bad[0]}] is {a[bad[0]]}: every value must be finite")
    return a


def lower_envelope(points: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """The lower convex envelope of ``points`` (``(rate, holding)``, rate >= 0) and ``(0, 0)``,
    as affine pieces ``(alpha, beta)``: the least holding at rate ``x`` is
    ``max(alpha * x + beta)`` over the pieces, for ``0 <= x <=`` the largest rate."""
    pts = sorted({(0.0, 0.0), *((float(x), float(y)) for x, y in points)})
    hull: list[tuple[float, float]] = []
    for p in pts:
        while len(hull) >= 2:
            (x1, y1), (x2, y2) = hull[-2], hull[-1]
            if (y2 - y1) * (p[0] - x1) >= (p[1] - y1) * (x2 - x1):
                hull.pop()  # hull[-1] lies on or above the chord from hull[-2] to p
            else:
                break
        if hull and hull[-1][0] == p[0]:
            continue  # the same rate at a larger holding (sorted): never the least
        hull.append(p)
    pieces = []
    for (x1, y1), (x2, y2) in itertools.pairwise(hull):
        alpha = (y2 - y1) / (x2 - x1)
        pieces.append((alpha, y1 - alpha * x1))
    return pieces or [(0.0, 0.0)]


def _pieces(
    use: npt.NDArray[np.float64] | Sequence[Sequence[Pieces]], n: int
) -> list[list[list[tuple[float, float]]]]:
    """``use`` as pieces per job per resource: a jobs x resources array of holdings per unit
    of rate (one piece each through 0), or the pieces themselves."""
    if isinstance(use, np.ndarray):
        u = use[:, None] if use.ndim == 1 else use
        if u.ndim != 2 or u.shape[0] != n:
            raise ConfigError(f"use: expected {n} rows (one per job), got shape {u.shape}")
        return [[[(float(v), 0.0)] for v in row] for row in u]
    out = [[[(float(x), float(y)) for x, y in res] for res in job] for job in use]
    if len(out) != n or len({len(job) for job in out}) != 1:
        raise ConfigError(f"use: expected {n} jobs with the same number of resources")
    return out


def capacity_bound(
    release: Sequence[float] | npt.ArrayLike,
    work: Sequence[float] | npt.ArrayLike,
    rate_cap: Sequence[float] | npt.ArrayLike,
    use: npt.NDArray[np.float64] | Sequence[Sequence[Pieces]],
    capacity: Sequence[float] | npt.ArrayLike,
    floor: Sequence[float] | npt.ArrayLike | None = None,
    earliest: Sequence[float] | npt.ArrayLike | None = None,
    min_step: float | None = None,
) -> CapacityBound:
    """The relaxation's optimum (see the module doc).

    ``release``, ``work``, ``rate_cap``, ``floor``, ``earliest``: one value per job (``floor``,
    a lower bound on each job's response time, never below ``work / rate_cap``; ``earliest``,
    when it can first progress, defaults to its release).  ``use``: per job and resource, the
    least holding at a progress rate: a jobs x resources array (holding per unit of rate) or
    :data:`Pieces` (:func:`lower_envelope`).  ``capacity``: per resource.  ``min_step``: the
    shortest interval (default: a twentieth of the shortest job's ``work / rate_cap``).  Any
    time unit, as long as it is the same everywhere.
    """
    r = _array(release, "release", None)
    n = r.size
    if n == 0:
        raise ConfigError("capacity_bound: no jobs")
    w = _array(work, "work", n)
    cap = _array(rate_cap, "rate_cap", n)
    pieces = _pieces(use, n)
    capa = _array(capacity, "capacity", len(pieces[0]))
    for key, arr in (("work", w), ("rate_cap", cap), ("capacity", capa)):
        if (arr <= 0).any():
            i = int(np.flatnonzero(arr <= 0)[0])
            raise ConfigError(f"{key}[{i}] is {arr[i]}: must be > 0")
    for j, job in enumerate(pieces):
        for q, res in enumerate(job):
            for alpha, beta in res:
                if not (math.isfinite(alpha) and math.isfinite(beta) and alpha >= 0 and beta <= 0):
                    raise ConfigError(
                        f"use of job {j}, resource {q}: piece ({alpha}, {beta}) must have a finite "
                        "slope >= 0 and a finite intercept <= 0 (a holding that is 0 at rate 0)"
                    )
                # the rate a job can use is capped by each capacity as well: a job that alone
                # would overflow a resource at its full rate can still run slower
                if alpha > 0:
                    cap[j] = min(cap[j], (capa[q] - beta) / alpha)
    dur = w / cap
    fl = dur if floor is None else np.maximum(_array(floor, "floor", n), dur)
    step = float(dur.min()) / 20 if min_step is None else float(min_step)
    if not (step > 0 and math.isfinite(step)):
        raise ConfigError(f"min_step must be a finite number > 0, got {min_step}")
    start = r if earliest is None else np.maximum(_array(earliest, "earliest", n), r)
    # every job alone, one after another from the last start: a feasible point, so the
    # programme's horizon never cuts off its optimum
    pts = intervals(start, float(start.max() + dur.sum()), step)
    return _solve(r, start, w, cap, pieces, capa, fl, pts[:-1], np.diff(pts))


def _solve(r, start, w, cap, pieces, capa, fl, a, length) -> CapacityBound:
    from scipy.optimize import linprog
    from scipy.sparse import coo_matrix, vstack

    n, k, nres = r.size, a.size, capa.size
    # x[j, k]: progress of job j in interval k, only from its earliest start on
    first = np.searchsorted(a, start - 1e-9 * np.maximum(1.0, np.abs(start)))
    vj = np.concatenate([np.full(k - f, j) for j, f in enumerate(first)])
    vk = np.concatenate([np.arange(f, k) for f in first])
    nx = vj.size
    xs = np.arange(nx)
    # a resource whose every holding is linear goes straight into its capacity row; one with
    # an envelope gets a holding variable y[j, k] >= every piece at x[j, k]
    linear = [all(len(job[q]) == 1 and job[q][0][1] == 0.0 for job in pieces) for q in range(nres)]
    y_at = {}
    nv = nx
    for q in range(nres):
        if not linear[q]:
            y_at[q] = nv
            nv += nx
    c_at = nv
    nv += n
    rows, rhs = [], []

    def coo(vals, r_idx, c_idx, m):
        return coo_matrix((vals, (r_idx, c_idx)), shape=(m, nv))

    for q in range(nres):
        if linear[q]:
            slope = np.array([job[q][0][0] for job in pieces])[vj]
            rows.append(coo(slope, vk, xs, k))
            rhs.append(capa[q] * length)
            continue
        rows.append(coo(np.ones(nx), vk, y_at[q] + xs, k))
        rhs.append(capa[q] * length)
        for s in range(max(len(job[q]) for job in pieces)):
            idx = np.flatnonzero(np.array([s < len(job[q]) for job in pieces])[vj])
            alpha = np.array([pieces[j][q][s][0] for j in vj[idx]])
            beta = np.array([pieces[j][q][s][1] for j in vj[idx]])
            m = idx.size
            rows.append(
                coo(
                    np.concatenate([alpha, -np.ones(m)]),
                    np.tile(np.arange(m), 2),
                    np.concatenate([idx, y_at[q] + idx]),
                    m,
                )
            )
            rhs.append(-beta * length[vk[idx]])
    # M_j + dur_j / 2 - C_j <= 0, M_j = sum_k x[j, k] a_k / work_j
    rows.append(
        coo(
            np.concatenate([a[vk] / w[vj], -np.ones(n)]),
            np.concatenate([vj, np.arange(n)]),
            np.concatenate([xs, c_at + np.arange(n)]),
            n,
        )
    )
    rhs.append(-(w / cap) / 2)
    cost = np.zeros(nv)
    cost[c_at:] = 1.0
    lo = np.zeros(nv)
    lo[c_at:] = np.maximum(r + fl, start + w / cap)
    hi = np.full(nv, np.inf)
    hi[:nx] = cap[vj] * length[vk]
    res = linprog(
        cost,
        A_ub=vstack(rows).tocsr(),
        b_ub=np.concatenate(rhs),
        A_eq=coo(np.ones(nx), vj, xs, n).tocsr(),
        b_eq=w,
        bounds=np.stack([lo, hi], axis=1),
        method="highs",
    )
    if res.status != 0:
        raise ConfigError(f"capacity_bound: the programme did not solve: {res.message}")
    return CapacityBound(np.asarray(res.x[c_at:], dtype=float), r, k)
