"""Flow-priority policies for cojobs: per-flow fair share, Baraat, Sincronia, SPTF and Grouper.

Every policy answers one question through :class:`CommPolicy`: given a read-only
:class:`~envs.sim.grouper.state.CojobSnapshot`, one priority *key* per running job — lower is
served first, equal keys share a level (max-min fair among them). The simulator maps keys onto
``q`` queues per port (:func:`~envs.sim.grouper.network.port_queues`) and allocates rates.
Policies are asked again at every event (arrival, a job finishing a stage or its last stage,
a cojob stage completing) and at the times :meth:`CommPolicy.next_wakeup` names.

:data:`POLICIES` is the only place names become classes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from enum import Enum
from typing import Any, Protocol

import numpy as np

from envs.sim.errors import ConfigError
from envs.sim.grouper.pda import PdaResult, pda_order, upstream_stage_weight
from envs.sim.grouper.state import CojobSnapshot


class CommPolicy(Protocol):
    """A network scheduling policy for cojobs."""

    name: str

    def keys(self, snap: CojobSnapshot) -> np.ndarray:
        """One float key per ``snap.running`` job; lower first, equal keys share a level."""
        ...

    def next_wakeup(self, now: float) -> float | None:
        """Next time (ms) this policy wants to be asked even if nothing happened, or None."""
        ...

    def reset(self) -> None:
        """Forget any state from a previous run (called when a run starts)."""
        ...


class _EventDriven:
    name: str = ""

    def next_wakeup(self, now: float) -> float | None:
        return None

    def reset(self) -> None:
        return None


class FairShare(_EventDriven):
    """Per-flow fair share (FS): one level, so every flow through a port gets an equal share."""

    name = "fs"

    def keys(self, snap: CojobSnapshot) -> np.ndarray:
        return np.zeros(len(snap.running))


def _dense_rank(*cols: np.ndarray) -> np.ndarray:
    """Rank rows by ``cols`` (first column most significant); equal rows share a rank."""
    n = len(cols[0])
    if n == 0:
        return np.zeros(0)
    order = np.lexsort(tuple(reversed(cols)))
    stacked = np.stack([c[order] for c in cols], axis=1)
    new = np.ones(n, dtype=bool)
    new[1:] = (stacked[1:] != stacked[:-1]).any(axis=1)
    rank = np.empty(n)
    rank[order] = np.cumsum(new) - 1
    return rank


class StageFifo(_EventDriven):
    """Baraat as Grouper evaluates it: each cojob stage is a task, tasks served FIFO.

    A job's task starts when its current stage starts (stage 1 at the cojob's arrival); tasks
    are ordered by that start time, then by cojob arrival, then by workload order. Jobs of one
    cojob stage share a level. Baraat's limited multiplexing of heavy tasks is not modelled.
    """

    name = "baraat"

    def keys(self, snap: CojobSnapshot) -> np.ndarray:
        a, r = snap.arrays, snap.running
        g = a.cojob[r]
        return _dense_rank(snap.stage_start_ms[r], a.arrival_ms[g], g.astype(float))


class Sincronia(_EventDriven):
    """Sincronia: BSSI order of each running job's current iteration coflow (unit weights).

    Blind to stages and cojobs: it orders per-iteration coflows by their port loads (the same
    primal-dual backward pass as PDA with one-stage chains). Ties: the job listed first (lower
    job index) goes last, as upstream.
    """

    name = "sincronia"

    def keys(self, snap: CojobSnapshot) -> np.ndarray:
        r = snap.running
        if len(r) == 0:
            return np.zeros(0)
        loads = snap.arrays.demand[r][:, None, :]
        res = pda_order(loads, np.ones(len(r), dtype=np.int64), np.ones((len(r), 1)))
        keys = np.empty(len(r))
        keys[[chain for chain, _ in res.order]] = np.arange(len(r))
        return keys


class SptfKey(Enum):
    """What SPTF ranks by: a job's whole network time alone, or its current stage's."""

    JOB = "job"
    STAGE = "stage"


class Sptf(_EventDriven):
    """Shortest processing time first, blind to cojobs.

    Processing time = iterations x the job's iteration time with the network to itself.
    ``key=SptfKey.JOB`` uses all the job's iterations up to its ``max_stage`` (sizes known in
    advance); ``SptfKey.STAGE`` the iterations of its current stage. Tie rule: equal processing
    times share a level (max-min fair), so the result never depends on job numbering.
    """

    name = "sptf"

    def __init__(self, key: SptfKey = SptfKey.JOB) -> None:
        if not isinstance(key, SptfKey):
            raise ConfigError(f"sptf: key must be an SptfKey, got {key!r}")
        self.key = key
        self.name = "sptf" if key is SptfKey.JOB else "sptf-stage"

    def keys(self, snap: CojobSnapshot) -> np.ndarray:
        a, r = snap.arrays, snap.running
        t_iter = a.alone_iteration_ms()[r]
        if self.key is SptfKey.JOB:
            iters = a.plan[r, a.max_stage[r] - 1]
        else:
            iters = a.stage_iterations()[r, snap.stage[r]]
        return iters * t_iter


class Grouper:
    """Grouper: PDA permutation of the live cojobs' unfinished stages.

    A job's key is the position of its cojob's current stage in the permutation. Port loads of
    a stage sum, over the cojob's live jobs that run it, the stage's remaining iterations times
    the job's MB per iteration on the port. Online (default) assumes every live job runs all the
    stages of its plan; offline (``offline=True``) knows where successive halving stops each job
    (its ``max_stage``). Stage weights are :func:`~envs.sim.grouper.pda.upstream_stage_weight`.

    ``period_ms=None`` recomputes at every event (stage change, job completion, arrival: the
    upstream simulator's rule); a period recomputes only every ``period_ms`` (the testbed's
    10 s), and between recomputations keeps the last permutation, a cojob that arrived since
    being served after every ranked one.
    """

    name = "grouper"

    def __init__(self, offline: bool = False, period_ms: float | None = None) -> None:
        if period_ms is not None and not (math.isfinite(period_ms) and period_ms > 0):
            raise ConfigError(f"grouper: period_ms must be > 0 or None, got {period_ms!r}")
        self.offline = offline
        self.period_ms = period_ms
        self.name = "grouper-offline" if offline else "grouper"
        self._rank: np.ndarray | None = None
        self._due = 0.0
        self.last: PdaResult | None = None

    def next_wakeup(self, now: float) -> float | None:
        return None if self.period_ms is None else self._due

    def reset(self) -> None:
        self._rank, self._due, self.last = None, 0.0, None

    def keys(self, snap: CojobSnapshot) -> np.ndarray:
        if self._rank is None or self.period_ms is None or snap.now >= self._due:
            self._rank = self.permutation(snap)
            if self.period_ms is not None:
                self._due = (math.floor(snap.now / self.period_ms) + 1) * self.period_ms
        a, r = snap.arrays, snap.running
        return self._rank[a.cojob[r], snap.stage[r]]

    def permutation(self, snap: CojobSnapshot) -> np.ndarray:
        """``(G, K)`` position of every live cojob stage in the PDA order (inf elsewhere)."""
        a = snap.arrays
        n_g, n_k = a.members.shape[0], a.plan.shape[1]
        rank = np.full((n_g, n_k), np.inf)
        live = snap.live
        if not live.any():
            return rank
        last = a.max_stage if self.offline else a.plan_len
        prev = np.concatenate([np.zeros((a.num_jobs, 1)), a.plan[:, :-1]], axis=1)
        ks = np.arange(n_k)
        rem = np.clip(a.plan - np.maximum(prev, snap.done[:, None]), 0, None)
        rem = rem * (ks[None, :] < last[:, None])
        jobs = np.flatnonzero(live)
        groups = np.flatnonzero(a.members[:, jobs].any(axis=1))
        mem = a.members[np.ix_(groups, jobs)]
        cur = np.where(mem, snap.stage[jobs][None, :], n_k).min(axis=1)
        n_stages = np.where(mem, last[jobs][None, :], 0).max(axis=1)
        lengths = n_stages - cur
        # by_stage[g, k, p] = sum over live jobs j of cojob g of rem[j, k] * demand[j, p]
        memf, dem = mem.astype(float), a.demand[jobs]
        by_stage = np.stack([memf @ (rem[jobs, k, None] * dem) for k in range(n_k)], axis=1)
        idx = np.minimum(cur[:, None] + ks[None, :], n_k - 1)
        valid = ks[None, :] < lengths[:, None]
        loads = by_stage[np.arange(len(groups))[:, None], idx] * valid[:, :, None]
        weights = upstream_stage_weight(cur[:, None] + ks[None, :] + 1) * valid
        res = pda_order(loads, lengths, weights)
        self.last = res
        for pos, (chain, i) in enumerate(res.order):
            rank[groups[chain], cur[chain] + i] = pos
        return rank


class GrouperOffline(Grouper):
    """Grouper with successive halving known in advance (GrouperOffline upstream)."""

    name = "grouper-offline"

    def __init__(self, period_ms: float | None = None) -> None:
        super().__init__(offline=True, period_ms=period_ms)


#: config name -> policy factory; the only place names become classes.
POLICIES: dict[str, Callable[..., CommPolicy]] = {
    "fs": FairShare,
    "baraat": StageFifo,
    "sincronia": Sincronia,
    "sptf": Sptf,
    "sptf-stage": functools.partial(Sptf, key=SptfKey.STAGE),
    "grouper": Grouper,
    "grouper-offline": GrouperOffline,
}


def make_policy(name: str, **params: Any) -> CommPolicy:
    """Build the policy registered as ``name`` (see :data:`POLICIES`) with ``params``."""
    try:
        factory = POLICIES[name]
    except KeyError:
        raise ConfigError(
            f"unknown cojob network policy {name!r}; known: {sorted(POLICIES)}"
        ) from None
    try:
        return factory(**params)
    except TypeError as exc:
        raise ConfigError(f"policy {name!r}: bad parameters {params}: {exc}") from None
