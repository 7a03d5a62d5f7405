"""Newcomer path (c) (docs/index.md): one reward registry for the envs
(:mod:`envs.gym.rewards`).  A reward written as one function plus ``@register_reward``, with
no other file touched, is used by a ``dlsched/Cluster-v0`` episode and a
``dlsched/Contention-v0`` episode, and sums over each to what it claims."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from envs.gym import rewards
from envs.gym.cluster.env import ClusterEnv
from envs.gym.contention_env import ContentionConfig, ContentionEnv, srsf_teacher
from envs.gym.rewards import CLUSTER, CONTENTION, REWARDS_BY_KIND, register_reward
from envs.sim.elastic.workload import DL2Setting
from envs.sim.errors import ConfigError

# 4 nodes, 6 jobs: a Cluster-v0 episode of a few hundred decisions.
TINY = DL2Setting(
    num_nodes=4, num_jobs=6, max_arrivals_per_slot=2, J=4, max_epochs=40, max_workers=4, max_ps=4
)


@pytest.fixture
def toy() -> Iterator[Callable[[Any, Any], float]]:
    """The newcomer's reward, for both kinds: 10 per job finished in the step's interval,
    minus 1 per reward step (registered for the test only)."""

    @register_reward("toy_finished", kinds=(CLUSTER, CONTENTION))
    def toy_finished(env: Any, step: Any) -> float:
        assert step.start <= step.end
        return 10.0 * len(step.finished) - 1.0

    try:
        yield toy_finished
    finally:
        for kind in (CLUSTER, CONTENTION):
            REWARDS_BY_KIND[kind].pop("toy_finished", None)


def _first_valid(env: ClusterEnv) -> int:
    nonvoid = np.flatnonzero(env.action_masks()[:-1])
    return int(nonvoid[0]) if nonvoid.size else env.void_action


def test_a_registered_reward_drives_a_cluster_episode(toy: Callable[..., float]) -> None:
    """Every job finishes in exactly one closed slot and every closed slot is one reward step:
    the episode's sum is 10 x jobs - slots closed; the other steps get 0."""
    env = ClusterEnv(TINY, reward="toy_finished", max_slots=500)
    assert rewards.REWARDS["toy_finished"] is toy  # Cluster-v0's table is the registry's
    env.reset(seed=2)
    total, closed = 0.0, 0
    while True:
        _, r, term, trunc, info = env.step(_first_valid(env))
        total += r
        if info["slot_ended"]:
            closed += 1
            assert r == info["slot_reward"]
        else:
            assert r == 0.0
        if term or trunc:
            break
    assert term and env.sim is not None
    jobs = len(env.sim.result().jobs)
    assert jobs == TINY.num_jobs and closed > 1
    assert total == 10.0 * jobs - closed


def test_a_registered_reward_drives_a_contention_episode(toy: Callable[..., float]) -> None:
    """Every valid step is one reward step and every job finishes in exactly one step's
    interval: the sum is 10 x jobs - steps.  The default reward of the same episode still
    sums to minus the average JCT."""
    returns = {}
    for reward in ("toy_finished", "jct"):
        env = ContentionEnv(num_jobs=8, reward=reward)
        env.reset(seed=1)
        total, steps = 0.0, 0
        while True:
            _, r, term, trunc, info = env.step(srsf_teacher(env))
            assert not info["invalid_action"]
            total += r
            steps += 1
            if term or trunc:
                break
        assert term
        returns[reward] = (total, steps, info["avg_jct_s"])
    total, steps, avg_jct = returns["toy_finished"]
    assert total == 10.0 * 8 - steps
    jct_total, jct_steps, jct_avg = returns["jct"]
    assert jct_steps == steps and jct_avg == avg_jct  # the reward does not change the episode
    assert jct_total == pytest.approx(-avg_jct, rel=1e-12)
    assert ContentionConfig(scale="small", num_jobs=8, reward="toy_finished").make().reward == (
        "toy_finished"
    )


def test_unknown_and_duplicate_rewards_are_one_clear_error(toy: Callable[..., float]) -> None:
    with pytest.raises(
        ConfigError,
        match=r"reward must be 'jct' or 'toy_finished' for dlsched/Contention-v0, got 'dl2'",
    ):
        ContentionEnv(reward="dl2")  # a Cluster-v0 reward only
    with pytest.raises(ConfigError, match=r"must be 'jct' or 'toy_finished' for .*, got 'nope'"):
        ContentionConfig(reward="nope").make()
    with pytest.raises(
        ConfigError, match=r"reward must be 'dl2' or 'jct' or 'toy_finished' for dlsched/Cluster-v0"
    ):
        ClusterEnv(TINY, reward="nope")
    with pytest.raises(ConfigError, match=r"reward 'toy_finished' is registered twice for"):
        register_reward("toy_finished", kinds=(CONTENTION,))(toy)
    with pytest.raises(ConfigError, match=r"kinds \['plan'\]; known: \['cluster', 'contention'\]"):
        register_reward("other", kinds=("plan",))
    assert "jct" in rewards.JCT_RETURN and "toy_finished" not in rewards.JCT_RETURN
