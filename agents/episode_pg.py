"""Group policy gradient over whole episodes, for decision-point envs (``dlsched/Contention-v0``).

The group learner of :mod:`agents.group` is built on ``ClusterEnv``'s time slots; this one
needs only Gymnasium's API plus ``action_masks()`` and a simulated clock (``env.sim.now``), so
it drives any env whose steps are decisions at instants of continuous time.  One iteration:

1. **Rollouts**: ``groups`` workload seeds (from the learner's seeded generator), each run
   ``group_size`` times with actions sampled from the masked policy (each rollout its own
   seeded generator; ``temperature`` > 1 flattens the sampling).
2. **Advantages**: the input-driven baseline of :func:`agents.baselines.group_advantages`
   (Decima): a decision's return-to-go minus the mean return-to-go of its group's rollouts at
   the same simulated time, so that a lucky workload is not mistaken for a good decision;
   divided by their standard deviation over the iteration.
3. **Update**: PPO's clipped ratio against the rollout policy, each decision weighted by the
   truncated importance ratio ``min(1, pi / mu)`` when sampling was tempered; ``epochs``
   passes of mini-batches; entropy bonus ``ent_coef``.

The policy may start from a behaviour clone (:func:`clone`).  Every random draw comes from
generators seeded by ``seed``: a run is reproducible bit for bit on one machine.  A trained
network is saved with the env layout it needs in one ``.npz`` (:func:`save_episode_pg`, the one
policy file format of :mod:`agents.policy_file`).
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import torch as th
from torch import nn
from torch.nn import functional as F

from agents.baselines import group_advantages
from agents.cloning import CloneConfig, CloneData, fit_clone
from agents.policy_format import load_weights, save_episode_net
from agents.policy_format import read as read_policy_file
from agents.rollout_pool import RolloutPool, replicas
from agents.rule_search import DEFAULT_SAMPLES
from agents.rule_selector import RuleSelector
from agents.set_contention import SetContentionNet
from agents.set_plan import SetPlanNet
from envs.gym.actors import RuleActor
from envs.gym.contention_env import OBS_WIDTHS
from envs.gym.episode import Actor, Recorder, collect_decisions, step
from envs.gym.episode import run_episode as play
from envs.gym.plan_env import GLOBAL_FEATURES
from envs.sim.errors import ConfigError

__all__ = [
    "CONTENTION_ARCHS",
    "NETS",
    "PLAN_ARCHS",
    "Episode",
    "EpisodePG",
    "EpisodePGConfig",
    "MaskedMLP",
    "PolicyNet",
    "Samples",
    "build_net",
    "clone",
    "contention_env_layout",
    "contention_net",
    "load_episode_pg",
    "masked_kl",
    "net_from_file",
    "plan_net",
    "replicas",
    "run_episode",
    "run_lockstep",
    "save_episode_pg",
    "teacher_data",
]

#: The ``format`` tag of the files :func:`save_episode_pg` wrote before the one policy file
#: format (:data:`agents.policy_file.FORMAT`); still read.
POLICY_FORMAT = "dlsched.episode_pg/1"


@dataclass
class EpisodePGConfig:
    """``groups`` workload seeds x ``group_size`` rollouts per iteration; ``lr``, ``epochs``,
    ``batch_size``, ``clip_range``, ``ent_coef``: the update; ``temperature`` (>= 1) and
    ``epsilon`` (in [0, 1)): rollouts sample from ``(1 - epsilon) softmax(logits / temperature)
    + epsilon uniform(valid actions)`` (exploration for a confident clone); ``hidden``: the
    MLP's two layer widths.  ``workers``: processes the rollouts are split over
    (:class:`~agents.rollout_pool.RolloutPool`; every rollout is the one a single process runs,
    bit for bit, so results do not depend on it).  ``lockstep``: the rollouts side by side in
    this process, one policy forward per step over every live rollout (:func:`run_lockstep`: the
    same draws, but a batched forward's logits differ from a batch of one's in the last bits of
    float32, and training runs drift apart from the default's after a few iterations; off by
    default); with ``workers`` > 1, side by side in each worker, one share of the rollouts per
    worker (:meth:`~agents.rollout_pool.RolloutPool.run_side_by_side`).  ``relative``: each
    group's advantages are divided by the magnitude of its mean return (so relative
    improvements: a workload of long jobs does not outweigh one of short jobs in a mixture of
    settings; off by default, the advantages in the return's own units, then all divided by
    their standard deviation)."""

    groups: int = 4
    group_size: int = 8
    lr: float = 3e-4
    epochs: int = 4
    batch_size: int = 512
    clip_range: float = 0.2
    ent_coef: float = 0.0
    temperature: float = 1.0
    epsilon: float = 0.0
    hidden: int = 128
    seed: int = 0
    workers: int = 1
    lockstep: bool = False
    relative: bool = False

    def check(self) -> None:
        for name in ("groups", "group_size", "epochs", "batch_size", "hidden", "workers"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.group_size < 2:
            raise ConfigError(f"group_size must be >= 2 (the baseline), got {self.group_size}")
        for name in ("lr", "clip_range", "temperature"):
            v = float(getattr(self, name))
            if not (math.isfinite(v) and v > 0):
                raise ConfigError(f"{name} must be finite and > 0, got {v}")
        if self.temperature < 1:
            raise ConfigError(f"temperature must be >= 1, got {self.temperature}")
        if not (0.0 <= self.epsilon < 1.0):
            raise ConfigError(f"epsilon must be in [0, 1), got {self.epsilon}")
        if not (math.isfinite(self.ent_coef) and self.ent_coef >= 0):
            raise ConfigError(f"ent_coef must be finite and >= 0, got {self.ent_coef}")


class MaskedMLP(nn.Module):
    """Observation -> action logits (two tanh layers); impossible actions get -1e9."""

    arch = "mlp"

    def __init__(self, obs_size: int, n_actions: int, hidden: int = 128) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(obs_size, hidden), nn.Tanh(),
            nn.Linear(hidden, hidden), nn.Tanh(),
            nn.Linear(hidden, n_actions),
        )  # fmt: skip

    @property
    def obs_size(self) -> int:
        first = self.net[0]
        assert isinstance(first, nn.Linear)
        return int(first.in_features)

    @property
    def n_actions(self) -> int:
        last = self.net[-1]
        assert isinstance(last, nn.Linear)
        return int(last.out_features)

    def describe(self) -> dict[str, Any]:
        """What rebuilds this network (saved with its weights)."""
        first = self.net[0]
        assert isinstance(first, nn.Linear)
        return {"arch": self.arch, "obs_size": self.obs_size, "n_actions": self.n_actions,
                "hidden": int(first.out_features)}  # fmt: skip

    def stack(self, obs: Sequence[npt.NDArray[np.float32]]) -> npt.NDArray[np.float32]:
        """Observations as one batch (``np.stack``: one input size)."""
        return np.stack(obs)

    def forward(self, obs: th.Tensor, masks: th.Tensor) -> th.Tensor:
        return self.net(obs).masked_fill(~masks, -1e9)

    def logits_one(self, obs: npt.NDArray[np.float32], mask: npt.NDArray[np.bool_]) -> th.Tensor:
        """``self(obs[None], mask[None])[0]`` without gradients, for one observation: the
        same torch operations in the same order (so the same bits), without the modules'
        call overhead, and without the fill where every action is valid (a fill of nothing
        changes nothing)."""
        with th.no_grad():
            x = th.as_tensor(obs)[None]
            for layer in self.net:
                if isinstance(layer, nn.Linear):
                    x = F.linear(x, layer.weight, layer.bias)
                else:
                    x = layer(x)
            if not mask.all():
                x = x.masked_fill(~th.as_tensor(mask)[None], -1e9)
            return x[0]

    def act(self, env: Any, obs: npt.NDArray[np.float32]) -> int:
        """The masked argmax (the deterministic policy)."""
        with th.no_grad():
            logits = self(th.as_tensor(obs)[None], th.as_tensor(env.action_masks())[None])
        return int(logits.argmax())


#: The networks EpisodePG trains and saves: the flat MLP, or the size-agnostic set network
#: (:mod:`agents.set_plan`) of plan observations.
PolicyNet = MaskedMLP | SetPlanNet | SetContentionNet

#: ``describe()["arch"]`` -> the network's class (how a saved policy is rebuilt)
NETS: dict[str, type[nn.Module]] = {
    "mlp": MaskedMLP,
    "set": SetPlanNet,
    "contention_set": SetContentionNet,
    "rule_selector": RuleSelector,
}


#: ``agent.plan.arch`` -> how the network is built for a plan env (:func:`plan_net`)
PLAN_ARCHS = ("mlp", "set")


def plan_net(arch: str, env: Any, hidden: int) -> PolicyNet:
    """The plan network ``arch`` for a plan env's (:class:`~envs.gym.plan_env.PlanEnv`)
    observations and plans: the flat MLP of its observation size, or the set network of its
    job rows (any window)."""
    if arch == "set":
        return SetPlanNet(env.row_width, len(GLOBAL_FEATURES), env.K, hidden)
    return MaskedMLP(env.obs_size, env.K, hidden)


#: ``agent.contention.arch`` -> how the network is built for Contention-v0 (:func:`contention_net`)
CONTENTION_ARCHS = ("mlp", "set", "selector")


def contention_net(
    arch: str, env: Any, hidden: int, rules: Sequence[str] | None = None
) -> PolicyNet:
    """The network ``arch`` for a ``ContentionEnv``: the flat MLP of its observation size
    (welded to its cluster and window), the set network of its job and server rows (any
    cluster, any window: :class:`~agents.set_contention.SetContentionNet`), or ``selector``:
    a learned choice among the registered ``rules`` (default
    :data:`~agents.rule_selector.SELECTOR_RULES`; any cluster, any window:
    :class:`~agents.rule_selector.RuleSelector`)."""
    if arch not in CONTENTION_ARCHS:
        raise ConfigError(
            f"agent.contention.arch must be one of {list(CONTENTION_ARCHS)}, got {arch!r}"
        )
    if arch == "set":
        job, server, globs = OBS_WIDTHS
        return SetContentionNet(job, server, globs, len(env.placements), hidden)
    if arch == "selector":  # no network: a learned choice among the rules (agents.cem trains it)
        return cast(PolicyNet, RuleSelector(rules) if rules else RuleSelector())
    return MaskedMLP(env.obs_size, env.wait_action + 1, hidden)


def build_net(description: dict[str, Any]) -> PolicyNet:
    """The network a :meth:`describe` dict describes (its other keys are the class's
    constructor arguments); an unknown ``arch`` is a :class:`ConfigError` naming the known
    ones."""
    arch = description.get("arch", "mlp")
    if arch not in NETS:
        raise ConfigError(f"unknown network arch {arch!r}; known: {', '.join(NETS)}")
    if arch == RuleSelector.arch:  # its rules are names; it acts through the env (acts_on_env)
        selector = RuleSelector(
            list(description["rules"]),
            int(description["n_features"]),
            str(description.get("search", "none")),
            description.get("samples", DEFAULT_SAMPLES),
            description.get("margin", 0.0),
            description.get("margin_by", "always"),
            description.get("model", "same"),
        )
        return cast(PolicyNet, selector)
    net = NETS[arch](**{k: int(v) for k, v in description.items() if k != "arch"})
    return cast(PolicyNet, net)


@dataclass
class Episode:
    """One rollout: per decision its observation, mask, action, behaviour log-prob (under the
    tempered policy), the policy's own log-prob, and the simulated time; per step the reward
    and the time it arrived; the final ``info``."""

    obs: list[npt.NDArray[np.float32]] = field(default_factory=list)
    masks: list[npt.NDArray[np.bool_]] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    logp_mu: list[float] = field(default_factory=list)
    logp_pi: list[float] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    reward_times: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def ret(self) -> float:
        return float(sum(self.rewards))

    def record(
        self,
        obs: npt.NDArray[np.float32],
        mask: npt.NDArray[np.bool_],
        action: int,
        logp_mu: float,
        logp_pi: float,
        t: float,
    ) -> None:
        """One sampled decision."""
        self.obs.append(obs)
        self.masks.append(mask)
        self.actions.append(action)
        self.logp_mu.append(logp_mu)
        self.logp_pi.append(logp_pi)
        self.times.append(t)


def _draw(
    p: npt.NDArray[np.float64],
    mask: npt.NDArray[np.bool_],
    epsilon: float,
    rng: np.random.Generator,
) -> tuple[int, float]:
    """An action drawn from the (tempered) policy ``p`` mixed with ``epsilon`` uniform over
    the valid actions, and its log-probability under that mixture."""
    if epsilon > 0:
        p = (1 - epsilon) * p + epsilon * mask / mask.sum()
    total = p.sum()
    if not (math.isfinite(total) and total > 0):
        raise ConfigError(f"the policy's action probabilities sum to {total} (non-finite logits?)")
    p = p / total
    # ``rng.choice(len(p), p=p)``'s steps for one draw (its cumulative sum, normalised by its
    # last entry, one ``rng.random()``, the right-side search): the same action and the same
    # generator state, bit for bit (tests/agents/test_episode_pg_draw.py), without choice's
    # argument checks (~40% of a rollout's sampling time); p is a normalised softmax here
    cdf = p.cumsum()
    cdf /= cdf[-1]
    a = int(cdf.searchsorted(rng.random(), side="right"))
    return a, float(np.log(p[a]))


#: a rollout's uniform share: a number, or an object whose ``at(obs)`` gives it per decision
#: (e.g. :class:`~agents.exploration.StarvedJobExploration`)
Epsilon = Any


def _epsilon_at(epsilon: Epsilon, obs: npt.NDArray[np.float32]) -> float:
    """The uniform share of the decision at ``obs``."""
    return float(epsilon) if isinstance(epsilon, int | float) else float(epsilon.at(obs))


def _outcome(ep: Episode, reward: float, done: bool, info: dict[str, Any], env: Any) -> None:
    """Record a step's reward and the time it arrived in ``ep`` (and, at the end, its
    ``info``)."""
    ep.rewards.append(float(reward))
    ep.reward_times.append(float(env.sim.now))
    if done:
        ep.info = info


def _advance(env: Any, ep: Episode, a: int) -> tuple[Any, bool]:
    """Step ``env`` with action ``a`` (:func:`envs.gym.episode.step`: a refused action is an
    error naming it and the decision time), recording the reward in ``ep``; the next
    observation and whether the episode ended (its ``info`` then kept)."""
    obs, r, term, trunc, info = step(env, a, env)
    done = bool(term or trunc)
    _outcome(ep, r, done, info, env)
    return obs, done


class _Rewards(Recorder):
    """:func:`run_episode`'s recorder: every step's reward into the :class:`Episode`."""

    def __init__(self, ep: Episode) -> None:
        self.ep = ep

    def after(self, reward: float, done: bool, info: dict[str, Any], view: Any) -> None:
        _outcome(self.ep, reward, done, info, view)


class _Sampler:
    """The net as an :class:`~envs.gym.episode.Actor` of one rollout: sampled with ``rng``
    (``temperature``, ``epsilon``), or its argmax without ``rng``; every decision recorded in
    ``ep`` (observation, mask, action, both log-probabilities, time)."""

    def __init__(
        self,
        ep: Episode,
        net: PolicyNet,
        rng: np.random.Generator | None,
        temperature: float,
        epsilon: Epsilon,
    ) -> None:
        self.ep, self.net, self.rng = ep, net, rng
        self.temperature, self.epsilon = temperature, epsilon

    def reset(self, seed: int | None) -> None:
        """Nothing: the rollout's generator is the caller's."""

    def act(self, obs: npt.NDArray[np.float32], view: Any) -> int:
        mask = view.action_masks()
        t = float(view.sim.now)
        logits = self.net.logits_one(obs, mask).double()
        logp = th.log_softmax(logits, -1).numpy()
        if self.rng is None:
            a = int(np.argmax(logp))
            lmu = 0.0
        else:
            # (x / 1.0 is x, bit for bit: the division is skipped at temperature 1)
            temperature = self.temperature
            scaled = logits if temperature == 1.0 else logits / temperature
            eps = _epsilon_at(self.epsilon, obs)
            a, lmu = _draw(th.softmax(scaled, -1).numpy(), mask, eps, self.rng)
        self.ep.record(obs, mask, a, lmu, float(logp[a]), t)
        return a


def run_episode(
    env: Any,
    workload_seed: int,
    net: PolicyNet | None = None,
    rng: np.random.Generator | None = None,
    temperature: float = 1.0,
    epsilon: Epsilon = 0.0,
    act: Callable[[Any, npt.NDArray[np.float32]], int] | Actor | None = None,
) -> Episode:
    """One episode on ``workload_seed``: sampled from ``net`` with ``rng`` (a rollout),
    ``net``'s argmax without ``rng``, or ``act(env, obs)`` (a heuristic; any
    :class:`~envs.gym.episode.Actor` too).  ``epsilon``: the uniform share of the sampling, a
    number or per decision (:data:`Epsilon`).  The loop is
    :func:`envs.gym.episode.run_episode`'s."""
    ep = Episode()
    if act is not None:
        actor: Any = act
    else:
        assert net is not None
        actor = _Sampler(ep, net, rng, temperature, epsilon)
    options = {"workload_seed": int(workload_seed)}
    play(env, actor, workload_seed, options=options, on_step=_Rewards(ep))
    return ep


