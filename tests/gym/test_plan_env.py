"""``dlsched/ClusterPlan-v0`` (envs/gym/plan_env.py): constant action 0 is EfficientSRTF
through ClusterEnv exactly, the return is ClusterEnv's for the same increments, determinism,
pickling, the checkers, and clear errors for bad actions."""

from __future__ import annotations

import pickle
import re

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import envs.gym  # noqa: F401  (registers the ids)
from envs.gym.factory import EnvConfig, make_env
from envs.gym.heuristic import HeuristicDriver
from envs.gym.plan_env import (
    DEFAULT_PLANS,
    GLOBAL_FEATURES,
    PLAN_ENV_ID,
    PlanEnv,
    parse_plan,
    plan_label,
    plan_specs,
)
from envs.sim.elastic.allocators import make_allocator
from envs.sim.errors import ConfigError


def _plan_episode(env: PlanEnv, seed: int, choose) -> tuple[float, dict, list[int]]:
    env.reset(seed=seed)
    total, actions = 0.0, []
    while True:
        a = choose(len(actions))
        actions.append(a)
        _, r, term, trunc, info = env.step(a)
        total += r
        if term or trunc:
            return total, info, actions


def _driver_episode(
    setting: str, seed: int, name: str, options: dict | None = None
) -> tuple[float, dict]:
    env = make_env(EnvConfig(setting=setting, reward="jct"))
    drv = HeuristicDriver(make_allocator(name, options), env)
    env.reset(seed=seed)
    total = 0.0
    while True:
        _, r, term, trunc, info = env.step(drv.act())
        total += r
        if term or trunc:
            return total, info


@pytest.mark.parametrize("seed", [3, 4])
def test_constant_esrtf_is_efficientsrtf_through_the_env(seed: int) -> None:
    env = PlanEnv("tiny", reward="jct")
    assert DEFAULT_PLANS[0] == ("esrtf", {})
    ret, info, _ = _plan_episode(env, seed, lambda _i: 0)
    ret2, info2 = _driver_episode("tiny", seed, "esrtf")
    assert info["avg_jct_slots"] == info2["avg_jct_slots"]
    assert ret == pytest.approx(ret2, rel=1e-12, abs=1e-12)
    assert info["jobs_finished"] == info2["jobs_finished"] == info["num_jobs"]


def test_return_equals_cluster_env_return_for_the_same_increments() -> None:
    """Replay a mixed plan sequence increment by increment on a bare ClusterEnv."""
    env = PlanEnv("tiny", reward="jct")
    pattern = [0, 3, 4, 5, 1, 2]
    env.reset(seed=7)
    inner_actions: list[int] = []
    total, i = 0.0, 0
    while True:  # record the inner increments of each plan
        k = pattern[i % len(pattern)]
        drv = env.drivers[k]
        while True:
            a = drv.act()
            inner_actions.append(a)
            _, r, term, trunc, info = env.inner.step(a)
            total += r
            if term or trunc or info["slot_ended"]:
                break
        i += 1
        if term or trunc:
            break
    plan_ret, plan_info, _ = _plan_episode(
        PlanEnv("tiny", reward="jct"), 7, lambda j: pattern[j % len(pattern)]
    )
    bare = make_env(EnvConfig(setting="tiny", reward="jct"))
    bare.reset(seed=7)
    bare_ret = 0.0
    for a in inner_actions:
        _, r, term, trunc, bare_info = bare.step(a)
        bare_ret += r
    assert term or trunc
    assert plan_ret == pytest.approx(bare_ret, rel=1e-12, abs=1e-12)
    assert plan_ret == pytest.approx(total, rel=1e-12, abs=1e-12)
    assert plan_info["avg_jct_slots"] == bare_info["avg_jct_slots"]


def test_observation_features_and_masks() -> None:
    env = PlanEnv("tiny", reward="jct")
    obs, _ = env.reset(seed=1)
    inner = env.inner.observation_space.shape[0]
    assert obs.shape == (inner + len(GLOBAL_FEATURES),)
    assert env.observation_space.contains(obs)
    assert env.action_masks().tolist() == [True] * len(DEFAULT_PLANS)
    for _ in range(5):
        obs, *_ = env.step(4)
        assert env.observation_space.contains(obs)
    assert obs[inner + 2] < 1.0  # the previous slot used some GPUs
    assert env.sim.now == env.inner._t


