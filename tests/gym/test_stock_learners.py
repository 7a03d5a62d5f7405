"""The env with stock tools only: ``gymnasium.make`` takes what Hydra's ``env=`` takes, its
default reward is one stock learners can learn from, a stuck policy cannot loop forever, and
the project's learners predict with masks as MaskablePPO does."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import envs.gym  # noqa: F401 - registers the id
from envs.gym.cluster_env import EngineClusterEnv
from envs.sim.errors import ConfigError

ID = "dlsched/Cluster-v0"


def _episode(env: gym.Env, seed: int, choose) -> tuple[float, dict]:  # type: ignore[type-arg]
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    total = 0.0
    while True:
        mask = env.unwrapped.action_masks()  # type: ignore[attr-defined]
        obs, r, term, trunc, info = env.step(choose(obs, mask, rng))
        total += float(r)
        if term or trunc:
            return total, info


def _random(_obs, mask, rng) -> int:  # type: ignore[no-untyped-def]
    return int(rng.choice(np.flatnonzero(mask)))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"setting": "tiny"},
        {"setting": "medium", "features": "extended"},
        {"setting": "tiny", "speed": "contention"},
        {"setting": "tiny", "overrides": {"num_jobs": 6}},
    ],
)
def test_gym_make_takes_the_hydra_env_keys(kwargs: dict) -> None:  # type: ignore[type-arg]
    """Every key of the Hydra env config; the default reward is ``jct``, whose episode return
    is exactly minus the total JCT (hand-checked against the episode's own figures)."""
    env = gym.make(ID, **kwargs)
    ret, info = _episode(env, 3, _random)
    assert info["unfinished_jobs"] == 0 and not info["stuck"]
    assert ret == pytest.approx(-info["avg_jct_slots"] * info["num_jobs"], rel=1e-9)
    if kwargs.get("speed") == "contention":
        assert isinstance(env.unwrapped, EngineClusterEnv)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"setting": "nope"}, "unknown env setting 'nope'"),
        ({"reward": "x"}, "reward must be 'dl2' or 'jct'"),
        ({"speed": "warp"}, "env speed must be one of"),
        ({"foo": 1}, "unknown env config key(s) ['foo']"),
        ({"jct_scale": float("nan")}, "jct_scale must be a finite number"),
    ],
)
def test_gym_make_refuses_bad_keys_clearly(kwargs: dict, words: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ConfigError) as info:
        gym.make(ID, **kwargs).reset(seed=0)
    assert words in str(info.value)


def test_a_policy_that_never_closes_a_slot_is_truncated() -> None:
    """Invalid actions are no-ops; 1,000 of them in one slot end the episode (``stuck``)."""
    env = gym.make(ID, setting="tiny")
    env.reset(seed=0)
    steps, trunc = 0, False
    while not trunc and steps < 2000:
        _, _, term, trunc, info = env.step(-1)
        steps += 1
    assert steps == 1000 and not term and info["stuck"]
    assert info["unfinished_jobs"] == info["num_jobs"]


def test_project_learners_predict_with_masks() -> None:
    """``DL2A2C.predict(obs, action_masks=m)`` (MaskablePPO's form) picks only valid actions."""
    from agents.build import build_agent
    from agents.config import AgentConfig
    from agents.vec import make_training_vec_env
    from envs.gym.factory import EnvConfig

    model = build_agent(AgentConfig(), make_training_vec_env([EnvConfig("tiny")], [0]), 8, 0)
    env = gym.make(ID, setting="tiny")
    obs, _ = env.reset(seed=1)
    for _ in range(200):
        mask = env.unwrapped.action_masks()  # type: ignore[attr-defined]
        a, _ = model.predict(obs, action_masks=mask, deterministic=False)
        assert mask[int(a)]
        obs, _, term, trunc, _ = env.step(int(a))
        if term or trunc:
            obs, _ = env.reset()


def test_stock_maskable_ppo_learns_on_the_default_env() -> None:
    """Stock sb3-contrib MaskablePPO on ``gymnasium.make(ID, setting="tiny")`` and nothing else
    from the project: 8k steps (a few seconds) already beat random valid actions on held-out
    workloads (DL²'s ``reward="dl2"`` returns the number of jobs whatever the policy)."""
    import torch as th
    from sb3_contrib import MaskablePPO

    th.set_num_threads(1)
    model = MaskablePPO(
        "MlpPolicy", gym.make(ID, setting="tiny"), seed=0, n_steps=512, batch_size=128
    )
    model.learn(8192)

    def learned(obs, mask, _rng) -> int:  # type: ignore[no-untyped-def]
        return int(model.predict(obs, action_masks=mask, deterministic=False)[0])

    seeds = range(100, 105)
    env = gym.make(ID, setting="tiny")
    rand = np.mean([_episode(env, s, _random)[1]["avg_jct_slots"] for s in seeds])
    mine = np.mean([_episode(env, s, learned)[1]["avg_jct_slots"] for s in seeds])
    assert mine < 0.8 * rand, (mine, rand)


def test_the_env_reads_a_trace_with_the_same_options_as_evaluate_py(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """``trace_options`` are ``evaluate.py``'s ``workload.trace.*``: a layout, a window, a cap,
    unknown job types drawn; at their defaults the env's records (and cache keys) are unchanged."""
    from pathlib import Path

    from envs.gym.factory import EnvConfig

    trace = Path(__file__).resolve().parents[2] / "envs/sim/data/traces/philly_vc_6c71a0_public.csv"
    env = gym.make(ID, trace=str(trace), trace_options={"max_jobs": 20, "duration_cap_s": 3600})
    env.reset(seed=0)
    jobs = env.unwrapped.jobs  # type: ignore[attr-defined]
    assert len(jobs) == 20
    odd = tmp_path / "odd.csv"
    odd.write_text("job_id,submit_time_s,duration_s,num_gpus,job_type\na,0,600,1,mystery\n")
    with pytest.raises(Exception, match="unknown model 'mystery'"):
        gym.make(ID, trace=str(odd)).reset(seed=0)
    drawn = gym.make(ID, trace=str(odd), trace_options={"unknown_models": "draw"})
    drawn.reset(seed=0)
    assert len(drawn.unwrapped.jobs) == 1  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"unknown trace_options key\(s\) \['max_job'\]"):
        gym.make(ID, trace=str(trace), trace_options={"max_job": 3})
    assert "trace_options" not in EnvConfig(setting="tiny").as_dict()
