"""EpisodePG's action draw (:func:`agents.episode_pg._draw`) is ``Generator.choice``'s draw,
bit for bit: the same action, the same log-probability and the same generator state after it,
so rollouts (and ``make demo``'s curve) do not change; non-finite probabilities are an error."""

from __future__ import annotations

import numpy as np
import pytest

from agents.episode_pg import _draw
from envs.sim.errors import ConfigError


def _choice_draw(p, mask, epsilon, rng):
    """The draw as it was written before: numpy's own ``choice``."""
    if epsilon > 0:
        p = (1 - epsilon) * p + epsilon * mask / mask.sum()
    p = p / p.sum()
    a = int(rng.choice(len(p), p=p))
    return a, float(np.log(p[a]))


@pytest.mark.parametrize("epsilon", [0.0, 0.05, 0.5])
def test_draw_equals_numpy_choice(epsilon: float) -> None:
    maker = np.random.default_rng(7)
    mine, theirs = np.random.default_rng(1), np.random.default_rng(1)
    seen = set()
    for i in range(3000):
        k = int(maker.integers(1, 12))
        mask = maker.random(k) < 0.7
        mask[int(maker.integers(k))] = True
        logits = np.where(mask, maker.normal(0, 3 if i % 2 else 30, k), -1e9)
        p = np.exp(logits - logits.max())
        p /= p.sum()
        a, lp = _draw(p, mask, epsilon, mine)
        b, lq = _choice_draw(p, mask, epsilon, theirs)
        assert (a, lp) == (b, lq), i
        assert mask[a]  # a masked action has probability 0 and is never drawn
        seen.add((k, a))
    assert mine.bit_generator.state == theirs.bit_generator.state
    assert len(seen) > 50  # many different actions were drawn


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_probabilities_are_an_error(bad: float) -> None:
    p = np.array([0.5, bad, 0.5])
    with pytest.raises(ConfigError, match="probabilities sum to"):
        _draw(p, np.ones(3, bool), 0.0, np.random.default_rng(0))
