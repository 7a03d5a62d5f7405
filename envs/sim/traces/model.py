"""The normalised in-memory form of a job trace, and the record of how it was read.

Every reader (:mod:`envs.sim.traces.readers`) turns its source layout into a :class:`Trace`:
a tuple of :class:`TraceJob` sorted by submission, times in seconds since the first
submission, plus a :class:`ReadReport` that counts the rows read, repaired and skipped with
the reason for each.  Windowing and scaling (:mod:`envs.sim.traces.transform`) return new
traces with one more entry in :attr:`Trace.steps`, so a result can always say exactly which
jobs it ran and why.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from envs.sim.errors import ConfigError

BadRows = Literal["error", "skip"]
Unsorted = Literal["error", "sort"]
Duplicates = Literal["error", "skip", "rename"]


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace.

    ``submit_s``: seconds since the trace's first submission.  ``duration_s``: run time in
    seconds on the requested GPUs (queueing excluded); ``None`` only when the source gives
    ``iterations`` instead.  ``gpu_milli``: share of each GPU requested (1000 = whole GPU).
    ``line``: the 1-based line (CSV) or record number (JSON) in the source, for messages.
    """

    job_id: str
    submit_s: float
    duration_s: float | None
    num_gpus: int
    gpu_milli: int = 1000
    job_type: str = ""
    status: str = ""
    vc: str = ""
    iterations: int | None = None
    line: int = 0


@dataclass(frozen=True)
class Repairs:
    """What a reader does with bad input instead of raising (default: raise everywhere).

    * ``bad_rows``: a row with a missing, unparsable, negative or zero value (times, duration,
      GPU count): ``"error"`` or ``"skip"`` (counted under ``"<column>: <cause>"``).
    * ``zero_gpus``: a job that asks for no GPU (CPU-only jobs in Helios and Alibaba):
      ``"error"`` or ``"skip"`` (counted under ``"num_gpus: zero (CPU-only job)"``).
    * ``unsorted``: rows out of submission order in a layout whose schema promises order
      (normalised CSV, Tiresias): ``"error"`` or ``"sort"`` (stable; counted as a repair).
      Layouts that are unsorted by nature (Philly, Helios, Alibaba) are always sorted and the
      report says how many rows moved.
    * ``duplicate_ids``: a job id seen before: ``"error"``, ``"skip"`` the later row, or
      ``"rename"`` it to ``<id>#<k>`` (k = 2, 3, ...).
    """

    bad_rows: BadRows = "error"
    zero_gpus: BadRows = "error"
    unsorted: Unsorted = "error"
    duplicate_ids: Duplicates = "error"

    def __post_init__(self) -> None:
        for name, allowed in (
            ("bad_rows", ("error", "skip")),
            ("zero_gpus", ("error", "skip")),
            ("unsorted", ("error", "sort")),
            ("duplicate_ids", ("error", "skip", "rename")),
        ):
            if getattr(self, name) not in allowed:
                raise ConfigError(
                    f"repairs.{name} must be one of {list(allowed)}, got {getattr(self, name)!r}"
                )


@dataclass(frozen=True)
class ReadReport:
    """How a file became a trace: ``rows`` read, ``jobs`` kept, repairs and skips by reason,
    and notes (rules the reader applied that change nothing but are worth knowing)."""

    source: str
    format: str
    rows: int
    jobs: int
    repaired: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "format": self.format,
            "rows": self.rows,
            "jobs": self.jobs,
            "repaired": dict(self.repaired),
            "skipped": dict(self.skipped),
            "notes": list(self.notes),
        }

    def describe(self) -> str:
        """One line: ``"200 rows read, 198 jobs kept; repaired: ...; skipped: ..."``."""
        parts = [f"{self.rows} rows read, {self.jobs} jobs kept"]
        for label, counts in (("repaired", self.repaired), ("skipped", self.skipped)):
            total = sum(counts.values())
            detail = ", ".join(f"{n} {why}" for why, n in sorted(counts.items()))
            parts.append(f"{label} {total}" + (f" ({detail})" if detail else ""))
        return "; ".join(parts)


@dataclass(frozen=True)
class Trace:
    """A validated trace: jobs sorted by ``(submit_s, source order)``, ids unique."""

    jobs: tuple[TraceJob, ...]
    report: ReadReport
    steps: tuple[dict[str, Any], ...] = ()

    @property
    def source(self) -> str:
        return self.report.source

    def __len__(self) -> int:
        return len(self.jobs)

    def with_step(self, jobs: tuple[TraceJob, ...], step: dict[str, Any]) -> Trace:
        """A new trace with ``jobs`` and ``step`` appended to :attr:`steps`."""
        return replace(self, jobs=jobs, steps=(*self.steps, step))

    def record(self) -> dict[str, Any]:
        """JSON-ready provenance: the read report, every step, and the final job count."""
        return {"read": self.report.to_dict(), "steps": list(self.steps), "jobs": len(self.jobs)}


class Tally:
    """Mutable counters a reader fills while it reads (frozen into a :class:`ReadReport`)."""

    def __init__(self) -> None:
        self.repaired: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.notes: list[str] = []

    def report(self, source: str, fmt: str, rows: int, jobs: int) -> ReadReport:
        return ReadReport(
            source, fmt, rows, jobs, dict(self.repaired), dict(self.skipped), tuple(self.notes)
        )
