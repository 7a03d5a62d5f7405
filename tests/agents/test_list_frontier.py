"""``benchmarks/list_frontier.py``: the priority-list allocator against EfficientSRTF by hand,
and the local search on a value whose minimum is known."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from agents.episode_results import run_episode
from envs.gym.actors import AllocatorActor
from envs.gym.cluster_env import ClusterEnv
from envs.gym.factory import EnvConfig, make_env
from envs.sim.elastic.allocator_base import JobState
from envs.sim.elastic.allocators import EfficientSRTF
from tests.agents.test_plan_search import later_jobs_longer
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


def _receding(lf: ModuleType, jobs: tuple, budget: int, before: int = 10**9, **kw: Any) -> Any:
    """A :class:`RecedingList` run on ``jobs`` (DL²'s tiny setting) up to slot ``before``: the
    scheduler, each slot's list and the episode's avg JCT (``None`` if stopped before)."""
    setting = make_env(EnvConfig(setting="tiny")).setting
    env = ClusterEnv(setting, reward="jct", jobs=jobs)
    env.reset(seed=0)
    scheduler = lf.RecedingList(budget, 7, **kw)
    lists, term, trunc = [], False, False
    while not (term or trunc) and env.slot < before:
        allocator = scheduler.plan(env)
        lists.append((env.slot, dict(allocator.rank), dict(allocator.efficiency)))
        _, _, term, trunc, _, _ = env.plan_slot(allocator)
    avg = float(np.mean(env.episode_jcts()[0])) if term or trunc else None
    return scheduler, lists, avg


def _tiny_jobs(seed: int) -> tuple:
    env = make_env(EnvConfig(setting="tiny"))
    env.reset(seed=seed)
    return tuple(env.jobs)


def test_the_receding_list_reads_nothing_about_jobs_still_to_arrive(lf: ModuleType) -> None:
    """Two workloads that agree on every job arriving before slot T (the later ones four times
    as long) get the same lists and values at every slot before T; the clairvoyant form,
    which sees the later jobs, does not (so the check has power)."""
    jobs = _tiny_jobs(102)
    T, later = later_jobs_longer(jobs)
    a, b = _receding(lf, jobs, 6, T), _receding(lf, later, 6, T)
    assert a[1] == b[1] and a[0].values == b[0].values and len(a[1]) > 3
    seer_a = _receding(lf, jobs, 6, T, future=True)[0].values
    assert seer_a != _receding(lf, later, 6, T, future=True)[0].values


def test_the_receding_list_plans_no_slot_worse_than_its_incumbent(lf: ModuleType) -> None:
    """Each slot's list is valued at most its incumbent's (the last slot's list, new jobs
    admitted), lower at some slot; the run is reproducible; with no budget every slot keeps
    the incumbent, and when every job arrives at slot 0 that is the static list in order of
    size at the start efficiency, run through the env (an oracle written apart)."""
    jobs = _tiny_jobs(101)
    scheduler, _, avg = _receding(lf, jobs, 12)
    assert all(chosen <= start for start, chosen in scheduler.values)
    assert any(chosen < start for start, chosen in scheduler.values)
    again, _, avg2 = _receding(lf, jobs, 12)
    assert again.values == scheduler.values and avg2 == avg
    at_once = tuple(replace(j, arrival_slot=0) for j in jobs)
    idle, lists, avg0 = _receding(lf, at_once, 0)
    assert all(chosen == start for start, chosen in idle.values)
    first = sorted(lists[0][1], key=lists[0][1].get)
    for _, r, e in lists:  # the first slot's list, less the jobs done
        assert sorted(r, key=r.get) == [j for j in first if j in r]
        assert set(e.values()) == {lf.START_EFFICIENCY}
    env = ClusterEnv(make_env(EnvConfig(setting="tiny")).setting, reward="jct", jobs=at_once)
    env.reset(seed=0)
    rule = EfficientSRTF(lf.START_EFFICIENCY)

    def size(job: Any) -> float:
        its = rule.target(JobState(job), env.speed)[0]
        return float(job.num_epochs * job.type.iterations_per_epoch / its)

    order = sorted(at_once, key=lambda j: (size(j), j.job_id))
    rank = {j.job_id: k for k, j in enumerate(order)}
    assert lists[0][1] == rank
    static = AllocatorActor(env, lambda: lf.PriorityList(rank, {}, False))
    assert run_episode(env, static, 0).avg_jct == pytest.approx(avg0, rel=1e-12)


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
