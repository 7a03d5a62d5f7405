"""Readers for the trace layouts dlsched meets, each giving a :class:`~.model.Trace`.

=================  ==========================================================================
format             layout and rules
=================  ==========================================================================
``normalised``     ``job_id, submit_time_s, duration_s, num_gpus[, job_type, status, vc,
                   gpu_milli, iterations]`` (``envs/sim/data/README.md``).  Rows must be
                   sorted by ``submit_time_s``.  ``iterations`` (an extension) may replace
                   ``duration_s`` row by row.  Times are kept as they are (not rebased).
``philly_digest``  ``timestamp, duration, num_gpus, gpu_time, cluster``: Philly's job digest
                   (``petuum/adaptdl`` ``simulator/traces/philly.csv``).  ``timestamp`` is a
                   naive ``YYYY-MM-DD HH:MM:SS`` submission time, ``duration`` seconds,
                   ``gpu_time`` must equal ``duration x num_gpus`` (relative 1e-6),
                   ``cluster`` is the VC.  Ids are ``philly-<vc>-<row>`` (1-based data row).
                   Exact repeats of an earlier row are kept (distinct rows of the source) and
                   counted in a note.
``philly_json``    Philly's raw ``cluster_job_log``: a JSON list of ``{jobid, vc, user,
                   status, submitted_time, attempts: [{start_time, end_time, detail: [{ip,
                   gpus: [...]}]}]}``; times are naive strings or ``"None"``.  Run time =
                   last attempt's end - first attempt's start (retries and the gaps between
                   them included, as in Jeon et al.).  GPUs = the first attempt's GPU count
                   (the largest over all attempts when the first lists none).  A job with no
                   attempts, or whose first attempt never started, is skipped as ``never
                   started``; one whose last attempt has no end as ``unfinished``.  Errors
                   name ``record <k>`` (1-based position in the list) and the jobid.
``alibaba_gpu``    Alibaba GPU 2023 pod list (``openb_pod_list_*.csv``): ``name, num_gpu,
                   gpu_milli, creation_time, scheduled_time, deletion_time[, cpu_milli,
                   memory_mib, gpu_spec, qos, pod_phase]``, times in integer seconds.
                   submit = ``creation_time``; run time = ``deletion_time -
                   scheduled_time``; an empty ``scheduled_time`` is skipped as ``never
                   scheduled``, an empty ``deletion_time`` as ``unfinished``.  ``gpu_milli``
                   (1..1000) is the share of each GPU; ``pod_phase`` becomes ``status``.
``helios``         Helios ``cluster_log.csv``: ``job_id, gpu_num, submit_time, duration[, user,
                   vc, jobname, cpu_num, node_num, state, start_time, end_time, queue]``;
                   ``submit_time`` a naive datetime string, ``duration`` the run time in s;
                   ``state`` becomes ``status`` (every state is kept: select on it with
                   :func:`~envs.sim.traces.transform.select`).
``tiresias``       Tiresias's job CSV: ``job_id, num_gpu, submit_time, duration[, iterations,
                   model_name, interval, ...]``, seconds, rows sorted by ``submit_time``.
                   ``model_name`` becomes ``job_type``.  Its ``iterations`` count iterations
                   of its own models' speed, so the duration is used and they are ignored.
=================  ==========================================================================

Common rules: raw layouts (every format but ``normalised``) get their times rebased so the
first kept job submits at 0.  GPU counts must be integers >= 1, durations > 0, times
parseable; a violation raises :class:`~envs.sim.errors.WorkloadError` naming the file, the
line (or record), the column and the cause, unless :class:`~.model.Repairs` asks to skip it,
in which case it is counted.  Duplicate ids and unsorted rows follow ``Repairs`` too.  A file
with no job left raises.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

from envs.sim.errors import WorkloadError
from envs.sim.traces._csv import (
    FieldError,
    PathLike,
    _err,
    _float_field,
    _int_field,
    _read_csv,
    _text,
    open_text,
)
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


# --------------------------------------------------------------------------------------------
# CSV layouts
# --------------------------------------------------------------------------------------------

_NORMALISED_REQUIRED = ("job_id", "submit_time_s", "num_gpus")


def _normalised_row(p: Path, line: int, row: Mapping[str, str]) -> TraceJob:
    job_id = _text(p, line, row, "job_id")
    submit = _float_field(p, line, row, "submit_time_s", zero_ok=True)
    gpus = _gpus(p, line, row, "num_gpus")
    milli = _milli(p, line, row, "gpu_milli")
    iterations: int | None = None
    duration: float | None = None
    if _opt(row, "iterations"):
        iterations = _int_field(p, line, row, "iterations")
    elif "duration_s" not in row:
        raise _err(p, line, "iterations", "empty value and no duration_s column", "empty")
    else:
        duration = _float_field(p, line, row, "duration_s")
    return TraceJob(
        job_id,
        submit,
        duration,
        gpus,
        milli,
        _opt(row, "job_type"),
        _opt(row, "status"),
        _opt(row, "vc"),
        iterations,
        line,
    )


def read_normalised_csv(path: PathLike, *, repairs: Repairs | None = None) -> Trace:
    """A trace in the normalised schema (see the module docstring)."""
    rep = repairs or Repairs()
    p, header, rows = _read_csv(path, _NORMALISED_REQUIRED)
    if "duration_s" not in header and "iterations" not in header:
        raise _err(
            p,
            1,
            "duration_s",
            "missing required column (need duration_s or iterations)",
            "missing column",
        )
    tally = Tally()
    jobs = _parse_rows(p, rows, _normalised_row, rep, tally)
    return _finish(
        p, "normalised", len(rows), jobs, tally, rep, id_col="job_id", ordered=True, rebase=False
    )


def read_philly_digest(path: PathLike, *, repairs: Repairs | None = None) -> Trace:
    """Philly's job digest ``timestamp,duration,num_gpus,gpu_time,cluster``."""
    rep = repairs or Repairs()
    p, _, rows = _read_csv(path, ("timestamp", "duration", "num_gpus", "gpu_time", "cluster"))
    first_data_line = rows[0][0]

    def parse(p: Path, line: int, row: Mapping[str, str]) -> TraceJob:
        submit = _timestamp(p, line, row["timestamp"], "timestamp")
        duration = _float_field(p, line, row, "duration")
        gpus = _gpus(p, line, row, "num_gpus")
        gpu_time = _float_field(p, line, row, "gpu_time")
        if not math.isclose(gpu_time, duration * gpus, rel_tol=1e-6):
            raise _err(
                p,
                line,
                "gpu_time",
                f"must equal duration x num_gpus = {duration * gpus:g}, got {gpu_time:g}",
                "inconsistent",
            )
        vc = _text(p, line, row, "cluster")
        data_row = line - first_data_line + 1
        return TraceJob(f"philly-{vc}-{data_row}", submit, duration, gpus, vc=vc, line=line)

    tally = Tally()
    jobs = _parse_rows(p, rows, parse, rep, tally)
    repeats = len(rows) - len({tuple(r.values()) for _, r in rows})
    if repeats:
        tally.notes.append(f"{repeats} rows repeat an earlier row exactly; kept as distinct jobs")
    return _finish(
        p,
        "philly_digest",
        len(rows),
        jobs,
        tally,
        rep,
        id_col="timestamp",
        ordered=False,
        rebase=True,
    )


