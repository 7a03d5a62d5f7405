"""TicTac (Hashemi et al., SysML 2019): parameter-transfer order and the overlap it buys.

- :mod:`.graph`: a worker's op graph (recv ops, compute ops); shipped model graphs scaled to
  a :class:`~envs.sim.spec.ModelProfile`.
- :mod:`.order`: the properties P, M, M+; TIC, TAC and the random baseline.
- :mod:`.schedule`: one iteration as a two-resource list schedule (link, GPU); T, alpha, U.
- :mod:`.model`: a job's iteration (slowest worker) under an order policy.
- :mod:`.overlap`: the engine's hook: PS exchanges shortened to what compute does not hide.
"""

from envs.sim.tictac.graph import OpGraph, OpGraphError, available_graphs, graph_for
from envs.sim.tictac.model import IterationModel, OrderPolicy
from envs.sim.tictac.order import DepIndex, tac_order, tic_priorities
from envs.sim.tictac.schedule import IterationStats, ListScheduler

__all__ = [
    "DepIndex",
    "IterationModel",
    "IterationStats",
    "ListScheduler",
    "OpGraph",
    "OpGraphError",
    "OrderPolicy",
    "available_graphs",
    "graph_for",
    "tac_order",
    "tic_priorities",
]
