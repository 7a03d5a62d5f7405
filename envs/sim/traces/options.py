"""The options of reading a trace, shared by ``evaluate.py``'s ``workload.trace.*`` and the
DL² env's ``trace_options`` (one set for both paths): how a trace is read, windowed, scaled
and converted, and :func:`load_trace_workload`, the one function that applies them.

Plain dataclasses (Hydra's structured configs use them as schemas).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from envs.memo import file_stamp, memo
from envs.sim.spec import Workload
from envs.sim.traces.convert import ConvertOptions, convert_trace
from envs.sim.traces.model import Repairs, Trace
from envs.sim.traces.readers import read_trace
from envs.sim.traces.transform import TraceWindow, prepare

__all__ = [
    "RepairsConfig",
    "TraceConfig",
    "convert_options",
    "load_trace_workload",
    "read_and_window",
    "trace_window",
]


@dataclass
class RepairsConfig:
    """:class:`envs.sim.traces.Repairs`: ``error`` everywhere unless asked."""

    bad_rows: str = "error"  # error | skip
    zero_gpus: str = "error"  # error | skip
    unsorted: str = "error"  # error | sort
    duplicate_ids: str = "error"  # error | skip | rename


@dataclass
class TraceConfig:
    """How a trace is read, windowed, scaled and converted (``evaluate.py`` kinds ``trace``,
    ``philly_builtin``, and the DL² env's ``trace_options``).

    Applied in this order: read (``format``, ``repairs``), select (``start_s``, ``end_s`` in
    trace seconds, ``vcs``, ``statuses``, ``max_jobs``), cap durations (``duration_cap_s``),
    scale arrivals (``arrival_scale`` or ``target_load`` x cluster GPUs), fit to the cluster
    (``fit``: error | clip | skip), convert (``unknown_models``, ``fractional_gpus``,
    ``max_iterations``; see :mod:`envs.sim.traces.convert`).
    """

    format: str = "auto"
    repairs: RepairsConfig = field(default_factory=RepairsConfig)
    start_s: float | None = None
    end_s: float | None = None
    vcs: list[str] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    max_jobs: int | None = None
    duration_cap_s: float | None = None
    arrival_scale: float = 1.0
    target_load: float | None = None
    fit: str = "error"
    unknown_models: str = "error"
    fractional_gpus: str = "whole"
    max_iterations: int | None = None


def trace_window(t: TraceConfig) -> TraceWindow:
    """The windowing part of ``t``."""
    return TraceWindow(
        start_s=t.start_s,
        end_s=t.end_s,
        vcs=tuple(t.vcs),
        statuses=tuple(t.statuses),
        max_jobs=t.max_jobs,
        duration_cap_s=t.duration_cap_s,
        arrival_scale=t.arrival_scale,
        target_load=t.target_load,
        fit=t.fit,  # type: ignore[arg-type]  # validated by fit_to_cluster
    )


#: The traces this process read (:func:`read_and_window`), before their windows: a
#: benchmark's scenarios and the DL² env's episodes share trace files (a VC at several loads
#: and scales), and reading a corpus costs far more than windowing it.
_TRACES: OrderedDict[Hashable, Trace] = OrderedDict()


def read_and_window(path: str | Path, t: TraceConfig, cluster_gpus: int) -> Trace:
    """Read ``path`` (``t.format``, ``t.repairs``) and apply ``t``'s window.  The read is
    memoised per process by the file (its size and mtime, :func:`envs.memo.file_stamp`) and
    the reading options; a :class:`Trace` is frozen, so the windows share it."""
    repairs = Repairs(**asdict(t.repairs))
    stamp = file_stamp(path)
    if stamp is None:  # unreadable: the reader says why
        trace = read_trace(path, format=t.format, repairs=repairs)
    else:
        key = (stamp, t.format, repr(repairs))
        trace = memo(_TRACES, key, lambda: read_trace(path, format=t.format, repairs=repairs))
    return prepare(trace, trace_window(t), cluster_gpus)


def load_trace_workload(
    path: str | Path, t: TraceConfig, *, cluster_gpus: int, seed: int, time_unit: float = 1000.0
) -> tuple[Workload, Trace, dict[str, object]]:
    """The workload of trace ``path`` under ``t`` for ``seed``: read, window, convert; also
    the windowed trace and the conversion record."""
    trace = read_and_window(path, t, cluster_gpus)
    workload, rules = convert_trace(trace, seed=seed, options=convert_options(t, time_unit))
    return workload, trace, rules


def convert_options(t: TraceConfig, time_unit: float = 1000.0) -> ConvertOptions:
    """The conversion part of ``t`` (``time_unit``: simulator ms per trace second)."""
    return ConvertOptions(
        time_unit=time_unit,
        unknown_models=t.unknown_models,  # type: ignore[arg-type]
        fractional_gpus=t.fractional_gpus,  # type: ignore[arg-type]
        max_iterations=t.max_iterations,
    )
