"""DL²'s actor-critic over the slot's plan: the group learner plus a critic and experience
replay (job-aware exploration is the rollouts', :class:`~agents.exploration.StarvedJobExploration`).

Why: DL²'s learner (critic baseline, job-aware exploration, experience replay; DL² §4.3) in
per-increment actions moves a confident clone by 0.1-0.3%; one action per slot with the
input-driven group baseline is what learned (docs/experiments/against-heuristics.md).
:class:`PlanA2C` keeps that base and adds DL²'s other two ingredients, each of which can be
switched off (the ablation of ``python train.py +agent=a2c``):

* **Critic**: a value network ``V(s)`` of the plan network's architecture (one output) beside
  the group baseline.  The group baseline removes what the workload decides; the critic
  predicts what is left, the advantage ``y`` of the decision's state (in units of the
  iteration's advantage spread), and the actor learns from ``y - V(s)``.  ``V`` is fitted
  after the actor's step on the iteration's samples (``vf_epochs`` passes of mean squared
  error, its own Adam at the actor's rate), so the advantages of an iteration never use a
  critic that has seen them.
* **Experience replay**: the decisions of the last ``replay`` iterations are kept (their
  observations, actions, behaviour log-probabilities and targets ``y``); each update adds
  ``replay_share`` times the iteration's decisions drawn from them, with the critic's current
  ``V`` and the truncated importance weight ``min(1, pi / mu)`` of the policy at the update's
  start against the policy that sampled them (ACER's truncation); PPO's ratio for them is
  taken against the policy at the update's start.

Every draw (replay samples, mini-batches) comes from the learner's seeded generators.
"""

from __future__ import annotations

import collections
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch as th
from torch import nn

from agents.episode_pg import Episode, EpisodePG, EpisodePGConfig, PolicyNet, Samples, build_net
from agents.exploration import StarvedJobExploration
from envs.gym.contention_env import CONTENTION_ENV_ID, ContentionEnv
from envs.gym.plan_env import GLOBAL_FEATURES, PlanEnv
from envs.sim.errors import ConfigError

__all__ = ["PlanA2C", "PlanA2CConfig", "build_plan_a2c", "starved_job_exploration"]


@dataclass
class PlanA2CConfig:
    """``agent.a2c`` of ``train.py +agent=a2c``.  ``critic``: the value network beside the
    group baseline (``vf_epochs`` passes of its regression per update); ``replay``: iterations
    of decisions kept (0: no replay); ``replay_share``: replayed decisions per decision of the
    iteration; ``explore``: job-aware exploration's ε, the uniform share of the sampling in
    slots where a window job starves (0: off), ``starve_stay``: how long (slots since arrival
    / 100) a job without progress has waited to count as starving
    (:class:`~agents.exploration.StarvedJobExploration`)."""

    critic: bool = True
    vf_epochs: int = 4
    replay: int = 4
    replay_share: float = 0.5
    explore: float = 0.1
    starve_stay: float = 0.1

    def check(self, iterations: int | None = None) -> None:
        if int(self.vf_epochs) < 1:
            raise ConfigError(f"agent.a2c.vf_epochs must be >= 1, got {self.vf_epochs}")
        if int(self.replay) < 0:
            raise ConfigError(f"agent.a2c.replay must be >= 0 iterations, got {self.replay}")
        for key in ("explore", "starve_stay"):
            v = float(getattr(self, key))
            if not (math.isfinite(v) and 0.0 <= v < 1.0):
                raise ConfigError(f"agent.a2c.{key} must be in [0, 1), got {getattr(self, key)}")
        share = float(self.replay_share)
        if not (math.isfinite(share) and 0.0 <= share <= 8.0):
            raise ConfigError(f"agent.a2c.replay_share must be in [0, 8], got {self.replay_share}")
        if iterations is not None and self.replay >= iterations > 0 and share > 0:
            raise ConfigError(
                f"agent.a2c.replay={self.replay} iterations is not less than the run's "
                f"{iterations} iterations: the buffer would hold the whole run; use fewer"
            )


def no_starved_jobs(explore: float, env_id: str) -> ConfigError:
    """The error of job-aware exploration asked for in an env other than ClusterPlan-v0."""
    return ConfigError(
        f"agent.a2c.explore={explore} is the job-aware exploration over the slot's plans "
        f"(starved jobs in ClusterPlan-v0's observation); {env_id} has no such rule: set "
        "agent.a2c.explore=0 (as +agent=contention_a2c does)"
    )


def starved_job_exploration(cfg: PlanA2CConfig, env: Any) -> StarvedJobExploration | None:
    """``cfg``'s job-aware exploration for plan env ``env`` (``None`` when ``explore`` is 0)."""
    if cfg.explore <= 0:
        return None
    if not isinstance(env, PlanEnv):
        where = CONTENTION_ENV_ID if isinstance(env, ContentionEnv) else type(env).__name__
        raise no_starved_jobs(cfg.explore, where)
    return StarvedJobExploration(float(cfg.explore), env.row_width, int(env.inner.L),
                                 len(GLOBAL_FEATURES), stay=float(cfg.starve_stay))  # fmt: skip


def build_plan_a2c(agent: Any, env: Any, net: PolicyNet, config: EpisodePGConfig) -> PlanA2C:
    """The learner of ``agent.algo=plan_a2c`` (:data:`agents.learners.LEARNERS`): PlanA2C
    with ``agent.a2c``'s critic, replay and job-aware exploration."""
    pg = PlanA2C(env, net, config, agent.a2c)
    pg.explore = starved_job_exploration(agent.a2c, env)
    return pg


