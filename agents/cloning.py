"""Behaviour cloning: the one optimisation that fits a masked policy to a teacher's decisions.

Every cloner of the project is a call of :func:`fit_clone`: ``pretrain/bc.py``
(:func:`pretrain.bc.behaviour_clone`, Stable-Baselines3 policies on ``Cluster-v0``) and
:func:`agents.episode_pg.clone` (EpisodePG networks on ``ClusterPlan-v0`` and
``Contention-v0``).  The dataset is per decision the observation, the action mask, the
teacher's action and (for a value head) the decision's return; the model is reached through a
small adapter per family (:func:`clonable`):

* :class:`NetClone`: an EpisodePG network, ``net(obs, masks) -> logits`` with impossible
  actions at ``-1e9`` (:class:`~agents.episode_pg.MaskedMLP`,
  :class:`~agents.set_plan.SetPlanNet`); no value head; its train/eval mode is never switched
  (these networks have no dropout or normalisation, and EpisodePG never switches it either).
* :class:`PolicyClone`: an SB3 ``MaskableActorCriticPolicy`` (:class:`~agents.policy.DL2Policy`
  or MaskablePPO's ``model.policy``): the teacher's log-probability from ``evaluate_actions``
  under the mask, its value head, ``set_training_mode``; evaluation mode after the fit.

Loss: the masked cross-entropy of the teacher's action; with ``smoothing`` > 0 that share of
each target moves onto the valid actions uniformly (:func:`smoothed_cross_entropy`), and with
``value_coef`` > 0 the value head regresses the returns at the same time (mean squared error).
Adam at ``lr``.  Two schedules (:class:`CloneConfig`), each drawing from its own generator
seeded by ``seed`` (so a fit is reproducible bit for bit and draws nothing from the global
generators):

* ``"epochs"``: ``epochs`` passes, each over a ``torch.randperm`` of the dataset split into
  minibatches of ``batch_size`` (the last one shorter); a point's ``train/loss`` is the mean
  loss over the samples since the last point (each minibatch weighted by its size).
* ``"steps"``: ``steps`` minibatches of ``min(batch_size, N)`` indices drawn with replacement
  by a numpy generator; a point's ``train/loss`` is the mean of the steps' losses since the
  last point and ``train/accuracy`` the mean share of each minibatch whose masked argmax,
  after the step, is the teacher's action.

An evaluation point comes every ``eval_every`` epochs or steps and after the last (0: only
after the last): the model in evaluation mode, the validation set's loss and accuracy
(:func:`score`), whatever ``on_eval(point)`` returns; the row goes into the
:class:`CloneHistory` and to ``log(point, row)``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import torch as th
from torch import nn
from torch.nn import functional as F

from envs.sim.errors import ConfigError

__all__ = [
    "SCHEDULES",
    "Clonable",
    "CloneConfig",
    "CloneData",
    "CloneHistory",
    "Demonstrations",
    "NetClone",
    "PolicyClone",
    "clonable",
    "fit_clone",
    "score",
    "smoothed_cross_entropy",
]

#: The minibatch schedules of :class:`CloneConfig`.
SCHEDULES = ("epochs", "steps")


@dataclass(frozen=True)
class CloneConfig:
    """How :func:`fit_clone` fits: ``schedule`` ``"epochs"`` (``epochs`` passes over a seeded
    permutation) or ``"steps"`` (``steps`` sampled minibatches); ``batch_size`` samples per
    minibatch; Adam at ``lr``; label ``smoothing`` in [0, 1); ``value_coef`` >= 0 weighs the
    value head's regression of the returns (0: none); an evaluation point every
    ``eval_every`` epochs or steps (0: only after the last); ``seed`` seeds the schedule's
    generator.  The defaults are :func:`agents.episode_pg.clone`'s."""

    schedule: str = "epochs"
    epochs: int = 20
    steps: int = 3000
    batch_size: int = 256
    lr: float = 1e-3
    smoothing: float = 0.0
    value_coef: float = 0.0
    eval_every: int = 1
    seed: int = 0

    def check(self, prefix: str = "clone.") -> None:
        """A :class:`ConfigError` naming the first bad key (as ``prefix`` + its name)."""
        if self.schedule not in SCHEDULES:
            raise ConfigError(
                f"{prefix}schedule must be one of {list(SCHEDULES)}, got {self.schedule!r}"
            )
        for key, lo in (("epochs", 0), ("steps", 1), ("batch_size", 1), ("eval_every", 0)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < lo:
                raise ConfigError(f"{prefix}{key} must be an integer >= {lo}, got {value!r}")
        if not isinstance(self.seed, int | np.integer) or isinstance(self.seed, bool):
            raise ConfigError(f"{prefix}seed must be an integer, got {self.seed!r}")
        for key in ("lr", "smoothing", "value_coef"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int | float | np.number):
                raise ConfigError(f"{prefix}{key} must be a number, got {value!r}")
        if not (np.isfinite(self.lr) and self.lr > 0):
            raise ConfigError(f"{prefix}lr must be a finite number > 0, got {self.lr!r}")
        if not (0.0 <= self.smoothing < 1.0):
            raise ConfigError(f"{prefix}smoothing must be in [0, 1), got {self.smoothing!r}")
        if not (np.isfinite(self.value_coef) and self.value_coef >= 0):
            raise ConfigError(
                f"{prefix}value_coef must be a finite number >= 0, got {self.value_coef!r}"
            )

    @property
    def length(self) -> int:
        """The number of epochs or steps the schedule runs."""
        return self.epochs if self.schedule == "epochs" else self.steps


class Demonstrations(Protocol):
    """A behaviour-cloning dataset: per decision ``obs``, ``masks`` (bool), ``actions`` (the
    teacher's) and ``returns`` (``None`` where no value head is fitted).
    :class:`pretrain.dataset.TeacherDataset` is one."""

    @property
    def obs(self) -> npt.NDArray[Any]: ...

    @property
    def masks(self) -> npt.NDArray[np.bool_]: ...

    @property
    def actions(self) -> npt.NDArray[np.int64]: ...

    @property
    def returns(self) -> npt.NDArray[np.float32] | None: ...


@dataclass(frozen=True)
class CloneData:
    """Arrays as :class:`Demonstrations` (e.g. :func:`agents.episode_pg.teacher_data`'s)."""

    obs: npt.NDArray[Any]
    masks: npt.NDArray[np.bool_]
    actions: npt.NDArray[np.int64]
    returns: npt.NDArray[np.float32] | None = None


@dataclass
class CloneHistory:
    """Per evaluation point: ``step`` (the epoch or step), ``train/loss`` (and
    ``train/accuracy`` under ``"steps"``), ``val/loss`` and ``val/accuracy`` with a validation
    set, and what ``on_eval`` returned."""

    rows: list[dict[str, float]] = field(default_factory=list)

    @property
    def last(self) -> dict[str, float]:
        return self.rows[-1] if self.rows else {}


def smoothed_cross_entropy(
    logp: th.Tensor, masks: th.Tensor, actions: th.Tensor, smoothing: float
) -> th.Tensor:
    """Mean cross-entropy of the masked log-probabilities ``logp`` (B, A) against targets
    that put ``1 - smoothing`` on the teacher's action and ``smoothing`` spread uniformly over
    the valid actions (so the argmax stays the teacher's); invalid actions count 0."""
    target = F.one_hot(actions, logp.shape[1]).float() * (1 - smoothing)
    valid = masks.float()
    target = target + smoothing * valid / valid.sum(1, keepdim=True)
    return -(target * logp.masked_fill(~masks, 0.0)).sum(1).mean()


class Clonable(Protocol):
    """What :func:`fit_clone` needs of a model (one adapter per family)."""

    #: Whether the model has a value head (``value_coef`` > 0 needs one).
    value_head: bool

    @property
    def n_actions(self) -> int | None:
        """Actions per decision (the dataset's mask width must match)."""
        ...

    def parameters(self) -> Iterator[nn.Parameter]: ...

    def set_training(self, mode: bool) -> None:
        """Training (``True``) or evaluation mode."""

    def logits(self, obs: th.Tensor, masks: th.Tensor) -> th.Tensor:
        """Action logits with invalid actions masked out (for accuracy and :func:`score`)."""
        ...

    def losses(
        self, obs: th.Tensor, masks: th.Tensor, actions: th.Tensor, config: CloneConfig
    ) -> tuple[th.Tensor, th.Tensor | None]:
        """The minibatch's cross-entropy (with ``config.smoothing``) and the value head's
        predictions (B,) when ``config.value_coef`` > 0 (else ``None``)."""
        ...


class NetClone:
    """An EpisodePG network (``net(obs, masks) -> logits``, see the module docstring)."""

    value_head = False

    def __init__(self, net: nn.Module) -> None:
        self.net = net

    @property
    def n_actions(self) -> int | None:
        """The network's action count (``None``: any, read off the masks)."""
        n = getattr(self.net, "n_actions", None)
        return None if n is None else int(n)

    def parameters(self) -> Iterator[nn.Parameter]:
        return self.net.parameters()

    def set_training(self, mode: bool) -> None:
        """Nothing: the networks have no dropout or normalisation (the mode is kept)."""

    def logits(self, obs: th.Tensor, masks: th.Tensor) -> th.Tensor:
        out: th.Tensor = self.net(obs, masks)
        return out

    def losses(
        self, obs: th.Tensor, masks: th.Tensor, actions: th.Tensor, config: CloneConfig
    ) -> tuple[th.Tensor, th.Tensor | None]:
        logp = th.log_softmax(self.net(obs, masks), -1)
        return smoothed_cross_entropy(logp, masks, actions, config.smoothing), None


class PolicyClone:
    """An SB3 ``MaskableActorCriticPolicy`` (see the module docstring); Stable-Baselines3 is
    imported only when one is cloned."""

    value_head = True

    def __init__(self, policy: Any) -> None:
        self.policy = policy

    @property
    def n_actions(self) -> int:
        return int(self.policy.action_space.n)

    def parameters(self) -> Iterator[nn.Parameter]:
        out: Iterator[nn.Parameter] = self.policy.parameters()
        return out

    def set_training(self, mode: bool) -> None:
        self.policy.set_training_mode(mode)

    def logits(self, obs: th.Tensor, masks: th.Tensor) -> th.Tensor:
        from agents.policy import masked_logits

        return masked_logits(self.policy, obs, masks)

    def losses(
        self, obs: th.Tensor, masks: th.Tensor, actions: th.Tensor, config: CloneConfig
    ) -> tuple[th.Tensor, th.Tensor | None]:
        if config.smoothing > 0:
            logp = th.log_softmax(self.logits(obs, masks), -1)
            loss = smoothed_cross_entropy(logp, masks, actions, config.smoothing)
            if config.value_coef > 0:
                return loss, self.policy.predict_values(obs)[:, 0]
            return loss, None
        values, logp_a, _ = self.policy.evaluate_actions(obs, actions, action_masks=masks)
        return -logp_a.mean(), values[:, 0]


def clonable(model: Any) -> Clonable:
    """The adapter of ``model``: an SB3 policy (it has ``evaluate_actions``) or an EpisodePG
    network (a torch module called with observations and masks); an adapter is returned as
    it is."""
    if isinstance(model, NetClone | PolicyClone):
        return model
    if hasattr(model, "evaluate_actions"):
        return PolicyClone(model)
    if isinstance(model, nn.Module):
        return NetClone(model)
    raise ConfigError(
        f"cannot clone into a {type(model).__name__}: an SB3 MaskableActorCriticPolicy or an "
        "EpisodePG network (net(obs, masks) -> logits) is needed"
    )


def _tensors(data: Demonstrations, value: bool) -> tuple[th.Tensor, ...]:
    """The dataset as tensors (shared with the arrays where their dtypes already match)."""
    out = (
        th.as_tensor(data.obs, dtype=th.float32),
        th.as_tensor(data.masks, dtype=th.bool),
        th.as_tensor(data.actions, dtype=th.int64),
    )
    if not value:
        return out
    if data.returns is None:
        raise ConfigError("value_coef > 0 needs the dataset's returns")
    return (*out, th.as_tensor(data.returns, dtype=th.float32))


def _check(model: Clonable, data: Demonstrations, config: CloneConfig, prefix: str) -> None:
    if len(data.actions) == 0:
        raise ConfigError("behaviour cloning needs a non-empty training set")
    if config.value_coef > 0 and not model.value_head:
        raise ConfigError(
            f"{prefix}value_coef must be 0 for a model without a value head, "
            f"got {config.value_coef!r}"
        )
    expected = model.n_actions
    if expected is not None and data.masks.shape[1] != expected:
        raise ConfigError(
            f"dataset has {data.masks.shape[1]} actions per decision, the policy {expected} "
            "(different window J)"
        )


def _batches(config: CloneConfig, n: int) -> Iterator[tuple[int, th.Tensor, bool]]:
    """``(point, minibatch indices, whether the point ends with it)`` in the schedule's order,
    points counted from 1 (an epoch or a step)."""
    if config.schedule == "epochs":
        gen = th.Generator().manual_seed(config.seed)
        for epoch in range(1, config.epochs + 1):
            parts = th.randperm(n, generator=gen).split(config.batch_size)
            for i, idx in enumerate(parts):
                yield epoch, idx, i == len(parts) - 1
    else:
        rng = np.random.default_rng(config.seed)
        for step in range(1, config.steps + 1):
            yield step, th.as_tensor(rng.integers(n, size=min(config.batch_size, n))), True


@th.no_grad()
def score(model: Any, data: Demonstrations, batch: int = 4096) -> dict[str, float]:
    """Mean cross-entropy and accuracy (the masked argmax is the teacher's action) of
    ``model`` (anything :func:`clonable` takes) on ``data``; NaN for an empty set."""
    n = len(data.actions)
    if n == 0:
        return {"loss": float("nan"), "accuracy": float("nan")}
    m = clonable(model)
    obs_t, mask_t, act_t = _tensors(data, value=False)
    loss = 0.0
    correct = 0
    for start in range(0, n, batch):
        sl = slice(start, min(start + batch, n))
        obs, masks, actions = obs_t[sl], mask_t[sl], act_t[sl]
        logits = m.logits(obs, masks)
        logp = th.log_softmax(logits, dim=1).gather(1, actions[:, None])[:, 0]
        loss -= float(logp.sum())
        correct += int((logits.argmax(dim=1) == actions).sum())
    return {"loss": loss / n, "accuracy": correct / n}


def fit_clone(
    model: Any,
    data: Demonstrations,
    config: CloneConfig,
    *,
    val: Demonstrations | None = None,
    log: Callable[[int, dict[str, float]], None] | None = None,
    on_eval: Callable[[int], dict[str, float]] | None = None,
    progress: bool = False,
    prefix: str = "clone.",
) -> CloneHistory:
    """Fit ``model`` (anything :func:`clonable` takes) to ``data`` as ``config`` says (see the
    module docstring); returns the evaluation points.  ``prefix`` names the config's keys in
    its errors (e.g. ``"bc."``)."""
    config.check(prefix)
    m = clonable(model)
    _check(m, data, config, prefix)
    value = config.value_coef > 0
    tensors = _tensors(data, value)
    obs_t, mask_t, act_t = tensors[:3]
    sampled = config.schedule == "steps"
    optimizer = th.optim.Adam(m.parameters(), lr=config.lr)
    m.set_training(True)
    history = CloneHistory()
    run_loss = run_acc = 0.0
    run_n = 0
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=config.length, desc="behaviour cloning", unit=config.schedule[:-1])
    for point, idx, ends in _batches(config, len(act_t)):
        obs, masks, actions = obs_t[idx], mask_t[idx], act_t[idx]
        loss, values = m.losses(obs, masks, actions, config)
        total = loss
        if value:
            assert values is not None
            total = total + config.value_coef * F.mse_loss(values, tensors[3][idx])
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
        if sampled:  # the mean over steps, and the accuracy after each step
            with th.no_grad():
                logits = m.logits(obs, masks)
                run_acc += float((logits.argmax(dim=1) == actions).float().mean())
            run_loss += float(loss.detach())
            run_n += 1
        else:  # the mean over samples
            run_loss, run_n = run_loss + float(loss.detach()) * len(idx), run_n + len(idx)
        if not ends:
            continue
        if bar is not None:
            bar.update(1)
        if (config.eval_every > 0 and point % config.eval_every == 0) or point == config.length:
            row: dict[str, float] = {"step": float(point), "train/loss": run_loss / run_n}
            if sampled:
                row["train/accuracy"] = run_acc / run_n
            run_loss = run_acc = 0.0
            run_n = 0
            m.set_training(False)
            if val is not None and len(val.actions):
                s = score(m, val)
                row["val/loss"], row["val/accuracy"] = s["loss"], s["accuracy"]
            if on_eval is not None:
                row.update(on_eval(point))
            m.set_training(True)
            history.rows.append(row)
            if log is not None:
                log(point, row)
            if bar is not None:
                bar.set_postfix(
                    {k.split("/")[-1]: f"{v:.3f}" for k, v in row.items() if k.startswith("val")}
                )
    if bar is not None:
        bar.close()
    m.set_training(False)
    return history
