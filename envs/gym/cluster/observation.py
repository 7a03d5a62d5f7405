"""The observation encoding of ``dlsched/Cluster-v0``: one row of per-job features per window
job (:class:`ObservationMixin` documents the columns), kept incrementally within a slot.

The per-job rows (:class:`_Row`, built at reset) also carry what the action masks need (the
job's demands and caps), so that a placement touches one small record.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from envs.gym.cluster.contract import FEATURES_PER_JOB, Obs
from envs.sim.elastic import native_alloc
from envs.sim.elastic.allocators import JobState
from envs.sim.elastic.spec import ElasticCluster, ElasticJob, SpeedModel
from envs.sim.elastic.workload import DL2Setting

__all__ = ["REMAINING_SCALE", "STAY_SCALE", "ObservationMixin"]

#: Slots since arrival are divided by this and clipped to 1 (DL²'s disabled ``stay / 100``).
STAY_SCALE = 100.0
#: Slots of remaining work that the extended remaining-work column maps to 1 (log scale).
REMAINING_SCALE = 10_000.0
_LOG_REMAINING = math.log1p(REMAINING_SCALE)


@dataclass(frozen=True, slots=True)
class _Row:
    """What a window row needs of its job: worker and PS demands (CPU, GPU slots), caps,
    indices of its worker, PS and bundle demands in ``ClusterEnv._demands``, type index."""

    wc: int
    wg: int
    pc: int
    pg: int
    max_w: int
    max_p: int
    iw: int
    ip: int
    ib: int
    type_index: int
    open_mask: bytes  # the row's mask entries with nothing allocated on an empty cluster
    open_valid: int  # how many of them are True
    acts: tuple[tuple[int, int], ...]  # per action kind (worker, PS, bundle): (CPU, GPU)
    arrival: int  # arrival slot
    # The allocation columns of the row for (w, p) at index ``w * (max_p + 1) + p``, filled
    # on first use; shared by the jobs of the same demands and caps (ClusterEnv._tables).
    table: list[tuple[float, float, float] | None]
    epochs_per_slot: float = 0.0  # at the job's caps (extended features)
    size: float = 0.0  # the extended size column


class ObservationMixin:
    """The observation of :class:`~envs.gym.cluster.env.ClusterEnv`: a flat
    ``Box(0, 1, (J * (L + 5),), float32)``; row ``j`` (entries ``j*(L+5) .. j*(L+5)+L+4``)
    describes window job ``j``; rows without a job are zero:

    =============  ======================================================================
    columns        value
    =============  ======================================================================
    ``0 .. L-1``   one-hot job type (``JobType.index``; ``L`` = number of types, 8 in DL²)
    ``L``          slots since arrival ``(t - arrival) / STAY_SCALE`` clipped to 1 (DL²'s
                   ``STAY``; :data:`STAY_SCALE` = 100 slots, DL²'s disabled rescale constant)
    ``L + 1``      remaining declared epochs ``max(1 - progress / num_epochs, 0)``
    ``L + 2``      dominant-resource share of the allocation built so far in this slot
                   (over the cluster's total CPU and GPU slots; in [0, 1] by construction)
    ``L + 3``      workers allocated so far in this slot / ``max_workers``
    ``L + 4``      PS allocated so far in this slot / ``max_ps`` (0 when ``max_ps`` is 0)
    =============  ======================================================================

    With ``features="extended"`` each row has two more columns (``L + 5``, ``L + 6``), for
    workloads whose job sizes the type does not determine (real traces; DL²'s generator sets
    a job's epochs from its type):

    =============  ======================================================================
    ``L + 5``      remaining work in slots at the job's caps, log-scaled:
                   ``log1p(remaining epochs / epochs per slot at (max_ps, max_workers))
                   / log1p(REMAINING_SCALE)`` clipped to 1 (:data:`REMAINING_SCALE` = 10,000)
    ``L + 6``      requested size ``log1p(max_workers) / log1p(setting.max_workers)``, clipped
    =============  ======================================================================

    *Difference from DL²:* its input is raw integers (type 1..8, stay, workers, PS;
    ``INPUT_RESCALE = False``); here the type is one-hot and the counts are scaled to [0, 1]
    by the constants above so that off-the-shelf policies see bounded inputs.

    The rows are written when a slot opens (:meth:`_write_slot_obs`, column-wise through
    numpy); a placement rewrites the three allocation columns of its row from the row's
    lazily filled table (:meth:`_columns`) through a memoryview.
    """

    # State of the env (ClusterEnv.__init__ and reset set it; declared for the type checker).
    L: int
    J: int
    setting: DL2Setting
    speed: SpeedModel
    cluster_spec: ElasticCluster
    jobs: tuple[ElasticJob, ...]
    _n_features: int
    _width: int
    _slot_open: bool
    _t: int
    _cap_cpu: int
    _cap_gpu: int
    _total_cpu: int
    _total_gpu: int
    _static: dict[int, _Row]
    _rows: list[_Row]
    _window: list[JobState]
    _demands: list[tuple[int, int]]
    _tables: dict[tuple[int, ...], list[tuple[float, float, float] | None]]
    _obs_flat: Obs
    _obs_buf: Obs
    _obs_mv: Any

    def _init_obs_buffers(self) -> None:
        """The flat observation buffer and its views; needs ``J`` and ``_width``."""
        self._obs_flat = np.zeros(self.J * self._width, dtype=np.float32)
        self._bind_obs_views()
        #: rows by (profile, arrival, demand indices), shared across episodes (_prepare_jobs)
        self._row_cache: dict[tuple[Any, ...], tuple[Any, _Row]] = {}

    def _bind_obs_views(self) -> None:
        """Views of ``_obs_flat`` (again after unpickling): its rows, and a memoryview.  Item
        writes through a memoryview cost half of numpy's; both round a Python float to float32
        by the same C cast, so the values are the same.  (Any: typeshed types a memoryview's
        items as int, this one's format is "f".)"""
        self._obs_buf = self._obs_flat.reshape(self.J, self._width)
        self._obs_mv = self._obs_flat.data

    def _prepare_jobs(self) -> None:
        """Per-job rows (demands, caps, indices of the distinct demands, type) and the
        distinct demands (``_demands``) of the episode's jobs.  What a row takes of its job's
        type and caps is worked out once per profile (type object, caps) of the episode; with
        the DL² features a row is then shared by the jobs (of any episode) of the same
        profile, arrival and demand indices (``_row_cache``: rows are immutable)."""
        index: dict[tuple[int, int], int] = {}
        self._static = static = {}
        cap_c, cap_g = self._cap_cpu, self._cap_gpu
        extended = self._n_features > FEATURES_PER_JOB
        rows = self._row_cache
        if len(rows) > 8192:
            rows.clear()
        profiles: dict[tuple[int, int, int], tuple[Any, ...]] = {}
        for job in self.jobs:
            t = job.type
            max_w, max_p = job.max_workers, job.max_ps
            pkey = (id(t), max_w, max_p)
            prof = profiles.get(pkey)
            if prof is None or prof[0] is not t:
                wc, wg, pc, pg = t.worker_cpu, t.worker_gpu, t.ps_cpu, t.ps_gpu
                demands = ((wc, wg), (pc, pg), (wc + pc, wg + pg))
                ids = tuple([index.setdefault(d, len(index)) for d in demands])
                # on an empty cluster every rule places a task iff it fits on an empty node
                fw, fp, fb = (c <= cap_c and g <= cap_g for c, g in demands)
                w_ok, p_ok = max_w > 0, max_p > 0
                bits = (w_ok and fw, p_ok and fp, w_ok and p_ok and fb)
                table = self._table(wc, wg, pc, pg, max_w, max_p)
                prof = profiles[pkey] = (t, ids, bits, demands, table)
            _, ids, bits, demands, table = prof
            eps = 0.0
            size = 0.0
            if extended:
                its = self.speed.speed(t, max_p, max_w)
                eps = its * self.cluster_spec.slot_s / t.iterations_per_epoch
                top = max(self.setting.max_workers, 1)
                size = min(math.log1p(max_w) / math.log1p(top), 1.0)
            else:
                rkey = (pkey, job.arrival_slot, ids)
                hit = rows.get(rkey)
                if hit is not None and hit[0] is t and hit[1].table is table:
                    static[job.job_id] = hit[1]
                    continue
            (wc, wg), (pc, pg), _ = demands
            row = _Row(
                wc,
                wg,
                pc,
                pg,
                max_w,
                max_p,
                ids[0],
                ids[1],
                ids[2],
                t.index,
                bytes(bits),
                sum(bits),
                ((wc, wg), (pc, pg), (wc + pc, wg + pg)),
                job.arrival_slot,
                table,
                eps,
                size,
            )
            static[job.job_id] = row
            if not extended:
                rows[rkey] = (t, row)
        self._demands = list(index)

    def _table(
        self, wc: int, wg: int, pc: int, pg: int, max_w: int, max_p: int
    ) -> list[tuple[float, float, float] | None]:
        """The (shared, lazily filled) allocation-column table of a job profile."""
        key = (wc, wg, pc, pg, max_w, max_p)
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = [None] * ((max_w + 1) * (max_p + 1))
        return table

    def _columns(self, row: _Row, w: int, p: int) -> tuple[float, float, float]:
        """The allocation columns of ``row`` with ``w`` workers and ``p`` PS (dominant share
        clipped at 1, ``w / max_workers``, ``p / max_ps``), into its table."""
        share = 0.0  # dominant_share(), the same arithmetic
        if self._total_cpu > 0:
            share = (w * row.wc + p * row.pc) / self._total_cpu
        if self._total_gpu > 0:
            gpu_share = (w * row.wg + p * row.pg) / self._total_gpu
            if gpu_share > share:  # max(share, gpu_share)
                share = gpu_share
        columns = (
            1.0 if share > 1.0 else share,  # min(share, 1.0)
            w / row.max_w,
            p / row.max_p if row.max_p > 0 else 0.0,
        )
        row.table[w * (row.max_p + 1) + p] = columns
        return columns

    def _write_slot_obs(self) -> None:
        """The observation of a newly opened slot (``_rows`` and ``_window`` set)."""
        rows = self._rows
        t, L, width = self._t, self.L, self._width
        # in C where built (native_alloc.slot_obs: the loop below, bit for bit)
        if not native_alloc.slot_obs(self._obs_flat, rows, self._window, t, L, width, STAY_SCALE):
            self._obs_flat.fill(0.0)  # the allocation columns are 0: nothing allocated yet
            # Row by row through the memoryview: the values are computed in Python floats
            # as before (stay, and JobState.remaining_fraction inlined), clipped at 1, then
            # rounded to float32 by the item write (the same C cast as numpy's assignment;
            # the clip commutes with the rounding: it is monotone and 1.0 is a float32).
            obs = self._obs_mv
            base = 0
            for row, v in zip(rows, self._window, strict=True):
                stay = (t - row.arrival) / STAY_SCALE
                rem = 1.0 - v.progress_epochs / v.spec.num_epochs
                if rem < 0.0:  # max(rem, 0.0) without the call (the same value, -0.0, NaN)
                    rem = 0.0
                obs[base + L] = 1.0 if stay > 1.0 else stay
                obs[base + L + 1] = 1.0 if rem > 1.0 else rem
                obs[base + row.type_index] = 1.0
                base += width
        if rows and self._n_features > FEATURES_PER_JOB:
            n, buf = len(rows), self._obs_buf
            buf[:n, L + 5] = [
                min(
                    math.log1p(
                        max(v.spec.num_epochs - v.progress_epochs, 0.0) / row.epochs_per_slot
                    )
                    / _LOG_REMAINING,
                    1.0,
                )
                if row.epochs_per_slot > 0
                else 1.0
                for v, row in zip(self._window, rows, strict=True)
            ]
            buf[:n, L + 6] = [row.size for row in rows]

    def _obs(self) -> Obs:
        return self._obs_flat.copy() if self._slot_open else self._obs_flat_closed()

    def _obs_flat_closed(self) -> Obs:
        return np.zeros(self.J * self._width, dtype=np.float32)
