"""Expert iteration over the slot's plan (``train.py +agent=plan_expert``): a rollout search
improves the policy, the policy is distilled from it, and the next search starts from the
distilled policy.

Why: RL over the plan of a confident clone moved one training seed in three past its clone
(docs/experiments/general-policy.md), while a rollout search over EfficientSRTF's plan found
~9% on ``medium`` (docs/experiments/against-heuristics.md).  The search's gain is a coordinated
choice of plan per slot, which is exactly ``dlsched/ClusterPlan-v0``'s action, so its labels
are consistent where per-increment labels were not.  The anchors (AlphaZero's expert
iteration, DAgger with a search expert) learn this way: the search is the teacher, the states
are the learner's.

One iteration of :class:`ExpertIteration`, for each of ``groups`` workloads (drawn as EpisodePG
draws them: the env's generator, or a mixture's setting in its own env):

1. the current policy (masked argmax) runs the workload to the end (its states: DAgger's);
2. ``states`` of its slots, drawn with the learner's generator, are searched
   (:func:`plan_values`): every plan is tried on a copy of the env at that slot and followed by
   the **base** (``policy``: the current network, the policy guiding the search; or a plan
   label: that constant plan) for ``horizon`` slots (0: to the end of the episode); a plan's
   value is the return from the slot on (``env.reward=jct``: minus the job-slots spent in the
   system, so over the whole remaining episode, the total JCT it leads to);
   with ``teacher=known`` the slot is valued instead as the released decision-time search
   values it (:func:`agents.plan_search.search_totals`: the copies know only the jobs that
   have arrived; the base ``hold`` holds the policy's plan, and ``also``'s plans are further
   held continuations; lower total JCT is better);
3. each searched slot gets the set of plans within ``tol`` (relative) of the best; slots where
   every plan ties carry nothing and are dropped;

then ``epochs`` passes of cross-entropy of the network towards each slot's best set (uniform
over it) over the labelled slots of the last ``keep`` iterations (0: all, DAgger's
aggregate).  The search sees the workload's future (arrivals and lengths), as every search in
:mod:`agents.search`; the distilled network sees only the observation, so what it can keep is
what the observation predicts.  Every draw comes from the learner's generators, so a run is
bit-reproducible from its seed (and its ``workers`` do not change the result).

Reported per iteration: ``search_regret`` (the current policy's plan against the search's
best, mean relative loss of the return from the slot: what the search adds at the policy's
own states), ``agree`` (share of searched slots where the policy's plan is in the best set),
``ties`` (share where every plan ties), ``labelled`` (slots in the training set).
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import torch as th
from torch import nn

from agents.episode_pg import EpisodePG, EpisodePGConfig, PolicyNet
from agents.plan_search import PlanSearch, search_totals
from envs.sim.errors import ConfigError

__all__ = [
    "ExpertConfig",
    "ExpertIteration",
    "Labelled",
    "action_values",
    "base_rule",
    "build_expert",
    "plan_values",
    "search_workload",
]


@dataclass
class ExpertConfig:
    """``agent.expert`` of ``train.py +agent=plan_expert`` (module docstring): ``states``
    searched slots per workload (the search budget), ``horizon`` slots each rollout follows
    the base after the tried plan (0: to the episode's end), ``base`` what the rollouts
    follow (``policy`` or a plan label of the env), ``epochs`` distillation passes per
    iteration, ``tol`` the relative tie margin, ``keep`` iterations of labelled slots trained
    on (0: all).  ``teacher``: ``future`` (the rollouts see the workload's jobs still to
    come) or ``known`` (``dlsched/ClusterPlan-v0`` only: a slot is valued as the released
    decision-time search values it, :func:`agents.plan_search.search_totals` on the jobs that
    have arrived; ``base`` ``hold`` holds the policy's plan, a label holds that plan, and each
    plan of ``also`` is a further held continuation)."""

    states: int = 16
    horizon: int = 0
    base: str = "policy"
    epochs: int = 4
    tol: float = 1e-3
    keep: int = 0
    candidates: int = 0
    anchor: float = 0.0
    teacher: str = "future"
    also: list[str] = field(default_factory=list)

    def check(self, env: Any = None, contention: bool | None = None) -> None:
        """One :class:`ConfigError` for a setting the search cannot run with.  ``env``: the
        env it will search in (its base and horizon are checked against it); ``contention``:
        whether that is ``dlsched/Contention-v0`` (read off ``env`` when given)."""
        if int(self.states) < 1:
            raise ConfigError(
                f"agent.expert.states (the search budget: decisions searched per workload) "
                f"must be >= 1, got {self.states}"
            )
        if int(self.horizon) < 0:
            raise ConfigError(
                f"agent.expert.horizon must be >= 0 (0: to the episode's end), got {self.horizon}"
            )
        if int(self.epochs) < 1:
            raise ConfigError(f"agent.expert.epochs must be >= 1, got {self.epochs}")
        for key, zero in (("keep", "all"), ("candidates", "every valid action")):
            if int(getattr(self, key)) < 0:
                raise ConfigError(
                    f"agent.expert.{key} must be >= 0 (0: {zero}), got {getattr(self, key)}"
                )
        tol = float(self.tol)
        if not (math.isfinite(tol) and 0.0 <= tol < 1.0):
            raise ConfigError(f"agent.expert.tol must be in [0, 1), got {self.tol}")
        anchor = float(self.anchor)
        if not (math.isfinite(anchor) and anchor >= 0.0):
            raise ConfigError(f"agent.expert.anchor must be finite and >= 0, got {self.anchor}")
        if env is not None:
            contention = not hasattr(env, "labels")
        if self._check_teacher(env, contention):
            return
        if contention:
            if int(self.horizon):
                raise ConfigError(
                    f"agent.expert.horizon={self.horizon}: Contention-v0's rollouts run to the "
                    "episode's end (how many decisions an episode takes is not known before it "
                    "runs, so a horizon could be past it); set agent.expert.horizon=0"
                )
            base_rule(self.base, None)  # a registered rule: known without the env
            return
        if env is None:  # the plan env's labels are not known yet
            return
        base_rule(self.base, env)
        limit = int(getattr(env.inner, "max_slots", 0) or 0)
        if limit and int(self.horizon) >= limit:
            raise ConfigError(
                f"agent.expert.horizon={self.horizon} slots is past the episode: the env "
                f"truncates every episode at max_slots={limit} (0: to the episode's end)"
            )

    def _check_teacher(self, env: Any, contention: bool | None) -> bool:
        """:meth:`check`'s part for ``teacher`` and ``also``; whether the known teacher was
        checked whole (nothing else of :meth:`check` applies to it)."""
        if self.teacher not in TEACHERS:
            raise ConfigError(
                f"agent.expert.teacher must be one of {', '.join(TEACHERS)}, got {self.teacher!r}"
            )
        if self.teacher == "future" and list(self.also):
            raise ConfigError(
                f"agent.expert.also={list(self.also)} needs agent.expert.teacher=known (the "
                "future teacher follows one base)"
            )
        if self.teacher == "known":
            if contention:
                raise ConfigError(
                    "agent.expert.teacher=known is the plan search's valuation "
                    "(dlsched/ClusterPlan-v0); Contention-v0 has teacher=future only"
                )
            if int(self.horizon):
                raise ConfigError(
                    f"agent.expert.horizon={self.horizon}: the known teacher runs the known "
                    "jobs to their end; set agent.expert.horizon=0"
                )
            if self.base == "policy":
                raise ConfigError(
                    "agent.expert.teacher=known continues with held plans: agent.expert.base "
                    "must be 'hold' (the policy's plan held) or a plan label, not 'policy'"
                )
            if env is not None:
                self.known_search().check(env.labels)
            return True
        return False

    def known_search(self) -> PlanSearch:
        """The decision-time search the ``known`` teacher values slots with."""
        also: Any = self.also  # (a list, or Hydra's ListConfig; anything else: check says)
        if isinstance(also, Sequence) and not isinstance(also, str):
            also = tuple(str(label) for label in also)
        return PlanSearch(base=str(self.base), also=also)


#: what values a searched slot: the rollouts see the jobs to come, or only the known ones
TEACHERS = ("future", "known")


def base_rule(base: str, env: Any) -> Any:
    """The rollouts' continuation other than the policy: in ``dlsched/ClusterPlan-v0`` a plan
    label of the env (that constant plan), in ``dlsched/Contention-v0`` (``env`` one, or
    ``None``) a registered Contention-v0 teacher (:func:`~envs.gym.contention_env.teacher`);
    ``None`` for ``policy``.  An unknown name is one :class:`ConfigError`."""
    base = str(base)
    if base == "policy":
        return None
    labels = getattr(env, "labels", None)
    if labels is None:
        from envs.gym.contention_env import teacher

        try:
            rule = teacher(base)
        except ConfigError as exc:
            raise ConfigError(f"agent.expert.base: {exc} (or 'policy')") from None
        return lambda e, _obs: rule(e)
    if base not in labels:
        raise ConfigError(
            f"agent.expert.base={base!r} is neither 'policy' nor a plan of the env "
            f"({', '.join(labels)})"
        )
    return _constant(list(labels).index(base))


def _follow(env: Any, obs: Any, base: Any, horizon: int) -> float:
    """Step ``env`` with ``base(env, obs)`` for ``horizon`` slots (0: to the end); the sum of
    the rewards."""
    total, n = 0.0, 0
    while horizon == 0 or n < horizon:
        obs, r, term, trunc, _ = env.step(base(env, obs))
        total += float(r)
        n += 1
        if term or trunc:
            break
    return total


def action_values(
    env: Any, base: Any, horizon: int = 0, actions: Sequence[int] | None = None
) -> npt.NDArray[np.float64]:
    """The value of each of ``actions`` (default: every action of the env's mask) at
    ``env``'s current decision (not ended): the return from this decision on when the action
    is taken and ``base(env, obs)`` the following ``horizon`` steps (0: to the episode's end),
    each on a copy of the env (the env itself is not stepped)."""
    if actions is None:
        actions = np.flatnonzero(env.action_masks()).tolist()
    blob = pickle.dumps(env)
    out = np.empty(len(actions), dtype=np.float64)
    for i, a in enumerate(actions):
        e = pickle.loads(blob)
        obs, r, term, trunc, _ = e.step(int(a))
        out[i] = float(r) + (0.0 if term or trunc else _follow(e, obs, base, horizon))
    return out


def plan_values(env: Any, base: Any, horizon: int = 0) -> npt.NDArray[np.float64]:
    """Every plan's value at a ``dlsched/ClusterPlan-v0`` env's current slot
    (:func:`action_values` over all ``K`` plans, in their order)."""
    return action_values(env, base, horizon, range(env.K))


@dataclass
class Labelled:
    """Searched slots: observations, the best-set mask per slot (plans within the tie margin
    of the best), and the current policy's relative regret at each."""

    obs: list[npt.NDArray[np.float32]]
    masks: list[npt.NDArray[np.bool_]]
    best: list[npt.NDArray[np.bool_]]
    regret: list[float]
    #: the policy's own decisions that were not labelled (``anchor`` > 0): observations,
    #: masks, the action it took
    kept: list[tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_], int]] = field(
        default_factory=list
    )
    ties: int = 0  # searched slots where every plan tied (dropped)
    searched: int = 0


def _constant(k: int) -> Any:
    def act(_env: Any, _obs: Any) -> int:
        return k

    return act


def _candidates(net: PolicyNet, obs: Any, mask: npt.NDArray[np.bool_], n: int) -> list[int]:
    """The valid actions the search tries: all of them, or (``n`` > 0) the ``n`` the policy
    scores highest (ties: the lower action)."""
    valid = np.flatnonzero(mask)
    if n <= 0 or len(valid) <= n:
        return valid.tolist()
    logits = net.logits_one(obs, mask).numpy()[valid]
    order = np.argsort(-logits, kind="stable")[:n]
    return sorted(valid[order].tolist())


def search_workload(net: PolicyNet, item: tuple[Any, int, int, ExpertConfig]) -> Labelled:
    """One workload's labelled decisions (steps 1-3 of the module docstring): ``item`` is
    (env, workload seed, the seed of the decisions' draw, the config).  A module-level
    function of ``(net, item)``, so :meth:`~agents.rollout_pool.RolloutPool.map` runs it in
    the workers."""
    env, wseed, draw_seed, cfg = item
    act = net.act
    known = cfg.teacher == "known"
    base = None if known else base_rule(cfg.base, env) or act
    search = cfg.known_search() if known else None
    allocators = [d.allocator for d in env.drivers] if known else []
    obs, _ = env.reset(seed=wseed)
    actions: list[int] = []
    visited: list[tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_], int]] = []
    while True:
        a = act(env, obs)
        actions.append(a)
        if cfg.anchor > 0:
            visited.append((obs, env.action_masks(), a))
        obs, _, term, trunc, _ = env.step(a)
        if term or trunc:
            break
    rng = np.random.default_rng(draw_seed)
    n = min(int(cfg.states), len(actions))
    chosen = set(rng.choice(len(actions), size=n, replace=False).tolist())
    out = Labelled([], [], [], [])
    labelled: set[int] = set()
    obs, _ = env.reset(seed=wseed)
    for i, a in enumerate(actions):
        if i in chosen:
            mask = env.action_masks()
            cands = _candidates(net, obs, mask, int(cfg.candidates))
            if a not in cands:  # (the policy's own action is always tried)
                cands = sorted([*cands, a])
            if search is not None:  # the released search's valuation (lower total: better)
                totals = search_totals(env.inner, allocators, env.labels, search, a)
                v = -totals[np.asarray(cands)]
            else:
                v = action_values(env, base, int(cfg.horizon), cands)
            best = float(v.max())
            scale = max(abs(best), 1e-12)
            good = (best - v) <= float(cfg.tol) * scale
            out.searched += 1
            if good.all():
                out.ties += 1
            else:
                target = np.zeros(len(mask), dtype=bool)
                target[np.asarray(cands)[good]] = True
                out.obs.append(obs)
                out.masks.append(mask)
                out.best.append(target)
                out.regret.append(float(best - v[cands.index(a)]) / scale)
                labelled.add(i)
        if len(out.obs) + out.ties == n:
            break
        obs, _, _, _, _ = env.step(a)
    out.kept = [d for i, d in enumerate(visited) if i not in labelled]
    return out


