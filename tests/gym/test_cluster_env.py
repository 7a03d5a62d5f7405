"""The Gymnasium environment ``dlsched/Cluster-v0`` (envs/gym/cluster_env.py)."""

from __future__ import annotations

import pickle
import warnings
from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium.error import ResetNeeded
from gymnasium.utils.env_checker import check_env as gym_check_env
from stable_baselines3.common.env_checker import check_env as sb3_check_env

import envs.gym
from envs.gym.cluster_env import FEATURES_PER_JOB, STAY_SCALE, ClusterEnv
from envs.sim.elastic.allocators import DRF, dominant_share
from envs.sim.elastic.simulator import SlotRecord
from envs.sim.elastic.workload import DL2Setting
from envs.sim.errors import ConfigError

# 4 nodes, 6 jobs (up to 2 per slot), window 4: episodes of a few hundred decisions.
TINY = DL2Setting(
    num_nodes=4, num_jobs=6, max_arrivals_per_slot=2, J=4, max_epochs=40, max_workers=4, max_ps=4
)


def make(**kwargs) -> ClusterEnv:
    kwargs.setdefault("max_slots", 500)
    return ClusterEnv(TINY, **kwargs)


def first_valid(env: ClusterEnv) -> int:
    mask = env.action_masks()
    nonvoid = np.flatnonzero(mask[:-1])
    return int(nonvoid[0]) if nonvoid.size else env.void_action


def run_episode(env: ClusterEnv, policy, seed: int | None = 0):
    obs, info = env.reset(seed=seed)
    trace = [(obs.copy(), 0.0)]
    rewards, infos = [], []
    while True:
        obs, r, term, trunc, info = env.step(policy(env))
        assert env.observation_space.contains(obs)
        trace.append((obs.copy(), r))
        rewards.append(r)
        infos.append(info)
        if term or trunc:
            return trace, rewards, infos, term, trunc


def test_env_checkers_pass():
    env = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gym_check_env(env)
        sb3_check_env(make(), warn=False)
        sb3_check_env(gymnasium.make("dlsched/Cluster-v0", setting=TINY), warn=False)


def test_gymnasium_make_and_spaces():
    env = gymnasium.make(envs.gym.ENV_ID, setting=TINY, reward="jct", max_slots=50)
    assert env.unwrapped.J == TINY.J  # type: ignore[attr-defined]
    assert env.action_space == gymnasium.spaces.Discrete(3 * TINY.J + 1)
    assert env.observation_space.shape == (TINY.J * (8 + FEATURES_PER_JOB),)
    obs, _ = env.reset(seed=3)
    assert obs.dtype == np.float32
    env2 = gymnasium.make("envs.gym:dlsched/Cluster-v0", setting="small")
    assert env2.observation_space.shape == (20 * 13,)
    env2.close()
    env.close()


def test_first_valid_policy_finishes_every_job():
    env = make()
    _, rewards, infos, term, trunc = run_episode(env, first_valid, seed=1)
    assert term and not trunc
    assert infos[-1]["jobs_finished"] == TINY.num_jobs
    assert env.sim is not None and env.sim.done
    assert infos[-1]["avg_jct_slots"] == pytest.approx(env.sim.result().avg_jct_slots)
    # reward only on steps that close a slot
    for r, info in zip(rewards, infos, strict=True):
        if not info["slot_ended"]:
            assert r == 0.0
        else:
            assert r == info["slot_reward"]
    assert sum(i["slot_ended"] for i in infos) + infos[-1]["empty_slots_total"] == env.sim.t


def test_random_valid_policy_finishes_and_masks_are_sound():
    env = make()
    rng = np.random.default_rng(7)
    env.reset(seed=5)
    while True:
        mask = env.action_masks()
        assert mask[-1]
        # empty rows are fully masked
        n_rows = len(env._window)
        assert not mask[3 * n_rows : -1].any()
        obs = env._obs().reshape(env.J, -1)
        assert not obs[n_rows:].any()
        a = int(rng.choice(np.flatnonzero(mask)))
        _, _, term, trunc, info = env.step(a)
        assert not info["invalid_action"]
        assert env.sim is not None
        env.sim.cluster.check()
        if term or trunc:
            break
    assert term and info["jobs_finished"] == TINY.num_jobs


