"""``experiments/specialist_gap.py``: each policy acts in its own env (the general policy reads
the extended features, the specialist the default ones) on the same workloads, and the paired
line is the hand-computed difference of the printed avg JCTs."""

from __future__ import annotations

import ast
import re

import pytest

from experiments.specialist_gap import main


def test_the_paired_gap_is_the_printed_runs_difference(capsys: pytest.CaptureFixture[str]) -> None:
    general, specialist = "policies/general", "policies/medium_plan_pg_backfill"
    main(["--env", "medium", "--policy", general, "--specialist", specialist, "--seeds", "300"])
    out = capsys.readouterr().out
    jct = {
        name: ast.literal_eval(runs)
        for name, runs in re.findall(r"^(\S+): (\[[^\]]*\]) \(mean", out, flags=re.M)
    }
    assert set(jct) == {general, specialist, "esrtf_load"}
    assert all(len(v) == 1 and v[0] > 0 for v in jct.values())
    assert jct[general] != jct[specialist]  # two policies, not one run twice
    said = re.search(rf"{general} vs {specialist}: ([+-][0-9.]+)%", out)
    assert said is not None
    # one workload: the gap is 100 (a / b - 1) of the printed (rounded) avg JCTs
    gap = 100.0 * (jct[general][0] / jct[specialist][0] - 1.0)
    assert float(said.group(1)) == pytest.approx(gap, abs=0.02)
