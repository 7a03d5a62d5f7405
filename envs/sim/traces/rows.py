"""What every trace reader shares: field parsing and the row driver that applies ``Repairs``.

A reader parses each row into a :class:`~.model.TraceJob` (or the reason it has none);
:func:`_parse_rows` turns field errors into skips where :class:`~.model.Repairs` asks for
them (counted in a :class:`~.model.Tally`), and :func:`_finish` deduplicates ids, checks or
restores submission order, rebases times and builds the :class:`~.model.Trace`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path

from envs.sim.errors import WorkloadError
from envs.sim.traces._csv import FieldError, _err, _int_field, _text
from envs.sim.traces.model import Repairs, Tally, Trace, TraceJob

ZERO_GPUS = "zero GPUs"
_EPOCH = datetime(1970, 1, 1)

#: What a row parser returns: a job, or the reason a row has no job by the format's own rules
#: (e.g. ``"never scheduled"``), which is counted as skipped.
RowResult = TraceJob | str
RowParser = Callable[[Path, int, Mapping[str, str]], RowResult]


# --------------------------------------------------------------------------------------------
# Field helpers
# --------------------------------------------------------------------------------------------


def _gpus(p: Path, line: int, row: Mapping[str, str], col: str) -> int:
    text = _text(p, line, row, col)
    try:
        value = float(text)
    except ValueError:
        raise _err(p, line, col, f"not a number: {text!r}", "not a number") from None
    if value == 0:
        raise _err(p, line, col, f"asks for no GPU, got {text!r}", ZERO_GPUS)
    return _int_field(p, line, row, col)


def _milli(p: Path, line: int, row: Mapping[str, str], col: str) -> int:
    if not row.get(col, "").strip():
        return 1000
    milli = _int_field(p, line, row, col)
    if milli > 1000:
        raise _err(p, line, col, f"must be in 1..1000, got {milli}", "out of range")
    return milli


def _timestamp(p: Path, line: int, value: str, col: str) -> float:
    """Seconds of a naive (or zoned) ISO date-time string; naive times are read as UTC, so
    differences are exact whatever the machine's time zone."""
    text = value.strip()
    if not text or text == "None":
        raise _err(p, line, col, f"no time given: {text!r}", "unparsable time")
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        raise _err(
            p, line, col, f"unparsable time {text!r} (want YYYY-MM-DD HH:MM:SS)", "unparsable time"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return (dt - _EPOCH.replace(tzinfo=UTC)).total_seconds()


def _opt(row: Mapping[str, str], col: str) -> str:
    return row.get(col, "").strip()


# --------------------------------------------------------------------------------------------
# The shared driver
# --------------------------------------------------------------------------------------------


def _parse_rows(
    p: Path,
    rows: list[tuple[int, dict[str, str]]],
    parse: RowParser,
    repairs: Repairs,
    tally: Tally,
) -> list[TraceJob]:
    jobs: list[TraceJob] = []
    for line, row in rows:
        try:
            res = parse(p, line, row)
        except FieldError as exc:
            if exc.kind == ZERO_GPUS:
                if repairs.zero_gpus != "skip":
                    raise WorkloadError(
                        f"{exc} [pass repairs.zero_gpus=skip to skip and count such jobs]"
                    ) from None
                tally.skipped[f"{exc.column}: zero (CPU-only job)"] += 1
                continue
            if repairs.bad_rows != "skip":
                raise
            tally.skipped[exc.reason] += 1
            continue
        if isinstance(res, str):
            tally.skipped[res] += 1
        else:
            jobs.append(res)
    return jobs


def _finish(
    p: Path,
    fmt: str,
    n_rows: int,
    jobs: list[TraceJob],
    tally: Tally,
    repairs: Repairs,
    *,
    id_col: str,
    ordered: bool,
    rebase: bool,
    where: str = "line",
) -> Trace:
    jobs = _dedupe(p, jobs, repairs, tally, id_col, where)
    if ordered:
        jobs = _check_order(p, jobs, repairs, tally, where)
    else:
        order = sorted(range(len(jobs)), key=lambda i: (jobs[i].submit_s, jobs[i].line))
        moved = sum(1 for k, i in enumerate(order) if k != i)
        if moved:
            tally.notes.append(
                f"source rows are not in submission order (this layout is not sorted); "
                f"sorted by (submit time, {where}): {moved} rows moved"
            )
        jobs = [jobs[i] for i in order]
    if not jobs:
        skipped = ", ".join(f"{n} {why}" for why, n in sorted(tally.skipped.items()))
        raise WorkloadError(f"{p.name}: no job left: {n_rows} rows read, skipped: {skipped}")
    if rebase:
        t0 = jobs[0].submit_s
        if t0:
            jobs = [_shift(j, t0) for j in jobs]
            tally.notes.append(f"times rebased: the first kept job submits at 0 (was {t0:g} s)")
    return Trace(tuple(jobs), tally.report(str(p), fmt, n_rows, len(jobs)))


def _shift(j: TraceJob, t0: float) -> TraceJob:
    return replace(j, submit_s=j.submit_s - t0)


def _renamed(j: TraceJob, job_id: str) -> TraceJob:
    return replace(j, job_id=job_id)


def _dedupe(
    p: Path, jobs: list[TraceJob], repairs: Repairs, tally: Tally, id_col: str, where: str
) -> list[TraceJob]:
    first: dict[str, int] = {}
    seen_count: Counter[str] = Counter()
    out: list[TraceJob] = []
    for j in jobs:
        seen_count[j.job_id] += 1
        if j.job_id not in first:
            first[j.job_id] = j.line
            out.append(j)
            continue
        if repairs.duplicate_ids == "skip":
            tally.skipped["duplicate id"] += 1
            continue
        if repairs.duplicate_ids == "rename":
            new_id = f"{j.job_id}#{seen_count[j.job_id]}"
            while new_id in first:
                seen_count[j.job_id] += 1
                new_id = f"{j.job_id}#{seen_count[j.job_id]}"
            first[new_id] = j.line
            out.append(_renamed(j, new_id))
            tally.repaired["duplicate id renamed"] += 1
            continue
        loc = f"{where} {first[j.job_id]}"
        cause = f"duplicate job id {j.job_id!r} (first on {loc})"
        if where == "line":
            raise _err(p, j.line, id_col, cause, "duplicate id")
        raise WorkloadError(f"{p.name}, record {j.line}, field {id_col!r}: {cause} (file: {p})")
    return out


def _check_order(
    p: Path, jobs: list[TraceJob], repairs: Repairs, tally: Tally, where: str
) -> list[TraceJob]:
    for prev, cur in pairwise(jobs):
        if cur.submit_s < prev.submit_s:
            if repairs.unsorted == "sort":
                out = sorted(jobs, key=lambda j: j.submit_s)  # stable: file order for ties
                moved = sum(1 for a, b in zip(jobs, out, strict=True) if a is not b)
                tally.repaired["row out of submission order (sorted)"] += moved
                return out
            raise WorkloadError(
                f"{p.name}, {where} {cur.line}: rows are not sorted by submit time "
                f"({cur.submit_s:g} s after {prev.submit_s:g} s on {where} {prev.line}); "
                f"pass repairs.unsorted=sort to sort them (file: {p})"
            )
    return jobs
