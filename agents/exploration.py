"""Job-aware exploration (DL² §4.3): in poor states, replace the sampled action with the
corrective one, with probability ε, and learn from the replaced action.

A window job is in a *poor state* (the paper's three cases) when it has

1. workers but no PS (corrective action: +1 PS),
2. PSs but no workers (+1 worker),
3. a badly unbalanced PS:worker ratio: ``ps > max_ratio * workers`` (+1 worker) or
   ``workers > max_ratio * ps`` (+1 PS).

The window is scanned in arrival order and the first poor job whose corrective action is
valid (mask) is the candidate; with probability ε (a schedule: linear from ``eps_start`` to
``eps_end`` over ``eps_decay_steps`` decisions) the agent's action is replaced by it.
``resource_balance`` adds the rule of DL²'s reference code (notes §7.5, rule 1): when the
window job holding the most tasks has more than ``balance_ratio`` times the tasks of the one
holding the fewest (at least one task), the poorest job gets a bundle (or, if the bundle is
masked, a worker).  The reference code's other rules (every job pre-assigned a bundle, a PS
push until PS >= 2 x workers, the action-type floor) are not reproduced: they hard-code a
PS-heavy allocation, which the measured speed table happens to reward (notes §7.5).

Counts are read from the observation (columns ``L + 3`` and ``L + 4`` are workers / max
workers and PS / max PS), so the rule needs nothing but what the policy sees and the caps.

Over the slot's plan (``dlsched/ClusterPlan-v0``, where every plan is a whole allocation and
no job is ever left with workers but no PS) the poor state is a *starved* job:
:class:`StarvedJobExploration` explores, with probability ε, only in slots whose window holds a
job that has been in the system for at least ``stay`` (the observation's column ``L``, slots
since arrival over 100) and has done none of its epochs yet (column ``L + 1``, its remaining
epochs, still at least ``1 - progress``): the slots where which plan runs decides who waits.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from envs.gym.cluster_env import FEATURES_PER_JOB
from envs.sim.errors import ConfigError, check_number

__all__ = ["ExplorationConfig", "JobAwareExploration", "StarvedJobExploration"]


@dataclass
class ExplorationConfig:
    """``enabled``; ε schedule ``eps_start`` -> ``eps_end`` over ``eps_decay_steps`` decisions
    (0: constant ``eps_start``); ``max_ratio`` for case 3; ``resource_balance`` and
    ``balance_ratio`` for the reference code's rule."""

    enabled: bool = True
    eps_start: float = 0.5
    eps_end: float = 0.1
    eps_decay_steps: int = 200_000
    max_ratio: float = 4.0
    resource_balance: bool = False
    balance_ratio: float = 4.0

    def validate(self) -> None:
        for name in ("eps_start", "eps_end"):
            v = check_number(getattr(self, name), f"exploration.{name}", ge=0)
            if v > 1.0:
                raise ConfigError(f"exploration.{name} must be in [0, 1], got {v}")
        if self.eps_decay_steps < 0:
            raise ConfigError("exploration.eps_decay_steps must be >= 0")
        for name in ("max_ratio", "balance_ratio"):
            check_number(getattr(self, name), f"exploration.{name}", ge=1)