def test_determinism_and_pickling() -> None:
    rng = np.random.default_rng(0)
    seq = [int(x) for x in rng.integers(0, len(DEFAULT_PLANS), 400)]
    a = _plan_episode(PlanEnv("tiny", reward="jct"), 11, lambda j: seq[j])
    b = _plan_episode(PlanEnv("tiny", reward="jct"), 11, lambda j: seq[j])
    assert a[0] == b[0] and a[1]["avg_jct_slots"] == b[1]["avg_jct_slots"]
    env = PlanEnv("tiny", reward="jct")
    env.reset(seed=11)
    for j in range(3):
        env.step(seq[j])
    copy = pickle.loads(pickle.dumps(env))
    outs = []
    for e in (env, copy):
        total, j = 0.0, 3
        while True:
            obs, r, term, trunc, info = e.step(seq[j])
            total += r
            j += 1
            if term or trunc:
                outs.append((total, info["avg_jct_slots"], obs.tobytes()))
                break
    assert outs[0] == outs[1]


def test_checkers_and_registration() -> None:
    gym_check_env(PlanEnv("tiny", reward="jct"), skip_render_check=True)
    sb3_check_env(gym.make(PLAN_ENV_ID, setting="tiny"), warn=False)
    env = gym.make(PLAN_ENV_ID, setting="tiny", plans=["esrtf", ("esrtf", {"efficiency": 0.7})])
    assert env.action_space.n == 2
    assert env.unwrapped.labels == ("esrtf", "esrtf(efficiency=0.7)")


def test_bad_actions_and_options() -> None:
    env = PlanEnv("tiny", reward="jct")
    with pytest.raises(gym.error.ResetNeeded):
        env.step(0)
    env.reset(seed=0)
    for bad in (-1, len(DEFAULT_PLANS), 1.5, "0", True, None):
        with pytest.raises(ConfigError):
            env.step(bad)
    env.step(np.int64(1))
    env.step(np.array(2))
    with pytest.raises(ConfigError, match="unknown allocator"):
        PlanEnv("tiny", plans=["nonsense"])
    with pytest.raises(ConfigError, match="at least one"):
        PlanEnv("tiny", plans=[])
    with pytest.raises(ConfigError, match="not several"):
        PlanEnv(env=make_env(EnvConfig(setting="tiny")), reward="jct")


def test_plan_labels_parse_back_and_bad_labels_name_the_cause() -> None:
    """``parse_plan`` inverts ``plan_label``; a label plan is the allocator it names."""
    for name, options in (*DEFAULT_PLANS, ("esrtf_load", {"light": 2, "eff_heavy": 0.6})):
        assert parse_plan(plan_label(name, options)) == (name, dict(options))
    env = PlanEnv("tiny", reward="jct", plans=["esrtf", "esrtf(efficiency=0.85)", "drf"])
    assert env.labels == ("esrtf", "esrtf(efficiency=0.85)", "drf")
    assert env.drivers[1].allocator.efficiency == 0.85  # type: ignore[attr-defined]
    # a constant label plan is its allocator through the env, as for DEFAULT_PLANS
    ret, info, _ = _plan_episode(env, 3, lambda _i: 1)
    ret2, info2 = _driver_episode("tiny", 3, "esrtf", {"efficiency": 0.85})
    assert info["avg_jct_slots"] == info2["avg_jct_slots"]
    assert ret == pytest.approx(ret2, rel=1e-12, abs=1e-12)
    cases = {
        "esrtf(0.8)": "not key=value",
        "esrtf(efficiency=x)": "not a number",
        "esrtf(efficiency=1e999)": "finite",
        "esrtf(efficiency=0.8, efficiency=0.7)": "given twice",
        "es trf": "expected NAME",
        "esrtf(efficiency=1.5)": "efficiency must be in (0, 1]",
        "esrtf(speed=2)": "bad options",
    }
    for label, words in cases.items():
        with pytest.raises(ConfigError, match=re.escape(words)) as info:
            plan_specs([label])
        assert label in str(info.value)
    with pytest.raises(ConfigError, match="more than once: esrtf"):
        plan_specs(["esrtf", "esrtf()"])
