"""A size-agnostic plan network: one set of weights for any window ``J`` and any cluster.

:class:`~agents.episode_pg.MaskedMLP` reads the plan observation
(:class:`~envs.gym.plan_env.SlotPlanner`: ``J`` job rows of ``W`` features, then the
``G`` global features) as one flat vector, so its first layer fixes ``J``.
:class:`SetPlanNet` reads it as a *set* of job rows, as Decima and RLScheduler score jobs with
one shared network:

- every row goes through the same encoder ``phi`` (two tanh layers); a row of zeros is an
  empty window position and is left out (a window job always has its one-hot type);
- the encodings are pooled: their mean and their maximum over the window's jobs, and the
  number of jobs as ``log1p(n) / log1p(64)`` (an absolute count, as the load-aware rules read
  it; not a fraction of ``J``);
- the head ``rho`` (two tanh layers, then one logit per plan) reads the pooled summary with the
  ``G`` global features, which are fractions of the cluster and of the window already (free
  GPU and CPU shares, window fill, backlog, progress).

So ``J`` is read off the observation's length (``(len - G) / W``), permuting the jobs leaves
the logits unchanged, and observations of several windows stack into one batch by padding
empty rows (:meth:`SetPlanNet.stack`).  The row features are the env's own: the one-hot type,
waiting time, remaining share (and, with ``features="extended"``, log remaining work and
requested size), the allocation columns (zero at a slot's start); all are in ``[0, 1]``
whatever the cluster's size.  It has :class:`~agents.episode_pg.MaskedMLP`'s interface
(``forward(obs, masks)``, :meth:`logits_one`, :meth:`act`), so EpisodePG, behaviour cloning,
the saved-policy format and :class:`~agents.plan_policy.PlanPolicy` take either network.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch as th
from torch import nn

from envs.sim.errors import ConfigError

__all__ = ["COUNT_SCALE", "SetPlanNet", "stack_padded"]

#: The job count's scale: ``log1p(n) / log1p(COUNT_SCALE)`` is 1 at 64 jobs (larger windows
#: give values above 1, still bounded by the log).
COUNT_SCALE = 64


def stack_padded(
    obs: Sequence[npt.NDArray[np.float32]], n_globals: int, fill: float
) -> npt.NDArray[np.float32]:
    """Flat observations of a set network as one batch: ``np.stack`` when they have one
    length; else each padded to the longest with ``fill`` between its rows and its last
    ``n_globals`` global features (which stay at the end), so the rows of every observation
    start at 0 and its globals end the row."""
    sizes = {o.shape[-1] for o in obs}
    if len(sizes) <= 1:
        return np.stack(obs)
    width = max(sizes)
    out = np.full((len(obs), width), fill, dtype=np.float32)
    for i, o in enumerate(obs):
        n = o.shape[-1] - n_globals
        out[i, :n] = o[:n]
        out[i, width - n_globals :] = o[n:]
    return out


class OneObservation(nn.Module):
    """What the set networks share: the logits of one observation and the masked argmax."""

    def logits_one(self, obs: npt.NDArray[np.float32], mask: npt.NDArray[np.bool_]) -> th.Tensor:
        """The logits of one observation, without gradients."""
        with th.no_grad():
            return self(th.as_tensor(obs)[None], th.as_tensor(mask)[None])[0]

    def act(self, env: Any, obs: npt.NDArray[np.float32]) -> int:
        """The masked argmax (the deterministic policy)."""
        return int(self.logits_one(obs, env.action_masks()).argmax())


class SetPlanNet(OneObservation):
    """Plan observation of any window ``J`` -> one logit per plan (see the module docstring);
    impossible actions get -1e9, as :class:`~agents.episode_pg.MaskedMLP`'s."""

    arch = "set"

    def __init__(self, row_width: int, n_globals: int, n_actions: int, hidden: int = 64) -> None:
        super().__init__()
        for name, v, lo in (("row_width", row_width, 1), ("n_globals", n_globals, 0),
                            ("n_actions", n_actions, 1), ("hidden", hidden, 1)):  # fmt: skip
            if int(v) < lo:
                raise ConfigError(f"SetPlanNet: {name} must be >= {lo}, got {v}")
        self.row_width, self.n_globals = int(row_width), int(n_globals)
        self.n_actions, self.hidden = int(n_actions), int(hidden)
        h = self.hidden
        self.phi = nn.Sequential(
            nn.Linear(self.row_width, h), nn.Tanh(),
            nn.Linear(h, h), nn.Tanh(),
        )  # fmt: skip
        self.rho = nn.Sequential(
            nn.Linear(2 * h + 1 + self.n_globals, h), nn.Tanh(),
            nn.Linear(h, h), nn.Tanh(),
            nn.Linear(h, self.n_actions),
        )  # fmt: skip

    # ------------------------------------------------------------------ layout
    def window_of(self, size: int) -> int:
        """The window ``J`` of a plan observation of ``size`` entries; a size that is not
        ``J * row_width + n_globals`` is a :class:`ConfigError`."""
        J, rest = divmod(int(size) - self.n_globals, self.row_width)
        if J < 0 or rest:
            raise ConfigError(
                f"a plan observation of {size} entries is not J rows of {self.row_width} job "
                f"features plus {self.n_globals} global features (the features this network "
                "was trained with: give the evaluation env the same env.features)"
            )
        return J

    def describe(self) -> dict[str, Any]:
        """What rebuilds this network (saved with its weights)."""
        return {
            "arch": self.arch,
            "row_width": self.row_width,
            "n_globals": self.n_globals,
            "n_actions": self.n_actions,
            "hidden": self.hidden,
        }

    def stack(self, obs: Sequence[npt.NDArray[np.float32]]) -> npt.NDArray[np.float32]:
        """Observations of possibly different windows as one batch: each padded to the
        largest window with empty rows (zeros) before its global features, which the network
        leaves out; the same windows stack as ``np.stack``."""
        if len({o.shape[-1] for o in obs}) > 1:
            for o in obs:
                self.window_of(o.shape[-1])  # each a layout of this network
        return stack_padded(obs, self.n_globals, 0.0)

    # ------------------------------------------------------------------ network
    def forward(self, obs: th.Tensor, masks: th.Tensor) -> th.Tensor:
        B, size = obs.shape
        J = self.window_of(size)
        W = self.row_width
        rows = obs[:, : J * W].reshape(B, J, W)
        glob = obs[:, J * W :]
        present = (rows != 0).any(-1)  # (B, J): a window position that holds a job
        keep = present.unsqueeze(-1)
        enc = self.phi(rows) * keep
        n = present.sum(-1, keepdim=True).to(obs.dtype)
        mean = enc.sum(1) / n.clamp(min=1.0)
        # tanh's range is (-1, 1): -1 marks the empty positions; 0 when no position is full
        top = enc.masked_fill(~keep, -1.0).amax(1) * (n > 0) if J else obs.new_zeros(B, self.hidden)
        count = th.log1p(n) / math.log1p(COUNT_SCALE)
        logits = self.rho(th.cat([mean, top, count, glob], -1))
        return logits.masked_fill(~masks, -1e9)
