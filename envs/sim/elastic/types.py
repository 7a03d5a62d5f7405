"""DL²'s job types, loaded from ``envs/sim/data/dl2/job_types.csv`` (DL² ``trace.py``).

:func:`load_job_types` reads and validates a job-type table; :func:`dl2_job_types` is the
shipped table, loaded once and cached (also reachable as the lazily loaded module attribute
``DL2_JOB_TYPES``); :func:`job_type` looks one type up by model name or 0-based index.

File errors are :class:`~envs.sim.errors.WorkloadError` naming the file, the 1-based line, the
column and the cause, like every loader of :mod:`envs.sim.workload`.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from envs.sim.elastic.spec import JobType
from envs.sim.errors import ConfigError, WorkloadError
from envs.sim.workload import _data_file, _err, _float_field, _int_field, _read_csv, _text

__all__ = ["DL2_JOB_TYPES", "dl2_job_types", "job_type", "load_job_types"]

PathLike = str | os.PathLike[str]

_REQUIRED = (
    "type_index",
    "model",
    "worker_cpu_slots",
    "worker_gpu_slots",
    "ps_cpu_slots",
    "ps_gpu_slots",
    "epoch_fraction_of_max",
    "iterations_per_epoch",
    "local_comp_time_s",
    "model_size_mb",
    "inter_node_bw_mb_s",
    "intra_node_bw_mb_s",
)


def load_job_types(path: PathLike | None = None) -> tuple[JobType, ...]:
    """Load a job-type table (default: the shipped ``dl2/job_types.csv``).

    Required columns (others are ignored): ``type_index`` (must equal the row's 0-based
    position, so that it is the observation's one-hot index), ``model`` (non-empty, unique,
    compared case-insensitively), ``worker_cpu_slots``, ``worker_gpu_slots``, ``ps_cpu_slots``,
    ``ps_gpu_slots`` (integers >= 0), ``epoch_fraction_of_max`` (> 0), ``iterations_per_epoch``
    (integer >= 1), ``local_comp_time_s``, ``model_size_mb``, ``inter_node_bw_mb_s``,
    ``intra_node_bw_mb_s`` (> 0).  Any violation raises :class:`WorkloadError` naming the
    file, line, column and cause.
    """
    if path is None:
        with _data_file("dl2", "job_types.csv") as p:
            return _load(p)
    return _load(Path(path))


def _load(path: Path) -> tuple[JobType, ...]:
    p, _, rows = _read_csv(path, _REQUIRED)
    types: list[JobType] = []
    first_line: dict[str, int] = {}
    for position, (line, row) in enumerate(rows):
        index = _int_field(p, line, row, "type_index", zero_ok=True)
        if index != position:
            raise _err(
                p,
                line,
                "type_index",
                f"must be {position} (types are listed in index order from 0), got {index}",
            )
        model = _text(p, line, row, "model")
        if model.lower() in first_line:
            raise _err(
                p,
                line,
                "model",
                f"duplicate model {model!r} (first on line {first_line[model.lower()]})",
            )
        first_line[model.lower()] = line
        try:
            types.append(
                JobType(
                    index=index,
                    model=model,
                    worker_cpu=_int_field(p, line, row, "worker_cpu_slots", zero_ok=True),
                    worker_gpu=_int_field(p, line, row, "worker_gpu_slots", zero_ok=True),
                    ps_cpu=_int_field(p, line, row, "ps_cpu_slots", zero_ok=True),
                    ps_gpu=_int_field(p, line, row, "ps_gpu_slots", zero_ok=True),
                    epoch_fraction=_float_field(p, line, row, "epoch_fraction_of_max"),
                    iterations_per_epoch=_int_field(p, line, row, "iterations_per_epoch"),
                    local_comp_time_s=_float_field(p, line, row, "local_comp_time_s"),
                    model_size_mb=_float_field(p, line, row, "model_size_mb"),
                    inter_bw_mb_s=_float_field(p, line, row, "inter_node_bw_mb_s"),
                    intra_bw_mb_s=_float_field(p, line, row, "intra_node_bw_mb_s"),
                )
            )
        except WorkloadError as exc:
            if str(exc).startswith(p.name):
                raise
            raise _err(p, line, None, str(exc)) from exc  # defensive: JobType's own checks
    return tuple(types)


@functools.lru_cache(maxsize=1)
def dl2_job_types() -> tuple[JobType, ...]:
    """DL²'s 8 job types (the shipped table), loaded on first use and cached."""
    return load_job_types()


def job_type(name_or_index: str | int) -> JobType:
    """The shipped job type with this model name (case-insensitive) or 0-based index.

    Raises :class:`ConfigError` listing the known names (and the valid index range).
    """
    types = dl2_job_types()
    known = [t.model for t in types]
    if isinstance(name_or_index, bool) or not isinstance(name_or_index, (str, int)):
        raise ConfigError(
            f"job type must be a model name or an index, got {name_or_index!r}; "
            f"known: {known} (indices 0..{len(types) - 1})"
        )
    if isinstance(name_or_index, int):
        if 0 <= name_or_index < len(types):
            return types[name_or_index]
        raise ConfigError(
            f"unknown job type index {name_or_index}; valid: 0..{len(types) - 1} ({known})"
        )
    for t in types:
        if t.model.lower() == name_or_index.strip().lower():
            return t
    raise ConfigError(f"unknown job type {name_or_index!r}; known: {known}")


def __getattr__(name: str) -> tuple[JobType, ...]:
    # ``DL2_JOB_TYPES`` is loaded on first access, not at import time.
    if name == "DL2_JOB_TYPES":
        return dl2_job_types()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


DL2_JOB_TYPES: tuple[JobType, ...]  # declared for type checkers; provided by __getattr__