#: one iteration's labelled decisions: observations, action masks, best sets
Masks = list[npt.NDArray[np.bool_]]
Batch = tuple[list[npt.NDArray[np.float32]], Masks, Masks]


class ExpertIteration(EpisodePG):
    """Expert iteration (module docstring) behind EpisodePG's interface: the episodes
    pipeline's validation, checkpoints, resume and Ctrl-C hold as for ``plan_pg``."""

    def __init__(
        self, env: Any, net: PolicyNet, config: EpisodePGConfig, expert: ExpertConfig
    ) -> None:
        super().__init__(env, net, config)
        expert.check(env)
        self.expert = expert
        #: per iteration, its labelled slots (the training set: the last ``keep``)
        self.data: list[Batch] = []
        #: this iteration's unlabelled decisions of the policy (``anchor`` > 0)
        self.kept: list[tuple[npt.NDArray[np.float32], npt.NDArray[np.bool_], int]] = []

    def training_state(self) -> dict[str, Any]:
        state = super().training_state()
        state["expert_data"] = [tuple([x.copy() for x in part] for part in d) for d in self.data]
        return state

    def load_training_state(self, state: dict[str, Any]) -> None:
        super().load_training_state(state)
        self.data = [(list(o), list(m), list(b)) for o, m, b in state.get("expert_data", [])]

    def search(self) -> list[Labelled]:
        """This iteration's searched workloads (drawn in the learner's order, then searched
        over the workers)."""
        items = []
        for _ in range(self.cfg.groups):
            env, wseed = self.next_workload()
            items.append((env, wseed, int(self.rng.integers(2**63)), self.expert))
        return self.rollout_pool().map(self.net, search_workload, items)

    def distil(self) -> dict[str, float]:
        """``epochs`` passes of cross-entropy towards the best sets over the kept labelled
        decisions, plus ``anchor`` x the cross-entropy towards the policy's own action over
        this iteration's other decisions (:attr:`kept`: the policy stays where the search
        said nothing)."""
        keep = int(self.expert.keep)
        data = self.data[-keep:] if keep else self.data
        obs = [o for d in data for o in d[0]]
        masks = [m for d in data for m in d[1]]
        best = [b for d in data for b in d[2]]
        if not obs:
            return {"loss": 0.0, "accuracy": float("nan"), "entropy": 0.0}
        obs_t = th.as_tensor(self.net.stack(obs))
        best_t = th.as_tensor(np.array(best))
        mask_t = th.as_tensor(np.array(masks))
        target = best_t.float() / best_t.float().sum(-1, keepdim=True)
        w = float(self.expert.anchor)
        kept = self.kept if w > 0 else []
        if kept:
            k_obs = th.as_tensor(self.net.stack([d[0] for d in kept]))
            k_mask = th.as_tensor(np.array([d[1] for d in kept]))
            k_act = th.as_tensor([d[2] for d in kept])
            k_batch = max(1, -(-len(kept) * self.cfg.batch_size // len(obs)))
        total, n = 0.0, 0
        for _ in range(int(self.expert.epochs)):
            batches = th.randperm(len(obs), generator=self.gen).split(self.cfg.batch_size)
            anchors = th.randperm(len(kept), generator=self.gen).split(k_batch) if kept else ()
            for b, idx in enumerate(batches):
                logp = th.log_softmax(self.net(obs_t[idx], mask_t[idx]), -1)
                loss = -(target[idx] * logp).sum(-1).mean()
                if kept and b < len(anchors):
                    j = anchors[b]
                    lk = th.log_softmax(self.net(k_obs[j], k_mask[j]), -1)
                    loss = loss - w * lk.gather(1, k_act[j, None]).mean()
                self.opt.zero_grad()
                loss.backward()
                nn.utils.clip_grad_norm_(self.net.parameters(), 0.5)
                self.opt.step()
                total += float(loss.detach())
                n += 1
        with th.no_grad():
            logits = self.net(obs_t, mask_t)
            hit = best_t.gather(1, logits.argmax(-1, keepdim=True))[:, 0]
            probs = th.softmax(logits, -1)
            ent = -(probs * th.log_softmax(logits, -1).clamp(min=-30)).sum(-1).mean()
        return {"loss": total / max(n, 1), "accuracy": float(hit.float().mean()),
                "entropy": float(ent)}  # fmt: skip

    def iterate(self) -> dict[str, float]:
        """Search (an interrupt here leaves the weights untouched), then distil."""
        return self.update_from(self.search())

    def update_from(self, found: Sequence[Labelled]) -> dict[str, float]:
        """Add the iteration's labelled slots and distil; the iteration's figures."""
        obs = [o for f in found for o in f.obs]
        masks = [m for f in found for m in f.masks]
        best = [b for f in found for b in f.best]
        regret = [r for f in found for r in f.regret]
        searched = sum(f.searched for f in found)
        ties = sum(f.ties for f in found)
        self.data.append((obs, masks, best))
        self.kept = [d for f in found for d in f.kept]
        out = self.distil()
        out.update(
            {
                "search_regret": float(np.mean(regret)) if regret else 0.0,
                "agree": float(np.mean([r <= self.expert.tol for r in regret])) if regret else 1.0,
                "ties": ties / max(searched, 1),
                "labelled": float(sum(len(d[0]) for d in self.data)),
                "decisions": float(searched),
                "learning_rate": float(self.opt.param_groups[0]["lr"]),
            }
        )
        return out


def build_expert(agent: Any, env: Any, net: PolicyNet, config: EpisodePGConfig) -> ExpertIteration:
    """The learner of ``agent.algo=expert_iteration`` (:data:`agents.learners.LEARNERS`)."""
    return ExpertIteration(env, net, config, agent.expert)
