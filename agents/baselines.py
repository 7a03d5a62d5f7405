"""Returns-to-go and the input-driven baseline (Mao et al., ICLR '19; Decima's training).

In a scheduling env an exogenous input (the job arrivals) drives most of the return: a state-
only critic cannot tell a lucky workload from a good decision.  With ``K`` rollouts of the same
workload, the mean return-to-go of the ``K`` rollouts *at the same simulated time* is a
baseline that depends on the input and not on the action, and the advantage
``G_k(t) - mean_k' G_k'(t)`` has far lower variance.

A rollout is a sequence of decisions at simulated times ``t_i`` (non-decreasing); rewards arrive
at times ``tau`` (here: the slot that closed).  Its return-to-go at any time ``t`` is

    G(t) = sum over rewards with tau >= t of gamma ** (tau - t) * r

a step function of ``t`` (gamma per unit of simulated time; 1 = the undiscounted episode sum,
which with the env's ``jct`` reward is minus the job-time still to come).  The baseline evaluates
each rollout's step function *exactly* at the other rollouts' decision times (no linear
interpolation is needed for a step function; a rollout that already ended contributes 0).
Computed by a backward recursion over each rollout's reward times and ``searchsorted``
queries, so it is numerically stable for any ``gamma`` in (0, 1].
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from envs.sim.errors import ConfigError

__all__ = ["RewardCurve", "group_advantages"]

F64 = npt.NDArray[np.float64]


class RewardCurve:
    """One rollout's return-to-go as a step function of simulated time."""

    def __init__(self, times: npt.ArrayLike, rewards: npt.ArrayLike, gamma: float = 1.0) -> None:
        if not (0.0 < gamma <= 1.0):
            raise ConfigError(f"gamma must be in (0, 1], got {gamma}")
        t = np.asarray(times, dtype=np.float64)
        r = np.asarray(rewards, dtype=np.float64)
        if t.shape != r.shape or t.ndim != 1:
            raise ConfigError("reward times and rewards must be 1-d arrays of one length")
        if not (np.all(np.isfinite(t)) and np.all(np.isfinite(r))):
            raise ConfigError("reward times and rewards must be finite")
        if t.size and np.any(np.diff(t) < 0):
            raise ConfigError("reward times must be non-decreasing")
        # merge equal times; G at each distinct reward time by a backward recursion
        uniq, first = np.unique(t, return_index=True)
        sums = np.add.reduceat(r, first) if t.size else r
        g = np.empty_like(uniq)
        acc = 0.0
        for i in range(len(uniq) - 1, -1, -1):
            if i + 1 < len(uniq):
                acc *= gamma ** (uniq[i + 1] - uniq[i])
            acc += sums[i]
            g[i] = acc
        self.gamma = float(gamma)
        self.times: F64 = uniq
        self.values: F64 = g

    def __call__(self, t: npt.ArrayLike) -> F64:
        """``G(t)`` at each query time."""
        q = np.asarray(t, dtype=np.float64)
        j = np.searchsorted(self.times, q, side="left")
        out = np.zeros(q.shape, dtype=np.float64)
        inside = j < len(self.times)
        if np.any(inside):
            jj = j[inside]
            vals = self.values[jj]
            if self.gamma != 1.0:
                vals = vals * self.gamma ** (self.times[jj] - q[inside])
            out[inside] = vals
        return out


def group_advantages(
    decision_times: Sequence[npt.ArrayLike],
    reward_times: Sequence[npt.ArrayLike],
    rewards: Sequence[npt.ArrayLike],
    gamma: float = 1.0,
) -> tuple[list[F64], list[F64]]:
    """``(returns, advantages)`` per rollout of one group (rollouts of the same workload).

    ``returns[k][i]`` is rollout ``k``'s return-to-go at its decision ``i`` (time
    ``decision_times[k][i]``); ``advantages[k][i]`` is that minus the mean over the group's
    ``K`` rollouts (``k`` included) of their return-to-go at the same time."""
    K = len(decision_times)
    if K < 1 or len(reward_times) != K or len(rewards) != K:
        raise ConfigError("group_advantages needs K >= 1 rollouts with times and rewards each")
    curves = [RewardCurve(reward_times[k], rewards[k], gamma) for k in range(K)]
    times = [np.asarray(d, dtype=np.float64) for d in decision_times]
    returns = [curves[k](times[k]) for k in range(K)]
    advantages = []
    for k in range(K):
        base = np.zeros_like(times[k])
        for c in curves:
            base += c(times[k])
        advantages.append(returns[k] - base / K)
    return returns, advantages