def run_lockstep(
    envs: Sequence[Any],
    workload_seeds: Sequence[int],
    net: PolicyNet,
    rngs: Sequence[np.random.Generator],
    temperature: float = 1.0,
    epsilon: Epsilon = 0.0,
) -> list[Episode]:
    """Rollouts side by side: episode ``i`` in ``envs[i]`` on ``workload_seeds[i]``, sampled
    with ``rngs[i]`` as :func:`run_episode` samples; one policy forward per step over every
    episode still running (the batch shrinks as episodes end).  Each episode's draws are its
    own generator's, in its own order, whatever the others do.  Each env steps by
    :func:`envs.gym.episode.step`, as :func:`run_episode`'s do."""
    eps = [Episode() for _ in envs]
    obs: list[Any] = [None] * len(envs)
    for i, (env, s) in enumerate(zip(envs, workload_seeds, strict=True)):
        obs[i], _ = env.reset(seed=int(s), options={"workload_seed": int(s)})
    live = list(range(len(envs)))
    while live:
        masks = [envs[i].action_masks() for i in live]
        with th.no_grad():
            x = th.as_tensor(net.stack([obs[i] for i in live]))
            logits = net(x, th.as_tensor(np.stack(masks))).double()
            logp_all = th.log_softmax(logits, -1).numpy()
            p_all = th.softmax(logits / temperature, -1).numpy()
        still = []
        for row, i in enumerate(live):
            env, ep, mask, logp = envs[i], eps[i], masks[row], logp_all[row]
            a, lmu = _draw(p_all[row], mask, _epsilon_at(epsilon, obs[i]), rngs[i])
            ep.record(obs[i], mask, a, lmu, float(logp[a]), float(env.sim.now))
            obs[i], done = _advance(env, ep, a)
            if not done:
                still.append(i)
        live = still
    return eps


