"""Heuristics through the environment (issue 4, item 5): envs/gym/heuristic.py."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest

import envs.gym  # noqa: F401  (registers the id)
from envs.gym.cluster_env import ClusterEnv
from envs.gym.heuristic import HeuristicDriver
from envs.sim.elastic.allocators import ALLOCATORS, DRF, Optimus, Tetris
from envs.sim.elastic.simulator import SlotSimulator
from envs.sim.elastic.workload import DL2Setting

# 6 nodes, 10 jobs, window J = 10 >= number of jobs: no job is ever beyond the window, so the
# driver sees exactly the jobs the allocator sees in SlotSimulator.run().  Long jobs (up to
# 3000 epochs) so that episodes run 5-35 slots with contention.
SMALL = DL2Setting(
    num_nodes=6,
    num_jobs=10,
    max_arrivals_per_slot=3,
    J=10,
    max_epochs=3000,
    max_workers=6,
    max_ps=6,
)


@pytest.mark.parametrize("seed", [0, 1, 3])
@pytest.mark.parametrize("alloc_cls", list(ALLOCATORS.values()), ids=list(ALLOCATORS))
def test_driver_reproduces_simulator_jcts(alloc_cls, seed):
    """Every registered allocator (the registry, not a list kept here) through the env gives
    the simulator's finish times."""
    env = ClusterEnv(SMALL)
    driver = HeuristicDriver(alloc_cls(), env)
    info = driver.run_episode(seed)
    assert env.sim is not None and env.sim.done
    ref = SlotSimulator(env.cluster_spec, SMALL.workload(seed), alloc_cls(), env.speed).run()
    assert driver.shortfalls == 0
    assert info["invalid_actions"] == 0
    for rec in ref.jobs:
        finish = env.sim.finish_time(rec.job_id)
        assert finish is not None
        assert finish == pytest.approx(rec.finish, abs=1e-9)
    assert info["avg_jct_slots"] == pytest.approx(ref.avg_jct_slots, abs=1e-9)
    assert info["makespan_slots"] == pytest.approx(ref.makespan_slots, abs=1e-9)


@pytest.mark.parametrize("placement", ["reference", "first_fit", "packing"])
@pytest.mark.parametrize("alloc_cls", [DRF, Optimus], ids=lambda c: c.__name__)
def test_driver_reproduces_simulator_under_each_placement(alloc_cls, placement):
    """The env's placement= rule is the simulator's: same per-job finish times."""
    env = ClusterEnv(SMALL, placement=placement)
    driver = HeuristicDriver(alloc_cls(), env)
    driver.run_episode(2)
    assert env.sim is not None and env.sim.done and driver.shortfalls == 0
    ref = SlotSimulator(
        env.cluster_spec, SMALL.workload(2), alloc_cls(), env.speed, placement=placement
    ).run()
    assert [env.sim.finish_time(r.job_id) for r in ref.jobs] == [r.finish for r in ref.jobs]


def test_driver_reaches_each_slot_target():
    """Every closed slot's allocation equals the allocator's target for that slot."""
    env = ClusterEnv(SMALL)
    driver = HeuristicDriver(Tetris(), env)
    env.reset(seed=2)
    assert env.sim is not None
    records = []
    env.sim.on_slot = records.append
    targets: dict[int, dict[int, tuple[int, int]]] = {}
    while True:
        a = driver.act()
        if env._slot_open:
            targets[env.sim.t] = dict(driver.last_target)
        _, _, term, trunc, _ = env.step(a)
        if term or trunc:
            break
    decided = {r.t: dict(r.allocation) for r in records if r.allocation}
    assert targets and targets == decided


def test_predict_adapter_through_gymnasium_make():
    env = gymnasium.make("envs.gym:dlsched/Cluster-v0", setting=SMALL)
    driver = HeuristicDriver(DRF(), env)
    obs, _ = env.reset(seed=1)
    state = None
    while True:
        action, state = driver.predict(obs, state=state, deterministic=True)
        assert action.shape == () and action.dtype == np.int64
        obs, _, term, trunc, info = env.step(action)
        if term or trunc:
            break
    assert term and info["invalid_actions"] == 0
    ref = SlotSimulator(
        env.unwrapped.cluster_spec, SMALL.workload(1), DRF(), env.unwrapped.speed
    ).run()
    assert info["avg_jct_slots"] == pytest.approx(ref.avg_jct_slots, abs=1e-9)
    batched, _ = driver.predict(obs[None, :])
    assert batched.shape == (1,)


def test_driver_rejects_other_envs():
    with pytest.raises(Exception, match="ClusterEnv"):
        HeuristicDriver(DRF(), gymnasium.make("CartPole-v1"))
