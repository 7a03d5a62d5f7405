"""Summary statistics: per-run metrics, means with Student-t 95% CIs over seeds, and paired
differences against a baseline on the same seeds (CIs by :mod:`scipy.stats`)."""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.stats import ttest_1samp, ttest_rel

from envs.sim import STACKS
from evaluation.runs import RunOutput

__all__ = [
    "METRICS",
    "PAIRED_METRICS",
    "PAPER_STATS",
    "mean_ci95",
    "mean_row",
    "paired_ci95",
    "paired_rows",
    "result_row",
    "run_metrics",
]

#: metric -> (Markdown header, format: ``"fixed"`` = fixed point with about 4 significant
#: digits, :func:`evaluation.report._fmt`)
METRICS: dict[str, tuple[str, str]] = {
    "avg_jct_s": ("avg JCT (s)", "fixed"),
    "median_jct_s": ("median JCT (s)", "fixed"),
    "p95_jct_s": ("p95 JCT (s)", "fixed"),
    "p99_jct_s": ("p99 JCT (s)", "fixed"),
    "avg_queue_s": ("mean queue (s)", "fixed"),
    "p95_queue_s": ("p95 queue (s)", "fixed"),
    "mean_slowdown": ("mean slowdown", "fixed"),
    "p95_slowdown": ("p95 slowdown", "fixed"),
    "makespan_s": ("makespan (s)", "fixed"),
    "gpu_util_pct": ("GPU util %", "{:.1f}"),
}
#: JCT statistics also reported in the paper's seconds
PAPER_STATS = ("avg", "median", "p95", "p99")
#: metrics compared against the baseline
PAIRED_METRICS = (
    "avg_jct_s",
    "median_jct_s",
    "p95_jct_s",
    "p99_jct_s",
    "avg_queue_s",
    "mean_slowdown",
    "makespan_s",
    "gpu_util_pct",
)


def _half_width(ci: Any) -> float:
    return float((ci.high - ci.low) / 2.0)


def mean_ci95(values: Sequence[float]) -> tuple[float, float]:
    """Mean and half-width of its 95% Student-t confidence interval (``nan`` for n < 2).

    The interval is scipy's ``ttest_1samp(...).confidence_interval(0.95)``, taken of the
    values *minus their mean* and halved: the interval of the raw values, ``mean ± h``, would
    lose ``h``'s low digits to cancellation when the mean is large (1e12 ± 2.5 keeps 5 digits
    of 2.5, not 16).  n < 2 has no interval (scipy would give one with a warning, from no
    degrees of freedom), so it is ``nan`` here, without asking scipy."""
    x = np.asarray(values, dtype=float)
    if x.size < 2:
        return float(x.mean()), math.nan
    mean = float(x.mean())
    with warnings.catch_warnings():  # identical values: scipy warns of precision loss and
        warnings.simplefilter("ignore", RuntimeWarning)  # gives the exact answer, 0
        ci = ttest_1samp(x - mean, 0.0).confidence_interval(0.95)
    return mean, _half_width(ci)