def teacher_data(
    env: Any,
    teacher: Callable[[Any], int] | Actor,
    workload_seeds: Sequence[int],
    stack: Callable[[Sequence[npt.NDArray[np.float32]]], npt.NDArray[np.float32]] = np.array,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_], npt.NDArray[np.int64]]:
    """``teacher``'s episodes on the given workloads: per decision the observation, the mask
    and the teacher's action (the behaviour-cloning dataset,
    :func:`envs.gym.episode.collect_decisions`); ``teacher`` is a rule ``(env) -> action``
    or an :class:`~envs.gym.episode.Actor`; ``stack`` makes the observations one array (a
    network's :meth:`~SetPlanNet.stack` for observations of several windows)."""
    actor = teacher if isinstance(teacher, Actor) else RuleActor(teacher)
    log, _ = collect_decisions(((env, actor, int(s)) for s in workload_seeds),
                               workload_options=True)  # fmt: skip
    return stack(log.obs), np.array(log.masks), np.array(log.actions, dtype=np.int64)


def clone(
    net: PolicyNet,
    env: Any,
    teacher: Callable[[Any], int],
    workload_seeds: Sequence[int],
    epochs: int = 20,
    lr: float = 1e-3,
    seed: int = 0,
    smoothing: float = 0.0,
    on_epoch: Callable[[int, float], None] | None = None,
) -> float:
    """Behaviour cloning (:func:`agents.cloning.fit_clone`, schedule ``"epochs"``: minibatches
    of 256 from a permutation seeded by ``seed``): masked cross-entropy on ``teacher``'s
    actions over the given workloads; returns the final epoch's mean loss (``on_epoch(epoch,
    mean loss)`` after each epoch, from 1).  ``smoothing`` (in [0, 1)) moves that share of
    each target onto the valid actions uniformly: the clone's argmax is still the
    teacher's, but it keeps probability on the alternatives, so that on-policy rollouts
    explore and PPO's ratio can move them (a near-deterministic clone's rare actions can grow
    only by the clip factor per update)."""
    config = CloneConfig(epochs=epochs, lr=lr, seed=seed, smoothing=smoothing)
    config.check("")
    data = CloneData(*teacher_data(env, teacher, workload_seeds, net.stack))
    log = None if on_epoch is None else lambda epoch, row: on_epoch(epoch, row["train/loss"])
    history = fit_clone(net, data, config, log=log, prefix="")
    return history.last.get("train/loss", 0.0)


