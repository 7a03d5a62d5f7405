"""Per-node CPU/GPU slot bookkeeping of DL²'s elastic world (DL² reference ``cluster.py``).

Every node has ``ElasticCluster.cpu_slots`` CPU slots and ``gpu_slots`` GPU slots.  A task
(one worker or one parameter server) takes an integer number of each on one node.  The
cluster is cleared at the start of every time slot and the allocator rebuilds all placements
(DL² has no migration state).

**Over-commit is impossible by construction.**  Every method that adds load checks the node's
capacity first: the searching methods (:meth:`SlotCluster.place_least_loaded`,
:meth:`SlotCluster.place_bundle` without a node, :meth:`SlotCluster.take`) return ``None``
(``-1`` for ``take``) when nothing fits, and an *explicit* request to load a node beyond its
capacity (:meth:`SlotCluster.place`, or :meth:`SlotCluster.place_bundle` with a node) raises
:class:`~envs.sim.errors.ConfigError` naming the node, the demand and what is used.

Where a searching placement puts a task (DL²'s least-loaded rule, fixed by default, and the
other rules): :class:`Placement`.  How a search costs a few integer operations whatever the
number of nodes: :class:`SlotCluster`.
Details: docs/design/elastic.md#speed-of-the-slot-world-clusterpy-simulatorpy
"""

from __future__ import annotations

import functools
from enum import StrEnum
from heapq import heappop, heappush

import numpy as np

from envs.sim.elastic.spec import ElasticCluster
from envs.sim.engine import SimulationError
from envs.sim.errors import ConfigError

Demand = tuple[int, int]  # (CPU slots, GPU slots) of one task


class Placement(StrEnum):
    """Where a searching placement puts a task.

    **Least-loaded placement.**  DL² places every task on the node with the fewest used
    slots, ``used CPU + used GPU`` summed, ties broken by node index (a priority queue keyed by
    ``(used sum, node)`` in the reference).  The reference tries *only* that node and reports
    a failure when the task does not fit there, even if another, more loaded node has room
    (which happens with mixed CPU-only and GPU tasks: the least-loaded node may have free CPU
    but no free GPU).  By default we pick the least-loaded node *among the nodes where the
    task fits* (same tie rule), so a placement fails only when no node can hold the task;
    ``strict_reference=True`` reproduces the try-only-the-least-loaded rule.  When the
    least-loaded node can hold the task both rules choose the same node.

    **Other placement rules** (``placement=``; not DL²'s, for comparing stacks):
    ``first_fit`` puts a task on the lowest-index node it fits on (nodes fill in order),
    ``packing`` on the *most* loaded node it fits on, ties by index (best fit by load: keeps
    empty nodes empty).  Both fail only when no node can hold the task.
    """

    LEAST_LOADED = "least_loaded"  # least used CPU + GPU among the nodes it fits on (default)
    REFERENCE = "reference"  # DL²'s reference: the least-loaded node overall, or fail
    FIRST_FIT = "first_fit"  # the lowest-index node it fits on
    PACKING = "packing"  # the most loaded node it fits on


#: Other accepted names: ``ff`` is the contention stacks' name of the same rule (FF, the lowest
#: indices with room: ``envs/sim/policies/placement.py`` ``FirstFit``).
PLACEMENT_ALIASES: dict[str, Placement] = {"ff": Placement.FIRST_FIT}


def placement_rule(placement: str | Placement | None, strict_reference: bool = False) -> Placement:
    """The rule named by ``placement`` (``None``: from the ``strict_reference`` flag);
    :class:`ConfigError` for an unknown name or a contradiction with ``strict_reference``."""
    if placement is None:
        return Placement.REFERENCE if strict_reference else Placement.LEAST_LOADED
    try:
        rule = PLACEMENT_ALIASES.get(str(placement)) or Placement(placement)
    except ValueError:
        known = [p.value for p in Placement] + list(PLACEMENT_ALIASES)
        raise ConfigError(f"unknown placement {placement!r}; known: {known}") from None
    if strict_reference and rule is not Placement.REFERENCE:
        raise ConfigError(f"strict_reference contradicts placement={rule.value!r}")
    return rule


