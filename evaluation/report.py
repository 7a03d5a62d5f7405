"""The run directory's tables and plots: Markdown and CSV summaries, per-job CSVs, the JCT
CDF and GPU utilisation plots, and the lines that say how the workload was made."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from envs.files import atomic_path
from envs.sim import STACKS
from evaluation.runs import RunOutput
from evaluation.stats import METRICS, PAIRED_METRICS, PAPER_STATS
from evaluation.workloads import Prepared

__all__ = [
    "ci_table",
    "json_default",
    "markdown_table",
    "paired_table",
    "plot_cdf",
    "plot_utilisation",
    "safe_name",
    "workload_lines",
    "write_csv",
    "write_jobs_csv",
]


def safe_name(stack: str) -> str:
    """A scheduler spec as a file-name part (``:`` and ``/`` become ``-``)."""
    return stack.replace(":", "-").replace("/", "-")


def _decimals(value: float) -> int:
    """Decimals that show about 4 significant digits of ``value`` in fixed point."""
    a = abs(value)
    if not math.isfinite(a) or a >= 100:
        return 0 if a >= 1000 or not math.isfinite(a) else 1
    if a >= 1:
        return 2
    return 3 if a >= 0.01 or a == 0 else 4


def _fmt(fmt: str, value: Any, like: float | None = None) -> str:
    """``value`` by ``fmt``; ``"fixed"``: fixed point with about 4 significant digits and
    thousands separators (``94,040``, ``12.78``), with the decimals of ``like`` when given (a
    CI or difference printed at its mean's precision: no ``± 1.771e-10``)."""
    if isinstance(value, float) and math.isnan(value):
        return "-"
    if fmt == "fixed":
        d = _decimals(float(value if like is None or math.isnan(like) else like))
        return f"{float(value):,.{d}f}"
    return fmt.format(value)


def markdown_table(rows: Sequence[dict[str, Any]], paper: bool) -> str:
    """The per-run table (one row per scheduler and seed, plus means over seeds)."""
    head = [("stack", "stack"), ("paper_name", "paper name"), ("seed", "seed(s)")]
    if paper:
        head += [(f"{s}_jct_paper_s", f"{s} JCT (paper s)") for s in PAPER_STATS]
    if any("avg_jct_slots" in r for r in rows):  # through the DL² env: train.py's unit too
        head += [("avg_jct_slots", "avg JCT (slots)")]
    censored = any(r.get("censored_jobs", 0) for r in rows)
    extra = ["censored_jobs"] if censored else []  # shown only where some run has them
    keys = [k for k, _ in head] + list(METRICS) + extra + ["wall_s"]
    names = (
        [h for _, h in head]
        + [h for h, _ in METRICS.values()]
        + (["censored jobs"] if censored else [])
        + ["wall (s)"]
    )
    lines = [
        "| " + " | ".join(names) + " |",
        "|"
        + "|".join(":---" if k in ("stack", "paper_name", "seed") else "---:" for k in keys)
        + "|",
    ]
    for row in rows:
        cells = []
        for k in keys:
            if k in ("stack", "paper_name", "seed"):
                cells.append(str(row[k]))
            elif k.endswith("_paper_s"):
                cells.append(_fmt("{:.1f}", row[k]))
            elif k == "avg_jct_slots":
                cells.append(_fmt("{:.2f}", row.get(k, math.nan)))
            elif k == "wall_s":
                cells.append(_fmt("{:.2f}", row[k]))
            elif k == "censored_jobs":
                cells.append(_fmt("{:.0f}", row.get(k, 0.0)))
            else:
                cells.append(_fmt(METRICS[k][1], row[k]))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ci_table(means: Sequence[dict[str, Any]]) -> str:
    """Mean ± 95% CI over seeds, one row per scheduler."""
    keys = [k for k in METRICS if k != "p95_queue_s"]
    lines = [
        "| stack | " + " | ".join(METRICS[k][0] for k in keys) + " |",
        "|:---|" + "|".join("---:" for _ in keys) + "|",
    ]
    for row in means:
        cells = [
            f"{_fmt(METRICS[k][1], row[k])} ± {_fmt(METRICS[k][1], row[k + '_ci95'], row[k])}"
            for k in keys
        ]
        lines.append(f"| {row['stack']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_table(rows: Sequence[dict[str, Any]]) -> str:
    """Differences against the baseline: mean ± 95% CI (mean relative %)."""
    lines = [
        "| stack | " + " | ".join("Δ " + METRICS[k][0] for k in PAIRED_METRICS) + " |",
        "|:---|" + "|".join("---:" for _ in PAIRED_METRICS) + "|",
    ]
    for row in rows:
        cells = []
        for k in PAIRED_METRICS:
            f = METRICS[k][1]
            ci = row[f"d_{k}_ci95"]
            pm = "" if math.isnan(ci) else f" ± {_fmt(f, ci, row[f'd_{k}'])}"
            rel = row[f"rel_{k}_pct"]
            rel_text = "" if math.isnan(rel) else f" ({rel:+.1f}%)"
            cells.append(f"{_fmt(f, row[f'd_{k}'])}{pm}{rel_text}")
        lines.append(f"| {row['stack']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Rows as CSV; the header is the union of their keys in first-seen order."""
    keys: list[str] = []
    for row in rows:
        keys.extend(k for k in row if k not in keys)
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        for row in rows:
            w.writerow(row)


def write_jobs_csv(path: Path, out: RunOutput) -> None:
    """One row per job (seconds); the scheduler and seed on every row, so that files can be
    concatenated."""
    n = len(out.name)
    cols: dict[str, Any] = {
        "stack": [out.scheduler] * n,
        "seed": [out.seed] * n,
        "job_id": out.job_id,
        "name": out.name,
        "num_gpus": out.num_gpus,
        "submit_s": out.submit_s,
        "start_s": out.start_s,
        "finish_s": out.finish_s,
        "jct_s": out.jct_s,
        "queue_s": out.queue_s,
        "ideal_s": out.ideal_s,
        "slowdown": out.jct_s / out.ideal_s,
        **out.extra,
    }
    with atomic_path(path) as tmp, open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(cols)
        for i in range(n):
            w.writerow([_cell(v[i]) for v in cols.values()])


def _cell(v: Any) -> Any:
    if isinstance(v, np.floating | float):
        return repr(float(v))
    if isinstance(v, np.integer):
        return int(v)
    return v


def json_default(obj: Any) -> Any:
    """``json.dumps(default=...)`` for numpy values (non-finite floats become ``null``)."""
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def stack_colors(stacks: list[str]) -> dict[str, str]:
    """One colour per scheduler, by its place in ``stacks`` (the config's order), so that a
    scheduler keeps its colour across plots and runs; distinct up to 20 schedulers (the
    default cycle up to 10, matplotlib's ``tab20`` beyond)."""
    if len(stacks) <= 10:
        cycle = [f"C{i}" for i in range(10)]
    else:
        from matplotlib import colormaps
        from matplotlib.colors import to_hex

        tab20 = colormaps["tab20"]
        cycle = [to_hex(tab20(i)) for i in (*range(0, 20, 2), *range(1, 20, 2))]
    return {s: cycle[i % len(cycle)] for i, s in enumerate(stacks)}


def _time_axis(t_max_s: float) -> tuple[float, str]:
    """Seconds per unit and the unit's name for a time axis reaching ``t_max_s``."""
    if t_max_s >= 2 * 86400:
        return 86400.0, "days"
    if t_max_s >= 2 * 3600:
        return 3600.0, "hours"
    return 1.0, "s"


def _save(fig: Any, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, dpi=120, format=path.suffix.lstrip(".") or "png")


def plot_cdf(
    path: Path,
    jcts: dict[str, list[np.ndarray]],
    title: str,
    colors: dict[str, str] | None = None,
) -> None:
    """One empirical CDF per scheduler (pooled over seeds; the title says so when there are
    several); x = JCT in s, log scale."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.5))
    seeds = max((len(parts) for parts in jcts.values()), default=1)
    for stack, parts in jcts.items():
        x = np.concatenate(parts)
        x = x[x > 0]
        if x.size == 0:
            continue
        label = f"{stack} ({STACKS[stack]})" if stack in STACKS else stack
        ax.ecdf(x, label=label, color=(colors or {}).get(stack))
    ax.set_xscale("log")
    ax.set_xlabel("JCT (s)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0.0, 1.0)
    pooled = f" (jobs of {seeds} seeds pooled)" if seeds > 1 else ""
    ax.set_title(title + pooled, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def plot_utilisation(
    path: Path,
    series: dict[str, tuple[np.ndarray, np.ndarray]],
    title: str,
    colors: dict[str, str] | None = None,
) -> None:
    """GPU utilisation over time, one line per scheduler (the first seed); time in s, hours
    or days by the span; above 100% means GPUs time-shared by several workers (the Ada-SRSF
    model), marked by a line at 100%."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.0))
    t_max = max((float(e[-1]) for e, _ in series.values() if len(e)), default=0.0)
    unit, name = _time_axis(t_max)
    peak = 0.0
    for stack, (edges, util) in series.items():
        ax.step(edges[:-1] / unit, 100.0 * util, where="post", label=stack,
                color=(colors or {}).get(stack))  # fmt: skip
        peak = max(peak, float(np.max(util, initial=0.0)))
    if peak > 1.0:
        ax.axhline(100.0, color="0.4", lw=0.8, ls="--")
        ax.text(0.01, 0.98, "above 100%: GPUs time-shared by several workers",
                transform=ax.transAxes, fontsize=7, va="top")  # fmt: skip
    ax.set_xlabel(f"time ({name})")
    ax.set_ylabel("GPU utilisation (% of the cluster's GPUs)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


def _trace_lines(first: dict[str, Any]) -> list[str]:
    rep = first["read"]
    lines = []

    def total(d: dict[str, int]) -> int:
        return sum(d.values())

    def why(d: dict[str, int]) -> str:
        return ", ".join(f"{n} {k}" for k, n in sorted(d.items())) or "none"

    lines.append(
        f"Trace `{Path(rep['source']).name}` ({rep['format']}): {rep['rows']} rows read, "
        f"{rep['jobs']} jobs kept; repaired {total(rep['repaired'])} "
        f"({why(rep['repaired'])}); skipped {total(rep['skipped'])} ({why(rep['skipped'])})."
    )
    for note in rep["notes"]:
        lines.append(f"Note: {note}.")
    for step in first.get("steps", []):
        detail = ", ".join(f"{k}={v}" for k, v in step.items() if k != "op")
        lines.append(f"Step `{step['op']}`: {detail}.")
    conv = first["conversion"]
    lines.append(
        f"Conversion (time_unit {conv['time_unit']:g} sim ms per s): models from the trace "
        f"{conv['model_from_trace']}, by family {conv['model_by_family']}, drawn "
        f"{conv['model_drawn']} (seeded per workload seed); fractional-GPU jobs "
        f"{conv['fractional_whole_gpu']} given whole GPUs, {conv['fractional_scaled']} "
        f"scaled; {conv['merged_jobs']} jobs run as macro-iterations (K <= "
        f"{conv['max_merge_factor']})."
    )
    return lines


def _env_line(first: dict[str, Any]) -> str:
    env, c = first["env"], first["cluster"]
    return (
        f"DL² env `{env['setting']}` (overrides {env['overrides'] or 'none'}, arrival "
        f"`{env['arrival']}`, horizon {env['max_slots']} slots): {c['num_nodes']} nodes of "
        f"{c['cpu_slots']} CPU + {c['gpu_slots']} GPU slots, {c['slot_s']:g}-s slots; every "
        f"elastic scheduler sees a window of J={first['window_J']} jobs."
    )


def workload_lines(prepared: Sequence[Prepared]) -> list[str]:
    """What the summary says about the jobs: read, repaired, skipped and why; every step."""
    first = prepared[0].record
    lines = []
    if first.get("read") is not None:
        lines.extend(_trace_lines(first))
    if first.get("env") is not None:
        lines.append(_env_line(first))
    for p in prepared:
        lines.append(f"Seed {p.seed}: `{p.name}`, {p.num_jobs} jobs simulated.")
    return lines