def masked_kl(net: PolicyNet, reference: PolicyNet, obs: th.Tensor, masks: th.Tensor) -> float:
    """Mean over the states ``obs`` (with action ``masks``) of KL(net || reference) between
    the two masked policies, in nats: ``sum_a p(a) (log p(a) - log q(a))`` over the valid
    actions (an invalid action has probability 0 under both).  Computed without gradients
    and without random draws."""
    with th.no_grad():
        logp = th.log_softmax(net(obs, masks).double(), -1)
        logq = th.log_softmax(reference(obs, masks).double(), -1)
        terms = (logp.exp() * (logp - logq)).masked_fill(~masks, 0.0)
        return float(terms.sum(-1).mean()) if len(obs) else 0.0


@dataclass
class Samples:
    """An iteration's decisions, flat over its rollouts: observations, masks, actions, the
    policy's and the behaviour's log-probabilities, and the advantages."""

    obs: list[npt.NDArray[np.float32]]
    masks: list[npt.NDArray[np.bool_]]
    acts: list[int]
    lpi: list[float]
    lmu: list[float]
    adv: npt.NDArray[np.float64]


class EpisodePG:
    """The learner (see the module docstring).  ``net`` is trained in place."""

    def __init__(self, env: Any, net: PolicyNet, config: EpisodePGConfig) -> None:
        config.check()
        self.env, self.net, self.cfg = env, net, config
        self.opt = th.optim.Adam(net.parameters(), lr=config.lr)
        self.rng = np.random.default_rng([config.seed, 1])
        self.gen = th.Generator().manual_seed(config.seed)
        self.iteration = 0
        #: ``rng -> (env, workload seed)`` for each group (e.g. a workload mixture's scenario in
        #: its own env); ``None``: ``env`` with a seed drawn from [10,000, 2^31)
        self.draw_workload: Callable[[np.random.Generator], tuple[Any, int]] | None = None
        self._rollouts: RolloutPool | None = None  # the processes of config.workers
        #: a frozen policy (e.g. the behaviour clone before RL): when set, each update's
        #: stats also hold ``kl_to_reference``, the mean KL(net || reference) over the
        #: iteration's states after the update (no gradients, no random draws: the training
        #: numbers do not change)
        self.reference: PolicyNet | None = None
        #: the rollouts' uniform share per decision (e.g. job-aware exploration,
        #: :class:`~agents.exploration.StarvedJobExploration`); ``None``: ``config.epsilon``
        self.explore: Epsilon | None = None

    def rollout_pool(self) -> RolloutPool:
        """The processes of ``config.workers`` (made on first use; also for other work with
        the network, e.g. validation episodes, :meth:`RolloutPool.map`)."""
        if self._rollouts is None:
            make_net = functools.partial(build_net, self.net.describe())
            self._rollouts = RolloutPool(
                self.cfg.workers, self.env, make_net, run_episode, batch=run_lockstep
            )
        return self._rollouts

    def training_state(self) -> dict[str, Any]:
        """What a resumed run needs to go on bit for bit: the weights, the optimiser, both
        generators (their states), the iteration and the frozen clone's weights."""
        return {
            "net": self.net.state_dict(),
            "opt": self.opt.state_dict(),
            "rng": self.rng.bit_generator.state,
            "gen": self.gen.get_state(),
            "iteration": self.iteration,
            "reference": None if self.reference is None else self.reference.state_dict(),
        }

    def load_training_state(self, state: dict[str, Any]) -> None:
        """Back to :meth:`training_state`'s point (a learner built with the same config)."""
        self.net.load_state_dict(state["net"])
        self.opt.load_state_dict(state["opt"])
        self.rng.bit_generator.state = state["rng"]
        self.gen.set_state(state["gen"])
        self.iteration = int(state["iteration"])
        if state.get("reference") is not None:
            self.reference = build_net(self.net.describe()).requires_grad_(False)
            self.reference.load_state_dict(state["reference"])

    def close(self) -> None:
        """Stop the rollout workers, if any were started (idempotent)."""
        if self._rollouts is not None:
            self._rollouts.close()

    def collect(self) -> list[list[Episode]]:
        """One iteration's rollouts, by group: the workloads and every rollout's generator
        are drawn first, in the learner's order; then the rollouts run over ``workers``
        processes (:meth:`rollout_pool`; each the rollout one process runs) or, with
        ``lockstep``, side by side in this process or, with several workers, in each
        (:meth:`RolloutPool.run_side_by_side`, which keeps the env copies it needs)."""
        cfg = self.cfg
        draws: list[tuple[Any, int, list[np.random.Generator]]] = []
        for _ in range(cfg.groups):
            env, wseed = self.next_workload()
            rolls = [np.random.default_rng(self.rng.integers(2**63)) for _ in range(cfg.group_size)]
            draws.append((env, wseed, rolls))
        tasks = [
            (None if env is self.env else env, wseed, r)
            for env, wseed, rolls in draws
            for r in rolls
        ]
        pool = self.rollout_pool()
        run = pool.run_side_by_side if cfg.lockstep else pool.run
        flat = run(self.net, tasks, cfg.temperature, self._epsilon())
        n = cfg.group_size
        return [flat[g * n : (g + 1) * n] for g in range(cfg.groups)]

    def next_workload(self) -> tuple[Any, int]:
        """The next group's (env, workload seed), drawn with the learner's generator:
        :attr:`draw_workload`'s, or ``env`` with a seed in [10,000, 2^31)."""
        if self.draw_workload is None:
            return self.env, int(self.rng.integers(10_000, 2**31))
        return self.draw_workload(self.rng)

    def _epsilon(self) -> Epsilon:
        return self.cfg.epsilon if self.explore is None else self.explore

    def samples(self, groups: list[list[Episode]]) -> Samples:
        """The iteration's decisions with their advantages before normalisation (the
        input-driven baseline; ``relative``: in units of the group's mean return)."""
        obs, masks, acts, lpi, lmu, adv = [], [], [], [], [], []
        for eps in groups:
            _, advs = group_advantages(
                [e.times for e in eps], [e.reward_times for e in eps], [e.rewards for e in eps]
            )
            if self.cfg.relative:  # in units of the group's mean return (its magnitude)
                scale = abs(float(np.mean([e.ret for e in eps])))
                advs = [ad / scale for ad in advs] if scale > 0 else advs
            for e, ad in zip(eps, advs, strict=True):
                obs += e.obs
                masks += e.masks
                acts += e.actions
                lpi += e.logp_pi
                lmu += e.logp_mu
                adv.append(ad)
        return Samples(obs, masks, acts, lpi, lmu, np.concatenate(adv))

    def update(self, groups: list[list[Episode]]) -> dict[str, float]:
        s = self.samples(groups)
        obs_t, mask_t = th.as_tensor(self.net.stack(s.obs)), th.as_tensor(np.array(s.masks))
        adv = s.adv / (s.adv.std() + 1e-8)
        out = self.optimise(obs_t, mask_t, th.as_tensor(s.acts), s.lpi, s.lmu, adv)
        rets = [e.ret for eps in groups for e in eps]
        out["return"] = float(np.mean(rets))
        out["decisions"] = float(len(s.acts))
        return out

    def optimise(
        self,
        obs_t: th.Tensor,
        mask_t: th.Tensor,
        act: th.Tensor,
        lpi: Sequence[float] | npt.NDArray[np.float64],
        lmu: Sequence[float] | npt.NDArray[np.float64],
        adv: npt.NDArray[np.float64],
    ) -> dict[str, float]:
        """``epochs`` passes of PPO's clipped objective over the decisions: ``lpi`` the
        log-probability the ratio is taken against, ``lmu`` the behaviour's (each decision
        weighted by ``min(1, pi / mu)``), ``adv`` the normalised advantages; the mean losses."""
        cfg = self.cfg
        old = th.as_tensor(np.asarray(lpi, dtype=np.float64))
        w = th.clamp(th.exp(old - th.as_tensor(np.asarray(lmu, dtype=np.float64))), max=1.0)
        w = w.float()
        adv_t = th.as_tensor(adv, dtype=th.float32)
        old = old.float()
        stats = {"loss": 0.0, "pg_loss": 0.0, "entropy_loss": 0.0, "entropy": 0.0, "clipped": 0.0}
        n = 0
        for _ in range(cfg.epochs):
            for idx in th.randperm(len(act), generator=self.gen).split(cfg.batch_size):
                logits = self.net(obs_t[idx], mask_t[idx])
                logp_all = th.log_softmax(logits, -1)
                logp = logp_all.gather(1, act[idx, None])[:, 0]
                ratio = th.exp(logp - old[idx])
                at = adv_t[idx]
                surr = th.minimum(
                    ratio * at, th.clamp(ratio, 1 - cfg.clip_range, 1 + cfg.clip_range) * at
                )
                probs = logp_all.exp()
                ent = -(probs * logp_all.clamp(min=-30)).sum(-1)
                pg_loss = -(w[idx] * surr).mean()
                ent_loss = cfg.ent_coef * ent.mean()
                loss = pg_loss - ent_loss  # the terms apart, the same operations as one sum
                self.opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(self.net.parameters(), 0.5)
                self.opt.step()
                stats["loss"] += float(loss.detach())
                stats["pg_loss"] += float(pg_loss.detach())
                stats["entropy_loss"] -= float(ent_loss.detach())
                stats["entropy"] += float(ent.mean().detach())
                stats["clipped"] += float(((ratio - 1).abs() > cfg.clip_range).float().mean())
                n += 1
        out = {k: v / max(n, 1) for k, v in stats.items()}
        out["learning_rate"] = float(self.opt.param_groups[0]["lr"])
        if self.reference is not None:
            out["kl_to_reference"] = masked_kl(self.net, self.reference, obs_t, mask_t)
        return out

    def iterate(self) -> dict[str, float]:
        """One iteration's work: rollouts, then the update (an interrupt during the rollouts
        leaves the weights untouched); its figures."""
        return self.update(self.collect())

    def learn(
        self,
        iterations: int,
        on_iteration: Callable[[int, dict[str, float]], None] | None = None,
    ) -> None:
        """``iterations`` rounds of collect + update; ``on_iteration(i, stats)`` after each.
        Ctrl-C (KeyboardInterrupt) stops between iterations with the weights of the last
        finished update left in ``net``."""
        for _ in range(iterations):
            stats = self.iterate()
            self.iteration += 1
            if on_iteration is not None:
                on_iteration(self.iteration, stats)


