"""Contention-v0 over a distribution of settings (:class:`~envs.gym.contention_env.
ContentionDistribution`, :class:`~envs.gym.contention_env.ContentionMixEnv`): each episode
seed draws one setting, always the same; the generator's settings are the paper's at load 1
on 16 servers; trace windows come from the training VCs before day 90 only, on clusters sized
to their largest job; bad keys are one clear error each."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from envs.gym.contention_env import (
    ContentionConfig,
    ContentionDistribution,
    ContentionMixEnv,
    draw_setting,
    srsf_exclusive_teacher,
)
from envs.gym.episode import run_episode
from envs.gym.workloads import TEST_VCS, TRAIN_VCS
from envs.sim.errors import ConfigError
from envs.sim.workload import generate_ada_srsf, paper_scale_workload

DAY = 86400.0


def _config(**changes: object) -> ContentionConfig:
    dist = replace(ContentionDistribution(enabled=True), **changes)  # type: ignore[arg-type]
    return ContentionConfig(scale="small", num_jobs=16, distribution=dist)


def _jobs(w: object) -> list[tuple[object, ...]]:
    return [(j.job_id, j.submit_ms, j.model.name, j.iterations, j.num_gpus) for j in w.jobs]  # type: ignore[attr-defined]


def test_each_seed_draws_one_setting_always_and_roles_draw_apart() -> None:
    """Two envs (and two draws in one) give a seed the same cluster, workload and record;
    the validation role and another distribution seed draw otherwise."""
    cfg = _config()
    a, b = cfg.make_distribution(), cfg.make_distribution()
    seeds = range(10_000, 10_024)
    for s in seeds:
        x, y = draw_setting(cfg.distribution, a, s, "train"), b.drawn(s)
        assert x.record == y.record and x.cluster == y.cluster
        assert _jobs(x.workload) == _jobs(y.workload)
    kinds = {a.drawn(s).record["kind"] for s in seeds}
    sizes = {a.drawn(s).cluster.num_servers for s in seeds}
    assert kinds == {"generator", "trace"} and len(sizes) >= 3  # a mixture, of sizes too
    val = cfg.make_distribution("validation")
    other = replace(cfg, distribution=replace(cfg.distribution, seed=1)).make_distribution()
    for env in (val, other):
        assert [env.drawn(s).record for s in seeds] != [a.drawn(s).record for s in seeds]


def test_the_generator_at_load_1_on_16_servers_is_the_papers_workload() -> None:
    """The arrival window is the scale's x 16 / servers / load: at 16 servers and load 1
    exactly :func:`paper_scale_workload`; at 32 servers and load 2 a quarter of it."""
    dist = ContentionDistribution(enabled=True, trace_share=0.0, servers=[16], loads=[1.0])
    cfg = ContentionConfig(distribution=dist)
    env = cfg.make_distribution()
    for s in (10_000, 10_001):
        drawn = env.drawn(s)
        assert drawn.cluster.num_servers == 16
        assert _jobs(drawn.workload) == _jobs(paper_scale_workload(s))
    quarter = replace(cfg.distribution, servers=[32], loads=[2.0])
    drawn = draw_setting(quarter, env, 10_000, "train")
    want = generate_ada_srsf(10_000, num_jobs=160, iterations_scale=100.0,
                             arrival_window_ms=300_000.0)  # fmt: skip
    assert drawn.cluster.num_servers == 32 and _jobs(drawn.workload) == _jobs(want)


@pytest.mark.parametrize("role", ["train", "validation"])
def test_held_out_vcs_and_days_are_never_drawn(role: str) -> None:
    """Every window of 150 draws (all trace windows) is cut from a training VC, inside the
    role's days (training before day 75, validation in days 75-90): never a held-out VC,
    never day 90 or later."""
    cfg = _config(trace_share=1.0)
    env = cfg.make_distribution(role)
    lo, hi = (0.0, 75.0) if role == "train" else (75.0, 90.0)
    vcs = set()
    for s in range(150):
        rec = env.drawn(s).record
        select = next(step for step in rec["window"]["steps"] if step["op"] == "select")
        assert set(select["vcs"]) <= set(TRAIN_VCS) and not set(select["vcs"]) & set(TEST_VCS)
        assert lo * DAY <= select["start_s"] < select["end_s"] <= hi * DAY <= 90 * DAY
        vcs |= set(select["vcs"])
    assert len(vcs) >= 4  # the draws do range over the training VCs


def test_a_window_runs_on_its_natural_cluster() -> None:
    """Enough servers for the largest request (at least ``trace_min_servers``), times the
    drawn factor, at most ``trace_max_servers``: hand-computed sizes, and every drawn window
    fits its cluster with nothing clipped below the cap."""
    dist = ContentionDistribution()
    assert dist.natural_servers(1, 1, 4) == 4  # one GPU: the floor
    assert dist.natural_servers(24, 2, 4) == 12  # 6 servers for 24 GPUs, x2
    assert dist.natural_servers(17, 1, 4) == 5
    assert dist.natural_servers(128, 4, 4) == 64  # the cap
    env = _config(trace_share=1.0, trace_sizes=[1]).make_distribution()
    for s in range(10_000, 10_020):
        drawn = env.drawn(s)
        largest = max(j.num_gpus for j in drawn.workload.jobs)
        servers = drawn.cluster.num_servers
        assert servers == max(-(-largest // 4), 4) and drawn.record["window"]["clipped"] == 0


def test_the_env_takes_each_episodes_cluster_and_gives_back_its_own() -> None:
    """A reset runs the drawn setting (its observation's length, its cluster, its record in
    ``info``); once the episode ends, the cluster given at construction is back (the layout a
    policy is saved with)."""
    cfg = _config()
    env = cfg.make_distribution()
    assert isinstance(env, ContentionMixEnv) and env.cluster.num_servers == 16
    seen = set()
    for s in range(10_000, 10_006):
        obs, info = env.reset(seed=s)
        drawn = env.drawn(s)
        assert info["setting"] == drawn.record and env.cluster == drawn.cluster
        assert obs.shape == (env.obs_size,) == env.observation_space.shape
        assert env.obs_size == 20 * 9 + drawn.cluster.num_servers * 4 + 3
        run = run_episode(env, lambda e, _o: srsf_exclusive_teacher(e), s)
        assert run.info["avg_jct_s"] > 0 and env.cluster.num_servers == 16
        seen.add(drawn.cluster.num_servers)
    assert len(seen) > 1


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"trace_vcs": ["6214e9", "ee9e8c"]}, "['ee9e8c'] are not training VCs (held out"),
        ({"loads": []}, "contention.distribution.loads must be a non-empty list of numbers"),
        ({"trace_share": 1.5}, "contention.distribution.trace_share must be in [0, 1]"),
        ({"servers": [4, 16]}, "the generator's largest job needs 8 servers of 4 GPUs"),
        ({"trace_jobs": [30, 1.5]}, "contention.distribution.trace_jobs must be a non-empty list"),
        ({"trace_min_servers": 8, "trace_max_servers": 4}, "trace_min_servers (8) must be <="),
        ({"trace_sizes": [0]}, "contention.distribution.trace_sizes must be a non-empty list"),
        ({"seed": -1}, "contention.distribution.seed"),
    ],
)
def test_bad_keys_are_one_clear_error(change: dict[str, object], says: str) -> None:
    with pytest.raises(ConfigError) as err:
        _config(**change).make_distribution()
    assert says in str(err.value)


def test_the_mixed_env_refuses_workloads_of_its_own() -> None:
    with pytest.raises(ConfigError, match="a distribution draws its own workloads"):
        ContentionMixEnv(ContentionDistribution(), workloads=[generate_ada_srsf(0, num_jobs=8)])
    with pytest.raises(ConfigError, match="role must be one of"):
        _config().make_distribution("test")
    assert np.isfinite(_config().make_distribution().reset(seed=3)[0]).all()
