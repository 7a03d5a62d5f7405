"""The combined table of a ``train.py -m`` sweep: one row per job, written as ``sweep.csv`` and
``sweep.md`` in the sweep directory once every job has run (as ``evaluate.py -m`` writes its
``summary.*``: the jobs run one after another in the one process, each adds its row
(:func:`job_row`), and ``train.py`` writes the table after Hydra returns).

A row: the job's number, its overrides, seed, status (``ok``, or ``failed: <why>``), the final
and the best validation avg JCT (slots), each validation baseline's avg JCT on the same
workloads (one column per heuristic, empty where a job did not run it), training seconds and
the run directory.  Both files are written atomically (:mod:`envs.files`)."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tabulate import tabulate

from envs.files import write_text

__all__ = ["FIXED", "job_row", "sweep_columns", "write_sweep_table"]

#: The columns every row has, in this order; the heuristics' columns follow ``best_avg_jct``.
FIXED = ("job", "overrides", "seed", "status", "final_avg_jct", "best_avg_jct")
_TAIL = ("train_s", "run_dir")


def job_row(
    num: int,
    overrides: Sequence[str],
    seed: int,
    run_dir: Path,
    summary: dict[str, Any] | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    """One job's row: from its ``summary`` (:func:`training.run.train`'s or
    :func:`training.plan.train_plan`'s), or, for a job that failed, ``error``."""
    row: dict[str, Any] = {
        "job": int(num),
        "overrides": [str(o) for o in overrides],
        "seed": int(seed),
        "status": "ok" if error is None else f"failed: {error}",
        "final_avg_jct": None,
        "best_avg_jct": None,
    }
    if summary is not None:
        final = summary.get("final") or {}
        row["final_avg_jct"] = final.get("avg_jct")
        row["best_avg_jct"] = summary.get("best_avg_jct")
        for name, v in (summary.get("baselines_avg_jct") or {}).items():
            row[str(name)] = float(v)
        row["train_s"] = summary.get("train_s")
    row["run_dir"] = str(run_dir)
    return row


def sweep_columns(rows: Sequence[dict[str, Any]]) -> list[str]:
    """:data:`FIXED`, then every heuristic named in any row (first-seen order), then
    ``train_s`` and ``run_dir``."""
    middle: list[str] = []
    for row in rows:
        middle += [k for k in row if k not in FIXED and k not in _TAIL and k not in middle]
    return [*FIXED, *middle, *_TAIL]


def _cell(v: Any) -> Any:
    return "" if v is None else " ".join(v) if isinstance(v, list) else v


def write_sweep_table(sweep_dir: Path, rows: Sequence[dict[str, Any]]) -> tuple[Path, Path]:
    """``sweep_dir/sweep.csv`` (full precision, every job's overrides in full) and
    ``sweep_dir/sweep.md`` (a GitHub table, JCTs to two decimals; the overrides every job shares
    are said once above it, the column keeps those that vary), rows by job number; their
    paths."""
    if not rows:
        raise ValueError("a sweep table needs at least one job")
    rows = sorted(rows, key=lambda r: r["job"])
    cols = sweep_columns(rows)
    buf = io.StringIO(newline="")
    writer = csv.DictWriter(buf, fieldnames=cols, restval="", lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: _cell(v) for k, v in r.items()} for r in rows)
    csv_path = write_text(sweep_dir / "sweep.csv", buf.getvalue())
    common = [o for o in rows[0]["overrides"] if all(o in r["overrides"] for r in rows)]
    shown = [{**r, "overrides": [o for o in r["overrides"] if o not in common]} for r in rows]
    body = tabulate(
        [[_cell(r.get(c)) for c in cols] for r in shown],
        headers=cols,
        tablefmt="github",
        floatfmt=".2f",
        missingval="",
    )
    ok = sum(r["status"] == "ok" for r in rows)
    text = (
        f"# Training sweep: {len(rows)} job(s), {ok} finished\n\n"
        "Validation avg JCT (slots) of each job's final and best policy, and of each heuristic "
        "on the same validation workloads; `train_s`: seconds of training.\n\n"
        + (f"Every job: `{' '.join(common)}`\n\n" if common else "")
        + f"{body}\n"
    )
    md_path = write_text(sweep_dir / "sweep.md", text)
    return csv_path, md_path