def paired_ci95(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Mean of ``a - b`` (pairs: the same seed) and the half-width of its 95% CI, scipy's
    ``ttest_rel(a, b).confidence_interval(0.95)`` (``nan`` for fewer than 2 pairs)."""
    x, y = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if x.shape != y.shape:
        raise ValueError(f"paired_ci95: {x.size} values against {y.size}")
    d = x - y
    if d.size < 2:
        return float(d.mean()), math.nan
    mean = float(d.mean())
    with warnings.catch_warnings():  # as in mean_ci95; the pairs shifted by the mean
        warnings.simplefilter("ignore", RuntimeWarning)  # difference, for the same reason
        ci = ttest_rel(x - mean, y).confidence_interval(0.95)
    return mean, _half_width(ci)


def run_metrics(out: RunOutput) -> dict[str, float]:
    """The summary statistics of one run (seconds; utilisation in %)."""
    jct, queue = out.jct_s, out.queue_s
    with np.errstate(divide="ignore", invalid="ignore"):
        slow = jct / out.ideal_s
    slow = slow[np.isfinite(slow)]
    pct = np.percentile
    return {
        "jobs": float(jct.size),
        "avg_jct_s": float(jct.mean()),
        "median_jct_s": float(pct(jct, 50)),
        "p95_jct_s": float(pct(jct, 95)),
        "p99_jct_s": float(pct(jct, 99)),
        "avg_queue_s": float(queue.mean()),
        "median_queue_s": float(pct(queue, 50)),
        "p95_queue_s": float(pct(queue, 95)),
        "mean_slowdown": float(slow.mean()) if slow.size else math.nan,
        "median_slowdown": float(pct(slow, 50)) if slow.size else math.nan,
        "p95_slowdown": float(pct(slow, 95)) if slow.size else math.nan,
        "makespan_s": out.makespan_s,
        "gpu_util_pct": 100.0 * out.gpu_util,
    }


def result_row(
    out: RunOutput, metrics: dict[str, float], ms_per_s: float, paper_div: float | None
) -> dict[str, Any]:
    """One per-run table row (machine-readable keys); ``ms_per_s`` is the workload's sim ms
    per reported second, ``paper_div`` the sim ms per paper second (or ``None``)."""
    row: dict[str, Any] = {
        "stack": out.scheduler,
        "paper_name": STACKS.get(out.scheduler, "-"),
        "seed": str(out.seed),
        **metrics,
    }
    if paper_div is not None:
        for stat in PAPER_STATS:
            row[f"{stat}_jct_paper_s"] = metrics[f"{stat}_jct_s"] * ms_per_s / paper_div
    slot_s = out.info.get("slot_s")
    if slot_s:  # through the DL² env: also in slots, the unit of train.py's validation
        row["avg_jct_slots"] = metrics["avg_jct_s"] / float(slot_s)
    finished = out.extra.get("finished")
    # jobs unfinished at the env's horizon (they count as finishing there: JCTs are lower bounds)
    row["censored_jobs"] = float(sum(not f for f in finished)) if finished is not None else 0.0
    row["wall_s"] = float(out.info.get("wall_s", math.nan))
    return row


def seeds_label(seeds: Sequence[int]) -> str:
    """Seeds as written, a run of 4 or more consecutive ones as a range: ``0,1,2``,
    ``300-319``, ``1,5-9``."""
    parts: list[str] = []
    i, s = 0, [int(x) for x in seeds]
    while i < len(s):
        j = i
        while j + 1 < len(s) and s[j + 1] == s[j] + 1:
            j += 1
        if j - i >= 3:
            parts.append(f"{s[i]}-{s[j]}")
        else:
            parts.extend(str(x) for x in s[i : j + 1])
        i = j + 1
    return ",".join(parts)


def mean_row(rows: Sequence[dict[str, Any]], seeds: Sequence[int]) -> dict[str, Any]:
    """Mean over seeds of every numeric column, with ``<key>_ci95`` half-widths."""
    out: dict[str, Any] = {
        "stack": rows[0]["stack"],
        "paper_name": rows[0]["paper_name"],
        "seed": f"mean({seeds_label(seeds)})",
    }
    for key in rows[0]:
        if key not in out:
            m, h = mean_ci95([r[key] for r in rows])
            out[key] = m
            out[f"{key}_ci95"] = h
    return out


def paired_rows(by_stack: dict[str, list[dict[str, Any]]], baseline: str) -> list[dict[str, Any]]:
    """Per scheduler and metric: mean difference to the baseline over seeds (same workload
    each), its 95% CI, and the mean relative difference in %."""
    base = by_stack[baseline]
    out = []
    for stack, rows in by_stack.items():
        if stack == baseline:
            continue
        if len(rows) != len(base):
            raise ValueError(f"paired_rows: {stack} has {len(rows)} seeds, {baseline} {len(base)}")
        row: dict[str, Any] = {"stack": stack, "baseline": baseline, "seeds": len(rows)}
        for key in PAIRED_METRICS:
            rel = [
                100.0 * (r[key] - b[key]) / b[key] if b[key] else math.nan
                for r, b in zip(rows, base, strict=True)
            ]
            row[f"d_{key}"], row[f"d_{key}_ci95"] = paired_ci95(
                [r[key] for r in rows], [b[key] for b in base]
            )
            row[f"rel_{key}_pct"] = float(np.mean(rel))
        out.append(row)
    return out
