"""The native slot allocators (``envs/sim/elastic/_alloc_native.c``): the Python allocators'
slots, without their per-task Python overhead.

Why: every learning result of the project comes from one decision per slot
(``dlsched/ClusterPlan-v0``), and half of its time went into the allocators themselves
(heaps, lambdas and a placement per task in Python).  :func:`allocate` runs one slot of
:class:`~envs.sim.elastic.allocators.DRF`, the fixed-demand allocators
(:class:`~envs.sim.elastic.fixed_demand.FixedDemand` without per-job requests,
``UniformDemand``, ``bundle``, ``adasrsf``, ``tiresias``),
:class:`~envs.sim.elastic.speed_aware.Optimus` and
:class:`~envs.sim.elastic.speed_aware.EfficientSRTF` (every option) in C, on any
:class:`~envs.sim.elastic.cluster.SlotCluster` placement rule, and writes back exactly what the
Python code leaves: the counts it returns, ``last_decisions`` and the cluster's free slots.
The Python classes are the specification; the C code computes the same floating-point
operations in the same order (``tests/sim/elastic/test_native_alloc.py`` cross-checks counts,
decision logs and clusters bit for bit over many workloads, every option and every rule).

Chosen automatically, like the native event loop: each covered allocator's ``allocate``
calls :func:`allocate` first and runs its Python code when it answers ``None``: the extension
is not built or is stale (``DLSCHED_NATIVE_ALLOC=0`` or :func:`use_native` turn it off), the
allocator is a subclass (its overrides would be skipped), the cluster is not a plain
``SlotCluster``, a job's demands or caps are not plain non-negative integers, or a job comes
twice (the Python code raises the error).

The slot transition too (issue 35): :func:`end_slot` runs
:meth:`~envs.sim.elastic.simulator.SlotSimulator.end_slot` up to ``on_slot`` (the checks, the
training loop, utilisation, reward and record), :func:`views` its ``active_jobs`` views and
:func:`slot_obs` the env's observation rows of a new slot
(``ObservationMixin._write_slot_obs``) in C, bit for bit as the Python code (the
specification, run when they answer ``None``/``False``: switched off, a subclass's hooks, an
error to raise, a value out of the ordinary; ``tests/sim/elastic/test_native_slot.py``).  The
C side keeps what a slot reads of a job's spec per spec object (4096 entries, holding the
specs), as the allocators' rows are kept here: specs are frozen.  The env's per-slot
bookkeeping of its window too: :func:`open_rows` (a new slot's alloc, rows and counts),
:func:`set_counts` (``plan_slot``'s write-back), :func:`decided` (the slot's allocation) and
:func:`any_valid` (the mask's rule over the window), each the Python code's loop, which runs
when they answer ``None``/``False``.  Standard library only.
"""

from __future__ import annotations

import math
import os
import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from envs.sim.elastic.allocator_base import JobState
from envs.sim.elastic.cluster import Placement, SlotCluster
from envs.sim.elastic.spec import ElasticJob, SpeedModel
from envs.sim.elastic.speed import MeasuredSpeed
from envs.sim.native import stale_build

try:
    from envs.sim.elastic import _alloc_native  # type: ignore[attr-defined]
except ImportError:  # not built (no C compiler at install time): the Python code runs
    _alloc_native = None

__all__ = ["KIND_DRF", "KIND_ESRTF", "KIND_FIXED", "KIND_OPTIMUS", "allocate", "any_valid",
           "available", "decided", "end_slot", "open_rows", "plan_obs", "set_counts",
           "slot_obs", "use_native", "used_totals", "views"]  # fmt: skip

KIND_DRF, KIND_FIXED, KIND_OPTIMUS, KIND_ESRTF = 0, 1, 2, 3
_RULES = {
    Placement.LEAST_LOADED: 0,
    Placement.REFERENCE: 1,
    Placement.FIRST_FIT: 2,
    Placement.PACKING: 3,
}
#: the packed row of a job, the C struct ``Row``: job id, arrival slot, worker CPU and GPU,
#: PS CPU and GPU, caps (8 int64), declared epochs, speed factor, iterations per epoch
ROW = struct.Struct("<8q3d")
#: rows cached per speed model before the cache is emptied (new episodes bring new jobs)
_CACHE_ROWS = 8192