def read_alibaba_gpu(path: PathLike, *, repairs: Repairs | None = None) -> Trace:
    """Alibaba GPU 2023 pod list (``openb_pod_list_*.csv``)."""
    rep = repairs or Repairs()
    required = ("name", "num_gpu", "gpu_milli", "creation_time", "scheduled_time", "deletion_time")
    p, _, rows = _read_csv(path, required)

    def parse(p: Path, line: int, row: Mapping[str, str]) -> RowResult:
        name = _text(p, line, row, "name")
        submit = _float_field(p, line, row, "creation_time", zero_ok=True)
        gpus = _gpus(p, line, row, "num_gpu")
        milli = _milli(p, line, row, "gpu_milli")
        if not _opt(row, "gpu_milli"):
            raise _err(p, line, "gpu_milli", "empty value", "empty")
        if not _opt(row, "scheduled_time"):
            return "never scheduled (no scheduled_time)"
        if not _opt(row, "deletion_time"):
            return "unfinished (no deletion_time)"
        start = _float_field(p, line, row, "scheduled_time", zero_ok=True)
        end = _float_field(p, line, row, "deletion_time", zero_ok=True)
        if start < submit:
            raise _err(
                p,
                line,
                "scheduled_time",
                f"before creation_time ({start:g} < {submit:g})",
                "before submission",
            )
        if not end > start:
            raise _err(
                p,
                line,
                "deletion_time",
                f"must be after scheduled_time ({end:g} <= {start:g})",
                "non-positive duration",
            )
        return TraceJob(
            name, submit, end - start, gpus, milli, status=_opt(row, "pod_phase"), line=line
        )

    tally = Tally()
    jobs = _parse_rows(p, rows, parse, rep, tally)
    return _finish(
        p, "alibaba_gpu", len(rows), jobs, tally, rep, id_col="name", ordered=False, rebase=True
    )


