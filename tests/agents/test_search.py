"""The rollout search (:mod:`agents.search`).

``dlsched/Cluster-v0`` on ``tiny``: deterministic, never worse than the base on its workload,
and its figure is what replaying its actions gives.  ``dlsched/Contention-v0`` on a small
cluster: the rollout actor's figures as ``experiments/contention_search.py`` computed them
before the search moved into the library, never worse than its rule, and replayed."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from agents.search import (
    Decisions,
    RolloutActor,
    best_alternative,
    contention_search,
    finish_with,
    replay,
    rollout_search,
)
from envs.gym.contention_env import ContentionEnv, srsf_teacher
from envs.gym.factory import EnvConfig
from envs.sim.errors import ConfigError

TINY = EnvConfig(setting="tiny")
SEED = 2000  # a training seed (validation 100-109, test 300-319)


def test_best_alternative_keeps_the_base_on_ties() -> None:
    assert best_alternative([5.0, 4.0, 4.0]) == 1  # the first of the lowest
    assert best_alternative([5.0, 5.0, 6.0]) == 0  # a tie with the base: the base
    assert best_alternative([5.0, 4.9999999]) == 1
    assert best_alternative([5.0, 4.9999999], tol=1e-6) == 0  # within tol: the base
    assert best_alternative([5.0, 4.0], tol=0.5) == 1


@pytest.mark.parametrize(
    ("mode", "p", "base"), [("slot", 0.0, "esrtf"), ("action", 0.1, "esrtf"), ("slot", 0.0, "load")]
)
def test_search_deterministic_no_worse_and_replays(mode: str, p: float, base: str) -> None:
    a = rollout_search(TINY, SEED, mode=mode, p=p, search_seed=1, base=base)
    b = rollout_search(TINY, SEED, mode=mode, p=p, search_seed=1, base=base)
    assert a.actions == b.actions and a.jct == b.jct and a.changed == b.changed
    assert a.points > 0 and a.rollouts > 0
    assert a.jct <= a.base_jct  # the base is always an alternative
    assert replay(TINY, SEED, a.actions) == pytest.approx(a.jct, rel=1e-12)


def test_one_step_no_worse() -> None:
    one = rollout_search(TINY, SEED, mode="slot", one_step=True)
    full = rollout_search(TINY, SEED, mode="slot")
    assert one.base_jct == full.base_jct
    assert one.jct <= one.base_jct and one.changed in (0, 1)


def test_recorded_decisions_are_the_episode() -> None:
    """Every decision of the improved episode is recorded, each with its slot's reward."""
    record = Decisions()
    r = rollout_search(TINY, SEED, mode="slot", record=record, episode=3)
    obs, masks, actions, episodes, returns = record.arrays()
    assert actions.tolist() == r.actions
    assert len(obs) == len(masks) == len(returns) == len(r.actions)
    assert set(episodes.tolist()) == {3}
    assert obs.dtype == np.float32 and masks.dtype == bool and actions.dtype == np.int64
    assert all(masks[i, a] for i, a in enumerate(actions))  # each action was valid


def test_search_refuses_unknown_mode_and_base() -> None:
    with pytest.raises(ConfigError, match="'slot' or 'action'"):
        rollout_search(TINY, SEED, mode="slots")
    with pytest.raises(ConfigError, match="esrtf, load"):
        rollout_search(TINY, SEED, base="drf")


def small_contention() -> ContentionEnv:
    """40 small-scale jobs on 4 x 4 GPUs, a window of 8: an episode of ~45 decisions."""
    return ContentionEnv(scale="small", num_jobs=40, comm="srsf1", J=8, num_servers=4)


def test_contention_search_figures_unchanged() -> None:
    """Recorded from ``experiments/contention_search.py``'s ``search`` on this env, seed 0,
    before it moved here: SRSF 10.7747 s, the rollout policy 9.8294 s, 12 decisions changed."""
    changes: list[tuple[int, int, float]] = []
    base, best, changed = contention_search(
        small_contention(), 0, srsf_teacher, lambda _e, k, a, g: changes.append((k, a, g))
    )
    assert base == pytest.approx(10.774680799999993, rel=1e-12)
    assert best == pytest.approx(9.829391999999995, rel=1e-12)
    assert changed == len(changes) == 12
    assert [k for k, _, _ in changes][:3] == [3, 4, 5]  # decision indices, in order
    assert all(g > 1e-6 for _, _, g in changes)  # each beat the rule by more than tol


def test_rollout_actor_replays_and_never_loses_to_its_rule() -> None:
    env = small_contention()
    env.reset(seed=1)
    actor = RolloutActor(srsf_teacher)
    actions: list[int] = []

    def act(e: Any) -> int:
        actions.append(actor(e))
        return actions[-1]

    searched = finish_with(env, act)
    assert actor.decisions == len(actions) and 0 < actor.changed < len(actions)
    again = small_contention()
    again.reset(seed=1)
    it = iter(actions)
    assert finish_with(again, lambda _e: next(it)) == searched  # the same episode
    again.reset(seed=1)
    assert searched < finish_with(again, srsf_teacher)
