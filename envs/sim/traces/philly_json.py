"""Philly's raw JSON job log (``cluster_job_log``) as a :class:`~.model.Trace`.

The file is a JSON list of ``{jobid, vc, user, status, submitted_time, attempts:
[{start_time, end_time, detail: [{ip, gpus: [...]}]}]}``; times are naive strings or
``"None"``.  Run time = last attempt's end - first attempt's start (retries and the gaps
between them included, as in Jeon et al.).  GPUs = the first attempt's GPU count (the largest
over all attempts when the first lists none).  A job with no attempts, or whose first attempt
never started, is skipped as ``never started``; one whose last attempt has no end as
``unfinished``.  Errors name ``record <k>`` (1-based position in the list) and the jobid.
Times are rebased so the first kept job submits at 0 (as in every raw layout).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from envs.sim.errors import WorkloadError
from envs.sim.traces._csv import FieldError, PathLike
from envs.sim.traces.model import Repairs, Tally, Trace, TraceJob
from envs.sim.traces.rows import ZERO_GPUS, RowResult, _finish, _timestamp


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


# one record's flat field checks, kept in one function on purpose (McCabe complexity 19)
def _philly_record(p: Path, k: int, rec: Any) -> RowResult:  # noqa: C901
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
