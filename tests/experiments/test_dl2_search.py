"""The rollout search over EfficientSRTF (experiments/dl2_search.py) on ``tiny``: deterministic,
never worse than the base on its workload, and its figure is what replaying its actions gives."""

from __future__ import annotations

import pytest

from envs.gym.factory import EnvConfig
from experiments.dl2_search import replay, rollout_search

TINY = EnvConfig(setting="tiny")
SEED = 2000  # a training seed (validation 100-109, test 300-319)


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
