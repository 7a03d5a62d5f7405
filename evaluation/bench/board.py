"""The leaderboard of a suite's cells: ``board.md``, ``board.csv``, ``heatmap.png``.

Per scenario: the winner (lowest mean avg JCT over the scenario's seeds, among the schedulers
with every seed) and each scheduler's ratio to it, the mean over seeds of ``JCT / winner's JCT
on the same seed`` with the half-width of its paired 95% CI (Student t over seeds,
:func:`evaluation.stats.paired_ci95`); ``n/a`` cells with their reason.

Overall, per scheduler (over the scenarios where it has results): mean rank (1 = best; ties
share the mean rank), win count, and the IQM (interquartile mean: the mean of the middle 50%)
of normalised JCT = JCT / the best JCT of any scheduler on the same scenario and seed.  The
same per world (a scheduler is ranked only against the others in its world).

The metric is each world's own (:data:`METRICS`): the average JCT in the elastic and
contention worlds, the average **stage completion time** (SCT, Grouper's metric: a cojob
stage's completion from the cojob's arrival) in the ``grouper`` world; ``board.csv`` names it
per row (``metric``) and the board per table, never calling an SCT a JCT.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from envs.files import write_bytes, write_text
from evaluation.bench.run import BenchResult, Cell
from evaluation.bench.scenarios import WORLDS, Scenario
from evaluation.stats import paired_ci95

__all__ = [
    "METRICS",
    "Board",
    "Overall",
    "ScenarioResult",
    "iqm",
    "make_board",
    "metric_of",
    "write_board",
]

#: world -> (short name, ``board.csv``'s ``metric``, what it is) of the metric its cells are
#: ranked by; a world not listed: the average JCT.
METRICS: dict[str, tuple[str, str, str]] = {
    "grouper": ("SCT", "avg_sct_s", "average stage completion time"),
}
_JCT = ("JCT", "avg_jct_s", "average job completion time")


def metric_of(world: str) -> tuple[str, str, str]:
    """``(short name, board.csv name, description)`` of the metric of ``world``'s cells."""
    return METRICS.get(world, _JCT)


@dataclass
class ScenarioResult:
    """One scenario's board row: ``ratio[s] = (mean ratio to the winner, CI half-width)``,
    ``rank[s]`` (1 = best), ``mean[s]`` (mean avg JCT, s)."""

    scenario: Scenario
    winner: str | None
    mean: dict[str, float]
    ratio: dict[str, tuple[float, float]]
    rank: dict[str, float]
    normalised: dict[str, list[float]]  # per seed, JCT / the seed's best


@dataclass
class Overall:
    scheduler: str
    scenarios: int
    mean_rank: float
    wins: int
    iqm: float


@dataclass
class Board:
    suite: str
    version: str
    code: str
    schedulers: list[str]
    rows: list[ScenarioResult]
    cells: dict[tuple[str, str], Cell]
    overall: list[Overall]
    per_world: dict[str, list[Overall]]


def iqm(values: Sequence[float]) -> float:
    """Interquartile mean: sort, drop the lowest and highest quarter (``n // 4`` values each),
    average the rest (``nan`` when empty)."""
    x = np.sort(np.asarray(values, dtype=float))
    if x.size == 0:
        return math.nan
    k = x.size // 4
    return float(x[k : x.size - k].mean())


def _ranks(means: dict[str, float]) -> dict[str, float]:
    """1 = the lowest mean; tied values share their mean rank."""
    order = sorted(means, key=lambda s: means[s])
    ranks: dict[str, float] = {}
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and means[order[j + 1]] == means[order[i]]:
            j += 1
        for s in order[i : j + 1]:
            ranks[s] = (i + j) / 2.0 + 1.0
        i = j + 1
    return ranks


def scenario_result(
    scenario: Scenario, schedulers: Sequence[str], cells: dict[tuple[str, str], Cell]
) -> ScenarioResult:
    seeds = list(scenario.seeds)
    ok = [
        s
        for s in schedulers
        if (c := cells.get((scenario.name, s))) is not None
        and c.status == "ok"
        and all(k in c.jct for k in seeds)
    ]
    jct = {s: np.array([cells[(scenario.name, s)].jct[k] for k in seeds]) for s in ok}
    mean = {s: float(v.mean()) for s, v in jct.items()}
    if not ok:
        return ScenarioResult(scenario, None, {}, {}, {}, {})
    winner = min(ok, key=lambda s: (mean[s], ok.index(s)))
    ratio = {}
    for s in ok:
        r = jct[s] / jct[winner]
        m, h = paired_ci95(r, np.ones_like(r))
        ratio[s] = (1.0 + m, h)
    best = np.min(np.stack([jct[s] for s in ok]), axis=0)
    normalised = {s: list(jct[s] / best) for s in ok}
    return ScenarioResult(scenario, winner, mean, ratio, _ranks(mean), normalised)


