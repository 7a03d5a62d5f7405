"""``agents/plan_sequences.py`` (what ``experiments/plan_sequences.py`` runs): a pass of the
clairvoyant local search over plan sequences values "the previous sequence from here" at slot
0 as exactly the previous run's total JCT, never ends above it, improves a poor start, is
deterministic, and refuses what it cannot run."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

import pytest

from agents.episode_results import evaluate_allocator, run_episode
from agents.plan_policy import PlanPolicy
from agents.plan_sequences import SequenceImprover, improve
from envs.gym.factory import coerce_env_config, make_env
from envs.sim.elastic.allocators import allocator_from_label
from envs.sim.errors import ConfigError
from tests.cli import ROOT

POLICY = PlanPolicy.load(ROOT / "policies" / "general" / "policy.npz")
TINY = replace(coerce_env_config(POLICY.env), setting="tiny")


def _run(start: list[int], seed: int, blocks: tuple[int, ...]) -> tuple[float, SequenceImprover]:
    env = make_env(TINY)
    actor = SequenceImprover(env, POLICY.plans, start, blocks)
    return run_episode(env, actor, seed).avg_jct, actor


@pytest.mark.parametrize("seed", [0, 3])
def test_a_pass_starts_from_the_previous_run_and_never_ends_above_it(seed: int) -> None:
    env = make_env(TINY)
    policy = POLICY.actor(env)
    own = run_episode(env, policy, seed).avg_jct
    total = sum(env.episode_jcts()[0])
    jct, actor = _run(list(policy.chosen), seed, (1, 4, 0))
    # "the previous sequence from slot 0" is the previous run, to the bit
    assert actor.base_totals[0] == total
    assert jct <= own and actor.changed > 0 and jct < own
    # and every later slot's "previous sequence from here" is no worse than the slot before
    assert all(b <= a for a, b in pairwise(actor.base_totals))
    assert _run(list(policy.chosen), seed, (1, 4, 0))[0] == jct  # deterministic


def test_passes_never_rise_and_improve_a_poor_start() -> None:
    drf = [POLICY.labels.index("drf")]  # DRF held: a poor schedule on tiny
    passes = improve(TINY, POLICY.plans, drf, 1, passes=3, blocks=(1,))
    jcts = [jct for jct, _ in passes]
    assert all(b <= a for a, b in pairwise(jcts))
    (drf_run,) = evaluate_allocator(lambda: allocator_from_label("drf"), TINY, [1])
    assert jcts[0] < drf_run.avg_jct  # the first pass already beats DRF held
    assert passes[-1][1] == 0 or len(passes) == 3  # stopped when nothing changed, or at 3


def test_what_cannot_run_is_one_clear_error() -> None:
    env = make_env(TINY)
    with pytest.raises(ConfigError, match="previous pass's plan sequence"):
        SequenceImprover(env, POLICY.plans, [], (1,))
    with pytest.raises(ConfigError, match="blocks must be slot counts"):
        SequenceImprover(env, POLICY.plans, [0], (1, -2))
    with pytest.raises(ConfigError, match=r"plan indices \[10\]"):
        SequenceImprover(env, POLICY.plans, [10], (1,))
    with pytest.raises(ConfigError, match="passes must be >= 1"):
        improve(TINY, POLICY.plans, [0], 1, passes=0)
