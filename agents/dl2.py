"""DL²'s actor-critic on Stable-Baselines3: slot-credited returns, job-aware exploration,
experience replay (DL² §4.3; reference-code notes §5-7).

Why: DL²'s learner credits every decision of a time slot with that slot's reward, explores
around poor allocations and replays past decisions; reproducing it as an SB3 agent keeps SB3's
training loop, logging and checkpoints.  Policy, returns, exploration, update, the no-critic
variant and the entropy-coefficient convention are described at :class:`DL2A2C`.
Details: docs/design/learning.md#the-actor-critic-agentsdl2py
"""

from __future__ import annotations

import copy
from dataclasses import asdict
from typing import Any

import numpy as np
import torch as th
from gymnasium import spaces
from sb3_contrib.common.maskable.utils import get_action_masks
from stable_baselines3 import A2C
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.type_aliases import GymEnv
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from agents.exploration import ExplorationConfig, JobAwareExploration
from agents.policy import DL2Policy, MaskedPredict, NumpyPolicy, masked_logits, setup_policy
from agents.replay import ReplayBuffer, ReplayConfig
from envs.sim.errors import ConfigError

__all__ = ["DL2A2C"]

_LOG_FLOOR = -69.0  # log(1e-30): a valid action's probability never logs below this


class DL2A2C(MaskedPredict, A2C):
    """DL²'s actor-critic.  Extra keyword arguments:
    ``returns`` (``"slot"`` | ``"discounted"``), ``critic``, ``baseline_momentum``,
    ``exploration`` (:class:`ExplorationConfig` or ``None`` = off), ``replay``
    (:class:`ReplayConfig` or ``None`` = off), ``gradient_steps``.

    :class:`DL2A2C` is an :class:`~stable_baselines3.A2C` subclass (so ``learn``, callbacks, the
    logger, TensorBoard, ``save``/``load`` and the progress bar are SB3's) with its own rollout
    collection and update:

    * **Policy**: :data:`agents.policy.DL2Policy` (masked softmax); rollouts run on a numpy copy
      (:class:`~agents.policy.NumpyPolicy`, re-synced after every update) and sample with the
      agent's own seeded ``numpy`` generator, so a run is reproducible from its seed.
    * **Returns** (``returns=``): ``"slot"`` (default, DL²'s rule): every decision of a slot gets
      the slot's reward (the reward ``step`` returns on the step that closes it, flagged by
      ``info["slot_ended"]``; a Gymnasium reward wrapper therefore applies), no bootstrapping or
      discounting across slots; ``"discounted"``: ``r_slot + gamma * V(first state of the next
      slot)`` (one-step TD at the slot level; 0 after termination).  Decisions wait in a per-env
      pending list until their slot closes; a slot that spans two rollouts is trained on in the
      second.
    * **Job-aware exploration** (:mod:`agents.exploration`): in poor states the sampled action is
      replaced, with probability ε, by the corrective one; the replaced action is the one stored
      and learned from (its behaviour log-probability is the policy's, as in DL²'s code).
    * **Update** (one per rollout of ``n_steps`` decisions per env, ``gradient_steps`` gradient
      steps): the on-policy decisions whose slots closed, plus a mini-batch from the replay buffer
      (:mod:`agents.replay`) weighted by the truncated importance ratio (or uncorrected, DL²'s
      code) and by the prioritised-sampling weight; loss ``-mean(w A log pi(a|s)) + vf_coef *
      mean(w_p (R - V)^2) - ent_coef * mean(H)`` with ``A = R - V(s)``; Adam; gradient-norm
      clipping at ``max_grad_norm``.
    * **No critic** (``critic=False``, the ``reinforce`` agent): ``A = R - b`` with ``b`` a moving
      average of on-policy returns (momentum ``baseline_momentum``); the value head is not trained.

    *Entropy coefficient*: DL²'s ``0.1`` multiplies ``mean(pi log pi)`` over the batch **and the
    actions**, i.e. ``0.1 / (3J + 1)`` times the entropy per sample (≈ 0.0016 for ``J`` = 20);
    ``ent_coef`` here multiplies the entropy itself.
    """

    def __init__(
        self,
        policy: Any = DL2Policy,
        env: GymEnv | str | None = None,
        learning_rate: float = 1e-4,
        n_steps: int = 256,
        gamma: float = 0.99,
        ent_coef: float = 0.01,
        vf_coef: float = 0.5,
        max_grad_norm: float = 10.0,
        *,
        returns: str = "slot",
        critic: bool = True,
        baseline_momentum: float = 0.99,
        exploration: ExplorationConfig | None = None,
        replay: ReplayConfig | None = None,
        gradient_steps: int = 1,
        normalize_advantage: bool = False,
        policy_kwargs: dict[str, Any] | None = None,
        tensorboard_log: str | None = None,
        verbose: int = 0,
        seed: int | None = None,
        device: th.device | str = "cpu",
        _init_setup_model: bool = True,
    ) -> None:
        if returns not in ("slot", "discounted"):
            raise ConfigError(f"returns must be 'slot' or 'discounted', got {returns!r}")
        if gradient_steps < 1:
            raise ConfigError(f"gradient_steps must be >= 1, got {gradient_steps}")
        self.returns_mode = returns
        self.critic = bool(critic)
        self.baseline_momentum = float(baseline_momentum)
        self.exploration_config = exploration or ExplorationConfig(enabled=False)
        self.replay_config = replay or ReplayConfig(capacity=0)
        self.gradient_steps = int(gradient_steps)
        super().__init__(
            policy=policy,
            env=env,  # type: ignore[arg-type]
            learning_rate=learning_rate,
            n_steps=n_steps,
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
        n_envs = self.n_envs
        obs_dim = int(np.prod(self.observation_space.shape or (1,)))
        assert isinstance(self.action_space, spaces.Discrete)  # setup_policy checked it
        n_actions = int(self.action_space.n)
        # Run-time state; kept when ``load`` restored it (it is part of the saved data).
        if not restored:
            self._rng = np.random.default_rng(self.seed)
            self._pending: list[list[tuple[np.ndarray, np.ndarray, int, float]]] = [
                [] for _ in range(n_envs)
            ]
            self._batch: list[tuple[np.ndarray, np.ndarray, int, float, float]] = []
            self._baseline = 0.0
            self._baseline_ready = False
            self._decisions = 0
            self._stats = np.zeros(3, dtype=np.int64)  # decisions, poor, overridden
            self._episode_jct: list[float] = []
        self.replay = ReplayBuffer(self.replay_config, obs_dim, n_actions)
        self._explorers: list[JobAwareExploration] | None = None
        self._fast = NumpyPolicy(self.policy)  # type: ignore[arg-type]

    def _excluded_save_params(self) -> list[str]:
        return [*super()._excluded_save_params(), "replay", "_explorers", "_fast", "_clone"]

    def set_anchor(self) -> None:
        """Freeze the current policy (the clone, after pretraining) as the reference of
        ``train/kl_to_clone``: the mean KL(policy || clone) over each update's on-policy
        decisions, after the update (a measurement only: the loss does not use it)."""
        clone = copy.deepcopy(self.policy)
        clone.set_training_mode(False)
        for p in clone.parameters():
            p.requires_grad_(False)
        self._clone = clone

    def _kl_to_clone(self, obs: np.ndarray, masks: np.ndarray) -> float | None:
        clone = getattr(self, "_clone", None)
        if clone is None or len(obs) == 0:
            return None
        with th.no_grad():
            o = th.as_tensor(obs, dtype=th.float32)
            m = th.as_tensor(masks, dtype=th.bool)
            logp = th.log_softmax(masked_logits(self.policy, o, m), dim=1)  # type: ignore[arg-type]
            logq = th.log_softmax(masked_logits(clone, o, m), dim=1)
            kl = (logp.exp() * (logp - logq).masked_fill(~m, 0.0)).sum(dim=1)
        return float(kl.mean())

    def _exploration_rules(self, env: VecEnv) -> list[JobAwareExploration]:
        if self._explorers is None:
            settings = env.get_attr("setting")
            Js, Ls = env.get_attr("J"), env.get_attr("L")
            self._explorers = [
                JobAwareExploration(self.exploration_config, J, L, s.max_workers, s.max_ps)
                for s, J, L in zip(settings, Js, Ls, strict=True)
            ]
        return self._explorers

    # ------------------------------------------------------------------ rollouts
    def collect_rollouts(
        self,
        env: VecEnv,
        callback: BaseCallback,
        rollout_buffer: Any,
        n_rollout_steps: int,
    ) -> bool:
        assert self._last_obs is not None
        self.policy.set_training_mode(False)
        fast = self._fast
        fast.sync()
        explorers = self._exploration_rules(env)
        callback.on_rollout_start()
        masks = _masks(env)
        n_envs = env.num_envs
        for _ in range(n_rollout_steps):
            obs = np.asarray(self._last_obs, dtype=np.float32)
            probs = fast.probs(obs, masks)
            actions = np.empty(n_envs, dtype=np.int64)
            logps = np.empty(n_envs, dtype=np.float64)
            for i in range(n_envs):
                c = np.cumsum(probs[i])
                a = int(
                    min(np.searchsorted(c, self._rng.random() * c[-1], side="right"), len(c) - 1)
                )
                a, poor, over = explorers[i].apply(a, obs[i], masks[i], self._decisions, self._rng)
                self._stats += (1, poor, over)
                self._decisions += 1
                actions[i] = a
                p = probs[i, a]
                logps[i] = np.log(p) if p > 0 else _LOG_FLOOR
            stepped = env.step(actions)
            new_obs = np.asarray(stepped[0], dtype=np.float32)
            rewards, dones, infos = stepped[1], stepped[2], stepped[3]
            self.num_timesteps += n_envs
            callback.update_locals(locals())
            if not callback.on_step():
                return False
            self._update_info_buffer(infos, dones)
            for i in range(n_envs):
                self._pending[i].append((obs[i], masks[i], int(actions[i]), float(logps[i])))
                info = infos[i]
                if info.get("slot_ended") or dones[i]:
                    self._close_slot(i, float(rewards[i]), info, bool(dones[i]), new_obs[i], fast)
                if dones[i] and "avg_jct_slots" in info and not info.get("unfinished_jobs"):
                    # finished episodes only: a truncated one carries a lower bound
                    self._episode_jct.append(float(info["avg_jct_slots"]))
            self._last_obs = new_obs
            self._last_episode_starts = dones
            masks = _masks(env)
        callback.update_locals(locals())
        callback.on_rollout_end()
        return True

    def _close_slot(
        self,
        i: int,
        reward: float,
        info: dict[str, Any],
        done: bool,
        next_obs: np.ndarray,
        fast: NumpyPolicy,
    ) -> None:
        """Credit the slot's reward (the reward ``step`` returned on the step that closed it,
        so a reward wrapper reaches it) to every decision of the slot."""
        ret = reward
        if self.returns_mode == "discounted":
            truncated = bool(info.get("TimeLimit.truncated", False))
            if not done:
                ret += self.gamma * float(fast.value(next_obs))
            elif truncated and "terminal_observation" in info:
                ret += self.gamma * float(fast.value(info["terminal_observation"]))
        for obs, mask, a, logp in self._pending[i]:
            self._batch.append((obs, mask, a, ret, logp))
        self._pending[i] = []

    # ------------------------------------------------------------------ update
    def train(self) -> None:
        self.policy.set_training_mode(True)
        self._update_learning_rate(self.policy.optimizer)
        batch = self._batch
        self._batch = []
        on = _stack(batch)
        stats: dict[str, list[float]] = {
            k: [] for k in ("policy_loss", "value_loss", "entropy", "is_weight", "advantage")
        }
        use_replay = self.replay.enabled and len(self.replay) > 0
        for _ in range(self.gradient_steps):
            parts: list[tuple[Any, ...]] = (
                [] if on is None else [(*on, np.ones(len(on[2]), np.float32), None)]
            )
            if use_replay:
                idx, w_prio = self.replay.sample(self.replay_config.batch_size, self._rng)
                r = self.replay
                parts.append(
                    (
                        r.obs[idx],
                        r.masks[idx],
                        r.actions[idx],
                        r.returns[idx],
                        r.logp[idx],
                        w_prio,
                        idx,
                    )
                )
            if not parts:
                break
            self._gradient_step(parts, stats)
        if on is not None:
            if not self.critic:
                mean_ret = float(np.mean(on[3]))
                if self._baseline_ready:
                    m = self.baseline_momentum
                    self._baseline = m * self._baseline + (1 - m) * mean_ret
                else:
                    self._baseline, self._baseline_ready = mean_ret, True
            self.replay.add(*on)
        self._n_updates += 1
        self._fast.sync()
        kl = None if on is None else self._kl_to_clone(on[0], on[1])
        if kl is not None:
            self.logger.record("train/kl_to_clone", kl)
        self._log(stats, 0 if on is None else len(on[2]))

    def _gradient_step(self, parts: list[tuple[Any, ...]], stats: dict[str, list[float]]) -> None:
        obs = th.as_tensor(np.concatenate([p[0] for p in parts]), dtype=th.float32)
        masks = th.as_tensor(np.concatenate([p[1] for p in parts]), dtype=th.bool)
        actions = th.as_tensor(np.concatenate([p[2] for p in parts]), dtype=th.int64)
        returns = th.as_tensor(np.concatenate([p[3] for p in parts]), dtype=th.float32)
        w_prio = th.as_tensor(np.concatenate([p[5] for p in parts]), dtype=th.float32)
        logits = masked_logits(self.policy, obs, masks)  # type: ignore[arg-type]
        logp_all = th.log_softmax(logits, dim=1)
        logp = logp_all.gather(1, actions[:, None])[:, 0]
        p_all = logp_all.exp()  # 0 where masked
        entropy = -(p_all * logp_all.masked_fill(~masks, 0.0)).sum(dim=1)
        # off-policy weights of the replayed part (the on-policy part has weight 1)
        w_is = np.ones(len(actions), dtype=np.float32)
        start = len(parts[0][2]) if parts[0][6] is None else 0
        replayed = parts[-1] if parts[-1][6] is not None else None
        if replayed is not None:
            w_is[start:] = self.replay.importance(logp[start:].detach().numpy(), replayed[6])
        w_is_t = th.as_tensor(w_is)
        if self.critic:
            values = self.policy.predict_values(obs)[:, 0]
            adv = (returns - values).detach()
            value_loss = (w_prio * (returns - values) ** 2).mean()
        else:
            adv = returns - self._baseline
            value_loss = th.zeros(())
        if self.normalize_advantage and len(adv) > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        policy_loss = -(w_is_t * w_prio * adv * logp).mean()
        loss = policy_loss - self.ent_coef * entropy.mean()
        if self.critic:
            loss = loss + self.vf_coef * value_loss
        self.policy.optimizer.zero_grad()
        loss.backward()
        th.nn.utils.clip_grad_norm_(self.policy.parameters(), self.max_grad_norm)
        self.policy.optimizer.step()
        if replayed is not None:
            self.replay.update_priorities(replayed[6], adv[start:].numpy())
        stats["policy_loss"].append(float(policy_loss.detach()))
        stats["value_loss"].append(float(value_loss.detach()))
        stats["entropy"].append(float(entropy.mean().detach()))
        stats["is_weight"].append(float(w_is[start:].mean()) if replayed is not None else 1.0)
        stats["advantage"].append(float(adv.abs().mean()))

    def _log(self, stats: dict[str, list[float]], n_on: int) -> None:
        for key, values in stats.items():
            if values:
                self.logger.record(f"train/{key}", float(np.mean(values)))
        self.logger.record("train/n_updates", self._n_updates)
        self.logger.record("train/onpolicy_decisions", n_on)
        self.logger.record("replay/size", len(self.replay))
        if self.replay_config.prioritized:
            self.logger.record("replay/beta", self.replay.beta)
        decisions, poor, over = (int(x) for x in self._stats)
        if decisions:
            self.logger.record("explore/poor_state_rate", poor / decisions)
            self.logger.record("explore/override_rate", over / decisions)
        if self._explorers:
            self.logger.record("explore/epsilon", self._explorers[0].epsilon(self._decisions))
        self._stats[:] = 0
        if self._episode_jct:
            self.logger.record("rollout/avg_jct_slots", float(np.mean(self._episode_jct)))
            self._episode_jct = []

    # ------------------------------------------------------------------ persistence
    def hparams(self) -> dict[str, Any]:
        """Flat hyperparameters for TensorBoard / run records."""
        out: dict[str, Any] = {
            "algo": "reinforce" if not self.critic else "dl2_a2c",
            "learning_rate": float(self.learning_rate)
            if not callable(self.learning_rate)
            else "schedule",
            "n_steps": self.n_steps,
            "ent_coef": self.ent_coef,
            "vf_coef": self.vf_coef,
            "gamma": self.gamma,
            "returns": self.returns_mode,
            "gradient_steps": self.gradient_steps,
        }
        out.update({f"exploration.{k}": v for k, v in asdict(self.exploration_config).items()})
        out.update({f"replay.{k}": v for k, v in asdict(self.replay_config).items()})
        return out


def _masks(env: VecEnv) -> np.ndarray:
    """Action masks of every env of ``env``; direct calls for in-process vector envs."""
    if isinstance(env, DummyVecEnv):
        return np.stack([e.unwrapped.action_masks() for e in env.envs])  # type: ignore[attr-defined]
    return get_action_masks(env)


def _stack(
    batch: list[tuple[np.ndarray, np.ndarray, int, float, float]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    if not batch:
        return None
    return (
        np.stack([b[0] for b in batch]).astype(np.float32),
        np.stack([b[1] for b in batch]).astype(bool),
        np.asarray([b[2] for b in batch], dtype=np.int64),
        np.asarray([b[3] for b in batch], dtype=np.float32),
        np.asarray([b[4] for b in batch], dtype=np.float32),
    )