def _overall(schedulers: Sequence[str], rows: Sequence[ScenarioResult]) -> list[Overall]:
    out = []
    for s in schedulers:
        mine = [r for r in rows if s in r.rank]
        if not mine:
            continue
        out.append(
            Overall(
                s,
                len(mine),
                float(np.mean([r.rank[s] for r in mine])),
                sum(r.winner == s for r in mine),
                iqm([v for r in mine for v in r.normalised[s]]),
            )
        )
    return sorted(out, key=lambda o: (o.mean_rank, o.iqm, o.scheduler))


def make_board(
    suite: str,
    version: str,
    code: str,
    scenarios: Sequence[Scenario],
    schedulers: Sequence[str],
    cells: dict[tuple[str, str], Cell],
) -> Board:
    """The board of these cells (ranks, ratios and IQMs within each world's schedulers)."""
    from evaluation.bench.run import world_of

    rows = []
    for sc in scenarios:
        mine = [s for s in schedulers if world_of(s) == sc.world]
        rows.append(scenario_result(sc, mine, cells))
    per_world = {
        w: _overall(
            [s for s in schedulers if world_of(s) == w], [r for r in rows if r.scenario.world == w]
        )
        for w in WORLDS
    }
    return Board(
        suite, version, code, list(schedulers), rows, cells, _overall(schedulers, rows), per_world
    )


def board_of(result: BenchResult) -> Board:
    return make_board(
        result.suite,
        result.version,
        result.code,
        result.scenarios,
        result.schedulers,
        result.cells,
    )


def _fmt_ratio(r: tuple[float, float]) -> str:
    m, h = r
    return f"{m:.3f}" if not math.isfinite(h) else f"{m:.3f} ± {h:.3f}"


def _overall_table(rows: Sequence[Overall], short: str = "JCT") -> str:
    lines = [
        f"| scheduler | mean rank | wins | IQM normalised {short} | scenarios |",
        "|---|---:|---:|---:|---:|",
    ]
    lines += [
        f"| `{o.scheduler}` | {o.mean_rank:.2f} | {o.wins} | {o.iqm:.3f} | {o.scenarios} |"
        for o in rows
    ]
    return "\n".join(lines)


def _short(spec: str) -> str:
    for prefix in ("elastic:", "policy:policies/", "contention:policies/"):
        if spec.startswith(prefix):
            return spec[len(prefix) :]
    return spec


def markdown(board: Board) -> str:
    from evaluation.bench.run import world_of

    worlds = [w for w in WORLDS if any(r.scenario.world == w for r in board.rows)]
    shorts = list(dict.fromkeys(metric_of(w)[0] for w in worlds)) or ["JCT"]
    others = [
        f"in the {w} world the metric is the {metric_of(w)[2]} ({metric_of(w)[0]}) in place of "
        "the avg JCT"
        for w in worlds
        if w in METRICS
    ]
    out = [
        f"# dlsched-bench {board.suite} (version `{board.version}`, code `{board.code}`)",
        "",
        "Ratio = mean over seeds of avg JCT / the scenario winner's avg JCT on the same seed, "
        "± half-width of the paired 95% CI (Student t over seeds); 1.000 = the winner. "
        "Normalised JCT = avg JCT / the best of any scheduler on that scenario and seed; "
        "IQM = mean of its middle 50%. Ranks, wins and IQMs are within each world"
        + ("; " + "; ".join(others) if others else "")
        + ".",
        "",
        "## Overall",
        "",
        _overall_table(board.overall, " / ".join(shorts)),
    ]
    for world in WORLDS:
        rows = [r for r in board.rows if r.scenario.world == world]
        if not rows:
            continue
        scheds = [s for s in board.schedulers if world_of(s) == world]
        short = metric_of(world)[0]
        out += ["", f"## World: {world}", "", _overall_table(board.per_world[world], short), ""]
        head = f"| scenario | winner | winner's avg {short} (s) | " + " | ".join(
            f"`{_short(s)}`" for s in scheds
        )
        out += [head + " |", "|---|---|---:|" + "---:|" * len(scheds)]
        reasons: dict[tuple[str, str], list[str]] = {}
        censored = False
        for r in rows:
            cols = []
            for s in scheds:
                c = board.cells.get((r.scenario.name, s))
                if s in r.ratio:
                    dagger = " †" if c is not None and c.censored else ""
                    censored = censored or bool(dagger)
                    cols.append(_fmt_ratio(r.ratio[s]) + dagger)
                elif c is None:
                    cols.append("—")
                else:
                    cols.append(c.status)
                    reasons.setdefault((s, f"{c.status}: {c.reason}"), []).append(r.scenario.name)
            win = f"`{_short(r.winner)}`" if r.winner else "—"
            wj = f"{r.mean[r.winner]:.4g}" if r.winner else "—"
            out.append(f"| {r.scenario.name} | {win} | {wj} | " + " | ".join(cols) + " |")
        if censored:
            out += [
                "",
                "†: some jobs were unfinished at the env's horizon (max_slots, 2000; for a trace, "
                "after its last arrival) and count as finishing there: the JCT is a lower bound.",
            ]
        if reasons:
            out += ["", "Cells without a ratio:", ""]
            out += [
                f"- `{s}` {why} ({len(names)} scenario(s): {', '.join(names)})"
                for (s, why), names in reasons.items()
            ]
    return "\n".join(out) + "\n"


