"""TicTac's iteration model: a job's iteration time from its op graph, bandwidth and order.

A synchronous PS job with ``W`` workers finishes an iteration when its slowest worker does:
``T_iter = max_w T_w``, each ``T_w`` the list schedule of :mod:`envs.sim.tictac.schedule`
under that worker's recv order.  Under ``RANDOM`` every worker draws its own order every
iteration (the stragglers of the paper's §6.3); under ``TIC`` the order is fixed up to ties,
which are broken at random per worker (the enforcement of §3.1); ``TAC``'s order is fixed.
"""

from __future__ import annotations

import enum

import numpy as np

from envs.sim.errors import ConfigError
from envs.sim.tictac.graph import OpGraph
from envs.sim.tictac.order import (
    DepIndex,
    order_from_priorities,
    random_order,
    tac_order,
    tic_priorities,
)
from envs.sim.tictac.schedule import IterationStats, ListScheduler


class OrderPolicy(enum.Enum):
    """How a worker orders its parameter transfers."""

    RANDOM = "random"
    TIC = "tic"
    TAC = "tac"

    @classmethod
    def parse(cls, value: str | OrderPolicy) -> OrderPolicy:
        if isinstance(value, OrderPolicy):
            return value
        try:
            return cls(value)
        except ValueError:
            known = [p.value for p in cls]
            raise ConfigError(f"unknown transfer order {value!r}; known: {known}") from None


class IterationModel:
    """Iteration time of one job's workers on ``graph`` under one order policy.

    ``rng`` (a ``numpy.random.Generator``) draws the random orders and TIC's tie breaks; a
    model with a policy that needs none may omit it.  ``tac_ms_per_mb`` is TAC's time oracle
    for transfers (ms per MB; the paper measures it once, offline, and every iteration then
    follows the same order); by default TAC orders at the bandwidth of each call.
    """

    def __init__(
        self,
        graph: OpGraph,
        policy: OrderPolicy | str,
        rng: np.random.Generator | None = None,
        *,
        upstream_tic_ties: bool = False,
        tac_ms_per_mb: float | None = None,
    ) -> None:
        self.graph = graph
        self.policy = OrderPolicy.parse(policy)
        self.rng = rng
        self.scheduler = ListScheduler(graph)
        self.tac_ms_per_mb = tac_ms_per_mb
        self.tic_has_ties = False
        self._index: DepIndex | None = None
        self._tic: np.ndarray | None = None
        self._tac: dict[float, np.ndarray] = {}
        self._fixed: dict[tuple[float, float, float | None], IterationStats] = {}
        self.upstream_tic_ties = upstream_tic_ties
        if self.policy is OrderPolicy.TIC:
            self._tic = tic_priorities(self.index, upstream_ties=upstream_tic_ties)
            self.tic_has_ties = len(np.unique(self._tic)) < graph.num_recvs
        needs_rng = self.policy is OrderPolicy.RANDOM or (
            self.policy is OrderPolicy.TIC and self.tic_has_ties
        )
        self.deterministic = not needs_rng
        if needs_rng and rng is None:
            raise ConfigError(f"{self.policy.value} order on {graph.name!r} needs an rng")

    @property
    def index(self) -> DepIndex:
        if self._index is None:
            self._index = DepIndex(self.graph)
        return self._index

    def tac(self, ms_per_mb: float) -> np.ndarray:
        """TAC's order with transfers timed at ``ms_per_mb`` (cached per value)."""
        key = ms_per_mb
        if key not in self._tac:
            recv_ms = self.scheduler.recv_mb * key
            self._tac[key] = tac_order(self.index, recv_ms)
        return self._tac[key]

    def draw_order(self, ms_per_mb: float = 1.0, oracle: float | None = None) -> np.ndarray:
        """One worker's recv order for one iteration (``oracle``: TAC's transfer time oracle
        in ms per MB, default the model's ``tac_ms_per_mb``, else ``ms_per_mb``)."""
        if self.policy is OrderPolicy.RANDOM:
            assert self.rng is not None
            return random_order(self.graph.num_recvs, self.rng)
        if self.policy is OrderPolicy.TIC:
            assert self._tic is not None
            return order_from_priorities(self._tic, self.rng if self.tic_has_ties else None)
        if oracle is None:
            oracle = self.tac_ms_per_mb if self.tac_ms_per_mb is not None else ms_per_mb
        return self.tac(oracle)

    def worker(
        self, ms_per_mb: float, compute_scale: float = 1.0, oracle: float | None = None
    ) -> IterationStats:
        """One worker's iteration (a fresh draw where the policy is random)."""
        if self.deterministic:
            key = (ms_per_mb, compute_scale, oracle)
            hit = self._fixed.get(key)
            if hit is None:
                order = self.draw_order(ms_per_mb, oracle)
                hit = self.scheduler.run(order, ms_per_mb, compute_scale)
                if len(self._fixed) < 4096:
                    self._fixed[key] = hit
            return hit
        return self.scheduler.run(self.draw_order(ms_per_mb, oracle), ms_per_mb, compute_scale)

    def iteration(
        self,
        ms_per_mb: float,
        workers: int = 1,
        compute_scale: float = 1.0,
        oracle: float | None = None,
    ) -> IterationStats:
        """A synchronous iteration of ``workers`` workers: the slowest worker's schedule."""
        if workers < 1:
            raise ConfigError(f"workers must be >= 1, got {workers}")
        if self.deterministic:
            return self.worker(ms_per_mb, compute_scale, oracle)
        runs = [self.worker(ms_per_mb, compute_scale, oracle) for _ in range(workers)]
        return max(runs, key=lambda s: s.T)