def test_invalid_actions_are_counted_noops():
    env = make()
    obs0, _ = env.reset(seed=2)
    mask = env.action_masks()
    invalid = [a for a in range(env.void_action) if not mask[a]]
    assert invalid, "an empty window row must exist in this workload"
    for n, a in enumerate([invalid[0], -1, 10**6, 1.5, "x"], start=1):
        obs, r, term, trunc, info = env.step(a)
        assert info["invalid_action"] and info["invalid_actions"] == n
        assert r == 0.0 and not info["slot_ended"] and not (term or trunc)
        np.testing.assert_array_equal(obs, obs0)
    assert env.sim is not None and int(env.sim.cluster.used_cpu.sum()) == 0
    obs, _, _, _, info = env.step(first_valid(env))
    assert not info["invalid_action"] and info["invalid_actions"] == 5
    assert not np.array_equal(obs, obs0)


def test_caps_are_masked():
    env = make()
    env.reset(seed=0)  # row 0 is a small CPU-only job: its caps bind before the cluster
    job = env._window[0]
    for _ in range(job.spec.max_workers):
        assert env.action_masks()[0]
        env.step(0)
    assert env._alloc[job.job_id] == [job.spec.max_workers, 0]
    mask = env.action_masks()
    assert not mask[0] and mask[1] and not mask[2]
    _, _, _, _, info = env.step(0)
    assert info["invalid_action"]


def test_jobs_beyond_window_wait_or_use_allocator():
    for alloc in (None, DRF()):
        env = make(J=1, allocator_for_unused=alloc)
        env.reset(seed=0)
        assert env.sim is not None and len(env._views) == 2
        records: list[SlotRecord] = []
        env.sim.on_slot = records.append
        env.step(2)
        env.step(env.void_action)
        (rec,) = records
        first, second = sorted(rec.allocation)
        assert rec.allocation[first] == (1, 1)
        if alloc is None:
            assert rec.allocation[second] == (0, 0)
        else:
            assert rec.allocation[second] != (0, 0)


def test_dl2_reward_equals_slot_record():
    records: list[SlotRecord] = []
    env = make()
    env.reset(seed=4)
    assert env.sim is not None
    env.sim.on_slot = records.append
    rewards = []
    while True:
        _, _, term, trunc, info = env.step(first_valid(env))
        if info["slot_ended"]:
            rewards.append(info["slot_reward"])
        if term or trunc:
            break
    nonempty = [rec for rec in records if rec.allocation]
    assert len(nonempty) == len(rewards)
    for rec, r in zip(nonempty, rewards, strict=True):
        expected = sum(
            e / next(j for j in env.jobs if j.job_id == jid).num_epochs
            for jid, e in rec.epochs.items()
        )
        assert r == pytest.approx(expected, rel=1e-12)
        assert r == rec.reward


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_jct_reward_sums_to_total_jct(seed):
    env = make(reward="jct", jct_scale=1.0)
    _, rewards, _, term, _ = run_episode(env, first_valid, seed=seed)
    assert term and env.sim is not None
    total = sum(r.jct_slots for r in env.sim.result().jobs)
    assert sum(rewards) == pytest.approx(-total, abs=1e-9)
    scaled = make(reward="jct", jct_scale=10.0)
    _, rewards2, _, _, _ = run_episode(scaled, first_valid, seed=seed)
    assert sum(rewards2) == pytest.approx(-total / 10.0, abs=1e-9)


def test_jct_reward_golden_with_backlog_and_allocator():
    # window of 1: the other jobs wait or are served by DRF; identity still holds
    for alloc in (None, DRF()):
        env = make(reward="jct", J=1, allocator_for_unused=alloc)
        _, rewards, _, term, _ = run_episode(env, first_valid, seed=3)
        assert term and env.sim is not None
        total = sum(r.jct_slots for r in env.sim.result().jobs)
        assert sum(rewards) == pytest.approx(-total, abs=1e-9)


def test_determinism_same_seed_same_actions():
    rng_a, rng_b = np.random.default_rng(11), np.random.default_rng(11)

    def pol(rng):
        return lambda env: int(rng.choice(np.flatnonzero(env.action_masks())))

    ta, ra, _, _, _ = run_episode(make(), pol(rng_a), seed=9)
    tb, rb, _, _, _ = run_episode(make(), pol(rng_b), seed=9)
    assert ra == rb
    for (oa, _), (ob, _) in zip(ta, tb, strict=True):
        np.testing.assert_array_equal(oa, ob)
    # a different seed gives a different workload
    env = make()
    env.reset(seed=9)
    jobs9 = env.jobs
    env.reset(seed=10)
    assert env.jobs != jobs9
    assert env.jobs == TINY.workload(10)


