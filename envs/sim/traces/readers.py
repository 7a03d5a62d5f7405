"""Readers for the trace layouts dlsched meets, each giving a :class:`~.model.Trace`.

Formats (each reader's docstring gives its layout and rules): ``normalised``
(:func:`read_normalised_csv`, ``envs/sim/data/README.md``), ``philly_digest``
(:func:`read_philly_digest`), ``philly_json`` (:func:`~.philly_json.read_philly_json`),
``alibaba_gpu`` (:func:`read_alibaba_gpu`), ``helios`` (:func:`read_helios`), ``tiresias``
(:func:`read_tiresias`), ``pollux`` (Pollux's and Sia's workloads:
:func:`~.pollux.read_pollux`); :func:`read_trace` reads any of them, :func:`detect_format` tells
which a file is.

Common rules: raw layouts (every format but ``normalised``) get their times rebased so the
first kept job submits at 0.  GPU counts must be integers >= 1, durations > 0, times
parseable; a violation raises :class:`~envs.sim.errors.WorkloadError` naming the file, the
line (or record), the column and the cause, unless :class:`~.model.Repairs` asks to skip it,
in which case it is counted.  Duplicate ids and unsorted rows follow ``Repairs`` too.  A file
with no job left raises.  The shared row handling is :mod:`envs.sim.traces.rows`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path

from envs.sim.errors import WorkloadError
from envs.sim.traces._csv import (
    PathLike,
    _err,
    _float_field,
    _int_field,
    _read_csv,
    _text,
    open_text,
)
from envs.sim.traces.model import Repairs, Tally, Trace, TraceJob
from envs.sim.traces.philly_json import read_philly_json
from envs.sim.traces.pollux import read_pollux
from envs.sim.traces.rows import (
    ZERO_GPUS,
    RowParser,
    RowResult,
    _finish,
    _gpus,
    _milli,
    _opt,
    _parse_rows,
    _timestamp,
)

__all__ = [
    "READERS",
    "ZERO_GPUS",
    "RowParser",
    "RowResult",
    "detect_format",
    "read_alibaba_gpu",
    "read_helios",
    "read_normalised_csv",
    "read_philly_digest",
    "read_philly_json",
    "read_pollux",
    "read_tiresias",
    "read_trace",
]

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
    """A trace in the normalised schema: ``job_id, submit_time_s, duration_s, num_gpus[,
    job_type, status, vc, gpu_milli, iterations]`` (``envs/sim/data/README.md``).  Rows must
    be sorted by ``submit_time_s``.  ``iterations`` (an extension) may replace ``duration_s``
    row by row.  Times are kept as they are (not rebased)."""
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
    """Philly's job digest ``timestamp, duration, num_gpus, gpu_time, cluster``
    (``petuum/adaptdl`` ``simulator/traces/philly.csv``).  ``timestamp`` is a naive
    ``YYYY-MM-DD HH:MM:SS`` submission time, ``duration`` seconds, ``gpu_time`` must equal
    ``duration x num_gpus`` (relative 1e-6), ``cluster`` is the VC.  Ids are
    ``philly-<vc>-<row>`` (1-based data row).  Exact repeats of an earlier row are kept
    (distinct rows of the source) and counted in a note."""
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
    """Alibaba GPU 2023 pod list (``openb_pod_list_*.csv``): ``name, num_gpu, gpu_milli,
    creation_time, scheduled_time, deletion_time[, cpu_milli, memory_mib, gpu_spec, qos,
    pod_phase]``, times in integer seconds.  submit = ``creation_time``; run time =
    ``deletion_time - scheduled_time``; an empty ``scheduled_time`` is skipped as ``never
    scheduled``, an empty ``deletion_time`` as ``unfinished``.  ``gpu_milli`` (1..1000) is
    the share of each GPU; ``pod_phase`` becomes ``status``."""
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
    """Helios ``cluster_log.csv``: ``job_id, gpu_num, submit_time, duration[, user, vc,
    jobname, cpu_num, node_num, state, start_time, end_time, queue]``; ``submit_time`` a
    naive datetime string, ``duration`` the run time in s; ``state`` becomes ``status``
    (every state is kept: select on it with :func:`~envs.sim.traces.transform.select`)."""
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
    """Tiresias's job CSV (``60_job.csv`` layout): ``job_id, num_gpu, submit_time,
    duration[, iterations, model_name, interval, ...]``, seconds, rows sorted by
    ``submit_time``.  ``model_name`` becomes ``job_type``.  Its ``iterations`` count
    iterations of its own models' speed, so the duration is used and they are ignored."""
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
    "pollux": read_pollux,
}

#: header columns that identify a CSV layout (a few distinctive ones, so that a file missing
#: some other required column is still recognised and its reader names what is missing)
_SIGNATURES: tuple[tuple[str, frozenset[str]], ...] = (
    ("normalised", frozenset({"job_id", "submit_time_s"})),
    ("philly_digest", frozenset({"timestamp", "gpu_time", "cluster"})),
    ("alibaba_gpu", frozenset({"creation_time", "scheduled_time"})),
    ("helios", frozenset({"gpu_num", "submit_time"})),
    ("tiresias", frozenset({"num_gpu", "submit_time"})),
    ("pollux", frozenset({"application", "num_replicas", "batch_size"})),
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
