"""Per-slot allocators of DL²'s elastic world, and their registry (:data:`ALLOCATORS`): DRF,
FIFO, SRTF, Tetris, Optimus, dlsched's own EfficientSRTF and LoadAwareESRTF, and the
fixed-demand allocators (:mod:`envs.sim.elastic.fixed_demand`).

Why: every consumer of an allocator name (``evaluate.py``'s ``elastic:<name>``, the
behaviour-cloning teacher ``pretrain.teacher``, ``train.py``'s ``eval.baselines`` and
``env.backlog``) looks it up in this one registry (:func:`make_allocator`; case-insensitive,
:data:`ALIASES` are the other accepted spellings); the names are listed at :data:`ALLOCATORS`.

An allocator is asked once per time slot, with the cluster empty, how many workers and
parameter servers (PS) every active job gets, placing every task while deciding (the contract
is at :class:`~envs.sim.elastic.allocator_base.Allocator`).  The five heuristics follow DL²'s
reference code with its flaws fixed by default; switches reproduce each flaw
(``Cls.reference()`` turns them all on; see
:class:`~envs.sim.elastic.allocator_base.AllocatorBase` and :class:`Tetris`).  Standard
library + numpy only.  The job view, the protocol and the shared base class are in
:mod:`envs.sim.elastic.allocator_base` (re-exported here), with the registry itself.

A new allocator is one class decorated ``@register_allocator("<name>", aliases=(...))`` in
any module imported by :mod:`envs.sim.elastic` (or by the code that uses it, e.g. a test):
nothing else lists it (docs/index.md, newcomer path (b)).

Details: docs/design/elastic.md#one-registry-of-allocators
"""

from __future__ import annotations

import ast
import heapq
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from envs.sim.elastic import native_alloc
from envs.sim.elastic.allocator_base import (
    ALIASES,
    ALLOCATORS,
    Allocator,
    AllocatorBase,
    Decision,
    InTurn,
    JobState,
    below_caps,
    dominant_share,
    index_jobs,
    register_allocator,
)
from envs.sim.elastic.cluster import SlotCluster
from envs.sim.elastic.spec import SpeedModel
from envs.sim.errors import ConfigError

__all__ = [
    "ALIASES",
    "ALLOCATORS",
    "DEFAULT_FIXED_WORKERS",
    "DL2_HEURISTICS",
    "DRF",
    "FIFO",
    "SRTF",
    "AdaSRSF",
    "Allocator",
    "AllocatorBase",
    "Decision",
    "EfficientSRTF",
    "FixedDemand",
    "InTurn",
    "JobState",
    "LoadAwareESRTF",
    "OneBundleEach",
    "Optimus",
    "Tetris",
    "TiresiasLAS",
    "UniformDemand",
    "allocator_from_label",
    "allocator_label",
    "allocator_name",
    "below_caps",
    "dominant_share",
    "index_jobs",
    "make_allocator",
    "optimus_utility",
    "parse_allocator_label",
    "register_allocator",
    "slots_to_finish",
]


@register_allocator("drf")
class DRF(AllocatorBase):
    """Dominant Resource Fairness by progressive filling in 1 worker + 1 PS bundles.

    Repeatedly the job with the smallest dominant share (ties: arrival, job id) gets one
    bundle on the least-loaded node; it stays in the queue while below both caps.
    """

    def allocate(
        self,
        jobs: Sequence[JobState],
        cluster: SlotCluster,
        speed: SpeedModel,
        slot_s: float,
    ) -> dict[int, tuple[int, int]]:
        if type(self) is DRF:  # the native slot, where built (envs.sim.elastic.native_alloc)
            params = (self.stop_at_first_failure,)
            out = native_alloc.allocate(
                self, native_alloc.KIND_DRF, params, jobs, cluster, speed, slot_s
            )
            if out is not None:
                return out
        by_id, counts = self._start(jobs)
        # Per job: its bundle demand (checked once by the cluster), caps and the worker/PS
        # demands for dominant_share() (its arithmetic, inlined below: this is the hot loop).
        static: dict[int, tuple[int, int, int, int, int, int, int, int]] = {}
        heap: list[tuple[float, int, int]] = []
        for j in by_id.values():
            (wc, wg), (pc, pg) = j.worker_demand, j.ps_demand
            bc, bg = cluster.bundle_demand(j.worker_demand, j.ps_demand)
            static[j.job_id] = (bc, bg, j.spec.max_workers, j.spec.max_ps, wc, wg, pc, pg)
            if below_caps(j, [0, 0]):
                heap.append((0.0, j.arrival, j.job_id))
        heapq.heapify(heap)
        total_cpu, total_gpu = cluster.total_cpu, cluster.total_gpu
        take, log = cluster.take, self.last_decisions
        heappop, heappush = heapq.heappop, heapq.heappush
        while heap:
            _, arrival, jid = heappop(heap)
            bc, bg, max_w, max_p, wc, wg, pc, pg = static[jid]
            node = take(bc, bg)  # _bundle(): one worker + one PS on one node
            if node < 0:
                if self.stop_at_first_failure:
                    break
                continue  # skip the job (default placement: it cannot fit later either)
            c = counts[jid]
            w = c[0] = c[0] + 1
            p = c[1] = c[1] + 1
            log.append((jid, "bundle", node))
            if w < max_w and p < max_p:
                share = 0.0  # dominant_share(job, w, p, cluster)
                if total_cpu > 0:
                    share = (w * wc + p * pc) / total_cpu
                if total_gpu > 0:
                    gpu_share = (w * wg + p * pg) / total_gpu
                    if gpu_share > share:
                        share = gpu_share
                heappush(heap, (share, arrival, jid))
        return self._result(counts)