def test_unseeded_resets_are_reproducible():
    a, b = make(seed=42), make(seed=42)
    a.reset()
    b.reset()
    assert a.jobs == b.jobs == TINY.workload(42)
    a.reset()
    b.reset()
    assert a.jobs == b.jobs and a.workload_seed != 42


def test_pickle_mid_episode_continues_identically():
    env = make()
    env.reset(seed=6)
    for _ in range(25):
        env.step(first_valid(env))
    clone = pickle.loads(pickle.dumps(env))
    rng = np.random.default_rng(0)
    while True:
        a = int(rng.choice(np.flatnonzero(env.action_masks())))
        o1, r1, te1, tr1, i1 = env.step(a)
        o2, r2, te2, tr2, i2 = clone.step(a)
        np.testing.assert_array_equal(o1, o2)
        assert (r1, te1, tr1, i1) == (r2, te2, tr2, i2)
        # the clone's mask is its own (rebuilt over its own state, not the original's)
        np.testing.assert_array_equal(env.action_masks(), clone.action_masks())
        if te1 or tr1:
            break


def test_placement_kwarg_selects_the_rule():
    """Two workers for window row 0 on an empty 4-node cluster: least-loaded rules spread
    them (nodes 0 and 1), first fit and packing stack them on node 0."""
    used = {}
    for placement in ("least_loaded", "reference", "first_fit", "packing"):
        env = make(placement=placement)
        env.reset(seed=0)
        for _ in range(2):
            assert not env.step(0)[4]["invalid_action"]
        assert env.sim is not None
        used[placement] = np.flatnonzero(env.sim.cluster.used_cpu).tolist()
    assert used == {
        "least_loaded": [0, 1],
        "reference": [0, 1],
        "first_fit": [0],
        "packing": [0],
    }
    assert make(strict_reference_placement=True).placement == "reference"
    with pytest.raises(ConfigError, match="unknown placement"):
        make(placement="random")


def test_truncation_and_step_after_end():
    env = make(max_slots=2)
    _, _, _, term, trunc = run_episode(env, lambda e: e.void_action, seed=0)
    assert trunc and not term
    assert env.sim is not None and env.sim.t == 2
    with pytest.raises(ResetNeeded):
        env.step(env.void_action)
    with pytest.raises(ResetNeeded):
        make().step(0)


def test_observation_contents():
    env = make()
    obs, _ = env.reset(seed=0)
    rows = obs.reshape(env.J, env.L + FEATURES_PER_JOB)
    job = env._window[0]
    assert rows[0, job.spec.type.index] == 1.0 and rows[0, : env.L].sum() == 1.0
    assert rows[0, env.L] == 0.0  # just arrived
    assert rows[0, env.L + 1] == 1.0  # nothing trained
    assert not rows[0, env.L + 2 :].any()
    obs, *_ = env.step(2)  # bundle to row 0
    rows = obs.reshape(env.J, -1)
    assert rows[0, env.L + 3] == pytest.approx(1 / job.spec.max_workers)
    assert rows[0, env.L + 4] == pytest.approx(1 / job.spec.max_ps)
    assert rows[0, env.L + 2] > 0
    env.step(env.void_action)
    assert env.sim is not None and env.sim.t >= 1
    rows = env._obs().reshape(env.J, -1)
    if env._window and env._window[0].job_id == job.job_id:
        assert rows[0, env.L] == pytest.approx((env.sim.t - job.arrival) / STAY_SCALE)
        assert rows[0, env.L + 1] < 1.0


def test_render_modes():
    env = make(render_mode="ansi")
    env.reset(seed=0)
    env.step(2)
    text = env.render()
    assert isinstance(text, str) and "slot 0" in text and "valid" in text
    env = make(render_mode="rgb_array")
    env.reset(seed=0)
    env.step(2)
    img = env.render()
    assert isinstance(img, np.ndarray) and img.dtype == np.uint8 and img.ndim == 3
    assert img.shape[0] == TINY.num_nodes * 4 and img.shape[2] == 3
    assert make().render() is None


