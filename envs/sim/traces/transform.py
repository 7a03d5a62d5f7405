"""Windowing and scaling of a :class:`~.model.Trace`; every function returns a new trace with
one entry appended to :attr:`~.model.Trace.steps` that records the choice and its counts.

The order :func:`prepare` applies them in (and the one to follow by hand): select a window /
VC / status, cap durations, scale arrivals (by a factor or to a target load), fit to the
cluster.  Selection rebases times so the first selected job submits at 0 (``rebase=False``
keeps them).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal

import numpy as np

from envs.sim.errors import ConfigError, WorkloadError
from envs.sim.traces.model import Trace, TraceJob

Fit = Literal["error", "clip", "skip"]


def _with(j: TraceJob, **changes: Any) -> TraceJob:
    return replace(j, **changes)


def _span(trace: Trace) -> str:
    if not trace.jobs:
        return "no jobs"
    return f"{len(trace)} jobs submitted {trace.jobs[0].submit_s:g}..{trace.jobs[-1].submit_s:g} s"


def select(
    trace: Trace,
    *,
    start_s: float | None = None,
    end_s: float | None = None,
    vcs: Sequence[str] | None = None,
    statuses: Sequence[str] | None = None,
    max_jobs: int | None = None,
    rebase: bool = True,
) -> Trace:
    """Jobs with ``start_s <= submit_s < end_s`` (either bound optional), whose VC is in
    ``vcs`` and status in ``statuses`` (when given), the first ``max_jobs`` of them.  An
    empty selection raises :class:`WorkloadError` naming the file and the window."""
    if start_s is not None and end_s is not None and not end_s > start_s:
        raise ConfigError(f"window end_s={end_s} must be > start_s={start_s}")
    if max_jobs is not None and max_jobs < 1:
        raise ConfigError(f"max_jobs must be >= 1, got {max_jobs}")
    vc_set = set(vcs) if vcs else None
    if vc_set is not None:
        _check_vcs(trace, vc_set)
    st_set = set(statuses) if statuses else None
    out: list[TraceJob] = []
    dropped = {"before window": 0, "after window": 0, "other vc": 0, "other status": 0}
    for j in trace.jobs:
        if start_s is not None and j.submit_s < start_s:
            dropped["before window"] += 1
        elif end_s is not None and j.submit_s >= end_s:
            dropped["after window"] += 1
        elif vc_set is not None and j.vc not in vc_set:
            dropped["other vc"] += 1
        elif st_set is not None and j.status not in st_set:
            dropped["other status"] += 1
        else:
            out.append(j)
    beyond = max(0, len(out) - max_jobs) if max_jobs is not None else 0
    out = out[:max_jobs] if max_jobs is not None else out
    window = {
        "start_s": start_s,
        "end_s": end_s,
        "vcs": list(vcs or []),
        "statuses": list(statuses or []),
        "max_jobs": max_jobs,
    }
    if not out:
        raise WorkloadError(
            f"{trace.source}: empty window: no job matches {window} ({_span(trace)}; "
            f"excluded {dropped})"
        )
    t0 = out[0].submit_s if rebase else 0.0
    if t0:
        out = [_with(j, submit_s=j.submit_s - t0) for j in out]
    step = {
        "op": "select",
        **window,
        "rebased_by_s": t0,
        "kept": len(out),
        "excluded": {k: v for k, v in dropped.items() if v},
        "beyond_max_jobs": beyond,
    }
    return trace.with_step(tuple(out), step)


def _looks_numeric(vc: str) -> bool:
    try:
        float(vc)
    except ValueError:
        return False
    return True


def _check_vcs(trace: Trace, wanted: set[str]) -> None:
    """A :class:`WorkloadError` naming every VC of ``wanted`` that no job of ``trace`` has
    (a typo, or a VC id a config parser read as a number: ``6214e9`` becomes 6.214e12),
    with the trace's VCs; nothing is dropped silently."""
    have = {j.vc for j in trace.jobs}
    missing = sorted(str(v) for v in wanted - have)
    if not missing:
        return
    known = sorted(have)
    shown = ", ".join(known[:20]) + (f", ... ({len(known)} in all)" if len(known) > 20 else "")
    hint = ""
    if any(_looks_numeric(v) for v in missing):
        hint = (
            "; a VC id that reads as a number (e.g. 6214e9) is turned into one by Hydra and "
            "YAML: quote it (\"workload.trace.vcs=['6214e9']\")"
        )
    raise WorkloadError(
        f"{trace.source}: no job of VC {missing} in the trace (its VCs: {shown}){hint}"
    )


def cap_durations(trace: Trace, cap_s: float) -> Trace:
    """Every duration above ``cap_s`` becomes ``cap_s`` (so one 30-day job cannot decide a
    comparison); jobs given by iterations are left alone and counted."""
    if not (cap_s > 0 and math.isfinite(cap_s)):
        raise ConfigError(f"duration cap must be a finite number > 0, got {cap_s}")
    capped = by_iterations = 0
    removed_s = 0.0
    out: list[TraceJob] = []
    for j in trace.jobs:
        if j.duration_s is None:
            by_iterations += 1
            out.append(j)
        elif j.duration_s > cap_s:
            capped += 1
            removed_s += (j.duration_s - cap_s) * j.num_gpus
            out.append(_with(j, duration_s=cap_s))
        else:
            out.append(j)
    step = {
        "op": "cap_durations",
        "cap_s": cap_s,
        "capped": capped,
        "gpu_hours_removed": removed_s / 3600.0,
        "not_capped_iterations_given": by_iterations,
    }
    return trace.with_step(tuple(out), step)