@register_allocator("fifo")
class FIFO(InTurn):
    """First in, first out: by arrival slot (then job id), each job up to its caps."""

    def order_key(self, job: JobState) -> tuple[float, ...]:
        return (job.arrival, job.job_id)


@register_allocator("srtf", aliases=("srsf",))
class SRTF(InTurn):
    """Shortest remaining first by DL²'s *remaining fraction* ``1 - progress/num_epochs``
    (not remaining time), ties by arrival then job id; each job up to its caps.

    On DL²'s ``tiny`` and ``small`` workloads it gives exactly :class:`FIFO`'s results (DL²'s
    own code reports 519.6 vs 520.1 slots on small).  Jobs not yet started all have remaining
    fraction 1, so they are ranked by arrival, as FIFO ranks them.  The two rules differ only
    when capacity binds among jobs that have started.  There, a younger job may have run
    through a larger fraction of its epochs than an older one, and SRTF puts it first.  On
    ``medium`` they differ, e.g. 127.4 vs 124.9 slots on seed 0
    (``tests/sim/elastic/test_allocators.py``)."""

    def order_key(self, job: JobState) -> tuple[float, ...]:
        return (job.remaining_fraction, job.arrival, job.job_id)


@register_allocator("tetris")
class Tetris(AllocatorBase):
    """Tetris-style packing, node by node in index order, in bundles.

    For the current node and every active job ``j`` with bundle demand ``b_j`` (worker + PS):
    ``align_j = sum_r free_r(node) * b_j,r`` and ``remain_j = sum_r b_j,r * remaining
    fraction``; ``weight = mean(align) / mean(remain)`` over all active jobs (0 when
    ``mean(remain)`` is 0).  Score ``align - weight * remain`` (default, Tetris' preference for
    less remaining work) or ``align + weight * remain`` (``reference_sign``, DL²'s code).  The
    best-scoring job below its caps (ties: arrival, job id) gets a bundle on this node; scores
    are recomputed after every bundle.  The node is left when ``mean(align)`` is 0 (nothing
    free that any job uses), when no job is eligible, or on a failure: by default only jobs
    whose bundle fits on the node are eligible; with ``stop_at_first_failure`` the best job is
    tried regardless and a misfit ends the node (the reference).

    ``reference_sign`` (default ``False``): Tetris (Grandl et al.) prefers jobs with *less*
    remaining work, so the default score *subtracts* the weighted remaining-work term; the DL²
    code *adds* it.  With ``stop_at_first_failure`` the reference's failure rule is "give up on
    this node after its best-scoring job does not fit there"; by default the next-best job that
    fits is tried before moving on.
    """

    def __init__(self, *, reference_sign: bool = False, stop_at_first_failure: bool = False):
        super().__init__(stop_at_first_failure=stop_at_first_failure)
        self.reference_sign = reference_sign

    @classmethod
    def reference(cls) -> Tetris:
        return cls(reference_sign=True, stop_at_first_failure=True)

    def __repr__(self) -> str:
        return (
            f"Tetris(reference_sign={self.reference_sign}, "
            f"stop_at_first_failure={self.stop_at_first_failure})"
        )

    def allocate(
        self,
        jobs: Sequence[JobState],
        cluster: SlotCluster,
        speed: SpeedModel,
        slot_s: float,
    ) -> dict[int, tuple[int, int]]:
        by_id, counts = self._start(jobs)
        order = sorted(by_id.values(), key=lambda j: (j.arrival, j.job_id))
        if not order:
            return {}
        b_cpu = np.array([j.worker_demand[0] + j.ps_demand[0] for j in order], dtype=np.float64)
        b_gpu = np.array([j.worker_demand[1] + j.ps_demand[1] for j in order], dtype=np.float64)
        remain = (b_cpu + b_gpu) * np.array([j.remaining_fraction for j in order])
        mean_remain = float(remain.mean())
        cap_w = np.array([j.spec.max_workers for j in order])
        cap_p = np.array([j.spec.max_ps for j in order])
        n_w = np.zeros(len(order), dtype=np.int64)
        n_p = np.zeros(len(order), dtype=np.int64)
        sign = 1.0 if self.reference_sign else -1.0
        # Exact shortcuts (same decisions, fewer numpy passes): a node with nothing free has
        # mean(align) = 0, and by default a node smaller than every bundle has no eligible job.
        fit_filter = not self.stop_at_first_failure
        min_cpu, min_gpu = float(b_cpu.min()), float(b_gpu.min())
        for node in range(cluster.num_nodes):
            while True:
                free_cpu, free_gpu = cluster.free(node)
                if free_cpu == 0 and free_gpu == 0:
                    break
                if fit_filter and (free_cpu < min_cpu or free_gpu < min_gpu):
                    break
                align = free_cpu * b_cpu + free_gpu * b_gpu
                mean_align = float(align.mean())
                if mean_align == 0:
                    break
                weight = mean_align / mean_remain if mean_remain > 0 else 0.0
                eligible = (n_w < cap_w) & (n_p < cap_p)
                if fit_filter:
                    eligible &= (b_cpu <= free_cpu) & (b_gpu <= free_gpu)
                if not eligible.any():
                    break
                score = np.where(eligible, align + sign * weight * remain, -np.inf)
                i = int(np.argmax(score))  # first maximum: ties by arrival, then job id
                job = order[i]
                if cluster.place_bundle(job.worker_demand, job.ps_demand, node=node) is None:
                    break  # reference: a misfit ends this node
                n_w[i] += 1
                n_p[i] += 1
                self.last_decisions.append((job.job_id, "bundle", node))
        for i, job in enumerate(order):
            counts[job.job_id] = [int(n_w[i]), int(n_p[i])]
        return self._result(counts)