#: ``MeasuredSpeed.speed``: where ``sim.speed`` is a MeasuredSpeed that does not override it,
#: :func:`end_slot` reads a rate not cached yet from its memo (``_rate``'s arithmetic) and
#: calls ``_rate`` only on a memo miss
_MEASURED_SPEED = MeasuredSpeed.speed
_STALE = stale_build(_alloc_native, Path(__file__).with_name("_alloc_native.c"))
_enabled = os.environ.get("DLSCHED_NATIVE_ALLOC", "1") != "0"


def available() -> bool:
    """Whether the extension is built from the current source."""
    return _alloc_native is not None and not _STALE


def enabled() -> bool:
    """Whether covered allocators run natively now (built, current, switched on)."""
    return _enabled and available()


#: ``enabled()``, kept current by :func:`use_native` (what every native path checks first)
_on = enabled()


@contextmanager
def use_native(on: bool) -> Iterator[None]:
    """Within the block, covered allocators run natively (``on``, where built) or in Python."""
    global _enabled, _on
    before = _enabled
    _enabled = bool(on)
    _on = enabled()
    try:
        yield
    finally:
        _enabled = before
        _on = enabled()


def used_totals(cluster: SlotCluster) -> tuple[int, int] | None:
    """``(used CPU, used GPU)`` slots of ``cluster`` after checking in C that every node's free
    slots are within ``[0, capacity]`` (what :meth:`SlotCluster.check` checks, with
    ``used_cpu_total``/``used_gpu_total``, in one pass); ``None`` when the extension is off
    or a node fails the check (then :meth:`SlotCluster.check` decides, and names the node)."""
    if not _on:
        return None
    out: tuple[int, int] | None = _alloc_native.check_free(
        cluster.free_cpu, cluster.free_gpu, cluster.cpu_capacity, cluster.gpu_capacity
    )
    return out


def end_slot(sim: Any, t: int, decided: Any, keep: float, record: type[Any]) -> Any:
    """:class:`~envs.sim.elastic.simulator.SlotSimulator` ``sim``'s ``_run_slot(t,
    decided)`` in C (``keep``: 1 minus the completion tolerance; ``record``: the
    ``SlotRecord`` class): the slot's record, with the runs, the utilisation and reward lists
    and the finished count updated as the Python code leaves them; or ``None``, nothing
    changed, when the Python code must run: the extension off, ``decided`` not a ``dict``, an
    error to raise (the Python code raises it) or a value it does not handle (anything but
    exact ints, floats, lists and pairs).  A rate not cached yet comes from the memo of a
    :class:`~envs.sim.elastic.speed.MeasuredSpeed` (not overridden) that holds the speed,
    with ``SlotSimulator._rate``'s arithmetic; else ``_rate`` is called.  The one trace a
    ``None`` can leave: the rates cached in ``_Run.rates`` that the Python loop caches too
    before it fails (a failing speed model is then asked twice)."""
    if not _on or type(decided) is not dict:
        return None
    return _alloc_native.end_slot(sim, decided, t, keep, record, _MEASURED_SPEED)


def views(active: list[Any]) -> list[JobState] | None:
    """``SlotSimulator.active_jobs`` for the runs ``active`` in C (each run's cached view,
    else a new one made and cached as the Python code does); ``None`` when switched off or
    a run is out of the ordinary (the Python code does the rest)."""
    if not _on:
        return None
    out: list[JobState] | None = _alloc_native.views(active, JobState)
    return out


def slot_obs(
    obs: Any, rows: list[Any], window: list[JobState], t: int, L: int, width: int, scale: float
) -> bool:
    """``ObservationMixin._write_slot_obs``'s base columns (zeros, then the stay, remaining
    and one-hot type columns of every window row) written into the float32 array ``obs`` in
    C, bit for bit as the Python loop writes them; ``False`` (nothing written) when switched
    off or the Python code must do it."""
    if not _on:
        return False
    return _alloc_native.slot_obs(obs, rows, window, t, L, width, scale) is not None


def open_rows(window: list[JobState], static: dict[int, Any]) -> tuple[Any, ...] | None:
    """The env's window bookkeeping of a new slot in C: ``(alloc, rows, counts, mask,
    n_valid)`` as ``ClusterEnv._open_next_slot``, ``_build_slot_cache`` and ``_open_mask``
    build them (``{v.spec.job_id: [0, 0] for v in window}``, ``[static[v.spec.job_id] for
    v in window]``, ``list(alloc.values())``, the rows' ``open_mask`` joined and their
    ``open_valid`` summed); ``None`` when switched off or the Python code must do it."""
    if not _on:
        return None
    out: tuple[Any, ...] | None = _alloc_native.open_rows(window, static)
    return out