def scale_arrivals(trace: Trace, factor: float) -> Trace:
    """Arrival rate times ``factor``: every ``submit_s`` divided by ``factor`` (2 = twice as
    many jobs per hour; durations unchanged)."""
    if not (factor > 0 and math.isfinite(factor)):
        raise ConfigError(f"arrival scale must be a finite number > 0, got {factor}")
    out = tuple(_with(j, submit_s=j.submit_s / factor) for j in trace.jobs)
    return trace.with_step(out, {"op": "scale_arrivals", "factor": factor})


def offered_load_gpus(trace: Trace) -> float:
    """GPUs the trace keeps busy on average: total GPU-seconds / arrival span (the last
    submission; a one-instant trace gives ``inf``).  Jobs given by iterations count 0."""
    gpu_s = sum((j.duration_s or 0.0) * j.num_gpus for j in trace.jobs)
    span = trace.jobs[-1].submit_s - trace.jobs[0].submit_s
    return gpu_s / span if span > 0 else math.inf


def scale_to_load(trace: Trace, num_gpus: int, load: float) -> Trace:
    """Scale arrivals so the offered load is ``load`` x ``num_gpus`` GPUs (e.g. 0.8 of a
    64-GPU cluster); the factor used is recorded."""
    if not (load > 0 and math.isfinite(load)):
        raise ConfigError(f"target load must be a finite number > 0, got {load}")
    offered = offered_load_gpus(trace)
    if not (0 < offered < math.inf):
        raise WorkloadError(
            f"{trace.source}: cannot scale to a load: offered load is {offered} GPUs "
            f"({_span(trace)})"
        )
    factor = load * num_gpus / offered
    out = scale_arrivals(trace, factor)
    step = {
        "op": "scale_to_load",
        "target_load": load,
        "cluster_gpus": num_gpus,
        "offered_load_gpus_before": offered,
        "factor": factor,
    }
    return trace.with_step(out.jobs, step)


def fit_to_cluster(trace: Trace, num_gpus: int, policy: Fit = "error") -> Trace:
    """Jobs asking for more than ``num_gpus`` GPUs: ``"error"`` (naming file and line),
    ``"clip"`` to ``num_gpus`` (duration unchanged), or ``"skip"``; counted."""
    if policy not in ("error", "clip", "skip"):
        raise ConfigError(f"fit policy must be error, clip or skip, got {policy!r}")
    out: list[TraceJob] = []
    changed = 0
    for j in trace.jobs:
        if j.num_gpus <= num_gpus:
            out.append(j)
            continue
        if policy == "error":
            raise WorkloadError(
                f"{trace.source}, line {j.line}: job {j.job_id!r} asks for {j.num_gpus} GPUs "
                f"but the cluster has {num_gpus}; pass fit=clip or fit=skip"
            )
        changed += 1
        if policy == "clip":
            out.append(_with(j, num_gpus=num_gpus))
    if not out:
        raise WorkloadError(f"{trace.source}: no job fits a {num_gpus}-GPU cluster")
    step = {"op": "fit_to_cluster", "cluster_gpus": num_gpus, "policy": policy, "changed": changed}
    return trace.with_step(tuple(out), step)


@dataclass(frozen=True)
class TraceWindow:
    """Every windowing/scaling choice in one place (``None`` = not applied)."""

    start_s: float | None = None
    end_s: float | None = None
    vcs: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ()
    max_jobs: int | None = None
    duration_cap_s: float | None = None
    arrival_scale: float = 1.0
    target_load: float | None = None
    fit: Fit = "error"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["vcs"], d["statuses"] = list(self.vcs), list(self.statuses)
        return d


def prepare(trace: Trace, window: TraceWindow, cluster_gpus: int) -> Trace:
    """Apply ``window`` in the documented order: select, cap, scale, fit."""
    if window.arrival_scale != 1.0 and window.target_load is not None:
        raise ConfigError("give arrival_scale or target_load, not both")
    t = trace
    if (
        window.start_s is not None
        or window.end_s is not None
        or window.vcs
        or window.statuses
        or window.max_jobs is not None
    ):
        t = select(
            t,
            start_s=window.start_s,
            end_s=window.end_s,
            vcs=window.vcs,
            statuses=window.statuses,
            max_jobs=window.max_jobs,
        )
    if window.duration_cap_s is not None:
        t = cap_durations(t, window.duration_cap_s)
    if window.target_load is not None:
        t = scale_to_load(t, cluster_gpus, window.target_load)
    elif window.arrival_scale != 1.0:
        t = scale_arrivals(t, window.arrival_scale)
    return fit_to_cluster(t, cluster_gpus, window.fit)


def trace_stats(trace: Trace) -> dict[str, Any]:
    """Shape of a trace: jobs, GPU-count mix, duration percentiles (s), span, offered load."""
    d = np.array([j.duration_s for j in trace.jobs if j.duration_s is not None], dtype=float)
    gpus: dict[str, int] = {}
    for j in trace.jobs:
        gpus[str(j.num_gpus)] = gpus.get(str(j.num_gpus), 0) + 1
    out: dict[str, Any] = {
        "jobs": len(trace),
        "gpus_per_job": dict(sorted(gpus.items(), key=lambda kv: int(kv[0]))),
        "fractional_gpu_jobs": sum(1 for j in trace.jobs if j.gpu_milli < 1000),
        "span_s": trace.jobs[-1].submit_s - trace.jobs[0].submit_s,
        "offered_load_gpus": offered_load_gpus(trace),
    }
    if d.size:
        for q in (0, 50, 90, 99, 100):
            out[f"duration_p{q}_s"] = float(np.percentile(d, q))
        out["gpu_hours"] = float(sum((j.duration_s or 0) * j.num_gpus for j in trace.jobs)) / 3600
    return out
