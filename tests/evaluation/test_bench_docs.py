"""docs/bench.md cannot drift from the suite: its scenario table is generated from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluation.bench.docs import board_section, scenario_table, splice
from evaluation.bench.scenarios import V1, Scenario

PAGE = Path(__file__).resolve().parents[2] / "docs" / "bench.md"


def test_the_pages_scenario_table_is_the_suites() -> None:
    text = PAGE.read_text(encoding="utf-8")
    begin, end = "<!-- scenarios:begin -->\n", "<!-- scenarios:end -->"
    table = text[text.index(begin) + len(begin) : text.index(end)]
    assert table == scenario_table(V1), "run python tools/bench_docs.py <board dir>"


def test_the_table_and_splice_against_hand_written_text(tmp_path: Path) -> None:
    s = Scenario("a-b", "contention", ("workload=ada160",), (0, 2), "a note")
    assert scenario_table((s,)) == (
        "| scenario | world | seeds | source |\n|---|---|---|---|\n"
        "| `a-b` | contention | 0, 2 | a note |\n"
    )
    page = "top\n<!-- x:begin -->\nold\n<!-- x:end -->\nbottom\n"
    assert splice(page, "x", "new\n") == "top\n<!-- x:begin -->\nnew\n<!-- x:end -->\nbottom\n"
    with pytest.raises(ValueError, match=r"no <!-- y:begin --> \.\.\. <!-- y:end --> markers"):
        splice(page, "y", "z")
    (tmp_path / "board.md").write_text("# dlsched-bench v1\n\nRatio ...\n\n## Overall\n\n| a |\n")
    assert board_section(tmp_path) == "Ratio ...\n\n### Overall\n\n| a |\n"
    (tmp_path / "board.md").write_text("not a board\n")
    with pytest.raises(ValueError, match=r"board\.md: not a board"):
        board_section(tmp_path)
