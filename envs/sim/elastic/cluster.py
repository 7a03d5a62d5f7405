"""Per-node CPU/GPU slot bookkeeping of DL²'s elastic world (DL² reference ``cluster.py``).

Every node has ``ElasticCluster.cpu_slots`` CPU slots and ``gpu_slots`` GPU slots.  A task
(one worker or one parameter server) takes an integer number of each on one node.  The
cluster is cleared at the start of every time slot and the allocator rebuilds all placements
(DL² has no migration state).

**Over-commit is impossible by construction.**  Every method that adds load checks the node's
capacity first: the searching methods (:meth:`SlotCluster.place_least_loaded`,
:meth:`SlotCluster.place_bundle` without a node) return ``None`` when nothing fits, and an
*explicit* request to load a node beyond its capacity (:meth:`SlotCluster.place`, or
:meth:`SlotCluster.place_bundle` with a node) raises :class:`~envs.sim.errors.ConfigError`
naming the node, the demand and what is used.

**Least-loaded placement.**  DL² places every task on the node with the fewest used slots,
``used CPU + used GPU`` summed, ties broken by node index (a priority queue keyed by
``(used sum, node)`` in the reference).  The reference tries *only* that node and reports a
failure when the task does not fit there, even if another, more loaded node has room (which
happens with mixed CPU-only and GPU tasks: the least-loaded node may have free CPU but no
free GPU).  By default we pick the least-loaded node *among the nodes where the task fits*
(same tie rule), so a placement fails only when no node can hold the task;
``strict_reference=True`` reproduces the try-only-the-least-loaded rule.  When the
least-loaded node can hold the task both rules choose the same node.
"""

from __future__ import annotations

import numpy as np

from envs.sim.elastic.spec import ElasticCluster
from envs.sim.engine import SimulationError
from envs.sim.errors import ConfigError

Demand = tuple[int, int]  # (CPU slots, GPU slots) of one task


def _check_demand(cpu: int, gpu: int) -> None:
    if cpu < 0 or gpu < 0 or int(cpu) != cpu or int(gpu) != gpu:
        raise ConfigError(f"a task demand must be non-negative integers, got ({cpu}, {gpu})")


