"""Lower bounds on average JCT (envs/sim/elastic/bounds.py): hand-computed cases, and no
scheduler ever beats them (directly on the simulator or through the env's window)."""

from __future__ import annotations

import numpy as np
import pytest

from envs.gym.factory import SETTINGS, EnvConfig, make_env
from envs.gym.heuristic import HeuristicDriver
from envs.sim.elastic.allocators import ALLOCATORS as ALLOCATORS_BY_NAME
from envs.sim.elastic.allocators import DRF, EfficientSRTF, Optimus
from envs.sim.elastic.bounds import (
    capacity_bound,
    fastest_rate,
    holding_envelopes,
    mean_jct,
    solo_bounds,
    window_bounds,
)
from envs.sim.elastic.simulator import SlotSimulator
from envs.sim.elastic.spec import ElasticCluster, ElasticJob
from envs.sim.elastic.speed import MeasuredSpeed
from envs.sim.errors import ConfigError
from tests.sim.elastic.test_allocators import SLOT_S, StandInSpeed, jtype

#: all but the gangs (``bundle``, one bundle each, is in)
GANGS = ("fixed", "adasrsf", "tiresias")
ALLOCATORS = {k: v for k, v in ALLOCATORS_BY_NAME.items() if k not in GANGS}


def test_fastest_rate_within_caps_and_capacity() -> None:
    # stand-in speed: base * (min(w, 2) + 0.5 min(p, 2)); best at w = 2, p = 2 (3 it/s)
    ty = jtype(worker=(2, 4), ps=(2, 0), ipe=100)
    job = ElasticJob(0, ty, 0, 10.0, 10.0, max_workers=8, max_ps=8)
    big = ElasticCluster(4, 8, 8, SLOT_S)
    rate, w, p = fastest_rate(job, big, StandInSpeed())
    assert (w, p) == (2, 2)  # ties go to fewer tasks
    assert rate == pytest.approx(3.0 / 100 * SLOT_S)
    # one node (8 CPU, 8 GPU): at most 2 workers by GPU, and 2 w + 2 p <= 8 CPU
    one = ElasticCluster(1, 8, 8, SLOT_S)
    capped = ElasticJob(1, ty, 0, 10.0, 10.0, max_workers=1, max_ps=8)
    rate1, w1, p1 = fastest_rate(capped, one, StandInSpeed())
    assert (w1, p1) == (1, 2) and rate1 == pytest.approx(2.0 / 100 * SLOT_S)


def test_window_bound_by_hand() -> None:
    # 1 it/s at (1, 1) with limit 1; 100 iterations per epoch, slot 100 s -> 1.5 epochs per
    # slot ((1 + 0.5) it/s).  Job 0: 3.75 epochs -> 2.5 slots; job 1: 1.5 epochs -> 1 slot;
    # job 2 arrives at 4: 0.75 epochs -> 0.5 slot.
    ty = jtype(model="m", ipe=100)
    speed = StandInSpeed({"m": (1.0, 1)})
    cl = ElasticCluster(2, 8, 8, 100.0)
    jobs = [
        ElasticJob(1, ty, 0, 1.5, 1.5),
        ElasticJob(0, ty, 0, 3.75, 3.75),
        ElasticJob(2, ty, 4, 0.75, 0.75),
    ]
    solo = solo_bounds(jobs, cl, speed)
    assert [(b.job_id, b.finish) for b in solo] == [(0, 2.5), (1, 1.0), (2, 4.5)]
    assert mean_jct(solo) == pytest.approx((2.5 + 1.0 + 0.5) / 3)
    # J = 1: job 0 (first by id) holds the window until 2.5; job 1 enters at slot 3 and ends
    # at 4; job 2 arrives at 4, the position is free at 4 (job 1 ended exactly then)
    win = window_bounds(jobs, cl, speed, J=1)
    assert [(b.job_id, b.entry, b.finish) for b in win] == [
        (0, 0.0, 2.5),
        (1, 3.0, 4.0),
        (2, 4.0, 4.5),
    ]
    assert mean_jct(win) == pytest.approx((2.5 + 4.0 + 0.5) / 3)
    # J = 2: nobody waits
    assert mean_jct(window_bounds(jobs, cl, speed, J=2)) == pytest.approx(mean_jct(solo))


