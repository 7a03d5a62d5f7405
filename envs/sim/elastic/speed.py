"""Training-speed models of DL²'s elastic world (DL² ``speed.py`` and ``job.py``).

* :class:`MeasuredSpeed` (``"measured"``): DL²'s default, a per-model interpolant of the
  authors' testbed measurements (``envs/sim/data/dl2/measured_speed.csv``), precomputed into a
  (PS, workers) lookup table.
* :class:`AnalyticalSpeed` (``"analytical"``): DL²'s PS/worker analytical model, without
  placement (every PS and worker on its own node).
* :func:`epochs_per_slot`: the epochs a job completes in one time slot at an allocation.

Speeds are total iterations (batches) per second summed over the job's workers.  Standard
library + numpy only (no scipy: the radial-basis-function fit is a dense numpy solve).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from envs.sim.elastic.spec import ElasticJob, JobType, SpeedModel
from envs.sim.errors import ConfigError
from envs.sim.workload import _data_file, _err, _float_field, _int_field, _read_csv, _text

__all__ = ["AnalyticalSpeed", "MeasuredSpeed", "epochs_per_slot", "load_measured_speeds"]

PathLike = str | os.PathLike[str]
FloatArray = npt.NDArray[np.float64]

_MEASURED_REQUIRED = ("model", "num_ps", "num_workers", "total_speed")


# --------------------------------------------------------------------------------------------
# Measured speeds
# --------------------------------------------------------------------------------------------


def load_measured_speeds(
    path: PathLike | None = None,
) -> dict[str, dict[tuple[int, int], float]]:
    """Read a measured-speed table: ``{model: {(num_ps, num_workers): total_speed}}``.

    Default: the shipped ``dl2/measured_speed.csv``.  Required columns (others, such as
    ``per_worker_speeds`` or the CPU utilisations, are ignored): ``model`` (non-empty),
    ``num_ps`` and ``num_workers`` (integers >= 1), ``total_speed`` (number >= 0, batches/s
    summed over workers; DL² fits the sum of the per-worker speeds, which equals it).  A
    repeated (model, num_ps, num_workers) is an error.  Errors are
    :class:`~envs.sim.errors.WorkloadError` naming the file, line, column and cause.  Models
    keep file order.
    """
    if path is None:
        with _data_file("dl2", "measured_speed.csv") as p:
            return _load_measured(p)
    return _load_measured(Path(path))


def _load_measured(path: Path) -> dict[str, dict[tuple[int, int], float]]:
    p, _, rows = _read_csv(path, _MEASURED_REQUIRED)
    out: dict[str, dict[tuple[int, int], float]] = {}
    first_line: dict[tuple[str, int, int], int] = {}
    for line, row in rows:
        model = _text(p, line, row, "model")
        ps = _int_field(p, line, row, "num_ps")
        workers = _int_field(p, line, row, "num_workers")
        speed = _float_field(p, line, row, "total_speed", zero_ok=True)
        key = (model, ps, workers)
        if key in first_line:
            raise _err(
                p,
                line,
                None,
                f"duplicate measurement for {model!r} at (num_ps={ps}, num_workers={workers}) "
                f"(first on line {first_line[key]})",
            )
        first_line[key] = line
        out.setdefault(model, {})[(ps, workers)] = speed
    return out


@dataclass(frozen=True)
class _LinearRbf:
    """``f(x) = sum_i w_i * ||x - c_i||`` through the points ``(c_i, d_i)`` (phi(r) = r).

    The weights solve the dense system ``A w = d`` with ``A_ij = ||c_i - c_j||`` (Euclidean,
    unscaled coordinates, no polynomial term, no smoothing): the same interpolant as
    ``scipy.interpolate.Rbf(x, y, d, function='linear')``.  For distinct centres ``A`` is
    non-singular, and ``f`` passes through every ``(c_i, d_i)``.  Outside the centres it
    extrapolates (asymptotically) linearly.
    """

    centres: FloatArray  # (n, 2)
    weights: FloatArray  # (n,)

    @classmethod
    def fit(cls, centres: FloatArray, values: FloatArray) -> _LinearRbf:
        a = _distances(centres, centres)
        weights: FloatArray = np.linalg.solve(a, values).astype(np.float64)
        return cls(centres, weights)

    def __call__(self, points: FloatArray) -> FloatArray:
        result: FloatArray = _distances(points, self.centres) @ self.weights
        return result


def _distances(a: FloatArray, b: FloatArray) -> FloatArray:
    diff = a[:, None, :] - b[None, :, :]
    dist: FloatArray = np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))
    return dist


@dataclass(frozen=True)
class _ModelFit:
    rbf: _LinearRbf
    ps_range: tuple[int, int]  # measured min, max
    worker_range: tuple[int, int]
    table: FloatArray  # (max_ps + 1, max_workers + 1), read-only


class MeasuredSpeed:
    """DL²'s measured speed function: for each model, a linear radial-basis-function
    interpolant of the measured ``total_speed`` over (num_ps, num_workers), tabulated.

    Fitting (as DL² ``speed.py``): ``f(p, w) = sum_i a_i * ||(p, w) - (p_i, w_i)||`` over the
    model's measured points, with ``a`` from a dense linear solve, so that ``f`` reproduces
    every measured point it was fitted on (``scipy``'s ``Rbf(function='linear')`` without
    scipy).  The table for PS ``0..max_ps`` x workers ``0..max_workers`` is computed once in
    the constructor, so :meth:`speed` is an array lookup (a query beyond the table evaluates
    the interpolant directly, under the same rules).

    Documented decisions (each covered by ``tests/sim/elastic/test_speed.py``):

    * **No worker or no PS -> speed 0** (DL²'s PS mode, ``job.py``: such a job makes no
      progress).
    * **Failed runs are repaired** by default: the nine measured zeros (vgg-16 at (PS, W) =
      (4,8), (5,6), (6,10), (9,11), (12,6), (13,6), (13,7), (14,7); inception-bn at (1,5)) are
      dropped before fitting, so the interpolant fills them in from their neighbours.
      ``keep_measured_zeros=True`` fits them like the reference does, which then reproduces
      them (e.g. vgg-16 with exactly 4 PS and 8 workers makes no progress).
    * **Clamped beyond the measured grid** by default: a query (p, w) is evaluated at
      ``(clip(p, min_p, max_p), clip(w, min_w, max_w))`` over the model's measured PS and
      worker ranges (so e.g. resnet-50 with 16 workers gets its 12-worker speed; the lower
      bound is 1 for every shipped model, so only the upper clamp ever applies to a query
      with >= 1 PS and worker).  The reference extrapolates the interpolant linearly, which
      can go negative; ``extrapolate=True`` does that instead.
    * **Never negative**: every value is clipped at 0 (this matters only with
      ``extrapolate=True``, or wherever an interpolated gap would dip below 0).

    A job type whose model is not in the file raises :class:`ConfigError` naming the model and
    the known ones.  Bad files raise :class:`~envs.sim.errors.WorkloadError` (see
    :func:`load_measured_speeds`).
    """

    name = "measured"

    def __init__(
        self,
        path: PathLike | None = None,
        *,
        max_ps: int = 32,
        max_workers: int = 32,
        keep_measured_zeros: bool = False,
        extrapolate: bool = False,
    ) -> None:
        for label, value in (("max_ps", max_ps), ("max_workers", max_workers)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{label} must be an integer >= 1, got {value!r}")
        self.max_ps = max_ps
        self.max_workers = max_workers
        self.keep_measured_zeros = keep_measured_zeros
        self.extrapolate = extrapolate
        self._measured = load_measured_speeds(path)
        self._source = "dl2/measured_speed.csv" if path is None else str(path)
        self._fits: dict[str, _ModelFit] = {}
        self._memo: dict[tuple[str, int, int], float] = {}
        for model, points in self._measured.items():
            self._fits[model] = self._fit(model, points)

    # -- construction ---------------------------------------------------------------------

    def _fit(self, model: str, points: dict[tuple[int, int], float]) -> _ModelFit:
        used = {k: v for k, v in points.items() if self.keep_measured_zeros or v > 0}
        if not used:
            raise ConfigError(
                f"{self._source}: model {model!r} has no non-zero measured speed to fit"
            )
        keys = sorted(used)
        centres = np.array(keys, dtype=np.float64)
        values = np.array([used[k] for k in keys], dtype=np.float64)
        rbf = _LinearRbf.fit(centres, values)
        ps_all = [p for p, _ in points]
        w_all = [w for _, w in points]
        ps_range = (min(ps_all), max(ps_all))
        worker_range = (min(w_all), max(w_all))
        grid_p, grid_w = np.meshgrid(
            np.arange(self.max_ps + 1), np.arange(self.max_workers + 1), indexing="ij"
        )
        table = self._evaluate(rbf, ps_range, worker_range, grid_p.ravel(), grid_w.ravel())
        table = table.reshape(self.max_ps + 1, self.max_workers + 1)
        table.setflags(write=False)
        return _ModelFit(rbf, ps_range, worker_range, table)

    def _evaluate(
        self,
        rbf: _LinearRbf,
        ps_range: tuple[int, int],
        worker_range: tuple[int, int],
        ps: npt.NDArray[np.int_],
        workers: npt.NDArray[np.int_],
    ) -> FloatArray:
        p = ps.astype(np.float64)
        w = workers.astype(np.float64)
        if not self.extrapolate:
            p = np.clip(p, *ps_range)
            w = np.clip(w, *worker_range)
        # Evaluate each distinct point once, so that clamped queries equal their edge point
        # bit for bit (a batched matrix product need not round identically row by row).
        unique, inverse = np.unique(np.stack([p, w], axis=1), axis=0, return_inverse=True)
        values: FloatArray = np.maximum(rbf(unique), 0.0)[inverse.ravel()]
        values[(ps <= 0) | (workers <= 0)] = 0.0
        # The fit and the product go through BLAS, whose summation order (and so the last
        # bits) depends on its thread count; rounding to 12 significant digits makes the
        # speeds, and every run built on them, identical whatever the threading.
        return np.array([float(f"{v:.12g}") for v in values], dtype=np.float64)

    # -- queries --------------------------------------------------------------------------

    @property
    def models(self) -> tuple[str, ...]:
        """The models of the file, in file order."""
        return tuple(self._fits)

    def measured_points(self, model: str) -> dict[tuple[int, int], float]:
        """The file's measurements of ``model``: ``{(num_ps, num_workers): total_speed}``."""
        return dict(self._measured[self._model(model)])

    def measured_range(self, model: str) -> tuple[tuple[int, int], tuple[int, int]]:
        """``((min PS, max PS), (min workers, max workers))`` measured for ``model``."""
        fit = self._fits[self._model(model)]
        return fit.ps_range, fit.worker_range

    def table(self, model: str) -> FloatArray:
        """The read-only lookup table of ``model``: ``table[num_ps, num_workers]``."""
        return self._fits[self._model(model)].table

    def _model(self, model: str) -> str:
        if model in self._fits:
            return model
        raise ConfigError(
            f"no measured speeds for model {model!r} in {self._source}; known: {list(self._fits)}"
        )

    def speed(self, job_type: JobType, num_ps: int, num_workers: int) -> float:
        """Total iterations/s of ``job_type`` with ``num_ps`` PS and ``num_workers`` workers
        (memoised by ``(model, num_ps, num_workers)``: the lookup below is a pure function)."""
        key = (job_type.model, num_ps, num_workers)
        value = self._memo.get(key)
        if value is None:
            value = self._memo[key] = self._speed(job_type, num_ps, num_workers)
        return value

    def _speed(self, job_type: JobType, num_ps: int, num_workers: int) -> float:
        fit = self._fits.get(job_type.model)
        if fit is None:
            self._model(job_type.model)  # raises ConfigError naming the known models
            raise AssertionError("unreachable")
        if num_ps < 0 or num_workers < 0:
            raise ConfigError(f"num_ps and num_workers must be >= 0, got ({num_ps}, {num_workers})")
        if not self.extrapolate and num_ps > 0 and num_workers > 0:
            num_ps = min(max(num_ps, fit.ps_range[0]), fit.ps_range[1])
            num_workers = min(max(num_workers, fit.worker_range[0]), fit.worker_range[1])
        if num_ps <= self.max_ps and num_workers <= self.max_workers:
            return float(fit.table[num_ps, num_workers])
        value = self._evaluate(
            fit.rbf,
            fit.ps_range,
            fit.worker_range,
            np.array([num_ps]),
            np.array([num_workers]),
        )
        return float(value[0])