#: Every elastic allocator of :data:`ALLOCATORS` by name (each class's ``name``):
#:
#: =============  ==========================================================================
#: ``drf``        :class:`DRF` progressive filling (DL²'s default teacher)
#: ``fifo``       :class:`FIFO`, up to the caps per job in arrival order
#: ``srtf``       :class:`SRTF`: least remaining *fraction* first (alias ``srsf``, the name
#:                the teachers used; not the contention stacks' SRSF order, see ``adasrsf``)
#: ``tetris``     :class:`Tetris` packing
#: ``optimus``    :class:`Optimus`'s marginal-gain greedy on the speed model
#: ``esrtf``      :class:`EfficientSRTF`: shortest estimated remaining time first, each job at
#:                the smallest allocation within 92% of its best speed (options
#:                ``efficiency``, ``head``, ``backfill``: the rest to Optimus's greedy)
#: ``esrtf_load`` :class:`~envs.sim.elastic.speed_aware.LoadAwareESRTF`: EfficientSRTF at
#:                efficiency 1.0 with <= 3 active jobs, 0.92 with 4-5, 0.7 above (found by a
#:                search on ``medium``'s training seeds)
#: ``fixed``      :class:`~envs.sim.elastic.fixed_demand.FixedDemand`: each job its
#:                ``requested`` workers (default its cap), all or nothing, arrival order
#: ``bundle``     :class:`~envs.sim.elastic.fixed_demand.OneBundleEach`: one worker + one PS
#:                per job (DL²'s ``ASSIGN_BUNDLE``; the env's ``backlog``)
#: ``adasrsf``    :class:`~envs.sim.elastic.fixed_demand.AdaSRSF`: every job ``workers`` (4)
#:                workers and as many PS, least remaining service first (aliases ``ada_srsf``,
#:                ``ada-srsf``)
#: ``tiresias``   :class:`~envs.sim.elastic.fixed_demand.TiresiasLAS`: the same demand, least
#:                attained service first (2D-LAS, undiscretised)
#: =============  ==========================================================================
#:
#: Each class is registered where it is defined (:func:`register_allocator`, with its
#: aliases); the classes of the two sibling modules are imported here, after this module's
#: own, so that the registry lists DL²'s heuristics first, in the order above (the order
#: ``evaluation.bench`` and the experiments iterate it in).
from envs.sim.elastic.speed_aware import (  # noqa: E402
    EfficientSRTF,
    LoadAwareESRTF,
    Optimus,
    optimus_utility,
    slots_to_finish,
)

