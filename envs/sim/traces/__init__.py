"""Real GPU-cluster traces: readers for seven layouts, one normalised in-memory form
(:class:`Trace` of :class:`TraceJob`), windowing and scaling, and conversion to a
:class:`~envs.sim.spec.Workload`.  Standard library + numpy only.

Typical use::

    from envs.sim.traces import Repairs, TraceWindow, prepare, read_trace, convert_trace

    trace = read_trace("cluster_log.csv", repairs=Repairs(zero_gpus="skip"))
    trace = prepare(trace, TraceWindow(max_jobs=1000, duration_cap_s=86400), cluster_gpus=64)
    workload, rules = convert_trace(trace, seed=0)
    print(trace.report.describe(), trace.steps, rules)

Formats and their rules: :mod:`envs.sim.traces.readers`; windowing:
:mod:`envs.sim.traces.transform`; rules for what a trace lacks (model, iterations, fractional
GPUs): :mod:`envs.sim.traces.convert`.
"""

from envs.sim.traces.convert import (
    MODEL_FAMILIES,
    ConvertOptions,
    convert_trace,
    to_workload,
)
from envs.sim.traces.model import ReadReport, Repairs, Trace, TraceJob
from envs.sim.traces.readers import (
    READERS,
    detect_format,
    read_alibaba_gpu,
    read_helios,
    read_normalised_csv,
    read_philly_digest,
    read_philly_json,
    read_pollux,
    read_tiresias,
    read_trace,
)
from envs.sim.traces.transform import (
    TraceWindow,
    cap_durations,
    fit_to_cluster,
    offered_load_gpus,
    prepare,
    scale_arrivals,
    scale_to_load,
    select,
    trace_stats,
)

__all__ = [
    "MODEL_FAMILIES",
    "READERS",
    "ConvertOptions",
    "ReadReport",
    "Repairs",
    "Trace",
    "TraceJob",
    "TraceWindow",
    "cap_durations",
    "convert_trace",
    "detect_format",
    "fit_to_cluster",
    "offered_load_gpus",
    "prepare",
    "read_alibaba_gpu",
    "read_helios",
    "read_normalised_csv",
    "read_philly_digest",
    "read_philly_json",
    "read_pollux",
    "read_tiresias",
    "read_trace",
    "scale_arrivals",
    "scale_to_load",
    "select",
    "to_workload",
    "trace_stats",
]