def read_helios(path: PathLike, *, repairs: Repairs | None = None) -> Trace:
    """Helios ``cluster_log.csv``."""
    rep = repairs or Repairs()
    p, _, rows = _read_csv(path, ("job_id", "gpu_num", "submit_time", "duration"))

    def parse(p: Path, line: int, row: Mapping[str, str]) -> TraceJob:
        job_id = _text(p, line, row, "job_id")
        submit = _timestamp(p, line, row["submit_time"], "submit_time")
        gpus = _gpus(p, line, row, "gpu_num")
        duration = _float_field(p, line, row, "duration")
        return TraceJob(
            job_id, submit, duration, gpus, status=_opt(row, "state"), vc=_opt(row, "vc"), line=line
        )

    tally = Tally()
    jobs = _parse_rows(p, rows, parse, rep, tally)
    return _finish(
        p, "helios", len(rows), jobs, tally, rep, id_col="job_id", ordered=False, rebase=True
    )


def read_tiresias(path: PathLike, *, repairs: Repairs | None = None) -> Trace:
    """Tiresias's job CSV (``60_job.csv`` layout)."""
    rep = repairs or Repairs()
    p, _, rows = _read_csv(path, ("job_id", "num_gpu", "submit_time", "duration"))

    def parse(p: Path, line: int, row: Mapping[str, str]) -> TraceJob:
        job_id = _text(p, line, row, "job_id")
        submit = _float_field(p, line, row, "submit_time", zero_ok=True)
        gpus = _gpus(p, line, row, "num_gpu")
        duration = _float_field(p, line, row, "duration")
        return TraceJob(job_id, submit, duration, gpus, job_type=_opt(row, "model_name"), line=line)

    tally = Tally()
    jobs = _parse_rows(p, rows, parse, rep, tally)
    if rows and "iterations" in rows[0][1]:
        tally.notes.append("Tiresias iterations ignored: work comes from duration")
    return _finish(
        p, "tiresias", len(rows), jobs, tally, rep, id_col="job_id", ordered=True, rebase=True
    )


# --------------------------------------------------------------------------------------------
# Philly's raw JSON job log
# --------------------------------------------------------------------------------------------