def _check_demand(cpu: int, gpu: int) -> None:
    if cpu < 0 or gpu < 0 or int(cpu) != cpu or int(gpu) != gpu:
        raise ConfigError(f"a task demand must be non-negative integers, got ({cpu}, {gpu})")


@functools.lru_cache(maxsize=64)
def _positions(cpu_cap: int, gpu_cap: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The free states ``fc * (gpu_cap + 1) + fg`` ranked by load level (``used CPU + used
    GPU``, then state): ``(position of every state, level of every position)``."""
    stride = gpu_cap + 1
    states = sorted(
        range((cpu_cap + 1) * stride),
        key=lambda st: (cpu_cap - st // stride + gpu_cap - st % stride, st),
    )
    pos_of = [0] * len(states)
    for pos, st in enumerate(states):
        pos_of[st] = pos
    level_of = tuple(cpu_cap - st // stride + gpu_cap - st % stride for st in states)
    return tuple(pos_of), level_of


@functools.lru_cache(maxsize=64)
def _position_bits(cpu_cap: int, gpu_cap: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per position (:func:`_positions`): its bit, and the bits of the *later* positions at
    the same load level (built once per capacity: a cluster of every episode needs them)."""
    _, level_of = _positions(cpu_cap, gpu_cap)
    n_pos = len(level_of)
    bits = tuple(1 << pos for pos in range(n_pos))
    later = tuple(
        sum(1 << q for q in range(pos + 1, n_pos) if level_of[q] == level_of[pos])
        for pos in range(n_pos)
    )
    return bits, later


@functools.lru_cache(maxsize=1024)
def _fit_mask(cpu_cap: int, gpu_cap: int, cpu: int, gpu: int) -> int:
    """The bits of the positions (:func:`_positions`) whose free state holds a ``(cpu, gpu)``
    task."""
    pos_of, _ = _positions(cpu_cap, gpu_cap)
    stride = gpu_cap + 1
    mask = 0
    for fc in range(max(cpu, 0), cpu_cap + 1):
        for fg in range(max(gpu, 0), gpu_cap + 1):
            mask |= 1 << pos_of[fc * stride + fg]
    return mask


class SlotCluster:
    """Used CPU and GPU slots of every node (read-only numpy ``int64`` arrays
    ``used_cpu``/``used_gpu``, current when read) and the free slots (lists ``free_cpu``/
    ``free_gpu``, read-only to callers).

    ``strict_reference=True`` makes the searching placements try only the least-loaded node,
    as DL²'s reference does; ``placement`` chooses any :class:`Placement` rule
    (``strict_reference=True`` is ``placement="reference"``).

    **Search without scanning the nodes.**  A node's *free state* is its pair (free CPU, free
    GPU); there are at most ``(cpu_slots + 1) x (gpu_slots + 1)`` of them (81 in DL²), and
    its load (``used CPU + used GPU``) is a function of the state.  The states are ranked by
    load level (their *positions*); the cluster keeps the set of occupied positions as the
    bits of an ``int`` (:attr:`occupied`), the number of nodes and a heap of the nodes of
    every position, and the position of every node.  The positions where a ``(cpu, gpu)``
    task fits form a fixed bit set (:meth:`fit_positions`, cached per demand), so a search is
    a few integer operations: ``occupied & fit`` are the candidate positions, its lowest bit
    the least load among the nodes the task fits on, and the smallest node index among the
    heap heads of the candidate positions of that level is the node (usually one position).
    That is the least-loaded rule (least load among fitting nodes, ties by index) in a cost
    that does not grow with the number of nodes or levels; ``first_fit`` takes the smallest
    head over all candidates, ``packing`` the highest level's, ``reference`` the lowest
    occupied level's (then checks the fit).  ``occupied & fit_positions(cpu, gpu)`` also says
    whether a task fits on some node.  Heaps are cleaned lazily (a node that left a position
    is dropped when it reaches the head).  The per-node state is kept in the lists
    ``free_cpu``/``free_gpu``; ``used_cpu``/``used_gpu`` are read-only numpy snapshots of it,
    rebuilt when read after a change (so placements, :meth:`check` and the totals cost no
    numpy call).  Change the state only through the methods.
    """

    def __init__(
        self,
        spec: ElasticCluster,
        *,
        strict_reference: bool = False,
        placement: str | Placement | None = None,
    ) -> None:
        self.spec = spec
        self.placement = placement_rule(placement, strict_reference)
        self.strict_reference = self.placement is Placement.REFERENCE
        self._least_loaded = self.placement is Placement.LEAST_LOADED
        self.cpu_capacity = int(spec.cpu_slots)
        self.gpu_capacity = int(spec.gpu_slots)
        #: Number of nodes; CPU and GPU slots of the whole cluster.
        self.num_nodes = int(spec.num_nodes)
        self.total_cpu = self.num_nodes * self.cpu_capacity
        self.total_gpu = self.num_nodes * self.gpu_capacity
        self._used_cpu = np.zeros(0, dtype=np.int64)  # snapshots, rebuilt when stale
        self._used_gpu = np.zeros(0, dtype=np.int64)
        self._synced = False  # whether the snapshots reflect the lists
        # The index (class docstring): free states ranked by load level ("positions"), a
        # bit per position in ``occupied`` when some node is in it, the node count and a lazy heap
        # of the nodes of every position, the position of every node.
        self._stride = self.gpu_capacity + 1
        self._pos_of, self._level_of = _positions(self.cpu_capacity, self.gpu_capacity)
        bits, later = _position_bits(self.cpu_capacity, self.gpu_capacity)
        n_pos = len(bits)
        self._bit = list(bits)
        # per position: the bits of the *later* positions at the same load level
        self._later_same_level = list(later)
        self._layout = (self._pos_of, self._stride, n_pos)  # index_layout
        self._empty_pos = self._pos_of[self.cpu_capacity * self._stride + self.gpu_capacity]
        # release_all's starting point, copied (a list copy costs less than building one)
        self._no_heaps: list[list[int] | None] = [None] * n_pos
        self._all_nodes = list(range(self.num_nodes))
        self._no_count = [0] * n_pos
        # ``occupied`` of an empty cluster: only the empty state's position (none without nodes)
        self._empty_occupied = self._bit[self._empty_pos] if self.num_nodes else 0
        self._demands: dict[tuple[int, int], tuple[int, int]] = {}  # checked -> as ints
        self._bundles: dict[tuple[Demand, Demand], tuple[int, int]] = {}  # checked -> summed
        self._fit_masks: dict[tuple[int, int], int] = {}  # demand -> _fit_mask()
        self.free_cpu: list[int] = []
        self.free_gpu: list[int] = []
        # node -> position; None while the index (this, the heaps and the counts) is not built:
        # release_all and adopt(occupied=...) leave it to the first search or placement
        # (_build_index); ``occupied`` and the free lists are always current
        self._state: list[int] | None = []
        self._lazy_empty = True  # what _build_index builds from: an empty cluster, or the lists
        # position -> heap of nodes (stale entries kept), None while no node came there
        self._buckets: list[list[int] | None] = []
        self._count: list[int] = []  # position -> nodes in it
        #: Read-only: the set (bits) of the free-state positions that hold a node; a task of
        #: ``(cpu, gpu)`` fits on some node iff ``occupied & fit_positions(cpu, gpu)``.
        self.occupied = 0
        #: Read-only: how many changes did not go through the placement rule since the cluster
        #: was built: releases (:meth:`release`, also those made inside a native allocator)
        #: and placements on a given node (:meth:`place`, :meth:`place_bundle` with a node).
        #: While it stays put, the cluster is what placing the same tasks one by one by the
        #: rule gives (what ``ClusterEnv.plan_slot`` relies on to skip the replay).
        self.off_rule = 0
        self.release_all()

    # ------------------------------------------------------------------ read-only views
    @property
    def used_cpu(self) -> np.ndarray:
        """Used CPU slots per node (``int64``)."""
        if not self._synced:
            self._sync()
        return self._used_cpu

    @property
    def used_gpu(self) -> np.ndarray:
        """Used GPU slots per node (``int64``)."""
        if not self._synced:
            self._sync()
        return self._used_gpu

    def _sync(self) -> None:
        self._used_cpu = np.subtract(self.cpu_capacity, self.free_cpu, dtype=np.int64)
        self._used_gpu = np.subtract(self.gpu_capacity, self.free_gpu, dtype=np.int64)
        self._used_cpu.setflags(write=False)
        self._used_gpu.setflags(write=False)
        self._synced = True

    @property
    def used_cpu_total(self) -> int:
        """Used CPU slots of the whole cluster."""
        return self.total_cpu - sum(self.free_cpu)

    @property
    def used_gpu_total(self) -> int:
        """Used GPU slots of the whole cluster."""
        return self.total_gpu - sum(self.free_gpu)

    @property
    def load(self) -> np.ndarray:
        """Per-node ``used CPU + used GPU`` slots, the least-loaded key."""
        return self.used_cpu + self.used_gpu

    def is_empty(self) -> bool:
        """No task on any node."""
        # every node in the empty state: its position is the only occupied one
        return self.occupied == self._empty_occupied

    def free(self, node: int) -> Demand:
        """Free (CPU, GPU) slots of ``node``."""
        self._check_node(node)
        return (self.free_cpu[node], self.free_gpu[node])

    # ------------------------------------------------------------------ checks
    def _demand(self, cpu: int, gpu: int) -> tuple[int, int]:
        """``(cpu, gpu)`` as ints after :func:`_check_demand` (checked once per demand)."""
        key = (cpu, gpu)
        checked = self._demands.get(key)
        if checked is None:
            _check_demand(cpu, gpu)
            checked = self._demands[key] = (int(cpu), int(gpu))
        return checked

    def _check_node(self, node: int) -> None:
        if not 0 <= node < self.num_nodes:
            raise ConfigError(f"node {node} out of range (cluster has {self.num_nodes} nodes)")

    def can_place(self, cpu: int, gpu: int, node: int) -> bool:
        """Whether a task of ``cpu`` CPU and ``gpu`` GPU slots fits on ``node`` now."""
        cpu, gpu = self._demand(cpu, gpu)
        self._check_node(node)
        return cpu <= self.free_cpu[node] and gpu <= self.free_gpu[node]

    def check(self) -> None:
        """Raise :class:`SimulationError` if any node is over capacity or negative."""
        free_cpu, free_gpu = self.free_cpu, self.free_gpu
        if (
            min(free_cpu) >= 0
            and min(free_gpu) >= 0
            and max(free_cpu) <= self.cpu_capacity
            and max(free_gpu) <= self.gpu_capacity
        ):
            return
        bad = [
            n
            for n, (fc, fg) in enumerate(zip(free_cpu, free_gpu, strict=True))
            if not (0 <= fc <= self.cpu_capacity and 0 <= fg <= self.gpu_capacity)
        ]
        if bad:
            node = bad[0]
            used_cpu = self.cpu_capacity - free_cpu[node]
            used_gpu = self.gpu_capacity - free_gpu[node]
            raise SimulationError(
                f"node {node} holds ({used_cpu} CPU, {used_gpu} GPU) slots, capacity "
                f"({self.cpu_capacity}, {self.gpu_capacity})"
            )

    # ------------------------------------------------------------------ placement
    def place(self, cpu: int, gpu: int, node: int) -> None:
        """Put a task on ``node``; raises :class:`ConfigError` if it would over-commit it."""
        if not self.can_place(cpu, gpu, node):
            raise ConfigError(
                f"over-commit refused: task ({cpu} CPU, {gpu} GPU) on node {node} which uses "
                f"({self.cpu_capacity - self.free_cpu[node]}, "
                f"{self.gpu_capacity - self.free_gpu[node]}) of "
                f"({self.cpu_capacity}, {self.gpu_capacity}) slots"
            )
        cpu, gpu = self._demands[(cpu, gpu)]
        self.off_rule += 1
        self._set_free(node, self.free_cpu[node] - cpu, self.free_gpu[node] - gpu)

    def release(self, cpu: int, gpu: int, node: int) -> None:
        """Take a task off ``node`` (undo of :meth:`place`)."""
        cpu, gpu = self._demand(cpu, gpu)
        self._check_node(node)
        used_cpu = self.cpu_capacity - self.free_cpu[node]
        used_gpu = self.gpu_capacity - self.free_gpu[node]
        if used_cpu < cpu or used_gpu < gpu:
            raise ConfigError(
                f"release of ({cpu} CPU, {gpu} GPU) from node {node} which uses only "
                f"({used_cpu}, {used_gpu})"
            )
        self.off_rule += 1
        self._set_free(node, self.free_cpu[node] + cpu, self.free_gpu[node] + gpu)

    def find_node(self, cpu: int, gpu: int) -> int | None:
        """The node a least-loaded placement of the task would use, or ``None``; places nothing.

        Default: least ``used CPU + used GPU`` among nodes where the task fits, ties by node
        index.  ``strict_reference``: the least-loaded node overall, ``None`` if it does not
        fit there.  ``first_fit``/``packing``: the lowest-index / most loaded node where it
        fits (ties by index).
        """
        cpu, gpu = self._demand(cpu, gpu)
        node = self._search(cpu, gpu)
        return None if node < 0 else node

    def take(self, cpu: int, gpu: int) -> int:
        """Place a task of ``(cpu, gpu)`` slots, non-negative ``int``\\ s (not checked: the
        fast path for callers that validated the demand), by the least-loaded rule of
        :meth:`find_node`; the node, or ``-1`` (nothing placed) when the rule finds none."""
        if not self._least_loaded:
            node = self._search(cpu, gpu)
            if node >= 0:
                self._set_free(node, self.free_cpu[node] - cpu, self.free_gpu[node] - gpu)
            return node
        fit = self._fit_masks.get((cpu, gpu))
        if fit is None:
            fit = self._fit_mask(cpu, gpu)
        cand = self.occupied & fit  # the occupied positions where the task fits
        if not cand:
            return -1
        if self._state is None:
            self._build_index()
        # The default rule and _set_free, inlined (the env's hot path; the same steps as
        # _search_rule and _set_free): the lowest candidate position has the least load;
        # the smallest node index among its nodes and those of the other candidate positions
        # of the same level.
        low = cand & -cand
        pos = low.bit_length() - 1
        state: list[int] = self._state  # type: ignore[assignment]  # built above
        buckets = self._buckets
        heap = buckets[pos]  # (an occupied position has its heap)
        node = heap[0]  # type: ignore[index]
        while state[node] != pos:  # drop stale entries (the position has a node)
            heappop(heap)  # type: ignore[arg-type]
            node = heap[0]  # type: ignore[index]
        same = cand & self._later_same_level[pos]
        if same:  # other states of the same load level where it fits (rare)
            node = self._min_head(same, node)
            pos = state[node]
            low = self._bit[pos]
        if not (cpu or gpu):  # an empty task: the node's state does not change
            return node
        free_cpu, free_gpu = self.free_cpu, self.free_gpu
        fc = free_cpu[node] - cpu
        fg = free_gpu[node] - gpu
        free_cpu[node] = fc
        free_gpu[node] = fg
        new = self._pos_of[fc * self._stride + fg]
        state[node] = new
        heap = buckets[new]
        if heap is None:  # the first node in this state since the slot began
            buckets[new] = [node]
        else:
            heappush(heap, node)
        count = self._count
        count[pos] -= 1
        if not count[pos]:
            self.occupied ^= low
        if not count[new]:
            self.occupied |= self._bit[new]
        count[new] += 1
        self._synced = False
        return node

    def place_least_loaded(self, cpu: int, gpu: int) -> int | None:
        """Place one task on the least-loaded node it fits on; the node, or ``None``."""
        cpu, gpu = self._demand(cpu, gpu)
        node = self.take(cpu, gpu)
        return None if node < 0 else node

    def bundle_demand(self, worker: Demand, ps: Demand) -> tuple[int, int]:
        """The summed ``(cpu, gpu)`` of a worker and a PS on one node, as ``int``\\ s, after
        checking the three demands (:class:`ConfigError`); :meth:`take` of it places a bundle
        as :meth:`place_bundle` does."""
        if type(worker) is not tuple or type(ps) is not tuple:  # e.g. lists: hashable keys
            worker, ps = (worker[0], worker[1]), (ps[0], ps[1])
        key = (worker, ps)
        summed = self._bundles.get(key)
        if summed is None:  # check the three demands once per (worker, PS) pair
            summed = self._demand(worker[0] + ps[0], worker[1] + ps[1])
            self._demand(*worker)
            self._demand(*ps)
            self._bundles[key] = summed
        return summed

    def place_bundle(self, worker: Demand, ps: Demand, node: int | None = None) -> int | None:
        """Place one worker and one PS together on one node; the node, or ``None``.

        Without ``node`` the node is chosen by the least-loaded rule on the summed demand.
        With ``node`` the bundle goes there if it fits (``None`` otherwise); nothing is placed
        on failure.
        """
        cpu, gpu = self.bundle_demand(worker, ps)
        if node is None:
            found = self.take(cpu, gpu)
            return None if found < 0 else found
        if not self.can_place(cpu, gpu, node):
            return None
        self.off_rule += 1
        self._set_free(node, self.free_cpu[node] - cpu, self.free_gpu[node] - gpu)
        return node

    def release_all(self) -> None:
        """Empty every node (start of a time slot)."""
        n = self.num_nodes
        self._synced = False
        self.free_cpu = [self.cpu_capacity] * n
        self.free_gpu = [self.gpu_capacity] * n
        self.occupied = self._empty_occupied
        self._state = None  # built by the first search or placement (_build_index)
        self._lazy_empty = True

    def _build_index(self) -> None:
        """The index (node positions, heaps, counts) of the free lists, left unbuilt by
        :meth:`release_all` or :meth:`adopt` (``occupied`` is current already)."""
        if self._lazy_empty:  # every node empty
            n = self.num_nodes
            empty = self._empty_pos
            self._state = [empty] * n
            self._buckets = self._no_heaps.copy()
            self._buckets[empty] = self._all_nodes.copy()  # ascending: a heap
            self._count = self._no_count.copy()
            self._count[empty] = n
        else:
            self._state, self._buckets, self._count, _ = self.index_of(self.free_cpu, self.free_gpu)

    def adopt(
        self,
        free_cpu: list[int],
        free_gpu: list[int],
        index: tuple[list[int], list[list[int] | None], list[int], int] | None = None,
        *,
        off_rule: int = 0,
        occupied: int | None = None,
    ) -> None:
        """Take ``free_cpu``/``free_gpu`` (lists of ``int``, one per node, within capacity:
        not checked) as the cluster's state and rebuild the index from them: how the native
        allocators (:mod:`envs.sim.elastic.native_alloc`) hand back the placements they made.
        Every search afterwards answers as if the same tasks had been placed one by one.
        ``index``: the index already built for these lists (``(state, buckets, count,
        occupied)``, as :meth:`index_of` builds it); or ``occupied``, its set of occupied
        positions only (:attr:`occupied`): the rest is built from the lists when a search or
        a placement first needs it; ``off_rule``: the changes among those placements that did
        not follow the rule (releases: added to :attr:`off_rule`)."""
        # (native_alloc.allocate makes the steps of the occupied= case itself: keep both alike)
        self.off_rule += off_rule
        self.free_cpu, self.free_gpu = free_cpu, free_gpu
        self._synced = False
        if index is None and occupied is not None:
            self.occupied = occupied
            self._state = None
            self._lazy_empty = False
            return
        if index is None:
            index = self.index_of(free_cpu, free_gpu)
        state, buckets, count, occ = index
        self._state, self._buckets, self._count = state, buckets, count
        self.occupied = occ

    @property
    def index_layout(self) -> tuple[tuple[int, ...], int, int]:
        """``(position of every free state, stride, number of positions)``: the free state
        ``(fc, fg)`` is at position ``pos_of[fc * stride + fg]`` (for an index built
        elsewhere, :meth:`adopt`)."""
        return self._layout

    def index_of(
        self, free_cpu: list[int], free_gpu: list[int]
    ) -> tuple[list[int], list[list[int] | None], list[int], int]:
        """The index of a cluster in these free states: every node's position, the nodes of
        every position (ascending: each list is a heap; ``None`` for a position without a
        node), the node count of every position and the set of occupied positions
        (:attr:`occupied`)."""
        pos_of, stride = self._pos_of, self._stride
        state = [pos_of[c * stride + g] for c, g in zip(free_cpu, free_gpu, strict=True)]
        buckets: list[list[int] | None] = [None] * len(self._level_of)
        count = [0] * len(self._level_of)
        for node, pos in enumerate(state):
            heap = buckets[pos]
            if heap is None:
                buckets[pos] = [node]
            else:
                heap.append(node)
            count[pos] += 1
        bit = self._bit
        occupied = 0
        for pos, c in enumerate(count):
            if c:
                occupied |= bit[pos]
        return state, buckets, count, occupied

    # ------------------------------------------------------------------ the index
    def fit_positions(self, cpu: int, gpu: int) -> int:
        """The set (bits) of the free-state positions on which a task of ``(cpu, gpu)`` slots
        fits; ``occupied & fit_positions(cpu, gpu)`` is non-zero iff it fits on some node."""
        cpu, gpu = self._demand(cpu, gpu)
        fit = self._fit_masks.get((cpu, gpu))
        return self._fit_mask(cpu, gpu) if fit is None else fit

    def _fit_mask(self, cpu: int, gpu: int) -> int:
        """The positions where an ``int`` demand fits (cached per demand)."""
        mask = self._fit_masks[(cpu, gpu)] = _fit_mask(
            self.cpu_capacity, self.gpu_capacity, cpu, gpu
        )
        return mask

    def _head(self, pos: int) -> int:
        """The smallest node index of an occupied position (dropping stale heap entries)."""
        heap, state = self._buckets[pos], self._state
        assert heap is not None and state is not None  # built by _search / take
        node = heap[0]
        while state[node] != pos:
            heappop(heap)
            node = heap[0]
        return node

    def _min_head(self, positions: int, best: int = -1) -> int:
        """The smallest node index over the occupied positions of the bit set ``positions``
        and ``best`` (-1: none)."""
        while positions:
            low = positions & -positions
            head = self._head(low.bit_length() - 1)
            if best < 0 or head < best:
                best = head
            positions ^= low
        return best

    def _search(self, cpu: int, gpu: int) -> int:
        """The node of the placement rule for an ``int`` demand, or ``-1``."""
        if self._state is None:
            self._build_index()
        if self.strict_reference:  # the least-loaded node overall, if the task fits there
            occ = self.occupied
            if not occ:
                return -1
            low = occ & -occ
            pos = low.bit_length() - 1
            node = self._min_head(occ & self._later_same_level[pos], self._head(pos))
            return node if cpu <= self.free_cpu[node] and gpu <= self.free_gpu[node] else -1
        fit = self._fit_masks.get((cpu, gpu))
        if fit is None:
            fit = self._fit_mask(cpu, gpu)
        cand = self.occupied & fit
        return self._search_rule(cand) if cand else -1

    def _search_rule(self, cand: int) -> int:
        """The node of a searching rule other than ``reference`` (see :meth:`_search`) among
        the occupied positions ``cand`` (not empty) where the task fits."""
        if self.placement is Placement.FIRST_FIT:  # the smallest index anywhere
            return self._min_head(cand)
        if self.placement is Placement.PACKING:  # the highest position: the most load
            pos = cand.bit_length() - 1
            level = self._level_of[pos]
            while pos > 0 and self._level_of[pos - 1] == level:
                pos -= 1  # the first position of that level
            return self._min_head(cand >> pos << pos)
        low = cand & -cand  # least loaded
        pos = low.bit_length() - 1
        return self._min_head(cand & self._later_same_level[pos], self._head(pos))

    def _set_free(self, node: int, fc: int, fg: int) -> None:
        """Move ``node`` to free state ``(fc, fg)`` (the caller checked the capacity)."""
        if self._state is None:
            self._build_index()
        new = self._pos_of[fc * self._stride + fg]
        old = self._state[node]  # type: ignore[index]  # built above
        if old == new:
            return
        self.free_cpu[node] = fc
        self.free_gpu[node] = fg
        self._state[node] = new  # type: ignore[index]
        heap = self._buckets[new]
        if heap is None:  # the first node in this state since the slot began
            self._buckets[new] = [node]
        else:
            heappush(heap, node)
        count = self._count
        count[old] -= 1
        if not count[old]:
            self.occupied ^= self._bit[old]
        if not count[new]:
            self.occupied |= self._bit[new]
        count[new] += 1
        self._synced = False
