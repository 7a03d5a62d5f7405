"""The one cloner (:mod:`agents.cloning`): each schedule bit for bit the loop it replaced.

The oracles below are the optimisation loops as they were before :func:`fit_clone`, copied
unchanged: ``agents/episode_pg.py``'s ``clone`` (schedule ``"epochs"``), ``pretrain/bc.py``'s
``behaviour_clone`` and ``score`` (schedule ``"steps"``) and ``experiments/contention_h2h.py``'s
``clone`` (MaskablePPO: schedule ``"epochs"`` at lr 1e-3).  Weights and reported numbers must
be equal, not close.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from torch import nn

from agents.cloning import (
    CloneConfig,
    CloneData,
    NetClone,
    PolicyClone,
    clonable,
    fit_clone,
    score,
    smoothed_cross_entropy,
)
from agents.episode_pg import MaskedMLP, clone, teacher_data
from agents.policy import PolicyConfig, masked_logits, policy_kwargs
from agents.set_plan import SetPlanNet
from envs.gym.contention_env import ContentionEnv, srsf_teacher
from envs.gym.factory import EnvConfig, make_env
from envs.sim.errors import ConfigError
from pretrain.bc import BCConfig, behaviour_clone, build_student
from pretrain.dataset import TeacherDataset

TINY = EnvConfig(setting="tiny")


# ------------------------------------------------------------------ the old loops (oracles)
def old_episode_clone(
    net: Any, data: tuple[np.ndarray, ...], epochs: int, lr: float, seed: int,
    smoothing: float, batch: int = 256,
) -> list[float]:  # fmt: skip
    """``agents.episode_pg.clone``'s loop before the one cloner (the epoch means)."""
    obs_t, mask_t, act_t = (th.as_tensor(x) for x in data)
    opt = th.optim.Adam(net.parameters(), lr=lr)
    gen = th.Generator().manual_seed(seed)
    out = []
    for _epoch in range(epochs):
        loss_sum, n = 0.0, 0
        for idx in th.randperm(len(act_t), generator=gen).split(batch):
            logp = th.log_softmax(net(obs_t[idx], mask_t[idx]), -1)
            target = nn.functional.one_hot(act_t[idx], logp.shape[1]).float() * (1 - smoothing)
            valid = mask_t[idx].float()
            target = target + smoothing * valid / valid.sum(1, keepdim=True)
            loss = -(target * logp.masked_fill(~mask_t[idx], 0.0)).sum(1).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss_sum, n = loss_sum + float(loss.detach()) * len(idx), n + len(idx)
        loss_sum /= n
        out.append(loss_sum)
    return out


def _old_tensors(data: TeacherDataset, index: np.ndarray) -> tuple[th.Tensor, ...]:
    return (
        th.as_tensor(data.obs[index], dtype=th.float32),
        th.as_tensor(data.masks[index], dtype=th.bool),
        th.as_tensor(data.actions[index], dtype=th.int64),
        th.as_tensor(data.returns[index], dtype=th.float32),
    )


@th.no_grad()
def old_score(policy: Any, data: TeacherDataset, batch: int = 4096) -> dict[str, float]:
    """``pretrain.bc.score`` before the one cloner."""
    loss = 0.0
    correct = 0
    for start in range(0, len(data), batch):
        obs, masks, actions, _ = _old_tensors(data, np.arange(start, min(start + batch, len(data))))
        logits = masked_logits(policy, obs, masks)
        logp = th.log_softmax(logits, dim=1).gather(1, actions[:, None])[:, 0]
        loss -= float(logp.sum())
        correct += int((logits.argmax(dim=1) == actions).sum())
    return {"loss": loss / len(data), "accuracy": correct / len(data)}