# ---------------------------------------------------------------------------- saved policies
def contention_env_layout(env: Any) -> dict[str, Any]:
    """What fixes a ``ContentionEnv``'s observation and action layout (and its world): window
    ``J``, ``placements``, ``comm``, the cluster's shape, plus the training workloads'
    ``scale``, ``num_jobs`` and ``fidelity`` (the keyword arguments to rebuild it)."""
    c = env.cluster
    return {
        "J": int(env.J),
        "placements": list(env.placements),
        "comm": str(env.comm),
        "num_servers": int(c.num_servers),
        "gpus_per_server": int(c.gpus_per_server),
        "gpu_memory_mb": float(c.gpu_memory_mb),
        "scale": str(env.scale),
        "num_jobs": int(env.num_jobs),
        "fidelity": env.fidelity.value,
    }


def save_episode_pg(
    path: str | os.PathLike[str],
    net: PolicyNet,
    env: Any,
    record: dict[str, Any],
    act: str = "argmax",
) -> Path:
    """Write ``net`` to ``path`` in the one policy file format (:mod:`agents.policy_file`:
    ``.npz``, no pickle): its weights and, as JSON under ``__meta__``, the network (``net``:
    its ``describe()``), the env layout (``layout``; ``env``: the env's ``policy_layout()``,
    e.g. :meth:`~envs.gym.plan_env.PlanEnv.policy_layout`, else
    :func:`contention_env_layout`), how it acts (``act``: ``"argmax"`` or ``"sampled"``, how
    it was validated) and ``record`` (training config, seed, command, versions, git commit).
    A network that does not fit ``env`` is a :class:`ConfigError`."""
    described = None if hasattr(env, "policy_layout") else contention_env_layout(env)
    return save_episode_net(path, net, env, record, act, described)