def set_counts(alloc: dict[int, list[int]], target: Any) -> bool:
    """``for jid, c in alloc.items(): c[0], c[1] = target[jid]`` in C (``ClusterEnv.plan_slot``'s
    write-back); ``False`` (nothing written) when switched off or the Python loop must run."""
    if not _on or type(target) is not dict:
        return False
    return _alloc_native.set_counts(alloc, target) is not None


def decided(alloc: dict[int, list[int]]) -> dict[int, tuple[int, int]] | None:
    """``{jid: (c[0], c[1]) for jid, c in alloc.items()}`` in C (``ClusterEnv._close_slot``);
    ``None`` when switched off or the Python code must build it."""
    if not _on:
        return None
    out: dict[int, tuple[int, int]] | None = _alloc_native.decided(alloc)
    return out


def any_valid(fits: list[bool], rows: list[Any], counts: list[list[int]]) -> bool | None:
    """``ClusterEnv._any_valid``'s loop over the window rows in C (the fit state current);
    ``None`` when switched off or the Python loop must decide."""
    if not _on:
        return None
    out: bool | None = _alloc_native.any_valid(fits, rows, counts)
    return out


def plan_obs(out: Any, inner: Any, env: Any) -> bool:
    """``SlotPlanner.observe`` in C (``envs/gym/plan_env.py``): ``inner`` and the plan's
    global features of ``env`` written into the float32 array ``out``, bit for bit as the
    Python code writes them; ``False`` (nothing written) when switched off or the Python
    code must do it."""
    if not _on:
        return False
    return _alloc_native.plan_obs(out, inner, env) is not None


def _plain_int(x: Any) -> bool:
    return type(x) is int and 0 <= x < 1 << 40


class _Rows:
    """The packed row and speed grid of every job seen (keyed by ``id(spec)``, the spec kept
    in the entry so that the id cannot be reused), for one speed model (``None``: rows
    without grids, for the allocators that do not plan with speeds); shared by every
    allocator (:data:`_TABLES`)."""

    __slots__ = ("grids", "rows", "speed")

    def __init__(self, speed: SpeedModel | None) -> None:
        self.speed = speed
        self.rows: dict[int, tuple[ElasticJob, bytes, bytes | None]] = {}
        self.grids: dict[tuple[Any, int, int], bytes] = {}

    def add(self, jobs: Sequence[JobState], need_grid: bool) -> bool:
        """Rows for the jobs without one; ``False`` if a job cannot run natively."""
        rows = self.rows
        if len(rows) > _CACHE_ROWS:
            rows.clear()
        for view in jobs:
            spec = view.spec
            if id(spec) in rows:
                continue
            row = _row(view)
            if row is None:
                return False
            grid = None
            if need_grid:
                if spec.max_workers < 1 or spec.max_ps < 1:
                    return False  # EfficientSRTF's empty grid: the Python code's error
                grid = self._grid(spec.type, spec.max_workers, spec.max_ps)
            rows[id(spec)] = (spec, row, grid)
        return True

    def _grid(self, job_type: Any, max_w: int, max_p: int) -> bytes:
        """``float(speed(type, p, w))`` at ``p * (max_w + 1) + w`` (0 without a worker or a
        PS, which the allocators never ask for)."""
        key = (job_type, max_w, max_p)
        grid = self.grids.get(key)
        if grid is None:
            speed = self.speed
            assert speed is not None
            values = [
                float(speed.speed(job_type, p, w)) if p > 0 and w > 0 else 0.0
                for p in range(max_p + 1)
                for w in range(max_w + 1)
            ]
            grid = self.grids[key] = struct.pack(f"<{len(values)}d", *values)
        return grid


_INT_LIMIT = 1 << 40  # (_plain_int's bound)
_EXACT = 1 << 53  # ints a double holds exactly


def _usual_number(x: Any) -> bool:
    """A finite float, or an int a double holds exactly."""
    if type(x) is float:
        return math.isfinite(x)
    return type(x) is int and -_EXACT < x < _EXACT


