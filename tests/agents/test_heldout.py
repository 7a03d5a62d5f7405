"""Held-out evaluation: paired differences by hand, the same figures as the plain paths."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from agents.episode_results import evaluate_allocator, evaluate_policy
from agents.policy import DL2Policy, PolicyConfig, policy_kwargs
from envs.gym.factory import EnvConfig, make_env
from envs.gym.workloads import TEST_VCS
from envs.sim.elastic.allocators import make_allocator
from evaluation.heldout import heldout_workloads, paired, run_schedulers

TINY = EnvConfig(setting="tiny", reward="jct")


def test_paired_difference_by_hand() -> None:
    a = np.array([[9.0, 22.0, 30.0], [11.0, 18.0, 30.0]])  # two training seeds
    b = np.array([10.0, 20.0, 40.0])
    mean, half = paired(a, b)
    # per workload: 10/10, 20/20, 30/40 -> 0%, 0%, -25%; mean -8.33%
    assert mean == pytest.approx(-25.0 / 3)
    sd = np.std([0.0, 0.0, -25.0], ddof=1)
    assert half == pytest.approx(4.302652729911275 * sd / np.sqrt(3), rel=1e-9)  # t(0.975, 2)


def test_schedulers_on_generator_seeds_match_the_plain_paths() -> None:
    seeds = [100, 101]
    work = heldout_workloads(TINY, seeds)
    env = make_env(TINY)
    policy = DL2Policy(
        env.observation_space,
        env.action_space,
        lambda _: 1e-3,
        **policy_kwargs(PolicyConfig(), env.J),
    )
    table = run_schedulers(TINY, work, heuristics=["drf"], policies={"p": [policy]})
    drf = evaluate_allocator(functools.partial(make_allocator, "drf"), TINY, seeds)
    np.testing.assert_array_equal(table.avg_jct["drf"], [r.avg_jct for r in drf])
    np.testing.assert_array_equal(table.p95_jct["drf"], [r.p95_jct for r in drf])
    plain = evaluate_policy(policy, TINY, seeds, deterministic=True)
    np.testing.assert_array_equal(table.avg_jct["p"][0], [r.avg_jct for r in plain])
    np.testing.assert_array_equal(table.p95_jct["p"][0], [r.p95_jct for r in plain])


def test_trace_windows_come_from_held_out_vcs() -> None:
    work = heldout_workloads(EnvConfig(setting="medium"), (), windows=3, window_seed=1)
    assert len(work) == 3
    for w in work:
        assert w.label.split(":")[1].split("@")[0] in TEST_VCS
        assert w.scenario.jobs is not None
    again = heldout_workloads(EnvConfig(setting="medium"), (), windows=3, window_seed=1)
    assert [w.label for w in again] == [w.label for w in work]


def test_ci_uses_the_exact_t_quantile_for_any_sample_size() -> None:
    """41 workloads: t(0.975, 40) = 2.0211 (a 30-row table used to fall back to 1.960 past 31,
    a 3% narrower interval)."""
    from evaluation.stats import mean_ci95

    x = np.arange(41.0)
    mean, half = mean_ci95(list(x))
    assert mean == 20.0
    assert half == pytest.approx(2.0210754 * np.std(x, ddof=1) / np.sqrt(41), rel=1e-6)
