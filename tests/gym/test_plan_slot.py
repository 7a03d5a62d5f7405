"""A slot's plan applied in one call (``ClusterEnv.plan_slot``, what ``PlanEnv.step`` uses)
against the reference path: the plan's increments replayed one ``ClusterEnv.step`` at a
time by a :class:`~envs.gym.heuristic.HeuristicDriver`, with the Python allocators.

Every step of every episode must be the same, bit for bit: the observation, the reward,
``terminated``/``truncated`` and the whole ``info`` (``inner_steps`` included), on many
seeds, every plan kind (the default plans, backfill, head, the allocators that place on
nodes of their own or release tasks), every placement rule, windows smaller than the active
jobs and every backlog rule.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from gymnasium.error import ResetNeeded

from envs.gym.cluster.env import ClusterEnv
from envs.gym.heuristic import HeuristicDriver
from envs.gym.plan_env import DEFAULT_PLANS, PlanEnv
from envs.sim.elastic import native_alloc
from envs.sim.elastic.allocators import DRF, make_allocator
from envs.sim.elastic.cluster import Placement
from envs.sim.elastic.spec import ElasticJob, JobType
from envs.sim.elastic.speed import AnalyticalSpeed
from envs.sim.elastic.workload import DL2Setting
from envs.sim.errors import ConfigError

#: the default plans and every other kind of slot: backfill, head, a load rule, node-by-node
#: packing (Tetris: its own nodes), in-turn filling, fixed demands (all or nothing)
PLANS: list[Any] = [
    *DEFAULT_PLANS,
    ("esrtf", {"backfill": True}),
    ("esrtf", {"head": 1}),
    ("esrtf_load", {}),
    ("tetris", {}),
    ("fifo", {}),
    ("bundle", {}),
    ("adasrsf", {"workers": 2}),
]


def _episodes(env: PlanEnv, seeds: range, *, fast: bool) -> list[list[Any]]:
    """Every step of a random-plan episode per seed (the plan drawn from the seed)."""
    env.slot_at_once = fast
    out = []
    with native_alloc.use_native(fast):
        for s in seeds:
            rng = np.random.default_rng(s)
            obs, info = env.reset(seed=s)
            steps: list[Any] = [(obs.tobytes(), sorted(info.items(), key=str))]
            while True:
                obs, r, term, trunc, info = env.step(int(rng.integers(env.K)))
                steps.append((obs.tobytes(), r, term, trunc, list(info.items())))
                if term or trunc:
                    break
            out.append(steps)
    return out


def _same(make: Any, seeds: range) -> int:
    fast = _episodes(make(), seeds, fast=True)
    ref = _episodes(make(), seeds, fast=False)
    assert fast == ref
    return sum(len(e) for e in fast)


@pytest.mark.parametrize("placement", [p.value for p in Placement])
def test_tiny_every_placement(placement: str) -> None:
    def make() -> PlanEnv:
        inner = ClusterEnv(
            DL2Setting(num_nodes=4, num_jobs=16, max_arrivals_per_slot=3, J=8,
                       max_epochs=3000, max_workers=8, max_ps=8),
            reward="jct", placement=placement,
        )  # fmt: skip
        return PlanEnv(env=inner, plans=PLANS)

    assert _same(make, range(8)) > 50


@pytest.mark.parametrize(
    "config",
    [
        {"setting": "medium", "reward": "jct"},
        {"setting": "small", "reward": "jct", "backlog": "bundle"},
        {"setting": "tiny", "reward": "dl2", "overrides": {"J": 3}, "backlog": "drf"},
        {"setting": "tiny", "reward": "jct", "overrides": {"J": 2}, "backlog": "optimus"},
    ],
)
def test_settings_and_backlogs(config: dict[str, Any]) -> None:
    seeds = range(1) if config["setting"] == "small" else range(3)
    assert _same(lambda: PlanEnv(config=config, plans=PLANS), seeds) > 20


def test_always_one_plan_is_the_allocator_through_the_env() -> None:
    """Always plan k in one call gives the allocator's own episode through the env, slot
    for slot (its JCT, and the increments it stands for)."""
    for k, (name, options) in enumerate(DEFAULT_PLANS):
        env = PlanEnv(config={"setting": "tiny", "reward": "jct"})
        env.reset(seed=4)
        steps = 0
        while True:
            _, _, term, trunc, info = env.step(k)
            steps += info["inner_steps"]
            if term or trunc:
                break
        driver = HeuristicDriver(make_allocator(name, options), env.inner)
        ref = driver.run_episode(seed=4)
        assert info["avg_jct_slots"] == ref["avg_jct_slots"]
        assert driver.shortfalls == 0


def _tight_env() -> ClusterEnv:
    """Three nodes where Tetris' node-by-node packing holds a bundle that the env's
    least-loaded placement of the same increments cannot place (found by a seeded search)."""
    demands = [(0, 2, 4, 0), (4, 2, 4, 2), (7, 3, 6, 2), (5, 1, 0, 1)]
    jobs = [
        ElasticJob(
            i,
            JobType(i, f"m{i}", wc, wg, pc, pg, 1.0, 10, 1.0, 50.0, 100.0, 1000.0),
            0,
            5.0,
            5.0,
            max_workers=3,
            max_ps=2,
        )
        for i, (wc, wg, pc, pg) in enumerate(demands)
    ]
    setting = DL2Setting(num_nodes=3, num_jobs=4, max_arrivals_per_slot=3, J=4, max_epochs=30,
                         max_workers=3, max_ps=3)  # fmt: skip
    return ClusterEnv(setting, jobs=jobs, speed=AnalyticalSpeed())


@pytest.mark.parametrize("fast", [True, False])
def test_a_plan_not_applied_whole_is_an_error(fast: bool) -> None:
    env = PlanEnv(env=_tight_env(), plans=["tetris", "drf"])
    env.slot_at_once = fast
    env.reset(seed=0)
    with pytest.raises(ConfigError, match=r"plan 'tetris' could not be applied whole in slot 0"):
        env.step(0)
    with pytest.raises(ResetNeeded):
        env.step(1)
    env.reset(seed=0)
    env.step(1)  # DRF places every increment by the rule


def test_plan_slot_names_the_job_and_resource() -> None:
    env = _tight_env()
    env.reset(seed=0)
    env.plan_slot(make_allocator("tetris"))
    assert env.last_shortfalls == [(1, "bundle", 8, 4)]  # job 1's worker + PS: 8 CPU, 4 GPU


def test_plan_slot_needs_an_untouched_open_slot() -> None:
    env = ClusterEnv("small", reward="jct")
    with pytest.raises(ResetNeeded):
        env.plan_slot(DRF())
    env.reset(seed=0)
    env.step(0)  # a worker for window row 0
    assert not env.slot_untouched()
    with pytest.raises(ConfigError, match="nothing placed yet"):
        env.plan_slot(DRF())
    env.step(env.void_action)
    assert env.slot_untouched()
    while True:
        *_, term, trunc, _, _ = env.plan_slot(DRF())
        if term or trunc:
            break
    with pytest.raises(ResetNeeded):
        env.plan_slot(DRF())
