"""``dlsched/Contention-v0`` on windows of the Philly corpus (issue 21): a window cut by hand,
determinism by seed, the held-out split, clear errors, the checkers, the return, the engine
reproduced through the env, and both learners running on a distribution of windows."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch as th
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

from agents.episode_pg import EpisodePG, EpisodePGConfig, MaskedMLP
from envs.gym.contention_env import ContentionEnv, srsf_exclusive_teacher, srsf_teacher
from envs.gym.workloads import (
    PHILLY_CORPUS,
    TEST_VCS,
    TRAIN_DAYS,
    TRAIN_VCS,
    VALIDATION_DAYS,
    TraceWindows,
    _corpus,
    contention_window,
)
from envs.sim import ClusterSpec, ModelOptions, SimConfig, simulate
from envs.sim.errors import ConfigError
from envs.sim.models import REFERENCE_MODELS
from envs.sim.workload import generate_ada_srsf
from tests.gym.test_contention_env import assert_pickled_copy_continues_alike

DAY = 86400.0
HELD_OUT = TraceWindows(vcs=list(TEST_VCS), days=[0.0, 120.0], jobs=30)


def _slice(tmp_path: Path) -> str:
    """VC ``a``: two jobs in day 1 (a1 asks for 100 GPUs and runs 200,000 s) and one in day 3;
    VC ``b`` in between; VC ``c``: one job in day 1 (too few to be drawn)."""
    rows = [
        ("b0", 0, 100, 1, "b"),
        ("a0", 86400, 3600, 2, "a"),
        ("b1", 90000, 50, 1, "b"),
        ("c0", 91000, 60, 1, "c"),
        ("a1", 93600, 200000, 100, "a"),
        ("a2", 3 * 86400, 10, 1, "a"),
    ]
    path = tmp_path / "slice.csv"
    lines = ["job_id,submit_time_s,duration_s,num_gpus,job_type,status,vc,gpu_milli"]
    lines += [f"{i},{t},{d},{g},,,{vc},1000" for i, t, d, g, vc in rows]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_window_cut_by_hand(tmp_path: Path, seed: int) -> None:
    """Days [1, 2) of VCs a and c, 3 jobs, load 0.5 of 64 GPUs, cap 24 h, every iteration:
    only a window from a0 has >= 2 jobs (from a1 it would be a1 alone: a2 is past day 2; c
    has one submission), so every seed gives a0, a1:

    - submits: 0 and 7200 s after a0; offered load (3600 x 2 + 86400 (capped) x 100) / 7200 =
      1201 GPUs, so arrivals are scaled by 0.5 x 64 / 1201: a1 at 7200 x 1201 / 32 = 270225 s;
    - a1's 100 GPUs clipped to the cluster's 64 (counted);
    - a0's iterations: 3,600,000 ms / (forward + backward) of its model, rounded half up."""
    spec = TraceWindows(path=_slice(tmp_path), vcs=["a", "c"], days=[1.0, 2.0], jobs=3,
                        duration_cap_h=24.0, load=0.5)  # fmt: skip
    cluster = ClusterSpec()
    w, rec = contention_window(spec, cluster, np.random.default_rng(seed), max_iterations=None)
    assert w.name == rec["label"] == "philly:a@1.00d:2"
    assert [j.name for j in w.jobs] == ["a0", "a1"]
    assert [j.submit_ms for j in w.jobs] == [0.0, pytest.approx(270_225_000.0, rel=1e-12)]
    assert [j.num_gpus for j in w.jobs] == [2, 64]
    assert rec["clipped"] == 1
    by_hand = {"vgg16": 40000, "resnet50": 58065, "inception-v3": 41379, "lstm": 45570}
    assert w.jobs[0].iterations == by_hand[w.jobs[0].model.name]
    a1 = {"vgg16": 960000, "resnet50": 1393548, "inception-v3": 993103, "lstm": 1093671}
    assert w.jobs[1].iterations == a1[w.jobs[1].model.name]  # 86,400,000 ms (the cap) / compute
    # models: convert_trace's rule, one uniform draw per job with the window's recorded seed
    draws = np.random.default_rng(rec["conversion"]["seed"]).integers(4, size=2)
    assert [j.model.name for j in w.jobs] == [list(REFERENCE_MODELS)[int(k)] for k in draws]
    assert rec["conversion"]["model_drawn"] == 2
    # macro-iterations (at most 200): the same compute to rounding
    m, _ = contention_window(spec, cluster, np.random.default_rng(seed), max_iterations=200)
    for full, merged in zip(w.jobs, m.jobs, strict=True):
        k = math.ceil(full.iterations / 200)
        assert merged.iterations == math.floor(full.iterations / k + 0.5) <= 200
        assert merged.model.forward_ms == full.model.forward_ms * k
        assert merged.submit_ms == full.submit_ms and merged.num_gpus == full.num_gpus


def test_windows_are_determined_by_the_seed() -> None:
    a = ContentionEnv(trace=HELD_OUT)
    b = ContentionEnv(trace=HELD_OUT)
    names = []
    for seed in range(6):
        wa, wb = a._workload(seed), b._workload(seed)
        assert wa == wb
        names.append(wa.name)
    assert len(set(names)) > 1  # the seed picks the window
    _, info = a.reset(seed=4)
    assert info["workload"] == names[4] and info["trace"]["label"] == names[4]
    assert 15 <= info["trace"]["jobs"] == len(a._workload(4).jobs) <= 30  # >= half a window


