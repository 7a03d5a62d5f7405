"""env.backlog: what the jobs beyond the window get (DL²'s ASSIGN_BUNDLE and allocators)."""

from __future__ import annotations

import pytest

from envs.gym.factory import EnvConfig, make_env
from envs.gym.heuristic import HeuristicDriver
from envs.sim.elastic.allocators import DRF, EfficientSRTF, OneBundleEach
from envs.sim.elastic.bounds import mean_jct, solo_bounds, window_bounds
from envs.sim.errors import ConfigError

# 30 jobs of the small setting behind a window of 10 (it binds); EfficientSRTF leaves capacity
CFG = {"setting": "small", "overrides": {"num_jobs": 30, "J": 10}}


def test_default_is_none_and_keeps_records_and_cache_keys() -> None:
    assert "backlog" not in EnvConfig().as_dict()
    assert EnvConfig(backlog="bundle").as_dict()["backlog"] == "bundle"
    assert make_env(EnvConfig()).allocator_for_unused is None


def test_bundle_gives_every_backlog_job_one_bundle_while_it_fits() -> None:
    env = make_env(EnvConfig(**CFG, backlog="bundle"), seed=0)
    assert isinstance(env.allocator_for_unused, OneBundleEach)
    records = []
    env.reset(seed=0)
    sim = env._require_sim()
    sim.on_slot = records.append
    driver = HeuristicDriver(EfficientSRTF(), env)
    while True:
        _, _, term, trunc, _ = env.step(driver.act())
        if term or trunc:
            break
    assert term
    backlog_runs = 0
    for rec in records:
        active = list(rec.allocation)  # every active job, in arrival order
        for jid in active[10:]:  # beyond the window
            w, p = rec.allocation[jid]
            assert (w, p) in ((0, 0), (1, 1))
            backlog_runs += (w, p) == (1, 1)
    assert backlog_runs > 0  # the backlog did run


def test_backlog_beats_the_window_bound_but_not_the_solo_bound() -> None:
    seed = 1
    none = make_env(EnvConfig(**CFG), seed=seed)
    bundle = make_env(EnvConfig(**CFG, backlog="bundle"), seed=seed)
    jct_none = HeuristicDriver(EfficientSRTF(), none).run_episode(seed=seed)["avg_jct_slots"]
    jct_bundle = HeuristicDriver(EfficientSRTF(), bundle).run_episode(seed=seed)["avg_jct_slots"]
    sim = bundle._require_sim()
    solo = mean_jct(solo_bounds(bundle.jobs, sim.spec, sim.speed))
    window = mean_jct(window_bounds(bundle.jobs, sim.spec, sim.speed, 10))
    assert jct_none >= window
    assert jct_bundle >= solo
    assert jct_bundle != jct_none


def test_allocator_backlog_and_bad_names() -> None:
    assert isinstance(make_env(EnvConfig(**CFG, backlog="drf")).allocator_for_unused, DRF)
    with pytest.raises(ConfigError, match="env backlog must be 'none' or an allocator name"):
        make_env(EnvConfig(**CFG, backlog="bundles"))
