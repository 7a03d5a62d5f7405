"""Bring ``docs/bench.md`` up to date with the suite and a finished board.

    python tools/bench_docs.py runs/bench/v1-<version>/<code version>

Replaces the page's scenario table (between ``<!-- scenarios:begin -->`` and ``<!--
scenarios:end -->``) with the suite's, the board (between ``<!-- board:begin -->`` and
``<!-- board:end -->``) with the board's ``board.md``, and copies its ``heatmap.png`` to
``docs/experiments/img/bench_<suite>_heatmap.png``.  A board of another version of the suite
than the checkout's is refused: the page would describe one list and show another's results.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from envs.files import write_text
from evaluation.bench.docs import board_section, scenario_table, splice
from evaluation.bench.scenarios import SUITES, suite_version

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("board", type=Path, help="a finished board: <out>/<suite>-<version>/<code>")
    p.add_argument("--page", type=Path, default=ROOT / "docs" / "bench.md")
    args = p.parse_args()
    suite, _, version = args.board.resolve().parent.name.partition("-")
    if suite not in SUITES:
        print(f"error: {args.board}: not a board of a known suite ({', '.join(SUITES)})")
        return 2
    if version != suite_version(SUITES[suite]):
        print(f"error: {args.board} is suite {suite} version {version}; this checkout's is "
              f"{suite_version(SUITES[suite])}: run the board again")  # fmt: skip
        return 2
    try:
        text = args.page.read_text(encoding="utf-8")
        text = splice(text, "scenarios", scenario_table(SUITES[suite]))
        text = splice(text, "board", board_section(args.board))
    except (OSError, ValueError) as exc:
        print(f"error: {args.page}: {exc}")
        return 2
    write_text(args.page, text)
    heat = args.board / "heatmap.png"
    if heat.is_file():
        shutil.copyfile(
            heat, args.page.parent / "experiments" / "img" / f"bench_{suite}_heatmap.png"
        )
    print(f"{args.page}: scenario table of {suite} ({len(SUITES[suite])}) and the board of "
          f"{args.board.name} written")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
