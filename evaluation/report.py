"""The run directory's tables and plots: Markdown tables (``tabulate``, GitHub format) and CSV
summaries, per-job CSVs, the JCT CDF and GPU utilisation plots (each scheduler styled by its
name, :func:`stack_styles`), and the lines that say how the workload was made."""

from __future__ import annotations

import csv
import hashlib
import math
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from tabulate import tabulate

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
    "seed_span",
    "stack_colors",
    "stack_label",
    "stack_styles",
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
    text = {"stack", "paper_name", "seed"}
    cells = []
    for row in rows:
        line = []
        for k in keys:
            if k in text:
                line.append(str(row[k]))
            elif k.endswith("_paper_s"):
                line.append(_fmt("{:.1f}", row[k]))
            elif k == "avg_jct_slots":
                line.append(_fmt("{:.2f}", row.get(k, math.nan)))
            elif k == "wall_s":
                line.append(_fmt("{:.2f}", row[k]))
            elif k == "censored_jobs":
                line.append(_fmt("{:.0f}", row.get(k, 0.0)))
            else:
                line.append(_fmt(METRICS[k][1], row[k]))
        cells.append(line)
    return github_table(cells, names, ["left" if k in text else "right" for k in keys])


def github_table(
    cells: Iterable[Sequence[Any]],
    headers: Sequence[str],
    align: Sequence[str] | None = None,
) -> str:
    """A GitHub Markdown table of already formatted cells (tabulate parses none of them);
    ``align``: ``"left"`` / ``"right"`` per column (tabulate's own default where ``None``).
    The one table writer of the reports, ``train.py`` and the experiment scripts."""
    return str(
        tabulate(
            [list(c) for c in cells],
            headers=list(headers),
            tablefmt="github",
            colalign=None if align is None else tuple(align),
            disable_numparse=True,
        )
    )


def ci_table(means: Sequence[dict[str, Any]]) -> str:
    """Mean ± 95% CI over seeds, one row per scheduler."""
    keys = [k for k in METRICS if k != "p95_queue_s"]
    cells = [
        [str(row["stack"])]
        + [
            f"{_fmt(METRICS[k][1], row[k])} ± {_fmt(METRICS[k][1], row[k + '_ci95'], row[k])}"
            for k in keys
        ]
        for row in means
    ]
    headers = ["stack", *(METRICS[k][0] for k in keys)]
    return github_table(cells, headers, ["left"] + ["right"] * len(keys))


def paired_table(rows: Sequence[dict[str, Any]]) -> str:
    """Differences against the baseline: mean ± 95% CI (mean relative %)."""
    cells = []
    for row in rows:
        line = [str(row["stack"])]
        for k in PAIRED_METRICS:
            f = METRICS[k][1]
            ci = row[f"d_{k}_ci95"]
            pm = "" if math.isnan(ci) else f" ± {_fmt(f, ci, row[f'd_{k}'])}"
            rel = row[f"rel_{k}_pct"]
            rel_text = "" if math.isnan(rel) else f" ({rel:+.1f}%)"
            line.append(f"{_fmt(f, row[f'd_{k}'])}{pm}{rel_text}")
        cells.append(line)
    headers = ["stack", *("Δ " + METRICS[k][0] for k in PAIRED_METRICS)]
    return github_table(cells, headers, ["left"] + ["right"] * len(PAIRED_METRICS))


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


#: Schedulers with a fixed style (the registered heuristics: the contention engine's stacks
#: and the elastic allocators, the most used first): the i-th gets colour i of
#: :data:`_COLOURS` (all distinct), line style i mod 4 and marker i mod 10, so neighbours
#: differ in all three.  Appending keeps the others' styles; any other name is hashed
#: (:func:`stack_styles`).
FIXED_STYLES = (
    "lwf1_adasrsf",
    "lwf1_srsf1",
    "ff_adasrsf",
    "ls_adasrsf",
    "elastic:drf",
    "elastic:optimus",
    "elastic:srtf",
    "elastic:fifo",
    "elastic:tetris",
    "elastic:esrtf",
    "rand_adasrsf",
    "lwf1_srsf2",
    "lwf1_srsf3",
    "elastic:esrtf_load",
    "elastic:fixed",
    "elastic:bundle",
    "elastic:adasrsf",
    "elastic:tiresias",
)
#: matplotlib's ``tab20``, its 10 strong colours (``tab10``, C0-C9) first, then the light ones
_COLOURS = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf",
    "#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5",
    "#c49c94", "#f7b6d2", "#c7c7c7", "#dbdb8d", "#9edae5",
)  # fmt: skip
_LINESTYLES = ("-", "--", "-.", ":")
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
_STYLE_SPACE = len(_COLOURS) * len(_LINESTYLES) * len(_MARKERS)
Style = tuple[int, int, int]  # indices into _COLOURS, _LINESTYLES, _MARKERS


