"""DL²'s workload generator (DL² ``trace.py``) and its two published settings.

:func:`generate_dl2_workload` draws a tuple of :class:`~envs.sim.elastic.spec.ElasticJob`
with ``numpy.random.default_rng(seed)`` only; :data:`DL2_SMALL` and :data:`DL2_LARGE` are the
"small" setting of DL²'s experiment scripts and the "large" default of its ``parameters.py``
(see the DL² reference-code notes §2.5 and §0).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from envs.sim.elastic.spec import ElasticCluster, ElasticJob, JobType
from envs.sim.elastic.types import dl2_job_types
from envs.sim.errors import ConfigError
from envs.sim.workload import _data_file, _err, _int_field, _read_csv

__all__ = [
    "DL2_LARGE",
    "DL2_SMALL",
    "DL2Setting",
    "dl2_arrival_patterns",
    "generate_dl2_workload",
    "load_arrival_patterns",
]

PathLike = str | os.PathLike[str]
Arrival = Literal["google", "poisson", "uniform"]
_ARRIVALS = ("google", "poisson", "uniform")
#: The Google pattern starts at a random offset drawn from 0..4 (DL²: ``randint(5)``).
GOOGLE_OFFSETS = 5


# --------------------------------------------------------------------------------------------
# Arrival patterns
# --------------------------------------------------------------------------------------------


def load_arrival_patterns(path: PathLike | None = None) -> dict[int, tuple[int, ...]]:
    """Read an arrival-pattern table: ``{cap: (arrivals in slot 0, 1, ...)}``.

    Default: the shipped ``dl2/google_arrival_patterns.csv`` (75 slots, caps 1, 2, 3, 4, 5,
    10, 15, 20, 30, 40, 50).  Columns: ``slot`` (must be 0, 1, 2, ... in order) and one or
    more ``cap_<N>`` (N an integer >= 1; values integers >= 0; other columns are ignored).
    Values may exceed their column's cap (DL²'s patterns do; the generator caps them).
    Errors are :class:`~envs.sim.errors.WorkloadError` naming the file, line, column, cause.
    """
    if path is None:
        with _data_file("dl2", "google_arrival_patterns.csv") as p:
            return _load_patterns(p)
    return _load_patterns(Path(path))


def _load_patterns(path: Path) -> dict[int, tuple[int, ...]]:
    p, header, rows = _read_csv(path, ("slot",))
    columns: dict[int, str] = {}
    for col in header:
        if not col.startswith("cap_"):
            continue
        suffix = col[len("cap_") :]
        if not suffix.isdigit() or int(suffix) < 1:
            raise _err(p, 1, col, "pattern columns must be named cap_<integer >= 1>")
        columns[int(suffix)] = col
    if not columns:
        raise _err(p, 1, None, f"no cap_<N> column; header is {header}")
    values: dict[int, list[int]] = {cap: [] for cap in sorted(columns)}
    for position, (line, row) in enumerate(rows):
        slot = _int_field(p, line, row, "slot", zero_ok=True)
        if slot != position:
            raise _err(p, line, "slot", f"must be {position} (slots 0, 1, 2, ...), got {slot}")
        for cap, col in columns.items():
            values[cap].append(_int_field(p, line, row, col, zero_ok=True))
    for cap, counts in values.items():
        if not any(counts):
            raise _err(p, 1, columns[cap], "pattern has no arrival at all")
    return {cap: tuple(counts) for cap, counts in values.items()}


@functools.lru_cache(maxsize=1)
def dl2_arrival_patterns() -> dict[int, tuple[int, ...]]:
    """The shipped Google arrival patterns, loaded once (do not mutate the result)."""
    return load_arrival_patterns()


# --------------------------------------------------------------------------------------------
# Generator
# --------------------------------------------------------------------------------------------


def _arrivals(rng: np.random.Generator, arrival: str, cap: int) -> Iterator[int]:
    """Arrivals in slot 0, 1, 2, ... (unbounded), each at most ``cap``."""
    if arrival == "google":
        patterns = dl2_arrival_patterns()
        if cap not in patterns:
            raise ConfigError(
                f"no Google arrival pattern for max_arrivals_per_slot={cap}; "
                f"available: {sorted(patterns)} (columns cap_<N> of "
                "envs/sim/data/dl2/google_arrival_patterns.csv)"
            )
        pattern = patterns[cap]
        offset = int(rng.integers(GOOGLE_OFFSETS))
        slot = 0
        while True:
            yield min(cap, pattern[(slot + offset) % len(pattern)])
            slot += 1
    elif arrival == "poisson":
        while True:
            yield min(cap, int(rng.poisson(cap)))
    else:
        while True:
            yield cap


def _check_fraction(label: str, value: float) -> None:
    if not (0.0 <= value < 1.0):
        raise ConfigError(f"{label} must be in [0, 1), got {value!r}")


def generate_dl2_workload(
    seed: int,
    *,
    num_jobs: int = 60,
    max_arrivals_per_slot: int = 3,
    arrival: Arrival = "google",
    max_epochs: int = 80000,
    fixed_length: bool = True,
    epoch_estimation_error: float = 0.0,
    speed_variation: float = 0.0,
    max_workers: int = 32,
    max_ps: int = 32,
    types: Sequence[JobType] | None = None,
) -> tuple[ElasticJob, ...]:
    """Draw DL²'s workload (``trace.py``, ``JOB_LEN_PATTERN = "Normal"``) with
    ``rng = numpy.random.default_rng(seed)``; no global RNG state is used.

    Arrivals (``cap = max_arrivals_per_slot``; slot ``t`` gets ``n_t <= cap`` jobs with
    ``arrival_slot = t``; jobs are taken slot by slot until there are ``num_jobs``, so the
    last used slot may get fewer than ``n_t``):

    * ``"google"``: ``n_t = min(cap, pattern[(t + offset) mod len])`` where ``pattern`` is
      column ``cap_<cap>`` of ``google_arrival_patterns.csv`` (:class:`ConfigError` if there is
      none) and ``offset`` is drawn uniform in 0..4 (DL²: ``randint(5)``).  The 75-slot pattern
      is cycled when more slots are needed (DL² stops after one pass and asserts).
    * ``"poisson"``: ``n_t = min(cap, rng.poisson(cap))``, drawn slot by slot.
    * ``"uniform"``: ``n_t = cap``.

    Per job, in this order: the type, uniform over ``types`` (default: DL²'s 8 types); if not
    ``fixed_length``, a factor ``U{0.90, 0.91, ..., 1.09}`` (DL²: ``randint(90, 110) / 100``);
    ``e = rng.uniform(-1, 1)`` for the estimation error; ``v = rng.uniform(-1, 1)`` for the
    speed.  All four draws happen whatever the options (except the length factor), so changing
    an error magnitude leaves the rest of the workload unchanged.  Draw order overall: the
    Google offset first, then slot by slot the slot's count (Poisson only) and its jobs.

    * ``num_epochs = int(epoch_fraction * max_epochs)`` (declared; what schedulers see), times
      the length factor when ``fixed_length`` is false (then not an integer, as in DL²).
      :class:`ConfigError` if a type would get less than 1 epoch.
    * ``real_num_epochs = num_epochs * (1 + epoch_estimation_error * e)`` (the work that
      actually finishes the job; DL² ``JOB_EPOCH_EST_ERROR``).
    * ``speed_factor = 1 + speed_variation * v``, a **per-job constant**.  DL²'s
      ``TRAIN_SPEED_ERROR`` instead draws a fresh factor ``1 + err * U(-1, 1)`` for every job
      and every slot (``job.py``); a constant per job is deterministic per seed, independent
      of the scheduler, and has the same range.

    Job ids are ``0..num_jobs-1`` in arrival order (DL²: 1-based); every job gets
    ``max_workers`` and ``max_ps``.  Both errors must be in [0, 1).
    """
    if isinstance(num_jobs, bool) or not isinstance(num_jobs, int) or num_jobs < 1:
        raise ConfigError(f"num_jobs must be an integer >= 1, got {num_jobs!r}")
    cap = max_arrivals_per_slot
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise ConfigError(f"max_arrivals_per_slot must be an integer >= 1, got {cap!r}")
    if arrival not in _ARRIVALS:
        raise ConfigError(f"unknown arrival pattern {arrival!r}; known: {list(_ARRIVALS)}")
    if not (max_epochs > 0 and math.isfinite(max_epochs)):
        raise ConfigError(f"max_epochs must be a finite number > 0, got {max_epochs!r}")
    _check_fraction("epoch_estimation_error", epoch_estimation_error)
    _check_fraction("speed_variation", speed_variation)
    if max_workers < 1 or max_ps < 0:
        raise ConfigError(f"need max_workers >= 1 and max_ps >= 0, got {max_workers}, {max_ps}")
    table = tuple(dl2_job_types() if types is None else types)
    if not table:
        raise ConfigError("types must contain at least one JobType")
    base_epochs = []
    for t in table:
        epochs = int(t.epoch_fraction * max_epochs)
        if epochs < 1:
            raise ConfigError(
                f"job type {t.model!r}: int({t.epoch_fraction} x max_epochs={max_epochs}) = "
                f"{epochs} epochs; raise max_epochs"
            )
        base_epochs.append(epochs)

    rng = np.random.default_rng(seed)
    jobs: list[ElasticJob] = []
    for slot, count in enumerate(_arrivals(rng, arrival, cap)):
        for _ in range(count):
            index = int(rng.integers(len(table)))
            num_epochs: float = base_epochs[index]
            if not fixed_length:
                num_epochs = num_epochs * int(rng.integers(90, 110)) / 100.0
            # rng.uniform(-1.0, 1.0) is -1.0 + 2.0 * rng.random() (numpy: low + (high - low) *
            # a double; the product by 2 is exact, so the one rounding is the sum's): the same
            # doubles and the same stream, without uniform's argument handling (~0.7 us a
            # draw; tests/sim/elastic/test_workload.py checks the equality)
            e = -1.0 + 2.0 * rng.random()
            v = -1.0 + 2.0 * rng.random()
            jobs.append(
                ElasticJob(
                    job_id=len(jobs),
                    type=table[index],
                    arrival_slot=slot,
                    num_epochs=num_epochs,
                    real_num_epochs=num_epochs * (1.0 + epoch_estimation_error * e),
                    max_workers=max_workers,
                    max_ps=max_ps,
                    speed_factor=1.0 + speed_variation * v,
                )
            )
            if len(jobs) == num_jobs:
                return tuple(jobs)
    raise AssertionError("unreachable: the arrival stream is unbounded")


# --------------------------------------------------------------------------------------------
# DL²'s settings
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DL2Setting:
    """One of DL²'s experimental settings: cluster size, workload size and window ``J``.

    ``J`` is the scheduler's window (jobs visible to the policy per slot); it is carried here
    for the policy and not used by the generator.
    """

    num_nodes: int
    num_jobs: int
    max_arrivals_per_slot: int
    J: int
    max_epochs: int
    max_workers: int
    max_ps: int

    def workload(self, seed: int, **options: Any) -> tuple[ElasticJob, ...]:
        """:func:`generate_dl2_workload` with this setting's sizes; ``options`` are its other
        keyword arguments (``arrival``, ``fixed_length``, errors, ``types``)."""
        return generate_dl2_workload(
            seed,
            num_jobs=self.num_jobs,
            max_arrivals_per_slot=self.max_arrivals_per_slot,
            max_epochs=self.max_epochs,
            max_workers=self.max_workers,
            max_ps=self.max_ps,
            **options,
        )

    def cluster(self) -> ElasticCluster:
        """``num_nodes`` nodes of 8 CPU and 8 GPU slots, 1200-s slots."""
        return ElasticCluster(num_nodes=self.num_nodes)


#: DL²'s experiment scripts (``params_template.py`` / ``experiment.py``).
DL2_SMALL = DL2Setting(
    num_nodes=48,
    num_jobs=60,
    max_arrivals_per_slot=3,
    J=20,
    max_epochs=80000,
    max_workers=32,
    max_ps=32,
)
#: DL²'s ``parameters.py`` default (``LARGE_SCALE``).
DL2_LARGE = DL2Setting(
    num_nodes=500,
    num_jobs=200,
    max_arrivals_per_slot=10,
    J=40,
    max_epochs=30000,
    max_workers=16,
    max_ps=16,
)
