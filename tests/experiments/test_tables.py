"""The Markdown tables the experiment scripts print through tabulate: cells exactly as the
scripts format them, one cell per header, and contention_h2h's confidence intervals from
evaluation.stats (hand-computed oracles)."""

from __future__ import annotations

import re
import types

import numpy as np

from experiments._common import markdown_table
from experiments.contention_h2h import summary_table
from experiments.heldout_eval import report

#: t_{0.975, 1}: the Student-t quantile of a 95% CI over two seeds
T1 = 12.706204736174707


def cells(md: str) -> list[list[str]]:
    """The header and body rows of a GitHub Markdown table (separator row dropped); an
    escaped ``\\|`` stays inside its cell."""
    rows = []
    for line in md.splitlines():
        if not line.startswith("|"):
            continue
        row = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if not all(re.fullmatch(r":?-+:?", c) for c in row):
            rows.append(row)
    return rows


def test_markdown_table_keeps_cells_verbatim() -> None:
    # tabulate's number parsing would print "85.0" as "85" and drop the sign of "+0.00"
    rows = [["drf", "85.0", "1,675.7", "+0.00%", ""], ["optimus", "7", "-3.10", "n/a", "x"]]
    md = markdown_table(rows, ["scheduler", "avg", "JCT", "vs DRF", "median \\|d\\|"])
    lines = md.splitlines()
    assert len(lines) == 4 and re.fullmatch(r"\|(-+\|)+", lines[1])
    assert cells(md) == [["scheduler", "avg", "JCT", "vs DRF", "median |d|"], *rows]
    assert markdown_table([], ["a", "b"]).count("\n") == 1  # header and separator only


def test_contention_summary_ci_from_stats() -> None:
    # two seeds (values chosen so that no mean sits on a rounding boundary):
    # per-seed avg JCT base 17, 41 and x 15, 48; p95 = lo + 0.95 (hi - lo)
    rows = {
        "x": [np.array([12.0, 18.0]), np.array([33.0, 63.0])],
        "lwf1_srsf1": [np.array([10.0, 24.0]), np.array([30.0, 52.0])],
    }
    got = cells(summary_table(rows, "lwf1_srsf1"))
    assert got[0] == ["scheduler", "avg JCT (s)", "p95 JCT (s)", "vs lwf1_srsf1"]
    # half-width of a 2-sample CI: t * |a - b| / sqrt(2) / sqrt(2) = t * |a - b| / 2
    assert got[1] == [  # the lower mean avg JCT first
        "lwf1_srsf1",
        f"29.0 ± {T1 * 24 / 2:.1f}",  # 146.1
        f"37.1 ± {T1 * (50.9 - 23.3) / 2:.1f}",  # p95 23.3, 50.9
        "+0.00% ± 0.00",  # zero spread: a CI of width 0, not NaN
    ]
    rel = (100 * (15 / 17 - 1), 100 * (48 / 41 - 1))  # paired with the base on each seed
    assert got[2] == [
        "x",
        f"31.5 ± {T1 * 33 / 2:.1f}",
        f"39.6 ± {T1 * (61.5 - 17.7) / 2:.1f}",  # p95 17.7, 61.5
        f"+2.65% ± {T1 * (rel[1] - rel[0]) / 2:.2f}",  # mean of -11.76% and +17.07%
    ]


def test_contention_summary_one_seed_has_no_ci() -> None:
    # the script's old copy printed "± 0.0" here; stats.mean_ci95 gives NaN: "n/a"
    rows = {"lwf1_srsf1": [np.array([10.0, 30.0])], "x": [np.array([30.0, 50.0])]}
    got = cells(summary_table(rows, "lwf1_srsf1"))
    assert got[1:] == [
        ["lwf1_srsf1", "20.0 ± n/a", "29.0 ± n/a", "+0.00% ± n/a"],
        ["x", "40.0 ± n/a", "49.0 ± n/a", "+100.00% ± n/a"],
    ]


def test_heldout_report_columns() -> None:
    """The optional ``versus`` column sits after "vs DRF"; every row has a cell per header and
    a scheduler's comparison with itself is empty."""
    avg = {
        "drf": np.array([10.0, 20.0]),
        "esrtf": np.array([8.0, 16.0]),
        "learned": np.array([[8.0, 12.0], [8.0, 20.0]]),  # training seeds x workloads
    }
    table = types.SimpleNamespace(
        avg_jct=avg, p95_jct=avg, unfinished={"drf": 0, "esrtf": 3, "learned": 1}
    )
    plain = cells(report(table, "T"))  # type: ignore[arg-type]
    versus = cells(report(table, "T", versus="drf"))  # type: ignore[arg-type]
    assert plain[0] == ["scheduler", "avg JCT (slots) ± 95% CI", "vs esrtf (paired)",
                        "vs DRF (paired)", "per-training-seed means",
                        "p95 JCT vs esrtf (paired)", "unfinished jobs"]  # fmt: skip
    assert versus[0] == [*plain[0][:4], "vs drf (paired)", *plain[0][4:]]
    assert all(len(r) == len(plain[0]) for r in plain)
    assert all(len(r) == len(versus[0]) for r in versus)
    by_name = {r[0]: r for r in versus[1:]}
    assert by_name["esrtf"][2] == "" and by_name["drf"][3] == "" and by_name["drf"][4] == ""
    # learned vs esrtf per workload: 8 / 8 - 1 = 0%, 16 / 16 - 1 = 0% -> zero spread
    assert by_name["learned"][2] == "+0.0% ± 0.0"
    assert by_name["learned"][5] == "10.00, 14.00"  # per training seed
    assert by_name["esrtf"][5] == "-" and by_name["esrtf"][7] == "3"
