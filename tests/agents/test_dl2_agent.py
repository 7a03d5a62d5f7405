"""DL²'s actor-critic on SB3: exploration, returns, smoke training, determinism, resume."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch as th

from agents.build import build_agent
from agents.checkpoint import load_checkpoint, save_checkpoint
from agents.config import AgentConfig
from agents.dl2 import DL2A2C
from agents.exploration import ExplorationConfig, JobAwareExploration
from agents.policy import NumpyPolicy, policy_kwargs
from agents.replay import ReplayConfig
from agents.vec import make_training_vec_env
from envs.gym.factory import EnvConfig, setting_of

TINY = EnvConfig(setting="tiny")


def make_model(seed: int = 0, **kw) -> DL2A2C:
    env = make_training_vec_env([TINY], [seed])
    kw.setdefault("exploration", ExplorationConfig())
    kw.setdefault("replay", ReplayConfig(capacity=1024, batch_size=64))
    return DL2A2C(
        env=env,
        policy_kwargs=policy_kwargs(None, 8),
        seed=seed,
        n_steps=64,
        learning_rate=1e-3,
        **kw,
    )


def params(model) -> np.ndarray:
    return th.cat([p.detach().flatten() for p in model.policy.parameters()]).numpy().copy()


def capture_batches(model: DL2A2C) -> list:
    seen: list = []
    original = model.train

    def spy() -> None:
        seen.extend(model._batch)
        original()

    model.train = spy  # type: ignore[method-assign]
    return seen


def test_exploration_fires_only_in_poor_states_and_the_replaced_action_is_stored() -> None:
    model = make_model(exploration=ExplorationConfig(eps_start=1.0, eps_end=1.0))
    seen = capture_batches(model)
    model.learn(1024)
    s = setting_of(TINY)
    rule = JobAwareExploration(ExplorationConfig(), 8, 8, s.max_workers, s.max_ps)
    poor = 0
    for obs, mask, action, _ret, _logp in seen:
        fix = rule.corrective(obs, mask)
        if fix is not None:
            poor += 1
            assert action == fix  # epsilon = 1: always the corrective action, and it is stored
    assert poor > 0 and len(seen) > poor


def test_slot_reward_is_credited_to_every_decision_of_the_slot() -> None:
    model = make_model()
    fast = NumpyPolicy(model.policy)
    obs = np.zeros(model.observation_space.shape, np.float32)
    mask = np.ones(model.action_space.n, bool)
    model._pending[0] = [(obs, mask, 1, -1.0), (obs, mask, 2, -1.0), (obs, mask, 24, -1.0)]
    model._batch = []
    model._close_slot(0, 0.7, {"slot_ended": True}, False, obs + 0.5, fast)
    assert [b[3] for b in model._batch] == [0.7, 0.7, 0.7]
    assert model._pending[0] == []
    model.returns_mode = "discounted"
    model._pending[0] = [(obs, mask, 1, -1.0)]
    model._close_slot(0, 0.7, {"slot_ended": True}, False, obs + 0.5, fast)
    expected = 0.7 + model.gamma * float(fast.value(obs + 0.5))
    assert model._batch[-1][3] == pytest.approx(expected)
    model._pending[0] = [(obs, mask, 1, -1.0)]
    model._close_slot(0, 0.7, {"TimeLimit.truncated": False}, True, obs, fast)
    assert model._batch[-1][3] == pytest.approx(0.7)  # terminal: no bootstrap


def test_a_reward_wrapper_reaches_the_slot_returns() -> None:
    """The learner credits the reward ``step`` returns (not ``info``), so a Gymnasium reward
    wrapper changes what it learns from: doubled rewards give exactly doubled returns."""
    import gymnasium as gym

    from agents.vec import LeanVecEnv
    from envs.gym.factory import make_env

    def returns(scale: float) -> np.ndarray:
        def make() -> gym.Env:
            env = make_env(TINY)
            return gym.wrappers.TransformReward(env, lambda r: scale * r) if scale != 1 else env

        env = LeanVecEnv([make])
        env.seed(0)
        model = DL2A2C(
            env=env,
            policy_kwargs=policy_kwargs(None, 8),
            seed=0,
            n_steps=64,
            exploration=ExplorationConfig(),
            replay=ReplayConfig(capacity=1024, batch_size=64),
            learning_rate=0.0,
        )
        seen = capture_batches(model)
        model.learn(256)
        return np.array([b[3] for b in seen])

    plain, doubled = returns(1.0), returns(2.0)
    assert len(plain) > 0 and np.any(plain != 0)
    np.testing.assert_array_equal(doubled, 2.0 * plain)


def test_returns_in_a_rollout_are_slot_rewards() -> None:
    model = make_model()
    seen = capture_batches(model)
    model.learn(512)
    rets = np.array([b[3] for b in seen])
    assert np.all(np.isfinite(rets)) and np.all(rets >= 0)  # DL² reward: epochs fractions
    # decisions of one slot share one return: far fewer distinct returns than decisions
    assert len(np.unique(rets)) < len(rets) / 2


@pytest.mark.parametrize("critic", [True, False])
def test_smoke_training_updates_the_policy(critic: bool) -> None:
    model = make_model(critic=critic)
    before = params(model)
    model.learn(640)
    after = params(model)
    assert np.all(np.isfinite(after)) and not np.array_equal(before, after)
    logged = model.logger.name_to_value
    assert "train/entropy" in logged or model._n_updates > 0
    assert len(model.replay) > 0


def test_same_seed_same_training() -> None:
    a, b = make_model(seed=3), make_model(seed=3)
    a.learn(512)
    b.learn(512)
    assert np.array_equal(params(a), params(b))
    c = make_model(seed=4)
    c.learn(512)
    assert not np.array_equal(params(a), params(c))


def test_checkpoint_then_resume_continues_identically(tmp_path) -> None:
    th.manual_seed(0)
    straight = make_model(
        seed=5, replay=ReplayConfig(capacity=512, batch_size=32, prioritized=True)
    )
    straight.learn(256)
    save_checkpoint(straight, tmp_path / "ck", {"note": "test"})
    straight.learn(256, reset_num_timesteps=False)
    resumed = load_checkpoint(tmp_path / "ck")
    assert resumed.num_timesteps == 256
    resumed.learn(256, reset_num_timesteps=False)
    assert resumed.num_timesteps == straight.num_timesteps == 512
    assert np.array_equal(params(resumed), params(straight))
    assert np.array_equal(resumed.replay.returns, straight.replay.returns)


@pytest.mark.parametrize(
    ("name", "cut", "what"),
    [
        ("model.zip", 0.5, "cannot read the model"),
        ("env.pkl", 0.5, "cannot read the saved training env"),
        ("replay.npz", 0.5, "cannot read the replay buffer"),
        ("rng.pt", 0.5, "cannot read torch's RNG state"),
        ("rng.pt", 0.0, "cannot read torch's RNG state"),
        ("meta.json", 0.5, "cannot read the checkpoint's metadata"),
    ],
)
def test_corrupt_checkpoint_files_name_the_file(tmp_path, name: str, cut: float, what: str) -> None:
    """A truncated (or empty) file of a checkpoint is a ConfigError naming it, as ``resume=``
    and as ``policy:`` (it used to be the unpickler's, zip reader's or torch's traceback)."""
    from agents.checkpoint import load_policy
    from envs.sim.errors import ConfigError

    model = make_model(seed=1, replay=ReplayConfig(capacity=256, batch_size=32))
    model.learn(128)
    d = save_checkpoint(model, tmp_path / "ck", {"agent": "a2c", "env": TINY.as_dict()})
    f = d / name
    data = f.read_bytes()
    f.write_bytes(data[: int(len(data) * cut)])
    with pytest.raises(ConfigError, match=re.escape(f"{f}: {what}")):
        load_checkpoint(d)
    if name in ("model.zip", "meta.json"):
        with pytest.raises(ConfigError, match=re.escape(f"{f}: {what}")):
            load_policy(d)


@pytest.mark.parametrize("algo", ["ppo", "maskable_ppo"])
def test_comparison_agents_train(algo: str) -> None:
    env = make_training_vec_env([TINY], [0])
    cfg = AgentConfig(name=algo, algo=algo, n_steps=128)
    cfg.ppo.batch_size = 64
    model = build_agent(cfg, env, J=8, seed=0)
    before = params(model)
    model.learn(256)
    assert not np.array_equal(before, params(model))


@pytest.mark.parametrize("algo", ["ppo", "maskable_ppo"])
def test_comparison_agents_resume_identically(algo: str, tmp_path) -> None:
    """SB3's rollout buffer shuffles minibatches with numpy's global RNG: the checkpoint saves
    that state too, so a resumed PPO / MaskablePPO continues exactly as the uninterrupted run
    (it used to drift by up to 0.04 in the weights)."""
    cfg = AgentConfig(name=algo, algo=algo, n_steps=64)
    cfg.ppo.batch_size = 32

    def model():  # type: ignore[no-untyped-def]
        th.manual_seed(0)
        return build_agent(cfg, make_training_vec_env([TINY], [0]), J=8, seed=0)

    straight = model()
    straight.learn(128)
    save_checkpoint(straight, tmp_path / "ck", {"agent": algo})
    straight.learn(128, reset_num_timesteps=False)
    np.random.seed(12345)  # whatever ran before the resume must not matter
    resumed = load_checkpoint(tmp_path / "ck")
    resumed.learn(128, reset_num_timesteps=False)
    assert resumed.num_timesteps == straight.num_timesteps == 256
    assert np.array_equal(params(resumed), params(straight))