def test_trace_workload() -> None:
    from pathlib import Path

    import gymnasium

    import envs.gym  # noqa: F401

    trace = Path(__file__).parents[2] / "envs/sim/data/traces/philly_vc_6c71a0_public.csv"
    env = gymnasium.make("dlsched/Cluster-v0", setting="small", trace=str(trace))
    obs, info = env.reset(seed=0)
    assert info["num_jobs"] == 200
    assert env.observation_space.contains(obs)
    steps = 0
    while steps < 200:
        mask = env.unwrapped.action_masks()  # type: ignore[attr-defined]
        obs, _, term, trunc, info = env.step(int(mask.nonzero()[0][0]))
        steps += 1
        if term or trunc:
            break
    assert info["invalid_actions"] == 0


def from_scratch(env: ClusterEnv) -> tuple[np.ndarray, np.ndarray]:
    """The observation and the mask as the module docstring defines them, recomputed from the
    window's views, the allocation built so far and the cluster (``find_node`` per demand):
    what the env's incremental bookkeeping must equal after every step."""
    width = env.L + FEATURES_PER_JOB
    obs = np.zeros((env.J, width), dtype=np.float32)
    mask = np.zeros(env.void_action + 1, dtype=bool)
    mask[-1] = True
    if not env._slot_open:
        return obs.ravel(), mask
    sim = env.sim
    assert sim is not None
    c = sim.cluster

    def fits(cpu: int, gpu: int) -> bool:
        return c.find_node(cpu, gpu) is not None

    for j, job in enumerate(env._window):
        w, p = env._alloc[job.job_id]
        spec, ty = job.spec, job.spec.type
        obs[j, ty.index] = 1.0
        obs[j, env.L] = min((sim.t - job.arrival) / STAY_SCALE, 1.0)
        obs[j, env.L + 1] = min(job.remaining_fraction, 1.0)
        obs[j, env.L + 2] = min(dominant_share(job, w, p, c), 1.0)
        obs[j, env.L + 3] = w / spec.max_workers
        obs[j, env.L + 4] = p / spec.max_ps if spec.max_ps else 0.0
        w_ok, p_ok = w < spec.max_workers, p < spec.max_ps
        mask[3 * j] = w_ok and fits(ty.worker_cpu, ty.worker_gpu)
        mask[3 * j + 1] = p_ok and fits(ty.ps_cpu, ty.ps_gpu)
        mask[3 * j + 2] = (
            w_ok and p_ok and fits(ty.worker_cpu + ty.ps_cpu, ty.worker_gpu + ty.ps_gpu)
        )
    return obs.ravel(), mask


@pytest.mark.parametrize("placement", ["least_loaded", "reference", "first_fit", "packing"])
def test_incremental_observation_and_mask_equal_a_recomputation(placement):
    """Random valid actions (and some masked ones) over whole episodes, on a small cluster
    where GPUs run out within slots (so demands stop fitting anywhere): after every step the
    returned observation and ``action_masks()`` equal the from-scratch definition, bit for
    bit."""
    rng = np.random.default_rng(3)
    for seed in range(3):
        env = make(placement=placement)
        obs, _ = env.reset(seed=seed)
        steps = 0
        while True:
            expected_obs, expected_mask = from_scratch(env)
            np.testing.assert_array_equal(obs, expected_obs)
            np.testing.assert_array_equal(env.action_masks(), expected_mask)
            if rng.random() < 0.1:
                a = int(rng.integers(env.void_action + 1))  # possibly masked: a no-op
            else:
                a = int(rng.choice(np.flatnonzero(expected_mask)))
            obs, _, term, trunc, _ = env.step(a)
            steps += 1
            if term or trunc:
                break
        assert term and steps > 20


def test_returned_arrays_are_fresh_copies():
    """The observation and the mask returned are the caller's: later steps do not change
    them, and writing to them does not change the env (the env keeps its own buffers)."""
    env = make()
    obs0, _ = env.reset(seed=0)
    kept = obs0.copy()
    mask0 = env.action_masks()
    kept_mask = mask0.copy()
    obs1, *_ = env.step(first_valid(env))
    np.testing.assert_array_equal(obs0, kept)
    np.testing.assert_array_equal(mask0, kept_mask)
    assert not np.array_equal(obs1, obs0)
    obs1[:] = 0.5
    mask1 = env.action_masks()
    mask1[:] = False
    obs2, _, _, _, info = env.step(env.void_action)
    assert info["slot_ended"] and env.observation_space.contains(obs2)
    assert env.action_masks()[-1]


