"""Behaviour cloning of a teacher's decisions into the policy RL fine-tunes.

The student is the very policy class and ``policy_kwargs`` the agents use
(:mod:`agents.policy`).  Loss: cross-entropy of the teacher's action under the *masked*
policy, i.e. ``-log pi(a | s, mask)`` from ``policy.evaluate_actions(obs, actions,
action_masks=mask)``; Adam (DL²: lr 0.005, batch 256); optionally the value head regresses the
teacher's slot returns at the same time (``value_coef``), so RL starts with a warm critic.
Accuracy = the masked argmax equals the teacher's action.  A validation split (whole held-out
workloads) is scored every ``eval_every`` steps; a callback may add more (e.g. the cloned
policy's average JCT on held-out workloads).  The optimisation is the project's one cloner,
:func:`agents.cloning.fit_clone`, with the ``"steps"`` schedule: ``steps`` minibatches drawn
with replacement by a numpy generator seeded by ``seed``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

from agents.cloning import CloneConfig, CloneHistory, fit_clone, score
from agents.policy import DL2Policy
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

    def clone_config(self) -> CloneConfig:
        """The cloner's config: schedule ``"steps"`` with these values."""
        return CloneConfig(
            schedule="steps", steps=self.steps, batch_size=self.batch_size, lr=self.lr,
            value_coef=self.value_coef, eval_every=self.eval_every, seed=self.seed,
        )  # fmt: skip


#: Per evaluation point: step, train loss/accuracy (running), validation loss/accuracy and
#: anything the callback returned (:class:`agents.cloning.CloneHistory`).
BCHistory = CloneHistory


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
    """Fit ``policy`` to ``train``; returns the evaluation history
    (:func:`agents.cloning.fit_clone`, schedule ``"steps"``).

    ``log(step, scalars)`` receives every evaluation point (e.g. TensorBoard); ``on_eval(step)``
    may return more scalars (e.g. the cloned policy's validation JCT).  A bad value is a
    :class:`ConfigError` naming its key (``bc.<key>``)."""
    return fit_clone(
        policy, train, config.clone_config(), val=val, log=log, on_eval=on_eval,
        progress=progress, prefix="bc.",
    )  # fmt: skip


def build_student(
    observation_space: Any, action_space: Any, kwargs: dict[str, Any], lr: float = 1e-4
) -> DL2Policy:
    """A fresh :class:`~agents.policy.DL2Policy` with the agents' ``policy_kwargs`` (SB3's
    constant schedule at ``lr``): an MLP or the per-job network, as ``kwargs`` say."""
    return DL2Policy(observation_space, action_space, lambda _: lr, **kwargs)