class JobAwareExploration:
    """The override rule for one env shape: ``J`` window rows of ``L + 5`` features, caps
    ``max_workers`` / ``max_ps``."""

    def __init__(self, config: ExplorationConfig, J: int, L: int, max_workers: int, max_ps: int):
        config.validate()
        self.config = config
        self.J, self.L = int(J), int(L)
        self.max_workers, self.max_ps = int(max_workers), int(max_ps)
        self.width = self.L + FEATURES_PER_JOB

    def epsilon(self, step: int) -> float:
        c = self.config
        if not c.enabled:
            return 0.0
        if c.eps_decay_steps <= 0:
            return c.eps_start
        frac = min(max(step, 0) / c.eps_decay_steps, 1.0)
        return c.eps_start + frac * (c.eps_end - c.eps_start)

    def counts(self, obs: npt.NDArray[np.floating]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(occupied rows, workers, PS) of the window from one observation."""
        rows = np.asarray(obs, dtype=np.float64).reshape(self.J, -1)  # any feature set
        occupied = rows[:, : self.L].sum(axis=1) > 0.5
        workers = np.rint(rows[:, self.L + 3] * self.max_workers).astype(int)
        ps = np.rint(rows[:, self.L + 4] * self.max_ps).astype(int)
        return occupied, workers, ps

    def corrective(self, obs: npt.NDArray[np.floating], mask: npt.NDArray[np.bool_]) -> int | None:
        """The corrective action for the first poor window job, or ``None`` (no poor state)."""
        occupied, workers, ps = self.counts(obs)
        r = self.config.max_ratio
        need_ps = occupied & (workers > r * ps)  # includes workers > 0 with no PS
        need_w = occupied & (ps > r * workers)  # includes PS > 0 with no worker
        body = mask[:-1].reshape(self.J, 3)
        candidates = (need_ps & body[:, 1]) | (need_w & body[:, 0])
        if candidates.any():
            j = int(np.argmax(candidates))
            return 3 * j + (1 if need_ps[j] else 0)
        if self.config.resource_balance:
            return self._balance(occupied, workers + ps, mask)
        return None

    def _balance(
        self, occupied: np.ndarray, tasks: np.ndarray, mask: npt.NDArray[np.bool_]
    ) -> int | None:
        idx = np.flatnonzero(occupied)
        if len(idx) < 2:
            return None
        most = int(tasks[idx].max())
        poorest = int(idx[np.argmin(tasks[idx])])
        if most <= self.config.balance_ratio * max(int(tasks[poorest]), 1):
            return None
        for a in (3 * poorest + 2, 3 * poorest):
            if mask[a]:
                return a
        return None

    def apply(
        self,
        action: int,
        obs: npt.NDArray[np.floating],
        mask: npt.NDArray[np.bool_],
        step: int,
        rng: np.random.Generator,
    ) -> tuple[int, bool, bool]:
        """``(action to take, poor state?, overridden?)``; the draw uses ``rng`` only in a poor
        state, so the random stream does not depend on anything else."""
        if not self.config.enabled:
            return action, False, False
        fix = self.corrective(obs, mask)
        if fix is None:
            return action, False, False
        if rng.random() < self.epsilon(step):
            return fix, True, fix != action
        return action, True, False


@dataclass(frozen=True)
class StarvedJobExploration:
    """Job-aware exploration over the slot's plan (see the module docstring): the rollout's
    sampling mixes in ``epsilon`` uniform over the valid plans in a slot where a window job
    starves, and nowhere else (:meth:`at`; the behaviour probability is the mixture's, so the
    learner's importance weights stay exact).  ``row_width``: features per window row (``L +
    5`` or ``L + 7``), ``type_columns``: ``L``; ``globals``: the plan observation's trailing
    global features.  The window ``J`` is read off the observation's length, so the rule
    acts on any window.  Picklable: it travels to the rollout workers."""

    epsilon: float
    row_width: int
    type_columns: int
    globals: int
    stay: float = 0.1
    progress: float = 0.01

    def __post_init__(self) -> None:
        for name, lo, hi in (("epsilon", 0.0, 1.0), ("stay", 0.0, 1.0), ("progress", 0.0, 1.0)):
            v = float(getattr(self, name))
            if not (math.isfinite(v) and lo <= v <= hi):
                raise ConfigError(f"exploration {name} must be in [{lo}, {hi}], got {v}")
        if self.epsilon >= 1.0:
            raise ConfigError(f"exploration epsilon must be < 1, got {self.epsilon}")
        if not 0 <= self.type_columns < self.row_width - 1 or self.globals < 0:
            raise ConfigError(
                f"exploration layout: {self.type_columns} type columns in rows of "
                f"{self.row_width}, {self.globals} global features"
            )

    def starved(self, obs: npt.NDArray[np.floating]) -> bool:
        """Whether a window job in ``obs`` (a plan observation) starves."""
        n = (obs.shape[0] - self.globals) // self.row_width
        rows = np.asarray(obs[: n * self.row_width]).reshape(n, self.row_width)
        L = self.type_columns
        occupied = rows[:, :L].sum(axis=1) > 0.5
        waiting = (rows[:, L] >= self.stay) & (rows[:, L + 1] >= 1.0 - self.progress)
        return bool((occupied & waiting).any())

    def at(self, obs: npt.NDArray[np.floating]) -> float:
        """The uniform share of the sampling in the slot that opens with ``obs``."""
        return self.epsilon if self.epsilon > 0 and self.starved(obs) else 0.0