def test_held_out_windows_share_no_vc_day_or_job_with_training() -> None:
    corpus = {j.job_id: j for j in _corpus(str(PHILLY_CORPUS)).jobs}
    cluster = ClusterSpec()
    sets = {}
    for name, vcs, days in [
        ("train", TRAIN_VCS, TRAIN_DAYS),
        ("validation", TRAIN_VCS, VALIDATION_DAYS),
        ("test", TEST_VCS, (0.0, 120.0)),
    ]:
        spec = TraceWindows(vcs=list(vcs), days=list(days), jobs=40)
        rng = np.random.default_rng(7)
        jobs = set()
        for _ in range(12):
            w, _ = contention_window(spec, cluster, rng)
            for j in w.jobs:
                src = corpus[j.name]
                assert src.vc in vcs and days[0] * DAY <= src.submit_s < days[1] * DAY
                jobs.add(j.name)
        sets[name] = jobs
    assert not sets["train"] & sets["test"] and not sets["validation"] & sets["test"]
    assert not sets["train"] & sets["validation"]
    assert not set(TRAIN_VCS) & set(TEST_VCS)


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        ({"trace": {"vcs": ["nosuchvc"]}}, "no job of VC"),
        ({"trace": {"vcs": "6c71a0"}}, "VC names"),
        ({"trace": {"bogus": 1}}, "unknown keys"),
        ({"trace": "philly"}, "must be a TraceWindows"),
        ({"trace": {"days": [3.0, 1.0]}}, "days"),
        ({"trace": {"days": [0.0, math.inf]}}, "days"),
        ({"trace": {"load": math.nan}}, "load"),
        ({"trace": {"duration_cap_h": -1.0}}, "duration_cap_h"),
        ({"trace": {"jobs": 2.5}}, "jobs must be an integer"),
        ({"trace": {"jobs": -1}}, "jobs must be >= 0"),
        ({"trace": {}, "trace_max_iterations": 0}, "trace_max_iterations"),
        ({"trace": {}, "trace_max_iterations": True}, "trace_max_iterations"),
        ({"trace": {}, "workloads": [generate_ada_srsf(0)]}, "not both"),
    ],
)
def test_bad_trace_settings_are_one_clear_error(kwargs: dict, msg: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError, match=msg):
        ContentionEnv(**kwargs)


def test_bad_window_arguments_are_named() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(ConfigError, match="num_jobs"):
        contention_window(HELD_OUT, ClusterSpec(), rng, num_jobs=0)
    with pytest.raises(ConfigError, match="max_iterations"):
        contention_window(HELD_OUT, ClusterSpec(), rng, max_iterations=0)


def test_checkers_pass_and_the_env_pickles_with_trace_windows() -> None:
    gym_check_env(ContentionEnv(trace=HELD_OUT), skip_render_check=True)
    sb3_check_env(ContentionEnv(trace={"vcs": list(TRAIN_VCS), "days": [0.0, 75.0], "jobs": 20}))
    env = ContentionEnv(trace=HELD_OUT)
    assert_pickled_copy_continues_alike(env, 3, srsf_teacher, srsf_exclusive_teacher)


def test_the_return_is_minus_avg_jct_on_trace_windows() -> None:
    env = ContentionEnv(trace=HELD_OUT)
    rng = np.random.default_rng(1)
    for seed in (0, 1, 2):
        obs, _ = env.reset(seed=seed)
        total = 0.0
        while True:
            assert np.all(np.isfinite(obs)) and env.observation_space.contains(obs)
            a = int(rng.choice(np.flatnonzero(env.action_masks())))
            obs, r, term, trunc, info = env.step(a)
            total += r
            if term or trunc:
                break
        jct = np.array([r.jct_ms for r in info["result"].records]) / 1000.0
        assert term and total == pytest.approx(-jct.mean(), rel=1e-9)
        assert info["decisions"] == len(env._workload(seed).jobs)


@pytest.mark.parametrize("comm", ["srsf1", "adasrsf"])
def test_the_srsf_teacher_on_a_trace_window_is_the_engines_lwf1_stack(comm: str) -> None:
    env = ContentionEnv(trace=HELD_OUT, comm=comm, fidelity="full")
    for seed in (0, 5):
        env.reset(seed=seed)
        while True:
            _, _, term, _, info = env.step(srsf_teacher(env))
            if term:
                break
        ref = simulate(
            env.cluster,
            env._workload(seed),
            f"lwf1_{comm}",
            SimConfig(model=ModelOptions(seed=seed)),
        )
        assert [r.finish_ms for r in info["result"].records] == [r.finish_ms for r in ref.records]


def test_both_learners_run_on_a_distribution_of_windows() -> None:
    from sb3_contrib import MaskablePPO

    th.manual_seed(0)
    th.set_num_threads(1)
    spec = TraceWindows(vcs=list(TRAIN_VCS), days=list(TRAIN_DAYS), jobs=12)
    env = ContentionEnv(trace=spec, num_servers=4)
    net = MaskedMLP(env.obs_size, env.wait_action + 1, hidden=16)
    pg = EpisodePG(env, net, EpisodePGConfig(groups=2, group_size=2, epochs=1, seed=0))
    seen: list[float] = []
    pg.learn(2, lambda _i, st: seen.append(st["return"]))
    assert len(seen) == 2 and all(np.isfinite(seen))
    model = MaskablePPO("MlpPolicy", ContentionEnv(trace=spec, num_servers=4), n_steps=64,
                        batch_size=32, seed=0, device="cpu")  # fmt: skip
    model.learn(128)