LATER_KEYS = frozenset({"unfinished_jobs", "stuck"})
CENSORED_KEYS = frozenset({"avg_jct_slots", "avg_jct_s", "makespan_slots"})


def episode_digest(env: ClusterEnv, seed: int, actions: str) -> str:
    """SHA-256 (first 16 hex digits) of everything an episode shows: every observation's
    bytes, mask, reward, flags and info (keys, values and their types), from ``reset(seed)``
    to the end, with seeded random valid actions (``"valid"``) or a mix of valid, masked,
    out-of-range and malformed ones (``"mixed"``)."""
    import hashlib

    h = hashlib.sha256()
    rng = np.random.default_rng(seed)

    def record(obs, reward, term, trunc, info) -> None:
        h.update(obs.tobytes())
        h.update(env.action_masks().tobytes())
        h.update(repr((reward, term, trunc)).encode())
        # keys added after the digests were recorded (episode-end ``unfinished_jobs``,
        # ``stuck``, and a truncated episode's censored JCT figures) are left out, so that the
        # recorded digests keep their meaning
        later = LATER_KEYS | (CENSORED_KEYS if trunc and not term else frozenset())
        shown = [(k, type(v).__name__, v) for k, v in info.items() if k not in later]
        h.update(repr(shown).encode())

    obs, info = env.reset(seed=seed)
    record(obs, 0.0, False, False, info)
    while True:
        valid = np.flatnonzero(env.action_masks())
        u = rng.random()
        if actions == "valid" or u < 0.6:
            a = valid[rng.integers(valid.size)]
        elif u < 0.8:
            a = int(rng.integers(env.void_action + 1))
        else:
            odd = [-1, env.void_action + 1, None, 1.5, "x", np.array([0, 1]), np.int8(0), True]
            a = odd[int(rng.integers(len(odd)))]
        obs, reward, term, trunc, info = env.step(a)
        record(obs, reward, term, trunc, info)
        if term or trunc:
            return h.hexdigest()[:16]


#: Recorded with the code before the speed work of issue 4 items 7-8 (the incremental
#: observation, mask and placement index were rewritten then): episodes must not change.
GOLDEN_DIGESTS = {
    "default-mixed": "7d552d7df444fb52/ad0c1da81ef05301/1929a44e3b8d6a00",
    "default-valid": "e395f0528f50bcf9/16ce2e71730e533e/2f5814a988d76be2",
    "first_fit-valid": "7bb66be9e1ad1580/738e911e985ae139/2f5814a988d76be2",
    "jct-valid": "6d226d0b5ae3a4a4/9291830c61aad7c8/e2082bac43af89c6",
    "packing-valid": "7bb66be9e1ad1580/738e911e985ae139/2f5814a988d76be2",
    "reference-mixed": "1419bcec72dea902/26a46367fcc16aaa/1929a44e3b8d6a00",
    "truncated-valid": "e395f0528f50bcf9/16ce2e71730e533e/70fb9ee3d3a2f3d3",
    "window2_drf-mixed": "9bee276cc8d0cbbf/94dcf064917753e1/c6c0d87dcd396005",
}


def golden_env(name: str) -> ClusterEnv:
    by_name: dict[str, dict[str, Any]] = {
        "default": {},
        "jct": {"reward": "jct", "jct_scale": 3.0},
        "reference": {"placement": "reference"},
        "first_fit": {"placement": "first_fit"},
        "packing": {"placement": "packing"},
        "window2_drf": {"J": 2, "allocator_for_unused": DRF()},
        "truncated": {"max_slots": 3},
    }
    return make(**by_name[name])


@pytest.mark.parametrize("key", sorted(GOLDEN_DIGESTS))
def test_episodes_equal_the_recorded_ones(key):
    name, actions = key.rsplit("-", 1)
    digests = [episode_digest(golden_env(name), seed, actions) for seed in range(3)]
    assert "/".join(digests) == GOLDEN_DIGESTS[key]