def load_episode_pg(path: str | os.PathLike[str]) -> tuple[PolicyNet, dict[str, Any]]:
    """``(net, meta)`` of a saved EpisodePG network: a file of the one policy file format or
    of the older ``dlsched.episode_pg/1`` (``meta`` in the one format's layout,
    :mod:`agents.policy_file`); a missing, corrupt or foreign file, or a policy of another
    network (a ``Cluster-v0`` network), is a :class:`ConfigError` that names it and the
    cause."""
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"EpisodePG policy file {str(p)!r} not found")
    arrays, meta, _ = read_policy_file(p)
    return net_from_file(p, arrays, meta), meta


def net_from_file(p: Path, arrays: dict[str, Any], meta: dict[str, Any]) -> PolicyNet:
    """The EpisodePG network of a policy file's ``arrays`` and ``meta``
    (:func:`agents.policy_format.read`), in eval mode."""
    kind = meta["net"].get("kind")
    if kind not in NETS:
        raise ConfigError(
            f"{p}: a {meta['layout']['env_id']} network ({kind!r}), not an EpisodePG one: "
            "evaluate it as policy:<path>"
        )
    try:
        net = build_net({k: v for k, v in meta["net"].items() if k not in ("kind", "activation")})
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"{p}: cannot rebuild the network its metadata describes ({exc})"
        ) from None
    load_weights(p, net, arrays)
    net.eval()
    return net
