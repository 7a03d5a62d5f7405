"""Behaviour cloning of a teacher's decisions into the policy RL fine-tunes.

The student is the very policy class and ``policy_kwargs`` the agents use
(:mod:`agents.policy`).  Loss: cross-entropy of the teacher's action under the *masked*
policy, i.e. ``-log pi(a | s, mask)`` from ``policy.evaluate_actions(obs, actions,
action_masks=mask)``; Adam (DL²: lr 0.005, batch 256); optionally the value head regresses the
teacher's slot returns at the same time (``value_coef``), so RL starts with a warm critic.
Accuracy = the masked argmax equals the teacher's action.  A validation split (whole held-out
workloads) is scored every ``eval_every`` steps; a callback may add more (e.g. the cloned
policy's average JCT on held-out workloads).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch as th
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

from agents.policy import DL2Policy, masked_logits
from envs.sim.errors import ConfigError
from pretrain.dataset import TeacherDataset

__all__ = ["BCConfig", "BCHistory", "behaviour_clone", "score"]


@dataclass
class BCConfig:
    """``steps`` gradient steps of ``batch_size`` samples, Adam at ``lr``; ``value_coef`` > 0
    warms the value head on the slot returns; validation every ``eval_every`` steps (0: only
    at the end); ``seed``
    drives minibatch sampling."""

    steps: int = 3000
    batch_size: int = 256
    lr: float = 5e-3
    value_coef: float = 0.5
    eval_every: int = 500
    seed: int = 0


@dataclass
class BCHistory:
    """Per evaluation point: step, train loss/accuracy (running), validation loss/accuracy and
    anything the callback returned."""

    rows: list[dict[str, float]] = field(default_factory=list)

    @property
    def last(self) -> dict[str, float]:
        return self.rows[-1] if self.rows else {}


def _tensors(data: TeacherDataset, index: np.ndarray | None = None) -> tuple[th.Tensor, ...]:
    sl = slice(None) if index is None else index
    return (
        th.as_tensor(data.obs[sl], dtype=th.float32),
        th.as_tensor(data.masks[sl], dtype=th.bool),
        th.as_tensor(data.actions[sl], dtype=th.int64),
        th.as_tensor(data.returns[sl], dtype=th.float32),
    )


@th.no_grad()
def score(
    policy: MaskableActorCriticPolicy, data: TeacherDataset, batch: int = 4096
) -> dict[str, float]:
    """Mean cross-entropy and accuracy of ``policy`` on ``data`` (masked)."""
    if len(data) == 0:
        return {"loss": float("nan"), "accuracy": float("nan")}
    loss = 0.0
    correct = 0
    for start in range(0, len(data), batch):
        obs, masks, actions, _ = _tensors(data, np.arange(start, min(start + batch, len(data))))
        logits = masked_logits(policy, obs, masks)
        logp = th.log_softmax(logits, dim=1).gather(1, actions[:, None])[:, 0]
        loss -= float(logp.sum())
        correct += int((logits.argmax(dim=1) == actions).sum())
    return {"loss": loss / len(data), "accuracy": correct / len(data)}


def behaviour_clone(
    policy: MaskableActorCriticPolicy,
    train: TeacherDataset,
    val: TeacherDataset | None,
    config: BCConfig,
    *,
    log: Callable[[int, dict[str, float]], None] | None = None,
    on_eval: Callable[[int], dict[str, float]] | None = None,
    progress: bool = False,
) -> BCHistory:
    """Fit ``policy`` to ``train``; returns the evaluation history.

    ``log(step, scalars)`` receives every evaluation point (e.g. TensorBoard); ``on_eval(step)``
    may return more scalars (e.g. the cloned policy's validation JCT)."""
    if len(train) == 0:
        raise ConfigError("behaviour cloning needs a non-empty training set")
    if config.steps < 1 or config.batch_size < 1:
        raise ConfigError(f"bad BC config {config}")
    expected = policy.action_space.n  # type: ignore[attr-defined]
    if train.masks.shape[1] != expected:
        raise ConfigError(
            f"dataset has {train.masks.shape[1]} actions per decision, the policy {expected} "
            "(different window J)"
        )
    rng = np.random.default_rng(config.seed)
    optimizer = th.optim.Adam(policy.parameters(), lr=config.lr)
    policy.set_training_mode(True)
    history = BCHistory()
    run_loss = run_acc = 0.0
    run_n = 0
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=config.steps, desc="behaviour cloning", unit="step")
    for step in range(1, config.steps + 1):
        index = rng.integers(len(train), size=min(config.batch_size, len(train)))
        obs, masks, actions, returns = _tensors(train, index)
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
        if bar is not None:
            bar.update(1)
        if (config.eval_every > 0 and step % config.eval_every == 0) or step == config.steps:
            row: dict[str, float] = {
                "step": float(step),
                "train/loss": run_loss / run_n,
                "train/accuracy": run_acc / run_n,
            }
            run_loss = run_acc = 0.0
            run_n = 0
            policy.set_training_mode(False)
            if val is not None and len(val):
                s = score(policy, val)
                row["val/loss"], row["val/accuracy"] = s["loss"], s["accuracy"]
            if on_eval is not None:
                row.update(on_eval(step))
            policy.set_training_mode(True)
            history.rows.append(row)
            if log is not None:
                log(step, row)
            if bar is not None:
                bar.set_postfix(
                    {k.split("/")[-1]: f"{v:.3f}" for k, v in row.items() if k.startswith("val")}
                )
    if bar is not None:
        bar.close()
    policy.set_training_mode(False)
    return history


def build_student(
    observation_space: Any, action_space: Any, kwargs: dict[str, Any], lr: float = 1e-4
) -> DL2Policy:
    """A fresh :class:`~agents.policy.DL2Policy` with the agents' ``policy_kwargs`` (SB3's
    constant schedule at ``lr``): an MLP or the per-job network, as ``kwargs`` say."""
    return DL2Policy(observation_space, action_space, lambda _: lr, **kwargs)