# --------------------------------------------------------------------------------------------
# Analytical speed
# --------------------------------------------------------------------------------------------


class AnalyticalSpeed:
    """DL²'s analytical PS/worker speed model (``job.py``, used when ``REAL_SPEED_TRACE`` is
    off), placement-free: every PS and every worker is assumed to sit on its own node.

    Each of the ``W`` workers runs iterations of
    ``t = local_comp_time_s + max(t_inter, t_intra)`` seconds, where a worker pushes and pulls
    its ``model_size_mb / P`` share to each of the ``P`` PS:

    * ``t_inter = 2 * (model_size_mb / P) / (inter_bw_mb_s / max(P, W))``: the reference's
      effective inter-node bandwidth for this placement — a worker's link is shared by its
      ``P`` PS connections and each PS's link by the ``W`` workers, and the smaller share
      counts;
    * ``t_intra = 2 * (model_size_mb / P) / intra_bw_mb_s``: the reference always takes the
      max with the intra-node term; with one task per node that bandwidth is unshared.

    Speed = ``W / t`` iterations/s summed over workers (the reference's epochs per slot
    ``W * slot_s / t / iterations_per_epoch``).  0 PS or 0 workers -> 0.  The reference's
    co-location effects (shared intra-node bandwidth, PS on a worker's node) are not modelled.
    """

    name = "analytical"

    def speed(self, job_type: JobType, num_ps: int, num_workers: int) -> float:
        """Total iterations/s of ``job_type`` with ``num_ps`` PS and ``num_workers`` workers."""
        if num_ps < 0 or num_workers < 0:
            raise ConfigError(f"num_ps and num_workers must be >= 0, got ({num_ps}, {num_workers})")
        if num_ps == 0 or num_workers == 0:
            return 0.0
        share_mb = job_type.model_size_mb / num_ps
        inter_bw = job_type.inter_bw_mb_s / max(num_ps, num_workers)
        t_inter = 2.0 * share_mb / inter_bw
        t_intra = 2.0 * share_mb / job_type.intra_bw_mb_s
        iteration_s = job_type.local_comp_time_s + max(t_inter, t_intra)
        return num_workers / iteration_s


# --------------------------------------------------------------------------------------------
# Progress
# --------------------------------------------------------------------------------------------


def epochs_per_slot(
    model: SpeedModel, job: ElasticJob, num_ps: int, num_workers: int, slot_s: float
) -> float:
    """Epochs ``job`` completes in one slot of ``slot_s`` seconds at (``num_ps``,
    ``num_workers``): ``speed * job.speed_factor * slot_s / job.type.iterations_per_epoch``
    (DL² ``job.py``)."""
    if not (slot_s > 0 and math.isfinite(slot_s)):
        raise ConfigError(f"slot_s must be a finite number > 0, got {slot_s}")
    speed = model.speed(job.type, num_ps, num_workers)
    return speed * job.speed_factor * slot_s / job.type.iterations_per_epoch
