"""Experience replay of recent slots' decisions (DL² §4.3, reference-code notes §7.4).

A ring buffer (FIFO eviction) of decisions that already have their return: observation, mask,
action, return, and the log-probability the behaviour policy gave the stored action.  Sampling
is uniform, or proportional to priorities (``p_i^alpha``, new samples at the current maximum;
after an update a sample's priority becomes ``min(|advantage| + 0.01, 4)`` as in DL²'s code),
with the usual importance weight ``(N P(i))^-beta / max`` and ``beta`` annealed to 1.

Off-policy correction of replayed samples (an option of the learner): the truncated importance
ratio ``min(c, pi(a|s) / mu(a|s))`` with ``mu`` the stored behaviour probability; DL²'s code
uses replayed samples uncorrected.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from envs.files import atomic_path
from envs.sim.errors import ConfigError, check_number

__all__ = ["ReplayBuffer", "ReplayConfig"]

PathLike = str | os.PathLike[str]


@dataclass
class ReplayConfig:
    """``capacity`` decisions (0 disables replay); ``batch_size`` replayed per gradient step;
    ``correction``: ``"truncated_is"`` (ratio clipped at ``clip``) or ``"none"`` (DL²'s code);
    ``prioritized`` with ``alpha``, ``beta`` from ``beta_start`` to 1 by ``beta_step`` per
    sampled batch."""

    capacity: int = 8192
    batch_size: int = 256
    correction: str = "truncated_is"
    clip: float = 1.0
    prioritized: bool = False
    alpha: float = 0.9
    beta_start: float = 0.1
    beta_step: float = 1e-4

    def validate(self) -> None:
        if self.capacity < 0 or self.batch_size < 0:
            raise ConfigError("replay.capacity and replay.batch_size must be >= 0")
        if self.capacity > 0 and self.batch_size < 1:
            raise ConfigError(
                f"replay.batch_size must be >= 1 with replay on (capacity {self.capacity}), "
                f"got {self.batch_size}; replay.capacity=0 turns replay off"
            )
        if self.correction not in ("truncated_is", "none"):
            raise ConfigError(
                f"replay.correction must be 'truncated_is' or 'none', got {self.correction!r}"
            )
        check_number(self.clip, "replay.clip", gt=0)
        for key in ("alpha", "beta_start"):
            value = check_number(getattr(self, key), f"replay.{key}", ge=0)
            if value > 1:
                raise ConfigError(f"replay.{key} must be in [0, 1], got {value}")
        check_number(self.beta_step, "replay.beta_step", ge=0)


class ReplayBuffer:
    """Fixed-capacity FIFO of decisions with returns (see the module docstring)."""

    def __init__(self, config: ReplayConfig, obs_dim: int, n_actions: int) -> None:
        config.validate()
        self.config = config
        cap = max(int(config.capacity), 1)
        self.obs = np.zeros((cap, obs_dim), dtype=np.float32)
        self.masks = np.zeros((cap, n_actions), dtype=bool)
        self.actions = np.zeros(cap, dtype=np.int64)
        self.returns = np.zeros(cap, dtype=np.float32)
        self.logp = np.zeros(cap, dtype=np.float32)
        self.priority = np.zeros(cap, dtype=np.float64)
        self.size = 0
        self.pos = 0
        self.beta = config.beta_start
        self.max_priority = 1.0

    def __len__(self) -> int:
        return self.size

    @property
    def enabled(self) -> bool:
        return self.config.capacity > 0

    def add(
        self,
        obs: npt.NDArray[np.float32],
        masks: npt.NDArray[np.bool_],
        actions: npt.NDArray[np.int64],
        returns: npt.NDArray[np.float32],
        logp: npt.NDArray[np.float32],
    ) -> None:
        """Append a batch of decisions (oldest evicted first)."""
        if not self.enabled:
            return
        cap = len(self.actions)
        for i in range(len(actions)):
            k = self.pos
            self.obs[k] = obs[i]
            self.masks[k] = masks[i]
            self.actions[k] = actions[i]
            self.returns[k] = returns[i]
            self.logp[k] = logp[i]
            self.priority[k] = self.max_priority
            self.pos = (k + 1) % cap
            self.size = min(self.size + 1, cap)

    def sample(
        self, n: int, rng: np.random.Generator
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """``(indices, weights)`` of ``n`` samples; weights are the prioritised-sampling
        correction (all 1 when sampling is uniform)."""
        if self.size == 0 or n <= 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        if not self.config.prioritized:
            return rng.integers(self.size, size=n), np.ones(n, dtype=np.float32)
        p = self.priority[: self.size] ** self.config.alpha
        p = p / p.sum()
        idx = rng.choice(self.size, size=n, p=p)
        w = (self.size * p[idx]) ** (-self.beta)
        w = w / (self.size * p.min()) ** (-self.beta)  # normalised by the largest weight
        self.beta = min(1.0, self.beta + self.config.beta_step)
        return idx.astype(np.int64), w.astype(np.float32)

    def update_priorities(self, idx: npt.NDArray[np.int64], advantages: np.ndarray) -> None:
        """DL²'s rule: ``min(|advantage| + 0.01, 4)``."""
        if not self.config.prioritized or len(idx) == 0:
            return
        pr = np.minimum(np.abs(np.asarray(advantages, dtype=np.float64)) + 0.01, 4.0)
        self.priority[idx] = pr
        self.max_priority = max(self.max_priority, float(pr.max()))

    def importance(self, logp_now: np.ndarray, idx: npt.NDArray[np.int64]) -> np.ndarray:
        """Off-policy weights of replayed samples ``idx`` given their current log-probs."""
        if self.config.correction == "none":
            return np.ones(len(idx), dtype=np.float32)
        ratio = np.exp(np.asarray(logp_now, dtype=np.float64) - self.logp[idx])
        return np.minimum(ratio, self.config.clip).astype(np.float32)

    # ------------------------------------------------------------------ persistence
    def save(self, path: PathLike) -> None:
        """Write the buffer to ``path`` (``.npz``), atomically."""
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            self._savez(f)

    def _savez(self, f: Any) -> None:
        np.savez_compressed(
            f,
            obs=self.obs,
            masks=self.masks,
            actions=self.actions,
            returns=self.returns,
            logp=self.logp,
            priority=self.priority,
            state=np.array([self.size, self.pos, self.beta, self.max_priority]),
        )

    def load(self, path: PathLike) -> None:
        with np.load(Path(path)) as d:
            if d["obs"].shape != self.obs.shape or d["masks"].shape != self.masks.shape:
                raise ConfigError(f"{path}: replay buffer of another shape")
            for name in ("obs", "masks", "actions", "returns", "logp", "priority"):
                getattr(self, name)[:] = d[name]
            size, pos, beta, maxp = d["state"]
        self.size, self.pos, self.beta, self.max_priority = (
            int(size),
            int(pos),
            float(beta),
            float(maxp),
        )
