"""``benchmarks/list_frontier.py``: the priority-list allocator against EfficientSRTF by hand,
and the local search on a value whose minimum is known."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from envs.sim.elastic.allocators import EfficientSRTF
from tests.sim.elastic.test_allocators import SLOT_S, cluster
from tests.sim.elastic.test_esrtf import _SPEED_4, _three_jobs, served_order

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def lf() -> Iterator[ModuleType]:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import list_frontier

        yield list_frontier
    finally:
        sys.path.pop(0)


def _alloc(alloc: Any, gpu: int = 32) -> tuple[dict[int, tuple[int, int]], list[int]]:
    got = alloc.allocate(_three_jobs(), cluster(cpu=32, gpu=gpu), _SPEED_4, SLOT_S)
    return got, served_order(alloc.last_decisions)


def test_priority_list_serves_jobs_in_its_order_each_at_its_efficiency(lf: ModuleType) -> None:
    # speed = min(w, 4) + 0.5 min(p, 4): at 0.7 (4.2) the fewest tasks are (4, 1) = 4.5; at 1.0
    # (4, 4) = 6.0.  Remaining epochs 10, 1, 20: EfficientSRTF's order is 1, 0, 2.
    srtf = {1: 0, 0: 1, 2: 2}
    at_07 = {0: 0.7, 1: 0.7, 2: 0.7}
    # in EfficientSRTF's order, one efficiency for all: EfficientSRTF's slot, task by task
    for gpu in (32, 8):
        for backfill in (False, True):
            plain = EfficientSRTF(0.7, backfill=backfill)
            listed = lf.PriorityList(srtf, at_07, backfill)
            got = listed.allocate(_three_jobs(), cluster(cpu=32, gpu=gpu), _SPEED_4, SLOT_S)
            want = plain.allocate(_three_jobs(), cluster(cpu=32, gpu=gpu), _SPEED_4, SLOT_S)
            assert got == want
            assert listed.last_decisions == plain.last_decisions
    # its own order: 8 GPUs hold two jobs' 4 workers; job 2 first, then 1, job 0 gets nothing
    assert _alloc(lf.PriorityList({2: 0, 1: 1, 0: 2}, at_07), gpu=8) == (
        {0: (0, 0), 1: (4, 1), 2: (4, 1)},
        [2, 1],
    )
    # a job's own efficiency: job 2 at 1.0 gets (4, 4), the others (4, 1)
    assert _alloc(lf.PriorityList(srtf, {**at_07, 2: 1.0})) == (
        {0: (4, 1), 1: (4, 1), 2: (4, 4)},
        [1, 0, 2],
    )
    # jobs the list does not name come after it, by arrival, at the start efficiency
    assert _alloc(lf.PriorityList({2: 0}, {}), gpu=8) == ({0: (4, 1), 1: (0, 0), 2: (4, 1)}, [2, 0])


def test_local_search_finds_a_known_minimum_and_is_reproducible(lf: ModuleType) -> None:
    # value: inversions against the order 4, 3, 2, 1, 0 plus each job's distance from
    # efficiency 0.92; its minimum 0 is that order with every job at 0.92
    want = (4, 3, 2, 1, 0)

    def value(cand: tuple[tuple[int, ...], dict[int, float]]) -> float:
        order, eff = cand
        pos = {j: k for k, j in enumerate(order)}
        inversions = sum(
            1
            for a in range(5)
            for b in range(5)
            if want.index(a) < want.index(b) and pos[a] > pos[b]
        )
        return inversions + sum(abs(e - 0.92) for e in eff.values())

    start = ((0, 1, 2, 3, 4), dict.fromkeys(range(5), 0.7))
    best, cand = lf.local_search(value, start, 3000, np.random.default_rng(0), patience=100)
    assert best == pytest.approx(0.0)
    assert cand[0] == want and all(e == 0.92 for e in cand[1].values())
    again = lf.local_search(value, start, 3000, np.random.default_rng(0), patience=100)
    assert again[0] == best and again[1] == cand
    # never above the start, whatever the budget
    assert lf.local_search(value, start, 1, np.random.default_rng(1))[0] <= value(start)


def test_bad_settings_and_heuristics_are_one_line_each(lf: ModuleType) -> None:
    for given, named in (
        (["--settings", "medium:x"], "'medium:x': the node count must be a positive integer"),
        (["--settings", "nope"], "'nope': unknown env setting"),
        (["--settings", "small:24/wat"], "'small:24/wat': env backlog"),
        (["--heuristics", "zzz", "--search", "none"], "unknown allocator 'zzz'"),
    ):
        with pytest.raises(SystemExit) as stop:
            lf.main([*given, "--evals", "5"])
        assert str(stop.value).startswith("error: ") and named in str(stop.value)
