"""``docs/bench.md`` from the suite and a finished board, so that the page cannot drift from
them: the scenario table is generated from the suite (:func:`scenario_table`), and the board
section is the board's own ``board.md`` (:func:`board_section`), each spliced between its
markers (:func:`splice`).  ``python tools/bench_docs.py <board dir>`` does both; a test checks
that the page's scenario table is the suite's."""

from __future__ import annotations

from pathlib import Path

from evaluation.bench.scenarios import Scenario

__all__ = ["board_section", "scenario_table", "splice"]


def scenario_table(suite: tuple[Scenario, ...]) -> str:
    """The suite as a Markdown table: scenario, world, seeds, source."""
    lines = ["| scenario | world | seeds | source |", "|---|---|---|---|"]
    for s in suite:
        seeds = ", ".join(str(x) for x in s.seeds)
        lines.append(f"| `{s.name}` | {s.world} | {seeds} | {s.source} |")
    return "\n".join(lines) + "\n"


def board_section(board_dir: Path) -> str:
    """A finished board's ``board.md`` without its title line (the page has its own), its
    headings one level down (``##`` -> ``###``)."""
    path = board_dir / "board.md"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ValueError(f"{path}: cannot read the board ({exc.strerror})") from None
    if not lines or not lines[0].startswith("# "):
        raise ValueError(f"{path}: not a board (no '# dlsched-bench' title line)")
    body = [("#" + line) if line.startswith("## ") else line for line in lines[1:]]
    return "\n".join(body).strip("\n") + "\n"


def splice(text: str, name: str, content: str) -> str:
    """``text`` with what lies between ``<!-- name:begin -->`` and ``<!-- name:end -->``
    replaced by ``content``; a ``ValueError`` when the markers are missing or out of order."""
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    a, b = text.find(begin), text.find(end)
    if a < 0 or b < a:
        raise ValueError(f"the page has no {begin} ... {end} markers (in that order)")
    return text[: a + len(begin)] + "\n" + content + text[b:]
