"""The plan recipe's rollouts split over processes (:class:`agents.rollout_pool.RolloutPool`)
and side by side (:func:`agents.episode_pg.run_lockstep`), against one process running them
one after the other.

Over processes every rollout must be the same, bit for bit (observations, actions, both
log-probabilities, rewards, times), and so must the learner's weights after its updates;
side by side the draws and the actions are the same and the log-probabilities agree to
float32 rounding.  The one-row forward (``MaskedMLP.logits_one``) is the module's forward
bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch as th

from agents.episode_pg import (
    Episode,
    EpisodePG,
    EpisodePGConfig,
    MaskedMLP,
    replicas,
    run_episode,
    run_lockstep,
)
from agents.rollout_pool import RolloutPool
from envs.gym.plan_env import PlanEnv
from envs.sim.errors import ConfigError

CONFIG = {"setting": "tiny", "reward": "jct", "overrides": {"num_jobs": 16}}


def _key(e: Episode) -> tuple[object, ...]:
    return (
        [o.tobytes() for o in e.obs], e.actions, e.logp_mu, e.logp_pi, e.rewards, e.times,
        e.reward_times,
    )  # fmt: skip


def _learner(workers: int, lockstep: bool = False) -> EpisodePG:
    th.manual_seed(0)
    env = PlanEnv(config=CONFIG)
    net = MaskedMLP(env.obs_size, env.K, 32)
    cfg = EpisodePGConfig(groups=2, group_size=3, seed=4, workers=workers, lockstep=lockstep,
                          batch_size=64)  # fmt: skip
    return EpisodePG(env, net, cfg)


def test_workers_give_the_one_process_rollouts_and_weights_bit_for_bit() -> None:
    runs = {}
    for workers in (1, 2):
        pg = _learner(workers)
        try:
            groups = [pg.collect()]
            pg.update(groups[0])
            groups.append(pg.collect())
        finally:
            pg.close()
        runs[workers] = (
            [[_key(e) for e in g] for it in groups for g in it],
            [p.detach().clone() for p in pg.net.parameters()],
        )
    assert runs[1][0] == runs[2][0]
    assert all(bool((a == b).all()) for a, b in zip(runs[1][1], runs[2][1], strict=True))
    assert len(runs[1][0]) == 4 and all(len(g) == 3 for g in runs[1][0])


def test_lockstep_draws_the_same_actions() -> None:
    one = _learner(1).collect()
    side = _learner(1, lockstep=True).collect()
    for g1, g2 in zip(one, side, strict=True):
        for a, b in zip(g1, g2, strict=True):
            assert a.actions == b.actions and a.rewards == b.rewards and a.times == b.times
            assert np.allclose(a.logp_pi, b.logp_pi, rtol=0, atol=1e-5)


def test_logits_one_is_the_forward_bit_for_bit() -> None:
    th.manual_seed(1)
    net = MaskedMLP(20, 5, 16)
    rng = np.random.default_rng(0)
    for _ in range(20):
        obs = rng.random(20).astype(np.float32)
        mask = rng.random(5) < 0.7
        mask[0] = True
        with th.no_grad():
            want = net(th.as_tensor(obs)[None], th.as_tensor(mask)[None])[0]
        assert bool((net.logits_one(obs, mask) == want).all())


def test_replicas_run_the_same_episode() -> None:
    env = PlanEnv(config=CONFIG)
    copies = replicas(env, 3)
    assert len({id(c) for c in copies}) == 3 and copies[0] is env
    th.manual_seed(0)
    net = MaskedMLP(env.obs_size, env.K, 16)
    runs = [_key(run_episode(c, 7, net, np.random.default_rng(3))) for c in copies]
    assert runs[0] == runs[1] == runs[2]
    eps = run_lockstep(copies, [7, 7, 8], net, [np.random.default_rng(3) for _ in range(3)])
    assert eps[0].actions == eps[1].actions


def test_bad_worker_counts_are_refused() -> None:
    with pytest.raises(ConfigError, match="workers must be >= 1"):
        EpisodePGConfig(workers=0).check()
    with pytest.raises(ConfigError, match="workers must be >= 1"):
        RolloutPool(0, None, lambda: None, run_episode)


def test_close_leaves_no_worker_running() -> None:
    import multiprocessing as mp

    before = {p.pid for p in mp.active_children()}
    pg = _learner(2)
    pg.collect()
    started = {p.pid for p in mp.active_children()} - before
    assert len(started) == 2
    pg.close()
    pg.close()  # idempotent
    assert not ({p.pid for p in mp.active_children()} & started)


def test_side_by_side_in_workers_is_each_shares_lockstep_bit_for_bit() -> None:
    """``lockstep`` with 2 workers: each worker runs its contiguous half side by side; every
    episode equals the one :func:`run_lockstep` gives for that half in this process (the same
    batch, the same generators), and the draws equal the one-process rollouts'."""
    pg = _learner(2, lockstep=True)
    try:
        side = pg.collect()
    finally:
        pg.close()
    ref = _learner(1)
    rng = np.random.default_rng([4, 1])  # the learner's generator: the same draws, in order
    tasks = []
    for _ in range(2):
        seed = int(rng.integers(10_000, 2**31))
        tasks += [(seed, np.random.default_rng(rng.integers(2**63))) for _ in range(3)]
    halves = [tasks[:3], tasks[3:]]
    want = []
    threads = th.get_num_threads()
    th.set_num_threads(1)  # as the workers run
    try:
        for half in halves:
            envs = replicas(PlanEnv(config=CONFIG), len(half))
            want += run_lockstep(envs, [s for s, _ in half], ref.net, [r for _, r in half])
    finally:
        th.set_num_threads(threads)
    got = [e for g in side for e in g]
    assert [_key(e) for e in got] == [_key(e) for e in want]
    one = [e for g in _learner(1).collect() for e in g]
    assert [e.actions for e in got] == [e.actions for e in one]


def test_side_by_side_envs_are_one_per_rollout_and_kept() -> None:
    from agents.rollout_pool import side_by_side_envs

    own, drawn = PlanEnv(config=CONFIG), PlanEnv(config=CONFIG)
    copies: list[object] = []
    envs = side_by_side_envs(own, copies, [None, drawn, None, drawn])
    assert len({id(e) for e in envs}) == 4 and len(copies) == 2
    assert envs[0] is copies[0] and envs[2] is copies[1]
    assert drawn in (envs[1], envs[3]) or all(e is not drawn for e in envs)
    again = side_by_side_envs(own, copies, [None])
    assert again[0] is copies[0] and len(copies) == 2