def old_behaviour_clone(
    policy: Any, train: TeacherDataset, val: TeacherDataset, config: BCConfig, on_eval: Any
) -> list[dict[str, float]]:
    """``pretrain.bc.behaviour_clone``'s loop before the one cloner (its history rows)."""
    rng = np.random.default_rng(config.seed)
    optimizer = th.optim.Adam(policy.parameters(), lr=config.lr)
    policy.set_training_mode(True)
    rows = []
    run_loss = run_acc = 0.0
    run_n = 0
    for step in range(1, config.steps + 1):
        index = rng.integers(len(train), size=min(config.batch_size, len(train)))
        obs, masks, actions, returns = _old_tensors(train, index)
        values, logp, _ = policy.evaluate_actions(obs, actions, action_masks=masks)
        loss = -logp.mean()
        total = loss
        if config.value_coef > 0:
            total = total + config.value_coef * th.nn.functional.mse_loss(values[:, 0], returns)
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
        with th.no_grad():
            logits = masked_logits(policy, obs, masks)
            run_acc += float((logits.argmax(dim=1) == actions).float().mean())
        run_loss += float(loss.detach())
        run_n += 1
        if (config.eval_every > 0 and step % config.eval_every == 0) or step == config.steps:
            row: dict[str, float] = {
                "step": float(step),
                "train/loss": run_loss / run_n,
                "train/accuracy": run_acc / run_n,
            }
            run_loss = run_acc = 0.0
            run_n = 0
            policy.set_training_mode(False)
            s = old_score(policy, val)
            row["val/loss"], row["val/accuracy"] = s["loss"], s["accuracy"]
            row.update(on_eval(step))
            policy.set_training_mode(True)
            rows.append(row)
    policy.set_training_mode(False)
    return rows


def old_h2h_clone(model: Any, data: tuple[np.ndarray, ...], epochs: int, seed: int) -> None:
    """``experiments/contention_h2h.py``'s ``clone`` (MaskablePPO), unchanged."""
    obs, masks, acts = (th.as_tensor(x) for x in data)
    policy = model.policy
    opt = th.optim.Adam(policy.parameters(), lr=1e-3)
    gen = th.Generator().manual_seed(seed)
    for _ in range(epochs):
        for idx in th.randperm(len(acts), generator=gen).split(256):
            dist = policy.get_distribution(obs[idx].float(), action_masks=masks[idx].numpy())
            loss = -dist.log_prob(acts[idx]).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()


# ------------------------------------------------------------------ helpers
def _same_weights(a: nn.Module, b: nn.Module) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for k in sa:
        assert th.equal(sa[k], sb[k]), k


def _synthetic(n: int, obs_size: int, n_actions: int, seed: int) -> TeacherDataset:
    """``n`` random decisions: every mask keeps the teacher's action and a random subset."""
    rng = np.random.default_rng(seed)
    actions = rng.integers(n_actions, size=n).astype(np.int64)
    masks = rng.random((n, n_actions)) < 0.5
    masks[np.arange(n), actions] = True
    obs = rng.standard_normal((n, obs_size)).astype(np.float32)
    returns = rng.standard_normal(n).astype(np.float32)
    return TeacherDataset(obs, masks, actions, np.zeros(n, np.int32), returns)


# ------------------------------------------------------------------ schedule "epochs"
@pytest.mark.parametrize("smoothing", [0.0, 0.3])
def test_episode_pg_clone_is_the_old_epoch_loop_bit_for_bit(smoothing: float) -> None:
    env = ContentionEnv(scale="small", num_jobs=20, num_servers=4)
    seeds = list(range(1, 15))
    th.manual_seed(0)
    net = MaskedMLP(env.obs_size, env.wait_action + 1, hidden=16)
    ref = copy.deepcopy(net)
    data = teacher_data(env, srsf_teacher, seeds, ref.stack)
    assert len(data[2]) > 256 and len(data[2]) % 256  # several minibatches, the last shorter
    want = old_episode_clone(ref, data, epochs=3, lr=1e-3, seed=5, smoothing=smoothing)
    got: list[tuple[int, float]] = []
    loss = clone(net, env, srsf_teacher, seeds, epochs=3, seed=5, smoothing=smoothing,
                 on_epoch=lambda e, x: got.append((e, x)))  # fmt: skip
    assert got == list(enumerate(want, 1)) and loss == want[-1]
    _same_weights(net, ref)
    assert clone(net, env, srsf_teacher, seeds[:1], epochs=0) == 0.0  # no epoch: no update
    _same_weights(net, ref)


def test_the_epoch_schedule_is_the_old_loop_for_the_set_network() -> None:
    """A set network (``SetPlanNet``) and a batch size that leaves a short last minibatch."""
    th.manual_seed(1)
    net = SetPlanNet(row_width=3, n_globals=2, n_actions=4, hidden=8)
    ref = copy.deepcopy(net)
    d = _synthetic(50, 3 * 5 + 2, 4, seed=3)
    arrays = (d.obs, d.masks, d.actions)
    want = old_episode_clone(ref, arrays, epochs=2, lr=3e-3, seed=9, smoothing=0.1, batch=16)
    config = CloneConfig(epochs=2, lr=3e-3, seed=9, smoothing=0.1, batch_size=16)
    history = fit_clone(net, CloneData(*arrays), config)
    assert [r["train/loss"] for r in history.rows] == want
    assert [r["step"] for r in history.rows] == [1.0, 2.0]
    _same_weights(net, ref)