def read_philly_json(path: PathLike, *, repairs: Repairs | None = None) -> Trace:
    """Philly's raw ``cluster_job_log`` (see the module docstring)."""
    rep = repairs or Repairs()
    p = Path(path)
    if not p.is_file():
        raise WorkloadError(f"{p.name}: file not found (file: {p})")
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise WorkloadError(f"{p.name}: not valid JSON: {exc} (file: {p})") from exc
    if not isinstance(data, list) or not data:
        raise WorkloadError(f"{p.name}: expected a non-empty JSON list of jobs (file: {p})")
    tally = Tally()
    jobs: list[TraceJob] = []
    for k, rec in enumerate(data, start=1):
        try:
            res = _philly_record(p, k, rec)
        except FieldError as exc:
            if exc.kind == ZERO_GPUS and rep.zero_gpus == "skip":
                tally.skipped["gpus: zero (CPU-only job)"] += 1
                continue
            if exc.kind != ZERO_GPUS and rep.bad_rows == "skip":
                tally.skipped[exc.reason] += 1
                continue
            raise
        if isinstance(res, str):
            tally.skipped[res] += 1
        else:
            jobs.append(res)
    return _finish(
        p,
        "philly_json",
        len(data),
        jobs,
        tally,
        rep,
        id_col="jobid",
        ordered=False,
        rebase=True,
        where="record",
    )


def _jerr(p: Path, k: int, jobid: str, key: str, cause: str, kind: str) -> FieldError:
    return FieldError(
        f"{p.name}, record {k} (jobid {jobid!r}), field {key!r}: {cause} (file: {p})",
        line=k,
        column=key,
        kind=kind,
    )


def _jtime(p: Path, k: int, jobid: str, key: str, value: Any) -> float | None:
    if value is None or value == "None":
        return None
    if not isinstance(value, str):
        raise _jerr(p, k, jobid, key, f"expected a time string, got {value!r}", "unparsable time")
    try:
        return _timestamp(p, k, value, key)
    except FieldError:
        raise _jerr(p, k, jobid, key, f"unparsable time {value!r}", "unparsable time") from None


def _philly_record(p: Path, k: int, rec: Any) -> RowResult:
    if not isinstance(rec, dict):
        raise _jerr(p, k, "?", "", f"expected a JSON object, got {type(rec).__name__}", "invalid")
    jobid = rec.get("jobid")
    if not isinstance(jobid, str) or not jobid:
        raise _jerr(p, k, "?", "jobid", f"missing or empty: {jobid!r}", "empty")
    for key in ("submitted_time", "attempts"):
        if key not in rec:
            raise _jerr(p, k, jobid, key, "missing field", "missing field")
    submit = _jtime(p, k, jobid, "submitted_time", rec["submitted_time"])
    if submit is None:
        raise _jerr(p, k, jobid, "submitted_time", "is None", "unparsable time")
    attempts = rec["attempts"]
    if not isinstance(attempts, list):
        raise _jerr(p, k, jobid, "attempts", f"expected a list, got {attempts!r}", "invalid")
    if not attempts:
        return "never started (no attempts)"
    gpu_counts: list[int] = []
    for a in attempts:
        if not isinstance(a, dict):
            raise _jerr(p, k, jobid, "attempts", f"attempt is not an object: {a!r}", "invalid")
        detail = a.get("detail") or []
        if not isinstance(detail, list):
            raise _jerr(
                p, k, jobid, "attempts[].detail", f"expected a list, got {detail!r}", "invalid"
            )
        count = 0
        for d in detail:
            if not isinstance(d, dict):
                continue
            listed = d.get("gpus") or []
            if not isinstance(listed, list):
                raise _jerr(
                    p, k, jobid, "attempts[].detail[].gpus",
                    f"expected a list of GPU ids, got {listed!r}", "invalid",
                )  # fmt: skip
            count += len(listed)
        gpu_counts.append(count)
    start = _jtime(p, k, jobid, "attempts[0].start_time", attempts[0].get("start_time"))
    end = _jtime(p, k, jobid, "attempts[-1].end_time", attempts[-1].get("end_time"))
    if start is None:
        return "never started (first attempt has no start_time)"
    if end is None:
        return "unfinished (last attempt has no end_time)"
    if not end > start:
        raise _jerr(
            p,
            k,
            jobid,
            "attempts[-1].end_time",
            f"run time must be > 0, got {end - start:g} s",
            "non-positive duration",
        )
    if start < submit:
        raise _jerr(
            p,
            k,
            jobid,
            "attempts[0].start_time",
            f"before submitted_time by {submit - start:g} s",
            "before submission",
        )
    gpus = gpu_counts[0] or max(gpu_counts)
    if gpus == 0:
        raise _jerr(p, k, jobid, "gpus", "no attempt lists a GPU", ZERO_GPUS)
    return TraceJob(
        jobid,
        submit,
        end - start,
        gpus,
        status=str(rec.get("status") or ""),
        vc=str(rec.get("vc") or ""),
        line=k,
    )


