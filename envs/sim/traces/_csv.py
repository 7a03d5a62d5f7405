"""CSV reading and field validation shared by every file reader in ``envs.sim``.

Every error is a :class:`FieldError` (a :class:`~envs.sim.errors.WorkloadError`) whose message
names the file, the 1-based line, the column and the cause, e.g.
``"jobs.csv, line 7, column 'iters': must be > 0, got '0' (file: /path/jobs.csv)"``; its
``column`` and ``kind`` attributes let a reader count rows it was asked to skip by cause.
Completely blank lines are not rows.
"""

from __future__ import annotations

import csv
import gzip
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO

from envs.sim.errors import WorkloadError

PathLike = str | os.PathLike[str]


class FieldError(WorkloadError):
    """A bad value in one row: ``column`` (or None) and a short ``kind`` of cause."""

    def __init__(self, message: str, *, line: int, column: str | None, kind: str) -> None:
        super().__init__(message)
        self.line = line
        self.column = column
        self.kind = kind

    @property
    def reason(self) -> str:
        """``"<column>: <kind>"``, the key under which a skipped row is counted."""
        return f"{self.column}: {self.kind}" if self.column else self.kind


def _err(
    path: Path, line: int, column: str | None, cause: str, kind: str = "invalid"
) -> FieldError:
    where = f"{path.name}, line {line}" + (f", column {column!r}" if column else "")
    return FieldError(f"{where}: {cause} (file: {path})", line=line, column=column, kind=kind)


def open_text(p: Path, errors: str = "strict") -> IO[str]:
    """A text file for reading, UTF-8 (BOM allowed); gzip-compressed when it ends in ``.gz``."""
    if p.suffix.lower() == ".gz":
        return gzip.open(p, "rt", encoding="utf-8-sig", errors=errors, newline="")
    return p.open(encoding="utf-8-sig", errors=errors, newline="")


def _existing_file(path: PathLike) -> Path:
    p = Path(path)
    if not p.exists():
        raise WorkloadError(f"{p.name}: file not found (file: {p})")
    if not p.is_file():
        raise WorkloadError(f"{p.name}: not a regular file (file: {p})")
    return p


def _header(p: Path, raw: list[str], line: int, required: Sequence[str]) -> list[str]:
    """The column names of the header row ``raw``: non-empty, unique, the required ones in."""
    header_row = [cell.strip() for cell in raw]
    seen: set[str] = set()
    for col in header_row:
        if not col:
            raise _err(p, line, None, "header has an empty column name")
        if col in seen:
            raise _err(p, line, col, "column appears twice in the header")
        seen.add(col)
    missing = [c for c in required if c not in seen]
    if missing:
        raise _err(
            p,
            line,
            missing[0],
            f"missing required column(s) {missing}; header is {header_row}",
            "missing column",
        )
    return header_row


def _read_csv(
    path: PathLike, required: Sequence[str]
) -> tuple[Path, list[str], list[tuple[int, dict[str, str]]]]:
    """Read a headed CSV; return (path, header, [(1-based line, row dict)]).  Validates shape."""
    p = _existing_file(path)
    rows: list[tuple[int, dict[str, str]]] = []
    try:
        with open_text(p) as fh:
            reader = csv.reader(fh)
            header_row: list[str] | None = None
            header_line = 0
            start = 1  # the line the next row starts on
            for raw in reader:
                row_start, start = start, reader.line_num + 1
                if reader.line_num > row_start and any("\n" in cell for cell in raw):
                    raise _err(
                        p,
                        row_start,
                        None,
                        "a quoted field opened on this line is not closed on it "
                        "(unterminated quote?)",
                        "unterminated quote",
                    )
                if header_row is None:
                    if not any(cell.strip() for cell in raw):
                        continue
                    header_line = reader.line_num
                    header_row = _header(p, raw, header_line, required)
                    continue
                if not any(cell.strip() for cell in raw):
                    continue  # a blank line is not a row
                if len(raw) != len(header_row):
                    raise _err(
                        p,
                        reader.line_num,
                        None,
                        f"expected {len(header_row)} comma-separated fields, got {len(raw)}",
                        "wrong number of fields",
                    )
                rows.append((reader.line_num, dict(zip(header_row, raw, strict=True))))
    except csv.Error as exc:
        if "unexpected end of data" in str(exc):  # a quote opened and never closed
            raise _err(
                p, start, None, "a quoted field opened on this line is never closed",
                "unterminated quote",
            ) from exc  # fmt: skip
        raise WorkloadError(f"{p.name}: malformed CSV: {exc} (file: {p})") from exc
    except UnicodeDecodeError as exc:
        raise WorkloadError(f"{p.name}: not UTF-8 text: {exc} (file: {p})") from exc
    except (OSError, EOFError) as exc:  # a corrupt or truncated .gz
        raise WorkloadError(f"{p.name}: cannot read: {exc} (file: {p})") from exc
    if header_row is None:
        raise _err(p, 1, None, "empty file: no header line", "empty file")
    if not rows:
        raise _err(p, header_line + 1, None, "no job rows after the header", "no rows")
    return p, header_row, rows


def _text(p: Path, line: int, row: Mapping[str, str], col: str) -> str:
    value = row[col].strip()
    if not value:
        raise _err(p, line, col, "empty value", "empty")
    return value


def _number(p: Path, line: int, row: Mapping[str, str], col: str) -> float:
    text = _text(p, line, row, col)
    try:
        value = float(text)
    except ValueError:
        raise _err(p, line, col, f"not a number: {text!r}", "not a number") from None
    if not math.isfinite(value):
        raise _err(p, line, col, f"not a finite number: {text!r}", "not a number")
    return value


def _float_field(
    p: Path, line: int, row: Mapping[str, str], col: str, *, zero_ok: bool = False
) -> float:
    value = _number(p, line, row, col)
    if value < 0:
        raise _err(p, line, col, f"must not be negative, got {row[col].strip()!r}", "negative")
    if value == 0 and not zero_ok:
        raise _err(p, line, col, f"must be > 0, got {row[col].strip()!r}", "zero")
    return value


def _int_field(
    p: Path, line: int, row: Mapping[str, str], col: str, *, zero_ok: bool = False
) -> int:
    value = _float_field(p, line, row, col, zero_ok=zero_ok)
    if not value.is_integer():
        raise _err(p, line, col, f"must be an integer, got {row[col].strip()!r}", "not an integer")
    return int(value)


def _round_half_up(x: float) -> int:
    return math.floor(x + 0.5)