def _row(view: JobState) -> bytes | None:
    """The packed row of ``view``'s job, or ``None`` if it cannot run natively: integer
    fields not plain ints, numbers not finite ints or floats (ints past 2**53 are not
    exactly doubles), progress not a number.  The usual case (exact ints and floats) is
    decided inline; anything else by the general checks."""
    spec = view.spec
    t = spec.type
    ints = (spec.job_id, spec.arrival_slot, t.worker_cpu, t.worker_gpu, t.ps_cpu, t.ps_gpu,
            spec.max_workers, spec.max_ps)  # fmt: skip
    jid, arrival, wc, wg, pc, pg, max_w, max_p = ints
    ipe = t.iterations_per_epoch
    floats = (spec.num_epochs, spec.speed_factor, ipe)
    ne, sf = floats[0], floats[1]
    progress = view.progress_epochs
    lim = _INT_LIMIT
    if not (
        type(jid) is int
        and type(arrival) is int
        and type(wc) is int
        and type(wg) is int
        and type(pc) is int
        and type(pg) is int
        and type(max_w) is int
        and type(max_p) is int
        and type(ipe) is int
        and 0 <= wc < lim
        and 0 <= wg < lim
        and 0 <= pc < lim
        and 0 <= pg < lim
        and 0 <= max_w < lim
        and 0 <= max_p < lim
        and 0 <= ipe < lim
        and _usual_number(ne)
        and _usual_number(sf)
        and (type(progress) is float or type(progress) is int)
    ):  # not the usual case: the general checks
        if not all(_plain_int(x) for x in ints[2:]) or type(jid) is not int:
            return None
        if type(arrival) is not int or not _plain_int(ipe):
            return None
        if not all(isinstance(x, int | float) and math.isfinite(x) for x in floats):
            return None
        if any(type(x) is int and abs(x) >= _EXACT for x in floats):
            return None  # not exactly a double
        if not isinstance(progress, float | int):
            return None
    return ROW.pack(*ints, float(ne), float(sf), float(ipe))


#: the row tables by ``id(speed model)`` (``id(None)`` for rows without grids)
_TABLES: dict[int, _Rows] = {}


def allocate(
    allocator: Any,
    kind: int,
    params: tuple[Any, ...],
    jobs: Sequence[JobState],
    cluster: SlotCluster,
    speed: SpeedModel,
    slot_s: float,
) -> dict[int, tuple[int, int]] | None:
    """One slot of ``allocator`` natively (``kind`` and ``params`` say which allocator and its
    options); the counts, with ``allocator.last_decisions`` and ``cluster`` updated as the
    Python code leaves them.  ``None``: run the Python code (see the module docstring)."""
    if not _on:
        return None
    if type(cluster) is not SlotCluster:
        return None
    need_grid = kind >= KIND_OPTIMUS
    model = speed if need_grid else None
    cache = _TABLES.get(id(model))
    if cache is None or cache.speed is not model:
        if len(_TABLES) > 16:
            _TABLES.clear()
        cache = _TABLES[id(model)] = _Rows(model)
    views = jobs if type(jobs) is list else list(jobs)
    call = _alloc_native.allocate
    layout = cluster._layout  # (index_layout's)
    args = (kind, params, views, cache.rows, cluster.free_cpu, cluster.free_gpu,
            cluster.cpu_capacity, cluster.gpu_capacity, _RULES[cluster.placement],
            float(slot_s), need_grid, layout[0], layout[1])  # fmt: skip
    out = call(*args)
    if out is None:
        if not cache.add(views, need_grid):
            return None
        out = call(*args)
        if out is None:  # a job given twice: the Python code raises the error
            return None
    counts, decisions, free_cpu, free_gpu, released, occupied = out
    allocator.last_decisions = decisions
    if occupied is None:  # (a free state beyond the positions the C side handles)
        built = _alloc_native.index(free_cpu, free_gpu, *cluster.index_layout)
        cluster.adopt(free_cpu, free_gpu, built, off_rule=released)
    else:  # the rest of the index is built when a search first needs it: adopt(free_cpu,
        # free_gpu, off_rule=released, occupied=occupied), its steps (a plain SlotCluster)
        cluster.off_rule += released
        cluster.free_cpu, cluster.free_gpu = free_cpu, free_gpu
        cluster._synced = False
        cluster.occupied = occupied
        cluster._state = None
        cluster._lazy_empty = False
    return counts