def test_holding_envelopes_by_hand() -> None:
    # stand-in speed: (min(w, 2) + 0.5 min(p, 2)) it/s with at least one PS and one worker; a
    # worker holds 2 CPUs and 4 GPUs, a PS 2 CPUs; 100 iterations per epoch, slot 100 s:
    # epochs per slot = it/s.  Allocations (w, p) -> rate: (1, 1) 1.5, (1, 2) 2, (2, 1) 2.5,
    # (2, 2) 3 (more tasks add nothing).  GPUs 4, 4, 8, 8: the envelope from (0, 0) runs
    # through (2, 4) and (3, 8).  CPUs 4, 6, 6, 8: through (2.5, 6) (slope 2.4, below (1.5, 4)
    # and (2, 6)) and (3, 8).
    ty = jtype(worker=(2, 4), ps=(2, 0), ipe=100)
    job = ElasticJob(0, ty, 0, 10.0, 10.0, max_workers=8, max_ps=8)
    gpus, cpus = holding_envelopes(job, ElasticCluster(4, 8, 8, 100.0), StandInSpeed())
    assert np.asarray(gpus) == pytest.approx(np.array([[2.0, 0.0], [4.0, -4.0]]))
    assert np.asarray(cpus) == pytest.approx(np.array([[2.4, 0.0], [4.0, -4.0]]))


def test_bad_input() -> None:
    ty = jtype()
    cl = ElasticCluster(1, 8, 8, SLOT_S)
    with pytest.raises(ConfigError, match="window J"):
        window_bounds([ElasticJob(0, ty, 0, 1.0, 1.0)], cl, StandInSpeed(), J=0)
    # a worker needs 4 GPUs, the cluster has none: speed 0 everywhere
    with pytest.raises(ConfigError, match=r"job 3 .* can never finish"):
        solo_bounds(
            [ElasticJob(3, ty, 0, 1.0, 1.0)], ElasticCluster(1, 8, 0, SLOT_S), StandInSpeed()
        )
    with pytest.raises(ConfigError, match="no jobs"):
        mean_jct([])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_no_scheduler_beats_the_bounds_tiny(seed: int) -> None:
    setting = SETTINGS["tiny"]
    speed = MeasuredSpeed(max_ps=setting.max_ps, max_workers=setting.max_workers)
    jobs = setting.workload(seed)
    cl = setting.cluster()
    solo = mean_jct(solo_bounds(jobs, cl, speed))
    win = mean_jct(window_bounds(jobs, cl, speed, setting.J))
    assert win >= solo
    # with the competition for the cluster: higher on every seed here (the jobs do not all
    # fit at their fastest), and still below every scheduler
    free = capacity_bound(jobs, cl, speed)
    held = capacity_bound(jobs, cl, speed, setting.J)
    assert free > solo and held > win and held >= free - 1e-9
    for name, make in ALLOCATORS.items():
        direct = SlotSimulator(cl, jobs, make(), speed).run().avg_jct_slots
        assert direct >= free, name
        env = make_env(EnvConfig(setting="tiny"), seed=seed)
        through = HeuristicDriver(make(), env).run_episode(seed=seed)["avg_jct_slots"]
        assert through >= held, name


def test_no_scheduler_beats_the_window_bound_small() -> None:
    setting = SETTINGS["small"]
    speed = MeasuredSpeed(max_ps=setting.max_ps, max_workers=setting.max_workers)
    jobs = setting.workload(200)
    win = window_bounds(jobs, setting.cluster(), speed, setting.J)
    assert any(b.entry > b.arrival for b in win)  # the window binds on this workload
    for make in (DRF, Optimus, EfficientSRTF):
        env = make_env(EnvConfig(setting="small"), seed=200)
        out = HeuristicDriver(make(), env).run_episode(seed=200)
        assert out["avg_jct_slots"] >= mean_jct(win)