def csv_text(board: Board) -> str:
    f = io.StringIO()
    w = csv.writer(f, lineterminator="\n")
    w.writerow(
        ["scenario", "world", "metric", "scheduler", "status", "reason", "mean_s", "ratio",
         "ratio_ci95", "rank", "winner", "censored_jobs"]
    )  # fmt: skip
    for r in board.rows:
        metric = metric_of(r.scenario.world)[1]
        for s in board.schedulers:
            c = board.cells.get((r.scenario.name, s))
            if c is None:
                continue
            has = s in r.ratio
            w.writerow(
                [
                    r.scenario.name,
                    r.scenario.world,
                    metric,
                    s,
                    c.status,
                    c.reason,
                    f"{r.mean[s]:.6g}" if has else "",
                    f"{r.ratio[s][0]:.6f}" if has else "",
                    f"{r.ratio[s][1]:.6f}" if has and math.isfinite(r.ratio[s][1]) else "",
                    f"{r.rank[s]:g}" if has else "",
                    int(r.winner == s),
                    c.censored,
                ]
            )
    return f.getvalue()


def heatmap(board: Board, path: Path) -> None:
    """Schedulers (rows) x scenarios (columns), colour = log2 of the ratio to the winner;
    grey = no result (n/a, failed, or the other world)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scheds, rows = board.schedulers, board.rows
    m = np.full((len(scheds), len(rows)), np.nan)
    for j, r in enumerate(rows):
        for i, s in enumerate(scheds):
            if s in r.ratio:
                m[i, j] = r.ratio[s][0]
    fig, ax = plt.subplots(figsize=(max(8, 0.3 * len(rows) + 4), max(4, 0.3 * len(scheds) + 2)))
    cmap = matplotlib.colormaps["viridis_r"].with_extremes(bad="#dddddd")
    hi = float(np.nanmax(np.log2(m))) if np.isfinite(m).any() else 1.0
    im = ax.imshow(np.log2(m), aspect="auto", cmap=cmap, vmin=0.0, vmax=max(hi, 0.1))
    ax.set_xticks(range(len(rows)), [r.scenario.name for r in rows], rotation=90, fontsize=6)
    ax.set_yticks(range(len(scheds)), [_short(s) for s in scheds], fontsize=7)
    bar = fig.colorbar(im, ax=ax)
    names = " or ".join(dict.fromkeys(f"avg {metric_of(r.scenario.world)[0]}" for r in rows))
    bar.set_label(f"log2({names or 'avg JCT'} / scenario winner's); grey: no result")
    ax.set_title(f"dlsched-bench {board.suite} ({board.version}): ratio to the best")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    write_bytes(path, buf.getvalue())


def write_board(board: Board, root: Path, plot: bool = True) -> dict[str, Any]:
    """``board.md``, ``board.csv`` (and ``heatmap.png``) in ``root``; returns their paths."""
    root.mkdir(parents=True, exist_ok=True)
    text = markdown(board)
    write_text(root / "board.md", text)
    write_text(root / "board.csv", csv_text(board))
    paths: dict[str, Any] = {"md": root / "board.md", "csv": root / "board.csv", "text": text}
    if plot:
        heatmap(board, root / "heatmap.png")
        paths["png"] = root / "heatmap.png"
    return paths
