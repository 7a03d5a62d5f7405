"""Training workloads from a distribution: the mixture, trace windows, extreme traces."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from envs.gym.cluster_env import EXTENDED_FEATURES_PER_JOB, REMAINING_SCALE, ClusterEnv
from envs.gym.factory import EnvConfig, make_env, setting_of
from envs.gym.workloads import (
    PHILLY_CORPUS,
    TEST_VCS,
    TRAIN_VCS,
    Mixture,
    MixtureConfig,
    Scenario,
    TraceWindows,
    scenario_envs,
)
from envs.sim.errors import ConfigError

SMALL = EnvConfig(setting="small", reward="jct")
EXTENDED = EnvConfig(setting="small", reward="jct", features="extended")


def _drive(env: ClusterEnv, seed: int, steps: int = 3000) -> None:
    """Random valid actions; every observation finite and inside the Box."""
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    for _ in range(steps):
        assert np.all(np.isfinite(obs)) and obs.min() >= 0.0 and obs.max() <= 1.0
        valid = np.flatnonzero(env.action_masks())
        obs, r, term, trunc, _ = env.step(int(valid[rng.integers(len(valid))]))
        assert np.isfinite(r)
        if term or trunc:
            obs, _ = env.reset()


def test_corpus_is_shipped_and_split_is_disjoint() -> None:
    assert PHILLY_CORPUS.is_file()
    assert not set(TRAIN_VCS) & set(TEST_VCS)


def test_mixture_draws_are_seeded_and_follow_the_config() -> None:
    cfg = MixtureConfig(enabled=True, trace_share=0.5, nodes=[10, 20], arrivals=[1, 2])
    a = [Mixture(cfg, SMALL).draw(np.random.default_rng(3)) for _ in range(2)]
    assert a[0] == a[1]  # same generator state, same scenario
    mix = Mixture(cfg, SMALL)
    rng = np.random.default_rng(0)
    scenarios = [mix.draw(rng) for _ in range(12)]
    kinds = {s.jobs is None for s in scenarios}
    assert kinds == {True, False}  # both sources drawn
    for s in scenarios:
        assert 10 <= s.setting.num_nodes <= 20
        assert 1 <= s.setting.max_arrivals_per_slot <= 2
        if s.jobs is not None:
            assert s.label.split(":")[1].split("@")[0] in TRAIN_VCS
            assert len(s.jobs) == s.setting.num_jobs
            assert all(j.max_workers <= s.setting.max_workers for j in s.jobs)
            envs = scenario_envs(SMALL, s, 2)
            assert envs[0].cluster_spec.num_nodes == s.setting.num_nodes
            _drive(envs[0], s.seed, steps=500)


def test_no_usable_window_is_a_config_error() -> None:
    cfg = MixtureConfig(
        enabled=True, trace_share=1.0, windows=TraceWindows(vcs=[TRAIN_VCS[0]], days=[0, 0.01])
    )
    with pytest.raises(ConfigError, match="no usable trace window"):
        Mixture(cfg, SMALL).draw(np.random.default_rng(0))


def test_a_vc_the_trace_lacks_is_an_error_not_a_silent_drop() -> None:
    """A VC name that is not in the corpus (e.g. YAML reading ``6214e9`` as the number
    6214000000000.0) names itself; it is not skipped while the others are drawn."""
    vcs = [*TRAIN_VCS[1:], "6214000000000.0"]
    cfg = MixtureConfig(enabled=True, trace_share=1.0, windows=TraceWindows(vcs=vcs))
    with pytest.raises(ConfigError, match=r"no job of VC\(s\) \['6214000000000.0'\]"):
        Mixture(cfg, SMALL).draw(np.random.default_rng(0))


def test_the_shipped_mixture_config_names_every_training_vc() -> None:
    from hydra import compose, initialize_config_dir

    from training.config import register_configs

    register_configs()
    conf = Path(__file__).resolve().parents[2] / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        cfg = compose("train", overrides=["+agent=gppo", "mixture=dl2_philly"])
    assert list(cfg.mixture.windows.vcs) == list(TRAIN_VCS)
    with pytest.raises(ConfigError, match="trace_share"):
        Mixture(MixtureConfig(trace_share=1.5), SMALL)
    with pytest.raises(ConfigError, match="nodes"):
        Mixture(MixtureConfig(nodes=[5, 2]), SMALL)
    with pytest.raises(ConfigError, match="days"):
        TraceWindows(days=[3, 1]).check()


def test_extreme_trace_keeps_every_feature_finite_and_in_range(tmp_path) -> None:
    # durations from 1 s to 10^7 s, requests up to 64 GPUs (clipped), bursts at one instant
    from tests.traces import extreme_trace_windows

    cfg = MixtureConfig(enabled=True, trace_share=1.0, windows=extreme_trace_windows(tmp_path))
    for env_cfg in (SMALL, EXTENDED):
        mix = Mixture(cfg, env_cfg)
        s = mix.draw(np.random.default_rng(1))
        assert s.jobs is not None
        env = scenario_envs(env_cfg, s, 1)[0]
        _drive(env, s.seed, steps=5000)


def test_extended_features_hand_computed() -> None:
    env = make_env(EXTENDED)
    obs, _ = env.reset(seed=1)
    L = env.L
    rows = obs.reshape(env.J, L + EXTENDED_FEATURES_PER_JOB)
    for j, view in enumerate(env._window):
        job = view.spec
        its = env.speed.speed(job.type, job.max_ps, job.max_workers)
        per_slot = its * env.cluster_spec.slot_s / job.type.iterations_per_epoch
        left = job.num_epochs - view.progress_epochs
        expected = min(math.log1p(left / per_slot) / math.log1p(REMAINING_SCALE), 1.0)
        assert rows[j, L + 5] == pytest.approx(expected, rel=1e-6)
        size = math.log1p(job.max_workers) / math.log1p(env.setting.max_workers)
        assert rows[j, L + 6] == pytest.approx(min(size, 1.0), rel=1e-6)
    # the DL² columns are the default env's, unchanged
    base, _ = make_env(SMALL).reset(seed=1)
    np.testing.assert_array_equal(rows[:, : L + 5], base.reshape(env.J, L + 5))


def test_pretraining_on_the_mixture(tmp_path) -> None:
    from agents.policy import PolicyConfig
    from pretrain.bc import BCConfig
    from training.pretraining import PretrainConfig, pretrain

    tiny = EnvConfig(setting="tiny", reward="jct")
    cfg = PretrainConfig(
        teacher="drf",
        num_workloads=3,
        bc=BCConfig(steps=5, eval_every=0),
        eval_seeds=[100],
        on_mixture=True,
    )
    with pytest.raises(ConfigError, match="needs a workload mixture"):
        pretrain(cfg, tiny, PolicyConfig(), tmp_path / "a")
    mix = MixtureConfig(enabled=True, trace_share=1.0, nodes=[3, 5])
    out = pretrain(cfg, tiny, PolicyConfig(), tmp_path / "b", cache_dir=tmp_path / "c", mixture=mix)
    assert (tmp_path / "b" / "policy.npz").is_file()
    import json

    meta = json.loads((tmp_path / "b" / "dataset.json").read_text())
    assert len(meta["teacher_results"]) == 3
    # the mixture's workloads differ from the generator's: another cache entry
    plain = PretrainConfig(**{**cfg.__dict__, "on_mixture": False})
    pretrain(plain, tiny, PolicyConfig(), tmp_path / "d", cache_dir=tmp_path / "c")
    assert len(list((tmp_path / "c").iterdir())) == 2
    assert out["teacher"] == "drf"


def test_scenario_envs_keep_the_speed_mode() -> None:
    """A contention-mode config gives contention envs (same results as make_env's)."""
    from envs.gym.cluster_env import EngineClusterEnv
    from envs.gym.heuristic import HeuristicDriver
    from envs.sim.elastic.allocators import DRF

    config = EnvConfig(setting="tiny", speed="contention", placer="lwf1", reward="jct")
    base = setting_of(config)
    (env,) = scenario_envs(config, Scenario(base, 7, None, "seed 7"), 1)
    assert isinstance(env, EngineClusterEnv)
    direct = make_env(config, seed=7)
    a = HeuristicDriver(DRF(), env).run_episode(seed=7)["avg_jct_slots"]
    b = HeuristicDriver(DRF(), direct).run_episode(seed=7)["avg_jct_slots"]
    assert a == b


def test_mixture_draws_settings_scales_and_trace_loads() -> None:
    """``settings``: each group's DL² setting (its own J, jobs, arrivals); ``scale``: its nodes
    x a log-uniform factor in [lo, hi]; ``trace_loads``: a trace window's offered load.  A
    mixture without these options draws what it drew before they existed (no extra draws)."""
    from envs.gym.factory import SETTINGS

    cfg = MixtureConfig(enabled=True, trace_share=0.5, settings=["tiny", "medium", "large"],
                        scale=[0.5, 2.0], trace_loads=[0.5, 2.0])  # fmt: skip
    mix = Mixture(cfg, SMALL)
    rng = np.random.default_rng(4)
    scenarios = [mix.draw(rng) for _ in range(24)]
    windows = {s.setting.J for s in scenarios}
    assert windows == {8, 12, 40}  # every setting drawn
    for s in scenarios:
        base = next(v for k, v in SETTINGS.items() if k in ("tiny", "medium", "large")
                    and v.J == s.setting.J)  # fmt: skip
        assert s.setting.num_jobs == base.num_jobs
        assert 0.5 * base.num_nodes - 1 <= s.setting.num_nodes <= 2 * base.num_nodes + 1
        if s.jobs is not None:
            load = float(s.label.split("load=")[1])
            assert 0.5 <= load <= 2.0
    assert {s.jobs is None for s in scenarios} == {True, False}
    # the options left out draw nothing: the same scenarios as a config without the fields
    plain = MixtureConfig(enabled=True, trace_share=0.5, nodes=[10, 20])
    a = Mixture(plain, SMALL).draw(np.random.default_rng(8))
    empty = MixtureConfig(
        enabled=True, trace_share=0.5, nodes=[10, 20], settings=[], scale=[], trace_loads=[]
    )
    b = Mixture(empty, SMALL).draw(np.random.default_rng(8))
    assert a == b


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"settings": ["huge"]}, "unknown DL² setting 'huge'"),
        ({"settings": ["ada"]}, "unknown DL² setting 'ada'"),
        ({"scale": [2.0, 1.0]}, "mixture.scale must be [lo, hi]"),
        ({"scale": [0.0, 1.0]}, "mixture.scale must be [lo, hi]"),
        ({"scale": [1.0, math.inf]}, "mixture.scale must be [lo, hi]"),
        ({"trace_loads": [math.nan, 1.0]}, "mixture.trace_loads must be [lo, hi]"),
        ({"scale": [1.0, 2.0], "nodes": [4, 8]}, "mixture.nodes or mixture.scale, not both"),
    ],
)
def test_bad_mixture_options_are_one_clear_error(changes: dict, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        Mixture(MixtureConfig(enabled=True, **changes), SMALL)
    assert words in str(info.value)
