"""Vectorised use of ``dlsched/Cluster-v0`` (issue 4, item 6)."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
from stable_baselines3.common.vec_env import DummyVecEnv, SubprocVecEnv

import envs.gym  # noqa: F401  (registers the id)
from envs.gym.cluster_env import ClusterEnv
from envs.sim.elastic.workload import DL2Setting

TINY = DL2Setting(
    num_nodes=4, num_jobs=6, max_arrivals_per_slot=2, J=4, max_epochs=40, max_workers=4, max_ps=4
)
STEPS = 300


def make_fn():
    return ClusterEnv(TINY, max_slots=200)


def random_valid_rollout(venv, seed: int, steps: int = STEPS):
    """Random valid actions from each sub-env's mask; the (obs, rewards, dones) trace."""
    rng = np.random.default_rng(seed)
    venv.seed(seed)
    obs = venv.reset()
    trace = [obs.copy()]
    for _ in range(steps):
        masks = venv.env_method("action_masks")
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        obs, rewards, dones, infos = venv.step(actions)
        assert obs.shape == (venv.num_envs, *venv.observation_space.shape)
        assert not any(info["invalid_action"] for info in infos)
        trace.append((obs.copy(), rewards.copy(), dones.copy()))
    return trace


def same(a, b) -> bool:
    return all(
        all(np.array_equal(x, y) for x, y in zip(s, t, strict=True))
        if isinstance(s, tuple)
        else np.array_equal(s, t)
        for s, t in zip(a, b, strict=True)
    )


def test_dummy_vec_env_rollouts_reproducible():
    t1 = random_valid_rollout(DummyVecEnv([make_fn, make_fn]), seed=3)
    t2 = random_valid_rollout(DummyVecEnv([make_fn, make_fn]), seed=3)
    assert same(t1, t2)
    assert any(d.any() for _, _, d in t1[1:])  # episodes ended and were auto-reset


@pytest.mark.parametrize("start_method", ["fork"])
def test_subproc_vec_env_matches_dummy(start_method):
    venv = SubprocVecEnv([make_fn, make_fn], start_method=start_method)
    try:
        t_sub = random_valid_rollout(venv, seed=5, steps=200)
    finally:
        venv.close()
    t_dummy = random_valid_rollout(DummyVecEnv([make_fn, make_fn]), seed=5, steps=200)
    assert same(t_sub, t_dummy)


def make_vec_rollout(seed: int, steps: int = STEPS):
    envs = gymnasium.make_vec(
        "envs.gym:dlsched/Cluster-v0",
        num_envs=2,
        vectorization_mode="sync",
        setting=TINY,
        max_slots=200,
    )
    rng = np.random.default_rng(seed)
    obs, _ = envs.reset(seed=seed)
    trace = [obs.copy()]
    for _ in range(steps):
        masks = envs.call("action_masks")
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        obs, rewards, term, trunc, _ = envs.step(actions)
        trace.append((obs.copy(), rewards.copy(), term.copy(), trunc.copy()))
    envs.close()
    return trace


def test_gymnasium_make_vec_sync_reproducible():
    t1 = make_vec_rollout(7)
    t2 = make_vec_rollout(7)
    assert same(t1, t2)
    assert t1[0].shape == (2, TINY.J * (8 + 5))
    assert any(t.any() for _, _, t, _ in t1[1:])
    assert not same(t1, make_vec_rollout(8))


def test_two_instances_same_seed_identical():
    e1, e2 = make_fn(), make_fn()
    rng1, rng2 = np.random.default_rng(0), np.random.default_rng(0)
    for episode in range(3):
        o1, _ = e1.reset(seed=100 + episode)
        o2, _ = e2.reset(seed=100 + episode)
        assert np.array_equal(o1, o2)
        while True:
            a1 = rng1.choice(np.flatnonzero(e1.action_masks()))
            a2 = rng2.choice(np.flatnonzero(e2.action_masks()))
            assert a1 == a2
            r1, r2 = e1.step(a1), e2.step(a2)
            assert np.array_equal(r1[0], r2[0]) and r1[1:4] == r2[1:4]
            if r1[2] or r1[3]:
                break


# ---------------------------------------------------------------------------- fuzz (item 8)
# A tiny setting with short episodes; 30 seeds of a seeded mix of valid, masked, out-of-range
# and malformed actions, invariants checked after every step.  The long version (>= 1e6 steps)
# is ``python benchmarks/bench_env.py --fuzz-steps 1000000``.
FUZZ = DL2Setting(
    num_nodes=3, num_jobs=5, max_arrivals_per_slot=2, J=3, max_epochs=30, max_workers=3, max_ps=3
)
ODD_ACTIONS = [None, 1.5, "x", np.array([0, 1]), np.int8(0), True, -1]


def fuzz_action(env: ClusterEnv, rng: np.random.Generator):
    u = rng.random()
    n = int(env.action_space.n)
    if u < 0.6:
        return rng.choice(np.flatnonzero(env.action_masks()))
    if u < 0.8:
        return int(rng.integers(n))  # possibly masked
    if u < 0.9:
        return int(rng.choice([-1, n, n + 7, -100]))
    return ODD_ACTIONS[int(rng.integers(len(ODD_ACTIONS)))]


def check_invariants(env: ClusterEnv, obs, info, prev: dict) -> None:
    sim = env.sim
    assert sim is not None
    c = sim.cluster
    assert (c.used_cpu <= c.cpu_capacity).all() and (c.used_gpu <= c.gpu_capacity).all()
    assert (c.used_cpu >= 0).all() and (c.used_gpu >= 0).all()
    cpu = gpu = 0
    for job in env._window:
        w, p = env._alloc[job.job_id]
        assert 0 <= w <= job.spec.max_workers and 0 <= p <= job.spec.max_ps
        cpu += w * job.worker_demand[0] + p * job.ps_demand[0]
        gpu += w * job.worker_demand[1] + p * job.ps_demand[1]
    if env._slot_open:  # the cluster holds exactly the window's tasks
        assert (int(c.used_cpu.sum()), int(c.used_gpu.sum())) == (cpu, gpu)
    assert env.observation_space.contains(obs)
    mask = env.action_masks()
    assert mask.shape == (env.action_space.n,) and mask.dtype == bool and mask[-1]
    for key in ("invalid_actions", "jobs_finished", "empty_slots_total", "slot"):
        assert info[key] >= prev.get(key, 0), key
        prev[key] = info[key]
    assert info["jobs_finished"] <= info["num_jobs"]


@pytest.mark.parametrize("seed", range(30))
def test_fuzz_invariants(seed):
    rng = np.random.default_rng(seed)
    env = ClusterEnv(FUZZ, max_slots=40)
    obs, info = env.reset(seed=seed)
    prev: dict = {}
    check_invariants(env, obs, info, prev)
    invalid = 0
    for _ in range(400):
        action = fuzz_action(env, rng)
        obs, reward, term, trunc, info = env.step(action)
        invalid += info["invalid_action"]
        assert np.isfinite(reward)
        check_invariants(env, obs, info, prev)
        assert info["invalid_actions"] == invalid
        if term or trunc:
            obs, info = env.reset()
            prev, invalid = {}, 0
            check_invariants(env, obs, info, prev)
