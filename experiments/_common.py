"""What several experiment scripts share: the ``--seeds`` parser, DL²'s reference numbers and
the Markdown table writer.

The scripts run as ``python experiments/<script>.py``, so this directory is on ``sys.path`` (the
project itself is installed: ``make setup``); no script edits ``sys.path``.
Importing it asks PyTorch and MKL for their portable kernels (:mod:`envs.numerics`), as
``train.py`` does: the scripts import it before they run anything.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Sequence
from typing import Any

from envs.numerics import use_portable

use_portable()  # before torch runs a kernel: the same bits on every x86-64 machine

#: DL² reference code, Google arrivals, "Normal" lengths, measured speeds (dl2.md §0; avg JCT
#: in slots).
DL2_REFERENCE_JCT = {
    "small": {"optimus": 85.0, "drf": 117.2, "srtf": 519.6, "fifo": 520.1, "tetris": 963.2},
    "large": {"optimus": 28.9, "drf": 41.4, "fifo": 55.0, "srtf": 55.3, "tetris": 60.1},
}


def seed_list(text: str) -> list[int]:
    """``'0-2'`` (inclusive range) or ``'0,3,5'``, for ``argparse`` ``type=``."""
    try:
        if "-" in text:
            lo, hi = text.split("-")
            seeds = list(range(int(lo), int(hi) + 1))
        else:
            seeds = [int(x) for x in text.split(",")]
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"seeds: '0-2' or '0,3,5', got {text!r}") from e
    if not seeds:
        raise argparse.ArgumentTypeError(f"seeds: empty range {text!r}")
    return seeds


def markdown_table(rows: Iterable[Sequence[Any]], headers: Sequence[str]) -> str:
    """A GitHub Markdown table of ``rows`` (no trailing newline).  Cells are printed as given:
    the scripts format their numbers themselves (``"1,675.7"``, ``"+1.6%"``), so tabulate's
    number parsing, which would re-format them, is off (:func:`evaluation.report.github_table`)."""
    from evaluation.report import github_table  # here: it imports scipy.stats (~1 s)

    return github_table(rows, headers)