class SlotCluster:
    """Used CPU and GPU slots of every node (numpy ``int64`` arrays ``used_cpu``/``used_gpu``).

    ``strict_reference=True`` makes the searching placements try only the least-loaded node,
    as DL²'s reference does (see the module docstring).
    """

    def __init__(self, spec: ElasticCluster, *, strict_reference: bool = False) -> None:
        self.spec = spec
        self.strict_reference = strict_reference
        self.cpu_capacity = int(spec.cpu_slots)
        self.gpu_capacity = int(spec.gpu_slots)
        self.used_cpu = np.zeros(spec.num_nodes, dtype=np.int64)
        self.used_gpu = np.zeros(spec.num_nodes, dtype=np.int64)

    # ------------------------------------------------------------------ read-only views
    @property
    def num_nodes(self) -> int:
        return self.spec.num_nodes

    @property
    def total_cpu(self) -> int:
        """CPU slots of the whole cluster."""
        return self.spec.num_nodes * self.cpu_capacity

    @property
    def total_gpu(self) -> int:
        """GPU slots of the whole cluster."""
        return self.spec.num_nodes * self.gpu_capacity

    @property
    def load(self) -> np.ndarray:
        """Per-node ``used CPU + used GPU`` slots, the least-loaded key."""
        return self.used_cpu + self.used_gpu

    def free(self, node: int) -> Demand:
        """Free (CPU, GPU) slots of ``node``."""
        self._check_node(node)
        return (
            self.cpu_capacity - int(self.used_cpu[node]),
            self.gpu_capacity - int(self.used_gpu[node]),
        )

    # ------------------------------------------------------------------ checks
    def _check_node(self, node: int) -> None:
        if not 0 <= node < self.spec.num_nodes:
            raise ConfigError(f"node {node} out of range (cluster has {self.num_nodes} nodes)")

    def can_place(self, cpu: int, gpu: int, node: int) -> bool:
        """Whether a task of ``cpu`` CPU and ``gpu`` GPU slots fits on ``node`` now."""
        _check_demand(cpu, gpu)
        self._check_node(node)
        return (
            int(self.used_cpu[node]) + cpu <= self.cpu_capacity
            and int(self.used_gpu[node]) + gpu <= self.gpu_capacity
        )

    def check(self) -> None:
        """Raise :class:`SimulationError` if any node is over capacity or negative."""
        bad = np.flatnonzero(
            (self.used_cpu > self.cpu_capacity)
            | (self.used_gpu > self.gpu_capacity)
            | (self.used_cpu < 0)
            | (self.used_gpu < 0)
        )
        if bad.size:
            node = int(bad[0])
            raise SimulationError(
                f"node {node} holds ({int(self.used_cpu[node])} CPU, {int(self.used_gpu[node])} "
                f"GPU) slots, capacity ({self.cpu_capacity}, {self.gpu_capacity})"
            )

    # ------------------------------------------------------------------ placement
    def place(self, cpu: int, gpu: int, node: int) -> None:
        """Put a task on ``node``; raises :class:`ConfigError` if it would over-commit it."""
        if not self.can_place(cpu, gpu, node):
            raise ConfigError(
                f"over-commit refused: task ({cpu} CPU, {gpu} GPU) on node {node} which uses "
                f"({int(self.used_cpu[node])}, {int(self.used_gpu[node])}) of "
                f"({self.cpu_capacity}, {self.gpu_capacity}) slots"
            )
        self.used_cpu[node] += cpu
        self.used_gpu[node] += gpu

    def release(self, cpu: int, gpu: int, node: int) -> None:
        """Take a task off ``node`` (undo of :meth:`place`)."""
        _check_demand(cpu, gpu)
        self._check_node(node)
        if int(self.used_cpu[node]) < cpu or int(self.used_gpu[node]) < gpu:
            raise ConfigError(
                f"release of ({cpu} CPU, {gpu} GPU) from node {node} which uses only "
                f"({int(self.used_cpu[node])}, {int(self.used_gpu[node])})"
            )
        self.used_cpu[node] -= cpu
        self.used_gpu[node] -= gpu

    def find_node(self, cpu: int, gpu: int) -> int | None:
        """The node a least-loaded placement of the task would use, or ``None``; places nothing.

        Default: least ``used CPU + used GPU`` among nodes where the task fits, ties by node
        index.  ``strict_reference``: the least-loaded node overall, ``None`` if it does not
        fit there.
        """
        _check_demand(cpu, gpu)
        fits = (self.used_cpu <= self.cpu_capacity - cpu) & (
            self.used_gpu <= self.gpu_capacity - gpu
        )
        load = self.used_cpu + self.used_gpu
        if self.strict_reference:
            node = int(np.argmin(load))  # first minimum: ties by node index
            return node if bool(fits[node]) else None
        if not fits.any():
            return None
        big = np.iinfo(np.int64).max
        return int(np.argmin(np.where(fits, load, big)))

    def place_least_loaded(self, cpu: int, gpu: int) -> int | None:
        """Place one task on the least-loaded node it fits on; the node, or ``None``."""
        node = self.find_node(cpu, gpu)
        if node is not None:
            self.place(cpu, gpu, node)
        return node

    def place_bundle(self, worker: Demand, ps: Demand, node: int | None = None) -> int | None:
        """Place one worker and one PS together on one node; the node, or ``None``.

        Without ``node`` the node is chosen by the least-loaded rule on the summed demand.
        With ``node`` the bundle goes there if it fits (``None`` otherwise); nothing is placed
        on failure.
        """
        cpu, gpu = worker[0] + ps[0], worker[1] + ps[1]
        if node is None:
            node = self.find_node(cpu, gpu)
            if node is None:
                return None
        elif not self.can_place(cpu, gpu, node):
            return None
        self.place(worker[0], worker[1], node)
        self.place(ps[0], ps[1], node)
        return node

    def release_all(self) -> None:
        """Empty every node (start of a time slot)."""
        self.used_cpu.fill(0)
        self.used_gpu.fill(0)
