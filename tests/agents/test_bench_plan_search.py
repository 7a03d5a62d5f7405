"""``benchmarks/bench_plan_search.py``'s "most played" column: a search's per-job options count
together, apart from their plan; a network alone is counted by its own plans."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]


def test_most_played_folds_per_job_options_into_their_plan() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from bench_plan_search import _most_played
    finally:
        sys.path.pop(0)
    planner = SimpleNamespace(labels=("esrtf", "drf", "optimus"))
    # indices 3 and 4 are per-job options of plan 1 (jobs 7 and 9): they count as one,
    # apart from plan 1 itself
    options = {3: (1, 7), 4: (1, 9)}
    search = SimpleNamespace(planner=planner, chosen=[0, 0, 1, 3, 4, 4], boosted=options.get)
    assert _most_played(search) == "drf + job first (3)"
    search.chosen = [0, 0, 0, 1, 3, 4]
    assert _most_played(search) == "esrtf (3)"
    alone = SimpleNamespace(planner=planner, chosen=[2, 0, 2])  # no boosted: a network alone
    assert _most_played(alone) == "optimus (2)"
    assert _most_played(SimpleNamespace(planner=planner, chosen=[])) == ""