def _fixed(i: int) -> Style:
    return i % len(_COLOURS), i % len(_LINESTYLES), i % len(_MARKERS)


def _unpack(i: int) -> Style:
    """Style number ``i`` of the whole space (mixed radix: colour fastest)."""
    c, rest = i % len(_COLOURS), i // len(_COLOURS)
    return c, rest % len(_LINESTYLES), (rest // len(_LINESTYLES)) % len(_MARKERS)


def _hashed(name: str) -> int:
    """A style number from ``name``'s SHA-256: the same in every process (``hash()`` of a
    str is salted per process)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big") % _STYLE_SPACE


def stack_styles(stacks: Sequence[str]) -> dict[str, dict[str, str]]:
    """Colour, line style and marker of each scheduler, a function of its name, not of its
    place in ``stacks``: a registered heuristic has its fixed style (:data:`FIXED_STYLES`),
    any other name a hash of it.  A hashed name whose style is taken in this plot (by a fixed
    one, or an earlier hashed one in sorted order) takes the next free style, so a set of
    names gets the same styles in any order."""
    index = {name: i for i, name in enumerate(FIXED_STYLES)}
    out: dict[str, Style] = {s: _fixed(index[s]) for s in stacks if s in index}
    taken = set(out.values())
    for s in sorted(set(stacks) - set(out)):
        i = _hashed(s)
        while _unpack(i) in taken and len(taken) < _STYLE_SPACE:
            i = (i + 1) % _STYLE_SPACE
        out[s] = _unpack(i)
        taken.add(out[s])
    return {
        s: {
            "color": _COLOURS[out[s][0]],
            "linestyle": _LINESTYLES[out[s][1]],
            "marker": _MARKERS[out[s][2]],
        }
        for s in stacks
    }


def stack_colors(stacks: list[str]) -> dict[str, str]:
    """Each scheduler's colour (:func:`stack_styles`), the same in every plot and run."""
    return {s: st["color"] for s, st in stack_styles(stacks).items()}


def stack_label(stack: str) -> str:
    """A scheduler's label in every plot's legend: its spec, with its paper name if any."""
    return f"{stack} ({STACKS[stack]})" if stack in STACKS else stack


def seed_span(seeds: Sequence[int]) -> str:
    """Seeds as ranges: ``300-302``, ``0, 2, 5-7``."""
    ordered = sorted(set(int(s) for s in seeds))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        parts.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ", ".join(parts)


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


def _markevery(points: int, i: int, lines: int, marks: int) -> tuple[int, int]:
    """About ``marks`` markers on a line of ``points``; line ``i`` of ``lines`` starts its
    markers a fraction ``i / lines`` of a step later, so that curves that coincide (e.g. FIFO
    and SRTF on DL²'s workloads) still show every marker."""
    step = max(1, points // marks)
    return (i * step) // max(1, lines), step


def _styles_for(
    stacks: Sequence[str], colors: Mapping[str, str] | None
) -> dict[str, dict[str, str]]:
    styles = stack_styles(list(stacks))
    for s, c in (colors or {}).items():  # a caller's colours win (the marker and dash stay)
        if s in styles:
            styles[s] = {**styles[s], "color": c}
    return styles


def plot_cdf(
    path: Path,
    jcts: dict[str, list[np.ndarray]],
    title: str,
    colors: dict[str, str] | None = None,
    *,
    seeds: Sequence[int] | None = None,
    unit: str = "s",
) -> None:
    """One empirical CDF per scheduler, pooled over seeds; x = JCT in ``unit``, log scale.

    The title's second line says what is pooled: the ``seeds`` (or their number) and the jobs
    per scheduler (each scheduler's own count in the legend when they differ).  Every
    scheduler has its colour, line style and marker (:func:`stack_styles`) and its
    :func:`stack_label`."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.0, 4.8))
    styles = _styles_for(list(jcts), colors)
    pooled: dict[str, np.ndarray] = {}
    for stack, parts in jcts.items():
        x = np.concatenate(parts) if parts else np.zeros(0)
        pooled[stack] = x[x > 0]
    counts = {s: x.size for s, x in pooled.items() if x.size}
    same = len(set(counts.values())) <= 1
    for i, (stack, x) in enumerate(pooled.items()):
        if x.size == 0:
            continue
        label = stack_label(stack) + ("" if same else f", {x.size} jobs")
        st = styles[stack]
        line = ax.ecdf(x, label=label, color=st["color"], linestyle=st["linestyle"])
        line.set_marker(st["marker"])
        line.set_markevery(_markevery(line.get_xdata().size, i, len(pooled), 8))
        line.set_markersize(5)
        line.set_markerfacecolor("none")
    ax.set_xscale("log")
    ax.set_xlabel(f"JCT ({unit}, log scale)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0.0, 1.0)
    n_seeds = max((len(parts) for parts in jcts.values()), default=1)
    which = f"seeds {seed_span(seeds)}" if seeds is not None else f"{n_seeds} seeds"
    if seeds is not None and len(seeds) == 1:
        which = f"seed {seed_span(seeds)}"
    per = f", {next(iter(counts.values()))} jobs per scheduler" if counts and same else ""
    pooled_text = f"jobs of {which} pooled{per}" if n_seeds > 1 else f"jobs of {which}{per}"
    ax.set_title(f"{title}\n{pooled_text}", fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)


Series = tuple[np.ndarray, np.ndarray]


def plot_utilisation(
    path: Path,
    series: Mapping[str, Series] | Mapping[int, Mapping[str, Series]],
    title: str,
    colors: dict[str, str] | None = None,
    *,
    ylabel: str = "GPU utilisation (% of the cluster's GPUs)",
    note: str | None = None,
) -> None:
    """GPU utilisation over time, one line per scheduler; one panel per seed when ``series``
    maps seeds to ``{scheduler: (bin edges, utilisation)}`` (a plain ``{scheduler: ...}`` is
    one panel).  Time in s, hours or days by the longest run, shared by the panels; above
    100% (GPUs time-shared by several workers, the contention engine's model) is marked by a
    line at 100%.  ``note`` goes under the panels (what exactly is measured)."""
    first = next(iter(series.values()), None)
    one = first is None or isinstance(first, tuple)  # {scheduler: series}: a single panel
    panels: dict[int | None, Mapping[str, Series]] = (
        {None: series} if one else dict(series)  # type: ignore[dict-item, arg-type]
    )
    plt = _pyplot()
    n = len(panels)
    ncols = 1 if n <= 3 else 2
    nrows = math.ceil(n / ncols)
    stacks = list(dict.fromkeys(s for p in panels.values() for s in p))
    styles = _styles_for(stacks, colors)
    # the bottom, in inches from the figure's edge: the note's lines, then the legend's rows
    width_in = 7.0 * (1 if ncols == 1 else 1.6)
    lines = textwrap.wrap(note, width=int(width_in * 17)) if note else []
    note_in = 0.05 + 0.13 * len(lines)
    legend_cols = min(3, len(stacks)) or 1
    bottom_in = note_in + 0.24 * math.ceil(len(stacks) / legend_cols) + 0.1
    height_in = 0.9 + 2.6 * nrows + bottom_in
    fig, axes = plt.subplots(
        nrows, ncols, figsize=(width_in, height_in), sharex=True, sharey=True, squeeze=False
    )
    t_max = max(
        (float(e[-1]) for p in panels.values() for e, _ in p.values() if len(e)), default=0.0
    )
    unit, name = _time_axis(t_max)
    peak = 0.0
    for ax, (seed, panel) in zip(axes.flat, panels.items(), strict=False):
        for i, (stack, (edges, util)) in enumerate(panel.items()):
            st = styles[stack]
            y = 100.0 * np.asarray(util, dtype=float)
            x = np.asarray(edges, dtype=float)[:-1] / unit
            every = _markevery(x.size, i, len(panel), 6)
            ax.step(x, y, where="post", label=stack_label(stack), color=st["color"],
                    linestyle=st["linestyle"], marker=st["marker"], markevery=every,
                    markersize=4, markerfacecolor="none", linewidth=1.2)  # fmt: skip
            if np.isfinite(y).any():
                peak = max(peak, float(np.nanmax(y)))
        if seed is not None and n > 1:  # one seed: the title names it
            ax.set_title(f"seed {seed}", fontsize=9)
        ax.grid(True, alpha=0.3)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    for ax in axes.flat[:n]:
        if peak > 100.0:
            ax.axhline(100.0, color="0.4", lw=0.8, ls="--")
    if peak > 100.0:
        axes.flat[0].text(0.01, 0.98, "above 100%: GPUs time-shared by several workers",
                          transform=axes.flat[0].transAxes, fontsize=7, va="top")  # fmt: skip
    for ax in axes[-1, :]:
        ax.set_xlabel(f"time ({name})")
    bottom = bottom_in / height_in
    fig.supylabel(ylabel, fontsize=9, y=(1.0 + bottom) / 2)
    fig.suptitle(title, fontsize=10)
    seen: dict[str, Any] = {}
    for ax in axes.flat[:n]:
        for h, lab in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(lab, h)
    if lines:
        fig.text(0.01, 0.03 / height_in, "\n".join(lines), fontsize=7, va="bottom", ha="left")
    fig.legend(list(seen.values()), list(seen), fontsize=8, loc="lower center", ncols=legend_cols,
               frameon=False, bbox_to_anchor=(0.5, note_in / height_in))  # fmt: skip
    fig.tight_layout(rect=(0.0, bottom, 1.0, 1.0))
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
