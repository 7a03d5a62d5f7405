"""Group PPO: batched full-episode rollouts, an input-driven baseline, anchored fine-tuning.

Why: rollouts of the same workload run side by side to the end of their episodes, so each
decision's advantage is measured against the group's return at the same simulated time (an
input-driven baseline, Decima's idea) rather than a critic that cannot see which workload it
is in; PPO's trust region and a KL anchor to the behaviour-cloned policy keep fine-tuning
close to the clone.  The iteration (rollouts, advantages, update, anchor) is described at
:class:`GroupPPO`; rollouts are in :mod:`agents.rollouts`, baselines in :mod:`agents.baselines`.
Details: docs/design/learning.md#the-group-learner-agentsgrouppy-rolloutspy-baselinespy
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch as th
from stable_baselines3 import A2C
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.type_aliases import GymEnv
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from agents.baselines import group_advantages
from agents.policy import DL2Policy, MaskedPredict, NumpyPolicy, masked_logits, setup_policy
from agents.rollouts import Batch, run_batched
from envs.gym.cluster_env import ClusterEnv
from envs.gym.workloads import Mixture, scenario_envs
from envs.sim.errors import ConfigError

__all__ = ["BASELINES", "GroupConfig", "GroupPPO", "anchor_kl"]

#: Advantage baselines of :class:`GroupPPO`.
BASELINES = ("group", "critic")


@dataclass
class GroupConfig:
    """The group learner's own settings (``agent.group`` in the configs).

    ``groups``: workload seeds per iteration; ``group_size``: rollouts per workload seed
    (K; the learner runs ``groups x group_size`` env copies); ``baseline``: ``group`` | ``critic``;
    ``sample_fraction``: share of the decisions trained on (kept with probability growing
    with ``1 - pi(a|s)``, weighted: unbiased); ``n_epochs``,
    ``batch_size``, ``clip_range``, ``target_kl`` (``0`` = no early stop): PPO's update;
    ``temperature`` (>= 1): rollouts sample from ``softmax(logits / temperature)`` and the
    update weights each decision by the truncated importance ratio ``min(1, pi / mu)``
    (exploration for a confident clone; 1 = on-policy); ``anchor_coef`` (``0`` = off),
    ``anchor_half_life`` (decisions; ``0`` = no decay):
    the KL anchor to the cloned policy; ``critic_warmup``: iterations that fit only the
    critic."""

    groups: int = 4
    group_size: int = 4
    baseline: str = "group"
    sample_fraction: float = 0.25
    n_epochs: int = 2
    batch_size: int = 2048
    clip_range: float = 0.2
    target_kl: float = 0.02
    temperature: float = 1.0
    anchor_coef: float = 0.0
    anchor_half_life: float = 0.0
    critic_warmup: int = 0

    def check(self, n_envs: int) -> None:
        """Clear errors for inconsistent settings (before anything runs)."""
        if self.groups < 1:
            raise ConfigError(f"agent.group.groups must be >= 1, got {self.groups}")
        if self.group_size < 1:
            raise ConfigError(f"agent.group.group_size must be >= 1, got {self.group_size}")
        if n_envs % self.group_size:
            raise ConfigError(
                f"n_envs={n_envs} is not a multiple of agent.group.group_size="
                f"{self.group_size}: every workload seed runs group_size rollouts"
            )
        if self.baseline not in BASELINES:
            raise ConfigError(
                f"agent.group.baseline must be one of {list(BASELINES)}, got {self.baseline!r}"
            )
        if self.baseline == "group" and self.group_size < 2:
            raise ConfigError(
                "agent.group.baseline=group needs group_size >= 2 (with one rollout per "
                "workload the advantage is always 0); use baseline=critic or a larger group"
            )
        if not 0.0 < self.sample_fraction <= 1.0:
            raise ConfigError(
                f"agent.group.sample_fraction must be in (0, 1], got {self.sample_fraction}"
            )
        for name in ("n_epochs", "batch_size"):
            if getattr(self, name) < 1:
                raise ConfigError(f"agent.group.{name} must be >= 1, got {getattr(self, name)}")
        if not (np.isfinite(self.temperature) and self.temperature >= 1.0):
            raise ConfigError(
                f"agent.group.temperature must be a finite number >= 1, got {self.temperature}"
            )
        for name in ("clip_range", "target_kl", "anchor_coef", "anchor_half_life"):
            v = float(getattr(self, name))
            if not (np.isfinite(v) and v >= 0):
                raise ConfigError(f"agent.group.{name} must be a finite number >= 0, got {v}")
        if self.critic_warmup < 0:
            raise ConfigError(f"agent.group.critic_warmup must be >= 0, got {self.critic_warmup}")


def anchor_kl(teacher_logits: th.Tensor, logits: th.Tensor, masks: th.Tensor) -> th.Tensor:
    """Per-sample ``KL(teacher || policy)`` over the valid actions (masked logits: ``-inf``
    where invalid); exactly 0 when the two agree."""
    lt = th.log_softmax(teacher_logits, dim=1)
    ls = th.log_softmax(logits, dim=1)
    pt = lt.exp()
    diff = (lt - ls).masked_fill(~masks, 0.0)
    return (pt * diff).sum(dim=1)


class GroupPPO(MaskedPredict, A2C):
    """Group PPO.  ``env`` must be an in-process vector env of :class:`ClusterEnv` copies (its
    ``num_envs`` = groups x ``group.group_size``).

    One iteration of :class:`GroupPPO`:

    1. **Rollouts** (:func:`agents.rollouts.run_batched`): ``groups x group_size`` env copies run
       one episode each in lockstep with one batched policy forward per step; the ``group_size``
       rollouts of a group share a workload seed (drawn from the learner's seeded generator) and
       differ only in their action draws (each its own seeded generator).  With a workload
       mixture (:mod:`envs.gym.workloads`) each group runs on a freshly drawn scenario (cluster
       size, arrival rate, or a real trace window).
    2. **Advantages** (:mod:`agents.baselines`, ``baseline``): ``"group"`` (Decima, no critic):
       return-to-go minus the mean return-to-go of the group's rollouts at the same simulated time;
       ``"critic"``: return-to-go minus ``V(s)``.  Returns are discounted per slot of simulated
       time by ``gamma`` (1 = the episode sum: with the env's ``jct`` reward, minus the job-time
       still to come).  ``normalize_advantage`` divides them by their standard deviation.
    3. **Update** (PPO's trust region): ``n_epochs`` passes of mini-batches of ``batch_size``
       over the kept decisions (about ``sample_fraction`` of them, each kept with a probability
       that grows with ``1 - pi(a|s)`` and weighted by its inverse, :func:`~agents.rollouts.
       run_batched`: decisions of one slot share their advantage and are near copies, and a
       confident policy's gradient lives in its rare off-mode choices), clipped ratio
       (``clip_range``), early stop when the approximate KL to the behaviour policy passes
       ``1.5 * target_kl``; entropy bonus ``ent_coef``; the critic (``vf_coef``) is always fitted
       to the returns (its loss is logged; with ``baseline="group"`` it only learns, it is not
       used).
    4. **Anchor** (kickstarting / DAPG's idea): ``+ anchor_coef * 0.5 ** (t / anchor_half_life) *
       KL(teacher || policy)``, the teacher being a frozen copy of the policy when learning
       started (the behaviour-cloned weights).  ``critic_warmup`` iterations fit only the critic
       before the actor moves.

    An SB3 :class:`~stable_baselines3.A2C` subclass (``learn``, callbacks, logger, TensorBoard,
    save/load and checkpoints are SB3's); every random draw comes from ``self._rng`` (saved
    with the model), so a run is reproducible from its seed and resumes identically at an
    iteration boundary.
    """

    def __init__(
        self,
        policy: Any = DL2Policy,
        env: GymEnv | str | None = None,
        learning_rate: float = 3e-4,
        gamma: float = 1.0,
        ent_coef: float = 0.001,
        vf_coef: float = 0.5,
        max_grad_norm: float = 1.0,
        *,
        group: GroupConfig | None = None,
        mixture: Mixture | None = None,
        normalize_advantage: bool = True,
        policy_kwargs: dict[str, Any] | None = None,
        tensorboard_log: str | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: th.device | str = "cpu",
        _init_setup_model: bool = True,
    ) -> None:
        self.group = group or GroupConfig()
        self._mixture = mixture
        if not 0.0 < gamma <= 1.0:
            raise ConfigError(f"gamma must be in (0, 1], got {gamma}")
        super().__init__(
            policy=policy,
            env=env,  # type: ignore[arg-type]
            learning_rate=learning_rate,
            n_steps=1,  # unused: an iteration is one episode per env
            gamma=gamma,
            ent_coef=ent_coef,
            vf_coef=vf_coef,
            max_grad_norm=max_grad_norm,
            use_rms_prop=False,
            normalize_advantage=normalize_advantage,
            policy_kwargs=policy_kwargs,
            tensorboard_log=tensorboard_log,
            verbose=verbose,
            seed=seed,
            device=device,
            _init_setup_model=_init_setup_model,
        )

    # ------------------------------------------------------------------ setup
    def _setup_model(self) -> None:
        restored = setup_policy(self)
        self.group.check(self.n_envs)
        if not restored:
            self._rng = np.random.default_rng(self.seed)
            self._iteration = 0
            self._anchor_state: dict[str, th.Tensor] | None = None
        self._anchor: DL2Policy | None = None
        self._data: tuple[Any, ...] | None = None
        self._episode_stats: dict[str, float] = {}
        self._labels: list[str] = []  # this iteration's scenarios (with a mixture)
        self._fast = NumpyPolicy(self.policy)  # type: ignore[arg-type]

    def _excluded_save_params(self) -> list[str]:
        return [
            *super()._excluded_save_params(),
            "_anchor",
            "_data",
            "_fast",
            "_mixture",
            "_labels",
        ]

    def set_mixture(self, mixture: Mixture | None) -> None:
        """Draw every group's workload from ``mixture`` (``None``: the env copies' own
        workloads); not saved with the model (a resumed run sets it again)."""
        self._mixture = mixture

    def set_anchor(self) -> None:
        """Freeze the current policy as the anchor's teacher (called after pretraining)."""
        self._anchor_state = {k: v.detach().clone() for k, v in self.policy.state_dict().items()}
        self._anchor = None

    def _anchor_policy(self) -> DL2Policy | None:
        if self.group.anchor_coef <= 0:
            return None
        if self._anchor_state is None:
            raise ConfigError(
                "agent.group.anchor_coef > 0 needs a teacher: pretrain a policy first "
                "(pretrain=<teacher>) or set anchor_coef=0"
            )
        if self._anchor is None:
            anchor = self.policy_class(
                self.observation_space, self.action_space, self.lr_schedule, **self.policy_kwargs
            )
            anchor.load_state_dict(self._anchor_state)
            anchor.set_training_mode(False)
            for p in anchor.parameters():
                p.requires_grad_(False)
            self._anchor = anchor  # type: ignore[assignment]
        return self._anchor

    def anchor_weight(self) -> float:
        """The anchor's coefficient now (decays with the decisions trained on)."""
        g = self.group
        if g.anchor_coef <= 0:
            return 0.0
        if g.anchor_half_life <= 0:
            return float(g.anchor_coef)
        return float(g.anchor_coef * 0.5 ** (self.num_timesteps / g.anchor_half_life))

    def _envs(self, env: VecEnv) -> list[ClusterEnv]:
        if not isinstance(env, DummyVecEnv):
            raise ConfigError(
                "GroupPPO steps its env copies itself: it needs an in-process vector env "
                f"(DummyVecEnv), got {type(env).__name__} (federated Ray envs: use a2c)"
            )
        envs = [e.unwrapped for e in env.envs]
        if not all(isinstance(e, ClusterEnv) for e in envs):
            raise ConfigError("GroupPPO needs ClusterEnv copies")
        return envs  # type: ignore[return-value]

    # ------------------------------------------------------------------ rollouts
    def collect_rollouts(
        self,
        env: VecEnv,
        callback: BaseCallback,
        rollout_buffer: Any,
        n_rollout_steps: int,
    ) -> bool:
        envs = self._envs(env)
        self.policy.set_training_mode(False)
        self._fast.sync()
        K = self.group.group_size
        n = len(envs)
        draws = self._rng.integers(2**31 - 1, size=n // K + n)
        seeds = [int(draws[i // K]) for i in range(n)]  # (drawn with a mixture too: one stream)
        sample_seeds = [int(s) for s in draws[n // K :]]
        self._labels = []
        if self._mixture is not None:  # every group on a freshly drawn scenario
            envs, seeds = [], []
            for _ in range(n // K):
                scenario = self._mixture.draw(self._rng)
                envs.extend(scenario_envs(self._mixture.env, scenario, K))
                seeds.extend([scenario.seed] * K)
                self._labels.append(scenario.label)
        callback.on_rollout_start()
        pending = [0]
        per_tick = max(n, 1)
        stop = [False]

        def on_step(made: int) -> bool:
            self.num_timesteps += made
            pending[0] += made
            while pending[0] >= per_tick:  # SB3's progress bar counts num_envs per on_step
                pending[0] -= per_tick
                callback.update_locals(locals())
                if not callback.on_step():
                    stop[0] = True
                    return False
            return True

        batch = run_batched(
            envs,
            seeds,
            self._fast,
            deterministic=False,
            sample_seeds=sample_seeds,
            record=True,
            record_fraction=self.group.sample_fraction,
            record_rng=self._rng,
            temperature=self.group.temperature,
            on_step=on_step,
        )
        if not any(e.decisions for e in batch.episodes):
            raise ConfigError(
                "an iteration collected no decisions (every episode ended at reset); check "
                "the env's workload and max_slots"
            )
        callback.on_rollout_end()
        if stop[0]:
            return False
        self._data = self._prepare(batch)
        return True

    def _prepare(self, batch: Batch) -> tuple[Any, ...]:
        """The kept decisions with their returns and advantages."""
        K = self.group.group_size
        eps = batch.episodes
        rets = np.zeros(len(batch), dtype=np.float64)
        advs = np.zeros(len(batch), dtype=np.float64)
        for g in range(len(eps) // K):
            members = list(range(g * K, (g + 1) * K))
            r, a = group_advantages(
                [batch.times[batch.rows(e)] for e in members],
                [eps[e].reward_times for e in members],
                [eps[e].rewards for e in members],
                self.gamma,
            )
            for e, re, ad in zip(members, r, a, strict=True):
                rets[batch.rows(e)] = re
                advs[batch.rows(e)] = ad
        jcts = [e.avg_jct_slots for e in eps if e.avg_jct_slots is not None]
        self._episode_stats = {
            "rollout/avg_jct_slots": float(np.mean(jcts)) if jcts else float("nan"),
            "rollout/episodes_truncated": float(sum(not e.terminated for e in eps)),
            "rollout/decisions": float(sum(e.decisions for e in eps)),
            "rollout/trained_decisions": float(len(batch)),
        }
        if self._labels:
            self._episode_stats["rollout/trace_groups"] = float(
                sum(label.startswith("philly") for label in self._labels)
            )
        return (
            batch.obs,
            batch.masks,
            batch.actions,
            batch.logp,
            rets.astype(np.float32),
            advs.astype(np.float32),
            (batch.weights / batch.weights.mean()).astype(np.float32)
            if len(batch)
            else batch.weights.astype(np.float32),
            batch.logp_policy,
        )

    # ------------------------------------------------------------------ update
    def train(self) -> None:
        if self._data is None:
            return
        obs_np, masks_np, actions_np, logp_mu_np, rets_np, advs_np, w_np, logp_np = self._data
        self._data = None
        g = self.group
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        obs = th.as_tensor(obs_np)
        masks = th.as_tensor(masks_np)
        actions = th.as_tensor(actions_np)
        old_logp = th.as_tensor(logp_np)
        returns = th.as_tensor(rets_np)
        weights = th.as_tensor(w_np)  # 1 / keep probability, mean 1
        # tempered rollouts: truncated importance weight pi / mu (exactly 1 at temperature 1)
        weights = weights * th.as_tensor(logp_np - logp_mu_np).exp().clamp(max=1.0)
        if g.baseline == "critic":
            with th.no_grad():
                adv_all = returns - self.policy.predict_values(obs)[:, 0]
        else:
            adv_all = th.as_tensor(advs_np)
        if self.normalize_advantage and len(adv_all) > 1:
            adv_all = adv_all / (adv_all.std() + 1e-8)  # a scale only: the baseline centres
        # the critic learns returns on their own scale
        ret_scale = float(returns.abs().mean()) + 1e-8
        actor_on = self._iteration >= g.critic_warmup
        anchor = self._anchor_policy() if actor_on else None
        w_anchor = self.anchor_weight()
        n = len(actions)
        stats: dict[str, list[float]] = {
            k: [] for k in ("policy_loss", "value_loss", "entropy", "approx_kl", "clip_fraction")
        }
        stats["anchor_kl"] = []
        stop = False
        for _epoch in range(g.n_epochs):
            order = th.as_tensor(self._rng.permutation(n))
            for start in range(0, n, g.batch_size):
                idx = order[start : start + g.batch_size]
                m = masks[idx]
                logits = masked_logits(self.policy, obs[idx], m)  # type: ignore[arg-type]
                logp_all = th.log_softmax(logits, dim=1)
                logp = logp_all.gather(1, actions[idx, None])[:, 0]
                w = weights[idx]
                ent = -(logp_all.exp() * logp_all.masked_fill(~m, 0.0)).sum(dim=1)
                entropy = (w * ent).mean()
                values = self.policy.predict_values(obs[idx])[:, 0]
                value_loss = (w * ((returns[idx] - values) / ret_scale) ** 2).mean()
                loss = self.vf_coef * value_loss
                log_ratio = logp - old_logp[idx]
                ratio = log_ratio.exp()
                adv = adv_all[idx]
                policy_loss = -(
                    w * th.min(ratio * adv, ratio.clamp(1 - g.clip_range, 1 + g.clip_range) * adv)
                ).mean()
                if actor_on:
                    loss = loss + policy_loss - self.ent_coef * entropy
                    if anchor is not None and w_anchor > 0:
                        with th.no_grad():
                            t_logits = masked_logits(anchor, obs[idx], m)
                        kl = (w * anchor_kl(t_logits, logits, m)).mean()
                        loss = loss + w_anchor * kl
                        stats["anchor_kl"].append(float(kl.detach()))
                self.policy.optimizer.zero_grad()
                loss.backward()
                th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
                self.policy.optimizer.step()
                with th.no_grad():
                    approx_kl = float(((ratio - 1) - log_ratio).mean())
                stats["policy_loss"].append(float(policy_loss.detach()))
                stats["value_loss"].append(float(value_loss.detach()))
                stats["entropy"].append(float(entropy.detach()))
                stats["approx_kl"].append(approx_kl)
                stats["clip_fraction"].append(
                    float(((ratio - 1).abs() > g.clip_range).float().mean())
                )
                if actor_on and g.target_kl > 0 and approx_kl > 1.5 * g.target_kl:
                    stop = True
                    break
            if stop:
                break
        self._iteration += 1
        self._n_updates += 1
        self._fast.sync()
        for key, vals in stats.items():
            if vals:
                self.logger.record(f"train/{key}", float(np.mean(vals)))
        self.logger.record("train/anchor_weight", w_anchor)
        self.logger.record("train/actor_on", float(actor_on))
        self.logger.record("train/early_stop", float(stop))
        self.logger.record("train/n_updates", self._n_updates)
        for k, v in self._episode_stats.items():
            self.logger.record(k, v)

    # ------------------------------------------------------------------ records
    def hparams(self) -> dict[str, Any]:
        from dataclasses import asdict

        out: dict[str, Any] = {
            "algo": "group_ppo",
            "learning_rate": float(self.learning_rate)
            if not callable(self.learning_rate)
            else "schedule",
            "gamma": self.gamma,
            "ent_coef": self.ent_coef,
            "vf_coef": self.vf_coef,
            "n_envs": self.n_envs,
        }
        out.update({f"group.{k}": v for k, v in asdict(self.group).items()})
        return out