# registration order: the speed-aware allocators, then the fixed-demand ones
# isort: split
from envs.sim.elastic.fixed_demand import (  # noqa: E402
    DEFAULT_FIXED_WORKERS,
    AdaSRSF,
    FixedDemand,
    OneBundleEach,
    TiresiasLAS,
    UniformDemand,
)

#: The five heuristics that follow DL²'s reference code (each with ``reference()``).
DL2_HEURISTICS: tuple[str, ...] = ("drf", "fifo", "srtf", "tetris", "optimus")
#: :data:`ALIASES` (from :func:`register_allocator`) are the other accepted names, kept for
#: the configs and runs that use them: ``srsf`` is the name the behaviour-cloning teachers
#: gave SRTF (``conf/pretrain/srsf.yaml``).


def allocator_name(name: str, *, role: str = "allocator") -> str:
    """The registry name for ``name`` (case-insensitive, aliases resolved); an unknown name is
    a :class:`ConfigError` listing the valid ones (``role`` names what was asked for, e.g.
    ``"teacher"``)."""
    key = str(name).lower()
    key = ALIASES.get(key, key)
    if key not in ALLOCATORS:
        known = ", ".join(sorted({*ALLOCATORS, *ALIASES}))
        raise ConfigError(f"unknown {role} {name!r}; known: {known}")
    return key


def make_allocator(
    name: str, options: Mapping[str, Any] | None = None, *, role: str = "allocator"
) -> Allocator:
    """A fresh allocator by name; ``options`` go to its constructor (e.g. ``workers`` for
    ``adasrsf``, ``efficiency`` for ``esrtf``)."""
    key = allocator_name(name, role=role)
    kwargs = dict(options or {})
    try:
        return ALLOCATORS[key](**kwargs)
    except TypeError as exc:
        raise ConfigError(f"{role} {key!r}: bad options {kwargs}: {exc}") from None


def allocator_label(name: str, options: Mapping[str, Any]) -> str:
    """An allocator with options as one label: ``esrtf``, ``esrtf(efficiency=0.8)``, ...
    (options sorted by key; :func:`parse_allocator_label` reads it back)."""
    if not options:
        return name
    return f"{name}({', '.join(f'{k}={v}' for k, v in sorted(options.items()))})"


_LABEL = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_-]*)\s*(?:\((.*)\))?\s*$")


def parse_allocator_label(label: str, *, role: str = "allocator") -> tuple[str, dict[str, Any]]:
    """The inverse of :func:`allocator_label`: ``"esrtf(efficiency=0.8)"`` -> ``("esrtf",
    {"efficiency": 0.8})``, a bare name -> no options.  Values are Python literals (numbers,
    booleans, quoted strings); anything else is a :class:`ConfigError` naming the label
    (``role``: what the label names, e.g. ``"plan"``)."""
    m = _LABEL.match(str(label))
    if m is None:
        raise ConfigError(f"{role} {label!r}: expected NAME or NAME(key=value, ...)")
    name, body = m.group(1), m.group(2)
    options: dict[str, Any] = {}
    for part in [] if body is None or not body.strip() else body.split(","):
        key, eq, raw = part.partition("=")
        key = key.strip()
        if not eq or not key.isidentifier():
            raise ConfigError(f"{role} {label!r}: option {part.strip()!r} is not key=value")
        try:
            value = ast.literal_eval(raw.strip())
        except (ValueError, SyntaxError):
            raise ConfigError(f"{role} {label!r}: option {key}'s value {raw.strip()!r} is not a "
                              "number, boolean or quoted string") from None  # fmt: skip
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{role} {label!r}: option {key} must be finite, got {value}")
        if key in options:
            raise ConfigError(f"{role} {label!r}: option {key} given twice")
        options[key] = value
    return name, options


def allocator_from_label(label: str, *, role: str = "allocator") -> Allocator:
    """A fresh allocator from a label with options (``"esrtf(backfill=True)"``): unknown
    names, malformed labels and bad options are one :class:`ConfigError` each."""
    name, options = parse_allocator_label(label, role=role)
    return make_allocator(name, options, role=role)
