"""The episode group policy-gradient learner (:mod:`agents.episode_pg`): it learns a known
optimum on a toy env and never samples a masked action, it is deterministic from its seed, a
clone of the SRSF rule acts as the rule does, and its settings are checked."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces

from agents.episode_pg import EpisodePG, EpisodePGConfig, MaskedMLP, clone, run_episode
from envs.gym.contention_env import ContentionEnv, srsf_exclusive_teacher, srsf_teacher
from envs.sim.errors import ConfigError


class Toy(gym.Env[np.ndarray, np.int64]):
    """Four decisions at simulated times 0..3 ms; action 0 costs 1, action 1 costs 0, action
    2 is always masked (taking it raises).  The optimum's return is 0."""

    def __init__(self) -> None:
        self.observation_space = spaces.Box(0.0, 1.0, shape=(3,), dtype=np.float32)
        self.action_space = spaces.Discrete(3)
        self.sim = SimpleNamespace(now=0.0)

    def _obs(self) -> np.ndarray:
        return np.array([1.0, self.sim.now / 4, 0.5], dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self.sim.now = 0.0
        return self._obs(), {}

    def action_masks(self) -> np.ndarray:
        return np.array([True, True, False])

    def step(self, action: Any) -> Any:
        assert int(action) != 2, "a masked action was sampled"
        self.sim.now += 1.0
        done = self.sim.now >= 4
        return self._obs(), -float(int(action) == 0), done, False, {}


def test_it_learns_the_toy_optimum_and_never_samples_a_masked_action() -> None:
    th.manual_seed(0)
    env = Toy()
    net = MaskedMLP(3, 3, hidden=16)
    cfg = EpisodePGConfig(groups=2, group_size=4, lr=1e-2, epochs=4, batch_size=16, seed=0)
    pg = EpisodePG(env, net, cfg)
    returns: list[float] = []
    pg.learn(25, lambda i, st: returns.append(st["return"]))
    assert returns[0] < -1.0  # the first rollouts come from the random start (about -2)
    assert returns[-1] > -0.2
    assert run_episode(env, 0, net).ret == 0.0  # the argmax is the optimum


def test_a_run_is_reproducible_from_its_seed() -> None:
    def train() -> list[np.ndarray]:
        th.manual_seed(3)
        env = ContentionEnv(scale="small", num_jobs=10, num_servers=4)
        net = MaskedMLP(env.obs_size, env.wait_action + 1, hidden=16)
        cfg = EpisodePGConfig(groups=2, group_size=2, epochs=1, seed=7, epsilon=0.1)
        EpisodePG(env, net, cfg).learn(2)
        return [p.detach().numpy().copy() for p in net.parameters()]

    for a, b in zip(train(), train(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_clone_of_the_srsf_rule_schedules_as_the_rule_does() -> None:
    th.manual_seed(0)
    env = ContentionEnv(scale="small", num_jobs=20, num_servers=4)
    net = MaskedMLP(env.obs_size, env.wait_action + 1, hidden=64)
    loss = clone(net, env, srsf_teacher, [1, 2, 3, 4], epochs=60, seed=0)
    assert loss < 0.05
    for s in (1, 2):
        rule = run_episode(env, s, act=lambda e, o: srsf_teacher(e)).info["avg_jct_s"]
        assert run_episode(env, s, net).info["avg_jct_s"] == pytest.approx(rule, rel=1e-12)


def test_a_smoothed_clone_keeps_the_teachers_argmax_and_mass_on_the_alternatives() -> None:
    th.manual_seed(0)
    env = ContentionEnv(scale="small", num_jobs=20, num_servers=4)
    net = MaskedMLP(env.obs_size, env.wait_action + 1, hidden=64)
    clone(net, env, srsf_teacher, [1, 2, 3, 4], epochs=60, seed=0, smoothing=0.3)
    obs, _ = env.reset(seed=1)
    agree, steps = 0, 0
    while True:
        mask = env.action_masks()
        with th.no_grad():
            p = th.softmax(net(th.as_tensor(obs)[None], th.as_tensor(mask)[None])[0], -1).numpy()
        assert p[~mask].sum() < 1e-6  # masked actions keep no probability
        if mask.sum() > 1:  # the alternatives keep about 0.3 / |valid| each, not ~0
            assert p[mask].min() > 0.3 / mask.sum() / 4
        a = srsf_teacher(env)
        agree += int(np.argmax(p) == a)
        steps += 1
        obs, _, term, trunc, _ = env.step(a)
        if term or trunc:
            break
    assert agree == steps
    with pytest.raises(ConfigError, match="smoothing must be in"):
        clone(net, env, srsf_teacher, [1], smoothing=1.0)


def test_the_exclusive_rule_never_oversubscribes_when_it_could_wait() -> None:
    env = ContentionEnv(scale="small", num_jobs=40, num_servers=4)
    for s in (0, 1):
        env.reset(seed=s)
        while True:
            a = srsf_exclusive_teacher(env)
            if a != env.wait_action:
                assert env.action_masks()[a]
                sim = env.sim
                assert sim is not None
                workers = sum(len(r) for r in sim.residents)
                after = workers + env.window[a // env.C].spec.num_gpus
                assert after <= env.cluster.num_gpus or not env.action_masks()[env.wait_action]
            _, _, term, trunc, info = env.step(a)
            assert not info["invalid_action"]
            if term or trunc:
                assert np.isfinite(info["avg_jct_s"])
                break


@pytest.mark.parametrize(
    ("key", "value", "msg"),
    [
        ("group_size", 1, "group_size must be >= 2"),
        ("epochs", 0, "epochs must be >= 1"),
        ("lr", float("nan"), "lr must be finite"),
        ("temperature", 0.5, "temperature must be >= 1"),
        ("epsilon", 1.0, "epsilon must be in"),
        ("ent_coef", float("inf"), "ent_coef must be finite"),
    ],
)
def test_bad_settings_are_named(key: str, value: float, msg: str) -> None:
    cfg = EpisodePGConfig()
    setattr(cfg, key, value)
    with pytest.raises(ConfigError, match=msg):
        EpisodePG(Toy(), MaskedMLP(3, 3), cfg)


def _synthetic_groups(scale_second: float) -> list[list[Any]]:
    """Two groups of two one-decision rollouts on 4-feature observations; the second
    group's rewards times ``scale_second``."""
    from agents.episode_pg import Episode

    groups = []
    for g, scale in enumerate((1.0, scale_second)):
        eps = []
        for k, reward in enumerate((-10.0, -14.0) if g == 0 else (-3.0, -2.0)):
            e = Episode()
            e.record(np.full(4, 0.1 * (g + k + 1), dtype=np.float32), np.ones(3, dtype=bool),
                     k, float(np.log(1 / 3)), float(np.log(1 / 3)), 0.0)  # fmt: skip
            e.rewards.append(reward * scale)
            e.reward_times.append(1.0)
            eps.append(e)
        groups.append(eps)
    return groups


def _updated(relative: bool, scale_second: float) -> list[Any]:
    th.manual_seed(0)
    net = MaskedMLP(4, 3, 8)
    pg = EpisodePG(None, net, EpisodePGConfig(relative=relative, epochs=1))
    pg.update(_synthetic_groups(scale_second))
    return [p.detach().clone() for p in net.parameters()]


def test_relative_advantages_weigh_each_workload_by_its_own_scale() -> None:
    """With ``relative``, a group's advantages are in units of its mean return: scaling one
    workload's rewards (longer jobs, the same decisions) leaves the update unchanged; without
    it, that workload's advantages outweigh the other's and the update differs."""
    same = _updated(True, 1.0), _updated(True, 100.0)
    assert all(th.allclose(a, b, atol=1e-6) for a, b in zip(*same, strict=True))
    plain = _updated(False, 1.0), _updated(False, 100.0)
    assert not all(th.allclose(a, b, atol=1e-6) for a, b in zip(*plain, strict=True))
