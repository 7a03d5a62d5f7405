"""``dlsched/Contention-v0`` (envs/gym/contention_env.py): the checkers, the reward's sum,
the SRSF teacher through the env reproducing the engine's own stack, determinism, pickling,
and invalid actions that change nothing."""

from __future__ import annotations

import pickle

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import envs.gym  # noqa: F401  (registers the ids)
from envs.gym.contention_env import CONTENTION_ENV_ID, ContentionEnv, srsf_teacher
from envs.sim import ClusterSpec, ModelOptions, SimConfig, simulate
from envs.sim.config import Fidelity
from envs.sim.errors import ConfigError
from envs.sim.workload import generate_ada_srsf


def assert_pickled_copy_continues_alike(env: ContentionEnv, seed: int, first, then) -> None:
    """Five ``first`` decisions from ``reset(seed)``, then ``then`` to the end on ``env`` and
    on a pickled copy of it: the same rewards and observations at every step."""
    env.reset(seed=seed)
    for _ in range(5):
        env.step(first(env))
    clone = pickle.loads(pickle.dumps(env))
    rest = []
    for e in (env, clone):
        out = []
        while True:
            obs, r, term, trunc, _ = e.step(then(e))
            out.append((r, obs.tobytes()))
            if term or trunc:
                break
        rest.append(out)
    assert rest[0] == rest[1]


def _episode(env: ContentionEnv, seed: int, act) -> tuple[float, dict, int]:
    env.reset(seed=seed)
    total, steps = 0.0, 0
    while True:
        _, r, term, trunc, info = env.step(act(env))
        total += r
        steps += 1
        if term or trunc:
            return total, info, steps


def test_both_checkers_pass() -> None:
    gym_check_env(ContentionEnv(num_jobs=20), skip_render_check=True)
    sb3_check_env(ContentionEnv(num_jobs=20))
    env = gym.make(CONTENTION_ENV_ID, num_jobs=20, comm="srsf1")
    assert env.reset(seed=0)[0].shape == env.observation_space.shape


@pytest.mark.parametrize("comm", ["adasrsf", "srsf1", "srsf2"])
@pytest.mark.parametrize("seed", [0, 3])
def test_the_srsf_teacher_through_the_env_is_the_engines_lwf1_stack(comm: str, seed: int) -> None:
    """Starting the window's first fitting job with LWF-1 at every stop is exactly the
    engine's LWF-1 + <comm> stack (SRSF order): same per-job finish times; the return is
    minus its avg JCT in seconds."""
    env = ContentionEnv(comm=comm, fidelity="full")
    total, info, _ = _episode(env, seed, srsf_teacher)
    ref = simulate(
        ClusterSpec(),
        generate_ada_srsf(seed),
        f"lwf1_{comm}",
        SimConfig(model=ModelOptions(seed=seed)),
    )
    assert [r.finish_ms for r in info["result"].records] == [r.finish_ms for r in ref.records]
    avg = np.mean([r.jct_ms for r in ref.records]) / 1000.0
    assert info["avg_jct_s"] == pytest.approx(avg, rel=1e-12)
    assert total == pytest.approx(-avg, rel=1e-9)


def test_the_return_is_minus_avg_jct_for_any_policy() -> None:
    env = ContentionEnv(scale="paper", num_jobs=40, fidelity=Fidelity.FAST.value)
    rng = np.random.default_rng(1)

    def random_valid(e: ContentionEnv) -> int:
        return int(rng.choice(np.flatnonzero(e.action_masks())))

    for seed in (0, 1):
        total, info, steps = _episode(env, seed, random_valid)
        jct = np.array([r.jct_ms for r in info["result"].records]) / 1000.0
        assert total == pytest.approx(-jct.mean(), rel=1e-9)
        assert steps >= 40 and info["decisions"] == 40  # every job started once


def test_seeded_and_picklable() -> None:
    env = ContentionEnv(num_jobs=30)
    a = _episode(env, 5, srsf_teacher)
    b = _episode(ContentionEnv(num_jobs=30), 5, srsf_teacher)
    assert a[0] == b[0] and a[2] == b[2]
    assert_pickled_copy_continues_alike(env, 2, srsf_teacher, srsf_teacher)


def test_invalid_actions_change_nothing_and_end_a_stuck_episode() -> None:
    env = ContentionEnv(num_jobs=30, max_invalid=50)
    obs, _ = env.reset(seed=0)
    sim = env.sim
    assert sim is not None
    state = (list(sim.free_mem_mb), [j.spec.job_id for j in sim.queued], sim.now)
    masks = env.action_masks()
    bad = [int(np.flatnonzero(~masks)[0]), -1, env.action_space.n, 2.5, "x", None, [0]]
    for a in bad:
        obs2, r, term, trunc, info = env.step(a)
        assert info["invalid_action"] and r == 0.0 and not term and not trunc
        assert (list(sim.free_mem_mb), [j.spec.job_id for j in sim.queued], sim.now) == state
        assert np.array_equal(obs2, obs)
    for _ in range(50 - len(bad) - 1):
        assert not env.step(-1)[3]
    _, _, term, trunc, info = env.step(-1)
    assert trunc and info["stuck"] and not term
    with pytest.raises(ConfigError, match="reset"):
        env.step(0)


def test_waiting_is_masked_only_when_it_would_never_end() -> None:
    env = ContentionEnv(num_jobs=10)
    env.reset(seed=0)
    waits = 0
    while not env.done:
        m = env.action_masks()
        sim = env.sim
        assert sim is not None
        if m[env.wait_action]:
            waits += 1
            env.step(env.wait_action)  # always wait when allowed: jobs start only when forced
        else:
            assert not sim.running and not any(j.spec.submit_ms > sim.now for j in sim.jobs)
            env.step(srsf_teacher(env))
    assert waits > 0
    assert np.isfinite(env.sim.result().records[0].finish_ms)  # type: ignore[union-attr]


def test_bad_config_is_one_clear_error() -> None:
    for kwargs, msg in [
        ({"scale": "huge"}, "scale"),
        ({"placements": ["lwf1", "best"]}, "unknown placements"),
        ({"comm": "magic"}, "communication scheduler"),
        ({"J": 0}, ">= 1"),
        ({"fidelity": "job"}, "fidelity"),
        ({"workloads": []}, "empty"),
        ({"num_gpus": 8}, r"unknown keyword\(s\) \['num_gpus'\]; it takes \['J', 'comm', "),
    ]:
        with pytest.raises(ConfigError, match=msg):
            ContentionEnv(**kwargs)
    import gymnasium as gym

    with pytest.raises(ConfigError, match=r"Contention-v0: unknown keyword\(s\) \['bogus'\]"):
        gym.make(CONTENTION_ENV_ID, bogus=1)  # through gymnasium: the same line