def test_the_h2h_maskable_ppo_cloner_is_the_epoch_schedule_at_lr_1e3() -> None:
    """``experiments/contention_h2h.py``'s ``clone(model, data, epochs, seed)`` is
    ``fit_clone(model.policy, CloneData(*data), CloneConfig(epochs=epochs, lr=1e-3,
    seed=seed))``."""
    obs_space = spaces.Box(-5.0, 5.0, (12,), np.float32)
    th.manual_seed(2)
    policy = MaskableActorCriticPolicy(obs_space, spaces.Discrete(6), lambda _: 3e-4)
    ref = copy.deepcopy(policy)
    d = _synthetic(600, 12, 6, seed=4)
    arrays = (d.obs, d.masks, d.actions)
    old_h2h_clone(type("Model", (), {"policy": ref})(), arrays, epochs=2, seed=7)
    fit_clone(policy, CloneData(*arrays), CloneConfig(epochs=2, lr=1e-3, seed=7))
    _same_weights(policy, ref)
    assert not policy.training  # SB3's evaluation mode after the fit


# ------------------------------------------------------------------ schedule "steps"
@pytest.mark.parametrize(
    ("arch", "config"),
    [
        ("mlp", BCConfig(steps=20, batch_size=16, eval_every=7, seed=3)),
        ("per_job", BCConfig(steps=9, batch_size=256, eval_every=0, value_coef=0.0, seed=1)),
    ],
)
def test_behaviour_clone_is_the_old_step_loop_bit_for_bit(arch: str, config: BCConfig) -> None:
    env = make_env(TINY)
    kwargs = policy_kwargs(PolicyConfig(arch=arch, hidden=16), env.J)
    th.manual_seed(0)
    student = build_student(env.observation_space, env.action_space, kwargs)
    ref = copy.deepcopy(student)
    n_obs, n_act = env.observation_space.shape[0], env.action_space.n
    train, val = _synthetic(60, n_obs, n_act, seed=1), _synthetic(30, n_obs, n_act, seed=2)
    want = old_behaviour_clone(ref, train, val, config, lambda step: {"extra": 2.0 * step})
    seen: list[int] = []
    history = behaviour_clone(
        student, train, val, config, log=lambda step, _row: seen.append(step),
        on_eval=lambda step: {"extra": 2.0 * step},
    )  # fmt: skip
    assert history.rows == want
    assert seen == [int(r["step"]) for r in want]
    _same_weights(student, ref)
    assert not student.training
    assert score(student, val) == old_score(ref, val)


# ------------------------------------------------------------------ the loss and the adapters
def test_smoothed_cross_entropy_by_hand() -> None:
    logp = th.log(th.tensor([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3]]))
    masks = th.tensor([[True, True, False], [True, True, True]])
    actions = th.tensor([0, 1])
    # targets: [0.75, 0.25, 0] and [0.5/3, 0.5 + 0.5/3, 0.5/3]
    first = 0.75 * np.log(0.5) + 0.25 * np.log(0.3)
    second = np.log(0.1) / 6 + (0.5 + 1 / 6) * np.log(0.6) + np.log(0.3) / 6
    want = -(first + second) / 2
    got = float(smoothed_cross_entropy(logp, masks, actions, 0.5))
    assert got == pytest.approx(want, rel=1e-6)
    plain = float(smoothed_cross_entropy(logp, masks, actions, 0.0))
    assert plain == pytest.approx(-(np.log(0.5) + np.log(0.6)) / 2, rel=1e-6)


