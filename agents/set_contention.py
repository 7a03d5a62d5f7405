"""A size-agnostic policy network for ``dlsched/Contention-v0``: one set of weights for any
number of servers, GPUs per server and window ``J``.

Why: :class:`~agents.episode_pg.MaskedMLP` reads Contention-v0's flat observation, whose size
is ``J * 9 + servers * 4 + 3``, so a policy trained on 16 servers refuses every other cluster
(issue 36).  This network reads the observation as what it is, two sets and a few globals
(:class:`~envs.gym.contention_env.ContentionEnv`'s layout):

* **servers**: each server's row ``[free memory share, log GPU load, NIC tasks / 4, running
  workers / GPUs]`` (already fractions of the server) through one shared encoder ``psi``,
  pooled by mean and max: the cluster's summary, the same size for 4 or 256 servers;
* **jobs**: each window row (model, log2 GPUs, log service and waiting time, fits, present)
  through one shared encoder ``phi``; empty rows (``present`` = 0) are left out of the mean
  and max over the window, and their job count enters as ``log1p(n) / log1p(64)``;
* **scores**: each job's encoding with the context (the two summaries, the count and the
  global features) gives one logit per placement candidate (a shared head: the score of
  starting that job with that placement), and the context alone gives the logit of waiting.

The action layout is the env's (``a = j * C + c``, ``J * C`` waits), so ``J`` is read off the
mask (``(len(mask) - 1) / C``) and the number of servers off the observation's length; a
length that is not ``J`` job rows, whole server rows and the globals is one
:class:`ConfigError`.  Observations of several cluster sizes (a distribution of settings,
:class:`~envs.gym.contention_env.ContentionMixEnv`) stack into one batch padded with server
rows of :data:`PAD`, which the pooling leaves out (:meth:`SetContentionNet.stack`).
Permuting the servers leaves the logits unchanged; permuting the window's
jobs permutes their logits with them (``tests/agents/test_set_contention.py``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch as th
from torch import nn

from agents.set_plan import COUNT_SCALE, OneObservation, stack_padded
from envs.sim.errors import ConfigError

__all__ = ["PAD", "SetContentionNet"]

#: the value of a padded server row's every entry in a batch of several cluster sizes
#: (:meth:`SetContentionNet.stack`): a real server's features are never negative
PAD = -1.0


def _encoder(width: int, h: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(width, h), nn.Tanh(), nn.Linear(h, h), nn.Tanh())


class SetContentionNet(OneObservation):
    """Contention-v0 observation of any cluster and window -> a logit per (job, placement)
    and one for waiting (module docstring); impossible actions get -1e9, as
    :class:`~agents.episode_pg.MaskedMLP`'s."""

    arch = "contention_set"

    def __init__(
        self,
        job_width: int,
        server_width: int,
        n_globals: int,
        n_placements: int,
        hidden: int = 64,
    ) -> None:
        super().__init__()
        for name, v, lo in (("job_width", job_width, 1), ("server_width", server_width, 1),
                            ("n_globals", n_globals, 0), ("n_placements", n_placements, 1),
                            ("hidden", hidden, 1)):  # fmt: skip
            if int(v) < lo:
                raise ConfigError(f"SetContentionNet: {name} must be >= {lo}, got {v}")
        self.job_width, self.server_width = int(job_width), int(server_width)
        self.n_globals, self.n_placements, self.hidden = (
            int(n_globals),
            int(n_placements),
            int(hidden),
        )
        h = self.hidden
        self.psi = _encoder(self.server_width, h)
        self.phi = _encoder(self.job_width, h)
        self.context = nn.Sequential(nn.Linear(4 * h + 1 + self.n_globals, h), nn.Tanh())
        self.score = nn.Sequential(nn.Linear(2 * h, h), nn.Tanh(), nn.Linear(h, self.n_placements))
        self.wait = nn.Linear(h, 1)

    # ------------------------------------------------------------------ layout
    def layout(self, size: int, n_actions: int) -> tuple[int, int]:
        """``(J, servers)`` of an observation of ``size`` entries with ``n_actions`` actions; a
        layout that is not ``J`` job rows, whole server rows and the globals is a
        :class:`ConfigError`."""
        J, rest = divmod(int(n_actions) - 1, self.n_placements)
        servers, left = divmod(int(size) - J * self.job_width - self.n_globals, self.server_width)
        if J < 0 or rest or servers < 1 or left:
            raise ConfigError(
                f"a Contention-v0 observation of {size} entries with {n_actions} actions is not "
                f"J job rows of {self.job_width}, server rows of {self.server_width} and "
                f"{self.n_globals} globals with {self.n_placements} placement candidates (the "
                "layout this network was trained with: the same placements and features)"
            )
        return J, servers

    def describe(self) -> dict[str, Any]:
        """What rebuilds this network (saved with its weights)."""
        return {
            "arch": self.arch,
            "job_width": self.job_width,
            "server_width": self.server_width,
            "n_globals": self.n_globals,
            "n_placements": self.n_placements,
            "hidden": self.hidden,
        }

    def stack(self, obs: Sequence[npt.NDArray[np.float32]]) -> npt.NDArray[np.float32]:
        """Observations as one batch.  Of one cluster: ``np.stack``.  Of clusters of several
        sizes (and one window ``J``, as the batch's masks are): each padded to the most
        servers with server rows of :data:`PAD` before its global features; :meth:`forward`
        pools over the real servers only."""
        return stack_padded(obs, self.n_globals, PAD)

    # ------------------------------------------------------------------ network
    def forward(self, obs: th.Tensor, masks: th.Tensor) -> th.Tensor:
        B, size = obs.shape
        J, S = self.layout(size, masks.shape[1])
        jw, sw = self.job_width, self.server_width
        jobs = obs[:, : J * jw].reshape(B, J, jw)
        servers = obs[:, J * jw : J * jw + S * sw].reshape(B, S, sw)
        glob = obs[:, J * jw + S * sw :]
        srv = self.psi(servers)
        real = servers[..., 0] > PAD  # (B, S): False on the padding of a mixed batch (stack)
        if bool(real.all()):
            srv_pool = th.cat([srv.mean(1), srv.amax(1)], -1)
        else:  # tanh's range is (-1, 1): -1 never wins the max
            keep_srv = real.unsqueeze(-1)
            n_srv = real.sum(-1, keepdim=True).to(obs.dtype).clamp(min=1.0)
            mean_srv = (srv * keep_srv).sum(1) / n_srv
            srv_pool = th.cat([mean_srv, srv.masked_fill(~keep_srv, -1.0).amax(1)], -1)
        present = jobs[..., -1] > 0.5  # (B, J): the row's ``present`` feature
        keep = present.unsqueeze(-1)
        enc = self.phi(jobs) * keep
        n = present.sum(-1, keepdim=True).to(obs.dtype)
        mean = enc.sum(1) / n.clamp(min=1.0)
        # tanh's range is (-1, 1): -1 marks the empty rows; 0 when no row holds a job
        top = enc.masked_fill(~keep, -1.0).amax(1) * (n > 0) if J else obs.new_zeros(B, self.hidden)
        count = th.log1p(n) / math.log1p(COUNT_SCALE)
        ctx = self.context(th.cat([srv_pool, mean, top, count, glob], -1))
        per_job = self.score(th.cat([enc, ctx.unsqueeze(1).expand(B, J, self.hidden)], -1))
        logits = th.cat([per_job.reshape(B, J * self.n_placements), self.wait(ctx)], -1)
        return logits.masked_fill(~masks, -1e9)
