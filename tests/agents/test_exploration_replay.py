"""Job-aware exploration and the replay buffer on hand-made inputs (issue 6)."""

from __future__ import annotations

import numpy as np
import pytest

from agents.exploration import ExplorationConfig, JobAwareExploration
from agents.replay import ReplayBuffer, ReplayConfig
from envs.gym.cluster_env import FEATURES_PER_JOB
from envs.sim.errors import ConfigError

J, L, MAXW, MAXP = 4, 3, 8, 8


def obs_of(rows: list[tuple[int, int] | None]) -> np.ndarray:
    """Window rows (workers, ps) (None = empty row) as an observation."""
    width = L + FEATURES_PER_JOB
    obs = np.zeros((J, width), dtype=np.float32)
    for j, row in enumerate(rows):
        if row is None:
            continue
        w, p = row
        obs[j, j % L] = 1.0
        obs[j, L + 3] = w / MAXW
        obs[j, L + 4] = p / MAXP
    return obs.reshape(-1)


def rule(**kw) -> JobAwareExploration:
    return JobAwareExploration(ExplorationConfig(**kw), J, L, MAXW, MAXP)


ALL = np.ones(3 * J + 1, dtype=bool)


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        ([(0, 0), (2, 2), None, None], None),  # no poor state (0/0 is not poor)
        ([(1, 1), (3, 0), None, None], 3 * 1 + 1),  # workers, no PS -> +PS for job 1
        ([(0, 2), (3, 0), None, None], 3 * 0 + 0),  # PS, no workers -> +worker, first job wins
        ([(1, 5), None, None, None], 0),  # PS > 4 x workers -> +worker
        ([(5, 1), None, None, None], 1),  # workers > 4 x PS -> +PS
        ([(4, 1), (1, 4), None, None], None),  # ratio exactly 4 is still fine
    ],
)
def test_poor_states_and_their_corrective_action(rows, expected) -> None:
    assert rule().corrective(obs_of(rows), ALL) == expected


def test_a_masked_correction_passes_to_the_next_poor_job() -> None:
    mask = ALL.copy()
    mask[1] = False  # job 0 cannot get a PS
    assert rule().corrective(obs_of([(3, 0), (0, 2), None, None]), mask) == 3


def test_resource_balance_rule_is_an_option() -> None:
    rows = [(6, 6), (1, 1), None, None]
    assert rule().corrective(obs_of(rows), ALL) is None
    assert rule(resource_balance=True).corrective(obs_of(rows), ALL) == 3 * 1 + 2


def test_override_probability_and_schedule() -> None:
    rng = np.random.default_rng(0)
    poor = obs_of([(3, 0), None, None, None])
    fine = obs_of([(2, 2), None, None, None])
    always = rule(eps_start=1.0, eps_end=1.0)
    assert always.apply(12, poor, ALL, 0, rng) == (1, True, True)
    assert always.apply(12, fine, ALL, 0, rng) == (12, False, False)
    never = rule(eps_start=0.0, eps_end=0.0)
    assert never.apply(12, poor, ALL, 0, rng) == (12, True, False)
    half = rule(eps_start=0.5, eps_end=0.5)
    fired = sum(half.apply(12, poor, ALL, 0, rng)[2] for _ in range(4000))
    assert 1800 < fired < 2200
    decay = rule(eps_start=0.5, eps_end=0.1, eps_decay_steps=100)
    assert decay.epsilon(0) == 0.5 and decay.epsilon(50) == pytest.approx(0.3)
    assert decay.epsilon(10**6) == pytest.approx(0.1)
    assert rule(enabled=False).apply(12, poor, ALL, 0, rng) == (12, False, False)
    with pytest.raises(ConfigError):
        rule(eps_start=1.5)


def buffer(**kw) -> ReplayBuffer:
    return ReplayBuffer(ReplayConfig(**kw), obs_dim=2, n_actions=3)


def add(buf: ReplayBuffer, values: list[float], logp: float = -1.0) -> None:
    n = len(values)
    buf.add(
        np.asarray([[v, v] for v in values], np.float32),
        np.ones((n, 3), bool),
        np.zeros(n, np.int64),
        np.asarray(values, np.float32),
        np.full(n, logp, np.float32),
    )


def test_replay_is_a_fifo_ring() -> None:
    buf = buffer(capacity=4)
    add(buf, [1, 2, 3])
    assert len(buf) == 3
    add(buf, [4, 5, 6])
    assert len(buf) == 4
    assert sorted(buf.returns.tolist()) == [3, 4, 5, 6]  # 1 and 2 evicted first
    idx, w = buf.sample(1000, np.random.default_rng(0))
    assert idx.min() >= 0 and idx.max() < 4 and np.all(w == 1)


def test_prioritised_sampling_and_weights() -> None:
    buf = buffer(capacity=4, prioritized=True, alpha=1.0, beta_start=0.5, beta_step=0.0)
    add(buf, [0, 0, 0, 0])
    buf.update_priorities(np.array([0, 1, 2, 3]), np.array([0.99, 1.99, 0.99, 0.99]))
    # priorities min(|A| + 0.01, 4) = 1, 2, 1, 1 -> P = 0.2, 0.4, 0.2, 0.2
    idx, w = buf.sample(20000, np.random.default_rng(1))
    freq = np.bincount(idx, minlength=4) / len(idx)
    assert np.allclose(freq, [0.2, 0.4, 0.2, 0.2], atol=0.015)
    # w = (N P)^-beta / max: (0.8)^-0.5 for P=0.2 (the max), (1.6)^-0.5 / (0.8)^-0.5 for P=0.4
    assert np.allclose(w[idx == 0], 1.0)
    assert np.allclose(w[idx == 1], (1.6**-0.5) / (0.8**-0.5))
    buf.update_priorities(np.array([0]), np.array([100.0]))
    assert buf.priority[0] == 4.0  # clipped


def test_truncated_importance_ratio() -> None:
    buf = buffer(capacity=4, correction="truncated_is", clip=1.0)
    add(buf, [0, 0], logp=np.log(0.5))
    w = buf.importance(np.log([0.25, 0.9]), np.array([0, 1]))
    assert np.allclose(w, [0.5, 1.0])  # 0.25/0.5, min(1, 0.9/0.5)
    raw = buffer(capacity=4, correction="none")
    add(raw, [0, 0], logp=np.log(0.5))
    assert np.allclose(raw.importance(np.log([0.25, 0.9]), np.array([0, 1])), 1.0)
    with pytest.raises(ConfigError, match="correction"):
        buffer(correction="retrace")


def test_replay_save_load(tmp_path) -> None:
    buf = buffer(capacity=4, prioritized=True)
    add(buf, [1, 2, 3, 4, 5])
    buf.save(tmp_path / "r.npz")
    back = buffer(capacity=4, prioritized=True)
    back.load(tmp_path / "r.npz")
    assert np.array_equal(back.returns, buf.returns) and (back.size, back.pos) == (4, 1)