def test_a_smoothed_policy_clone_with_a_value_head_learns() -> None:
    """The SB3 adapter's smoothed path (not in the old code): the value head regresses the
    returns, and the smoothed clone still fits the teacher's argmax better than before."""
    obs_space = spaces.Box(-5.0, 5.0, (8,), np.float32)
    th.manual_seed(3)
    policy = MaskableActorCriticPolicy(obs_space, spaces.Discrete(5), lambda _: 3e-4)
    d = _synthetic(40, 8, 5, seed=6)
    before = score(policy, d)
    config = CloneConfig(schedule="steps", steps=300, batch_size=40, lr=1e-2, smoothing=0.2,
                         value_coef=0.5, eval_every=0)  # fmt: skip
    history = fit_clone(policy, d, config, val=d)
    assert history.rows[-1]["val/accuracy"] > max(before["accuracy"], 0.9)
    with th.no_grad():
        values = policy.predict_values(th.as_tensor(d.obs))[:, 0].numpy()
    assert np.mean((values - d.returns) ** 2) < 0.5 * np.mean(d.returns**2)


def test_clonable_picks_the_adapter_by_family() -> None:
    net = MaskedMLP(4, 3, hidden=4)
    assert isinstance(clonable(net), NetClone) and clonable(net).n_actions == 3
    pol = MaskableActorCriticPolicy(spaces.Box(-1, 1, (4,)), spaces.Discrete(3), lambda _: 1e-3)
    assert isinstance(clonable(pol), PolicyClone) and clonable(pol).n_actions == 3
    adapter = NetClone(net)
    assert clonable(adapter) is adapter
    with pytest.raises(ConfigError, match="cannot clone into a str"):
        clonable("net")


# ------------------------------------------------------------------ config errors
@pytest.mark.parametrize(
    ("change", "key"),
    [
        ({"schedule": "sampled"}, "schedule must be one of"),
        ({"epochs": -1}, "epochs must be an integer >= 0"),
        ({"epochs": 2.5}, "epochs must be an integer"),
        ({"steps": 0}, "steps must be an integer >= 1"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1"),
        ({"batch_size": True}, "batch_size must be an integer"),
        ({"eval_every": -1}, "eval_every must be an integer >= 0"),
        ({"seed": "0"}, "seed must be an integer"),
        ({"lr": 0.0}, "lr must be a finite number > 0"),
        ({"lr": float("nan")}, "lr must be a finite number > 0"),
        ({"lr": "fast"}, "lr must be a number"),
        ({"smoothing": 1.0}, r"smoothing must be in \[0, 1\)"),
        ({"smoothing": -0.1}, r"smoothing must be in \[0, 1\)"),
        ({"value_coef": -1.0}, "value_coef must be a finite number >= 0"),
        ({"value_coef": float("inf")}, "value_coef must be a finite number >= 0"),
    ],
)
def test_a_bad_config_value_is_one_config_error_naming_its_key(
    change: dict[str, Any], key: str
) -> None:
    d = _synthetic(5, 4, 3, seed=0)
    net = MaskedMLP(4, 3, hidden=4)
    with pytest.raises(ConfigError, match=r"^clone\." + key):
        fit_clone(net, CloneData(d.obs, d.masks, d.actions), CloneConfig(**change))


def test_what_the_model_or_data_cannot_take_is_a_config_error() -> None:
    net = MaskedMLP(4, 3, hidden=4)
    d = _synthetic(5, 4, 3, seed=0)
    with pytest.raises(ConfigError, match=r"clone\.value_coef must be 0 for a model without"):
        fit_clone(net, d, CloneConfig(value_coef=0.5))
    with pytest.raises(ConfigError, match="dataset has 3 actions per decision, the policy 2"):
        fit_clone(MaskedMLP(4, 2, hidden=4), d, CloneConfig())
    with pytest.raises(ConfigError, match="non-empty training set"):
        fit_clone(net, CloneData(d.obs[:0], d.masks[:0], d.actions[:0]), CloneConfig())
    pol = MaskableActorCriticPolicy(spaces.Box(-1, 1, (4,)), spaces.Discrete(3), lambda _: 1e-3)
    with pytest.raises(ConfigError, match="value_coef > 0 needs the dataset's returns"):
        fit_clone(pol, CloneData(d.obs, d.masks, d.actions), CloneConfig(value_coef=0.5))
    with pytest.raises(ConfigError, match=r"^bc\.steps must be an integer >= 1, got 0"):
        behaviour_clone(pol, d, None, BCConfig(steps=0))
    env = ContentionEnv(scale="small", num_jobs=4, num_servers=2)
    with pytest.raises(ConfigError, match=r"^epochs must be an integer >= 0, got -1$"):
        clone(MaskedMLP(env.obs_size, env.wait_action + 1), env, srsf_teacher, [1], epochs=-1)