# --------------------------------------------------------------------------------------------
# Dispatch
# --------------------------------------------------------------------------------------------

#: format name -> reader
READERS: dict[str, Callable[..., Trace]] = {
    "normalised": read_normalised_csv,
    "philly_digest": read_philly_digest,
    "philly_json": read_philly_json,
    "alibaba_gpu": read_alibaba_gpu,
    "helios": read_helios,
    "tiresias": read_tiresias,
}

#: header columns that identify a CSV layout (a few distinctive ones, so that a file missing
#: some other required column is still recognised and its reader names what is missing)
_SIGNATURES: tuple[tuple[str, frozenset[str]], ...] = (
    ("normalised", frozenset({"job_id", "submit_time_s"})),
    ("philly_digest", frozenset({"timestamp", "gpu_time", "cluster"})),
    ("alibaba_gpu", frozenset({"creation_time", "scheduled_time"})),
    ("helios", frozenset({"gpu_num", "submit_time"})),
    ("tiresias", frozenset({"num_gpu", "submit_time"})),
)


def detect_format(path: PathLike) -> str:
    """The layout of ``path``: ``philly_json`` for a ``.json`` file or one starting with
    ``[``; otherwise the first CSV layout whose identifying columns are all in the header."""
    p = Path(path)
    if not p.exists():
        raise WorkloadError(f"{p.name}: file not found (file: {p})")
    if not p.is_file():
        kind = "a directory" if p.is_dir() else "not a regular file"
        raise WorkloadError(f"{p.name}: {kind}, not a trace file (file: {p})")
    try:
        with open_text(p, errors="replace") as fh:
            head = fh.read(4096)
    except (OSError, EOFError) as exc:  # a corrupt .gz
        raise WorkloadError(f"{p.name}: cannot read: {exc} (file: {p})") from exc
    if head.startswith(("\ufffd\ufffd", "\ufeff")) or "\x00" in head:
        raise WorkloadError(
            f"{p.name}: not UTF-8 text (NUL bytes or a UTF-16 byte-order mark): save it as "
            f"UTF-8 (file: {p})"
        )
    if p.suffix.lower() == ".json" or head.lstrip().startswith("["):
        return "philly_json"
    first = next((ln for ln in head.splitlines() if ln.strip()), "")
    if not first:
        raise WorkloadError(f"{p.name}: empty file (no header line) (file: {p})")
    columns = {c.strip().strip('"') for c in first.split(",")}
    for name, needed in _SIGNATURES:
        if needed <= columns:
            return name
    # most of one layout's identifying columns: that reader names what is missing
    near = [name for name, needed in _SIGNATURES if len(needed & columns) >= 2]
    if len(near) == 1:
        return near[0]
    raise WorkloadError(
        f"{p.name}, line 1: unknown trace layout, header {sorted(columns)}; known formats: "
        f"{sorted(READERS)} (give format=<name>) (file: {p})"
    )


def read_trace(path: PathLike, *, format: str = "auto", repairs: Repairs | None = None) -> Trace:
    """Read ``path`` in ``format`` (``"auto"``: :func:`detect_format`)."""
    fmt = detect_format(path) if format == "auto" else format
    reader = READERS.get(fmt)
    if reader is None:
        raise WorkloadError(f"unknown trace format {fmt!r}; known: {['auto', *sorted(READERS)]}")
    return reader(path, repairs=repairs)