class PlanA2C(EpisodePG):
    """:class:`~agents.episode_pg.EpisodePG` with a critic and experience replay (module
    docstring).  With both off it is EpisodePG, bit for bit."""

    def __init__(
        self, env: Any, net: PolicyNet, config: EpisodePGConfig, a2c: PlanA2CConfig
    ) -> None:
        super().__init__(env, net, config)
        a2c.check()
        self.a2c = a2c
        self.critic: PolicyNet | None = None
        if a2c.critic and getattr(net, "arch", "mlp") == "contention_set":
            raise ConfigError(
                "agent.a2c.critic needs a network of one output per observation; the "
                "size-agnostic Contention-v0 network (agent.contention.arch=set) has none yet: "
                "set agent.a2c.critic=false"
            )
        if a2c.critic:
            described = {**net.describe(), "n_actions": 1}
            self.critic = build_net(described)
            self.vf_opt = th.optim.Adam(self.critic.parameters(), lr=config.lr)
        self.buffer: collections.deque[Samples] = collections.deque(maxlen=max(a2c.replay, 1))
        self.replay_rng = np.random.default_rng([config.seed, 2])

    def training_state(self) -> dict[str, Any]:
        """EpisodePG's, plus the critic, its optimiser, the replay buffer and its generator."""
        out = super().training_state()
        out["replay_rng"] = self.replay_rng.bit_generator.state
        out["buffer"] = list(self.buffer)
        if self.critic is not None:
            out["critic"], out["vf_opt"] = self.critic.state_dict(), self.vf_opt.state_dict()
        return out

    def load_training_state(self, state: dict[str, Any]) -> None:
        super().load_training_state(state)
        self.replay_rng.bit_generator.state = state["replay_rng"]
        self.buffer.clear()
        self.buffer.extend(state["buffer"])
        if self.critic is not None:
            self.critic.load_state_dict(state["critic"])
            self.vf_opt.load_state_dict(state["vf_opt"])

    def _values(self, obs_t: th.Tensor) -> th.Tensor:
        assert self.critic is not None
        ones = th.ones((obs_t.shape[0], 1), dtype=th.bool)
        return self.critic(obs_t, ones)[:, 0]

    def _replayed(self, n: int) -> Samples | None:
        """``n`` decisions drawn uniformly from the buffer (``None``: nothing to replay)."""
        pool = list(self.buffer)
        total = sum(len(s.acts) for s in pool)
        if n < 1 or total == 0:
            return None
        picks = np.sort(self.replay_rng.choice(total, size=min(n, total), replace=False))
        obs, masks, acts, lmu, adv = [], [], [], [], []
        start = 0
        for s in pool:
            size = len(s.acts)
            for i in picks[(picks >= start) & (picks < start + size)] - start:
                obs.append(s.obs[i])
                masks.append(s.masks[i])
                acts.append(s.acts[i])
                lmu.append(s.lmu[i])
                adv.append(s.adv[i])
            start += size
        return Samples(obs, masks, acts, [], lmu, np.asarray(adv, dtype=np.float64))

    def update(self, groups: list[list[Episode]]) -> dict[str, float]:
        cfg = self.a2c
        if not cfg.critic and (cfg.replay == 0 or cfg.replay_share == 0):
            return super().update(groups)
        s = self.samples(groups)
        s.adv = s.adv / (s.adv.std() + 1e-8)  # targets y in units of this iteration's spread
        n_new = len(s.acts)
        obs, masks, acts = list(s.obs), list(s.masks), list(s.acts)
        lpi, lmu, y = list(s.lpi), list(s.lmu), [s.adv]
        old = self._replayed(round(cfg.replay_share * n_new)) if cfg.replay > 0 else None
        if old is not None:
            obs += old.obs
            masks += old.masks
            acts += old.acts
            lmu += old.lmu
            y.append(old.adv)
        obs_t, mask_t = th.as_tensor(self.net.stack(obs)), th.as_tensor(np.array(masks))
        act_t = th.as_tensor(acts)
        if old is not None:  # PPO's ratio against the policy at the update's start
            with th.no_grad():
                logp = th.log_softmax(self.net(obs_t[n_new:], mask_t[n_new:]).double(), -1)
            lpi += logp.gather(1, act_t[n_new:, None])[:, 0].tolist()
        targets = np.concatenate(y)
        adv = targets
        if self.critic is not None:
            with th.no_grad():
                adv = targets - self._values(obs_t).double().numpy()
        adv = adv / (adv.std() + 1e-8)
        out = self.optimise(obs_t, mask_t, act_t, lpi, lmu, adv)
        if self.critic is not None:
            out.update(self._fit_critic(obs_t, th.as_tensor(targets, dtype=th.float32)))
        out["replayed"] = float(len(acts) - n_new)
        rets = [e.ret for eps in groups for e in eps]
        out["return"] = float(np.mean(rets))
        out["decisions"] = float(n_new)
        if cfg.replay > 0:
            self.buffer.append(s)
        return out

    def _fit_critic(self, obs_t: th.Tensor, targets: th.Tensor) -> dict[str, float]:
        """``vf_epochs`` passes of mean squared error of ``V`` on ``targets``; the mean loss and
        the explained variance of the targets before the fit."""
        assert self.critic is not None
        with th.no_grad():
            before = self._values(obs_t)
            var = float(targets.var())
            explained = 1.0 - float((targets - before).var()) / var if var > 0 else 0.0
        total, n = 0.0, 0
        for _ in range(self.a2c.vf_epochs):
            for idx in th.randperm(len(targets), generator=self.gen).split(self.cfg.batch_size):
                loss = ((self._values(obs_t[idx]) - targets[idx]) ** 2).mean()
                self.vf_opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(self.critic.parameters(), 0.5)
                self.vf_opt.step()
                total += float(loss.detach())
                n += 1
        return {"value_loss": total / max(n, 1), "explained_variance": explained}
