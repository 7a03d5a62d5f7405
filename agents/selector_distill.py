"""A rule selector's search distilled into its weights: ``train.py +agent=contention_distill
agent.distill.source=<a searched selector's file>`` (``agent.algo=distill``).

Why: the ``known`` search (:mod:`agents.rule_search`) is 7% past the best heuristic at paper
scale, but it runs at decision time (about 80 CPU-s a paper-scale episode at fast fidelity,
200x the selector) and is no network.  Its choices depend only on what the selector sees (the
arrived jobs and the count still to arrive), so unlike a search over the workload's own future
(expert iteration in this env: docs/experiments/contention-env.md, "Expert iteration") its
labels do not contradict each other for states the policy cannot tell apart.  This learner
fits the selector's weights to them: DAgger (Ross et al.) with the search as the expert.

One iteration (:meth:`SelectorDistill.iterate`):

1. draw ``agent.distill.episodes`` workload seeds with the learner's generator (with
   ``contention=mix``, each also its setting);
2. run each episode: in the first ``agent.distill.expert_iterations`` iterations the search
   acts, afterwards the selector being trained (DAgger: the states its own choices lead to).
   At every decision where the search weighs two or more actions
   (:func:`~agents.rule_search.search_values`), record the selector's features, each rule's
   rollout value and which rules take the search's action;
3. add them to every earlier iteration's decisions, and fit the weights to all of them
   (:func:`fit`): the softmax over the rules' scores should put its mass on the rules that
   take the search's action, each decision weighted by how much its choice matters (the
   spread of its rollout values, a share of the selector's own, at most
   ``agent.distill.weight_cap``), with an L2 pull (``agent.distill.l2``) toward the source's
   weights.  Full-batch L-BFGS in float64 from the source's weights: deterministic.

The search's rollouts follow the *source's* weights throughout (a fixed expert): the student
learns one step of policy improvement over the source, as the search does at decision time.
Everything random is the learner's generator (the workload draws); the labels are the
engine's, deterministic given the seeds; the fit is deterministic.  So a run is
bit-reproducible from its seed (tested), and its state (weights, generator, every labelled
decision) resumes bit for bit.  The policy it writes is a plain selector (no search): it acts
at the selector's cost, on any cluster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import torch as th

from agents.episode_pg import EpisodePG, EpisodePGConfig, PolicyNet, build_net, run_episode
from agents.rule_search import search_values
from agents.rule_selector import FEATURES, RuleSelector, selector_features
from envs.sim.errors import ConfigError

__all__ = [
    "DistillConfig",
    "Labels",
    "SelectorDistill",
    "build_distill",
    "checked_source",
    "fit",
    "label_episode",
    "load_source",
]


@dataclass
class DistillConfig:
    """``agent.distill`` (module docstring): the searched selector's policy file ``source``
    (its weights start the student and drive the search's rollouts; its ``search``,
    ``margin`` and ``margin_by`` are the expert's), ``episodes`` labelled per iteration, the
    first ``expert_iterations`` acted by the search, the ``l2`` pull toward the source's
    weights, the ``weight_cap`` of a decision's weight and the L-BFGS ``steps`` of each fit."""

    source: str = "policies/contention_known"
    episodes: int = 8
    expert_iterations: int = 1
    l2: float = 0.01
    weight_cap: float = 0.1
    steps: int = 200

    def check(self) -> None:
        """One :class:`ConfigError` per setting the learner cannot run with."""
        for key, least in (("episodes", 1), ("expert_iterations", 0), ("steps", 1)):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ConfigError(
                    f"agent.distill.{key} must be an integer >= {least}, got {value!r}"
                )
        for key in ("l2", "weight_cap"):
            value = getattr(self, key)
            number = float(value) if isinstance(value, int | float) else math.nan
            if isinstance(value, bool) or not (math.isfinite(number) and number >= 0.0):
                raise ConfigError(f"agent.distill.{key} must be finite and >= 0, got {value!r}")
        if not float(self.weight_cap) > 0.0:
            raise ConfigError("agent.distill.weight_cap must be > 0 (every weight would be 0)")
        if not str(self.source):
            raise ConfigError("agent.distill.source: name a searched rule selector's policy file")


def checked_source(distill: DistillConfig, rules: list[str]) -> RuleSelector:
    """``distill``'s settings checked and its source loaded (:func:`load_source`), which must
    choose among ``rules`` (``agent.cem.rules``, the run's selector's): one
    :class:`ConfigError` otherwise (``train.py`` before anything runs, and the learner)."""
    distill.check()
    source = load_source(str(distill.source))
    if list(source.rules) != list(rules):
        raise ConfigError(
            f"agent.distill.source={distill.source} chooses among {list(source.rules)}, "
            f"agent.cem.rules is {list(rules)}: make them agree"
        )
    return source


def load_source(source: str) -> RuleSelector:
    """The searched rule selector of the policy file ``source``: one :class:`ConfigError`
    naming the file if it is not a rule selector or does not search with ``known`` or
    ``drained``."""
    from agents.episode_pg import load_episode_pg
    from agents.policy_file import find

    p = find(source)
    net, _ = load_episode_pg(p)
    if not isinstance(net, RuleSelector):
        raise ConfigError(
            f"agent.distill.source={source}: {p} holds a {getattr(net, 'arch', 'mlp')!r} "
            "network, not a rule selector"
        )
    if net.search not in ("known", "drained"):
        raise ConfigError(
            f"agent.distill.source={source}: its search is {net.search!r}; distilling needs "
            "a selector with search known or drained (python -m agents.selector_search)"
        )
    return net


@dataclass
class Labels:
    """Labelled decisions: ``x`` the selector's features (n x F), ``values`` each rule's
    rollout value (n x K, s), ``target`` which rules take the search's action (n x K)."""

    x: npt.NDArray[np.float64]
    values: npt.NDArray[np.float64]
    target: npt.NDArray[np.bool_]

    @staticmethod
    def empty(k: int) -> Labels:
        return Labels(np.zeros((0, len(FEATURES))), np.zeros((0, k)), np.zeros((0, k), bool))

    def __len__(self) -> int:
        return int(self.x.shape[0])

    def extend(self, *others: Labels) -> Labels:
        """These decisions, then ``others``'s, in one array each."""
        parts = (self, *others)
        return Labels(
            np.concatenate([p.x for p in parts]),
            np.concatenate([p.values for p in parts]),
            np.concatenate([p.target for p in parts]),
        )

    def weights(self, cap: float) -> npt.NDArray[np.float64]:
        """Each decision's weight: the spread of its finite rollout values over the
        selector's own (the lowest finite value stands in for a stuck rule's ``inf``), at
        most ``cap``."""
        finite = np.isfinite(self.values)
        lo = np.where(finite, self.values, np.inf).min(axis=1, initial=np.inf)
        hi = np.where(finite, self.values, -np.inf).max(axis=1, initial=-np.inf)
        stuck = ~finite.all(axis=1)  # (every rule stuck: the cap too, no warning)
        with np.errstate(invalid="ignore", divide="ignore"):
            spread = np.where(stuck, cap, (hi - lo) / np.maximum(lo, 1e-12))
        return np.minimum(spread, cap)

    def state(self) -> dict[str, th.Tensor]:
        return {"x": th.from_numpy(self.x.copy()), "values": th.from_numpy(self.values.copy()),
                "target": th.from_numpy(self.target.copy())}  # fmt: skip

    @staticmethod
    def from_state(state: dict[str, th.Tensor]) -> Labels:
        return Labels(state["x"].numpy().copy(), state["values"].numpy().copy(),
                      state["target"].numpy().copy())  # fmt: skip


def label_episode(net: RuleSelector, env: Any, item: tuple[Any, bool, int]) -> Labels:
    """One episode of workload seed ``item[2]`` in ``env``, labelled by the expert ``item[0]``
    (``(description, flat weights)`` of the searched source): the expert acts, or with
    ``item[1]`` the selector ``net`` (the student, no search).  A module-level function:
    it runs in the rollout workers."""
    (description, flat), student_acts, seed = item
    expert = build_net(description)
    assert isinstance(expert, RuleSelector)
    expert.set_flat(flat)
    xs: list[npt.NDArray[np.float64]] = []
    values: list[list[float]] = []
    targets: list[list[bool]] = []

    def act(view: Any, _obs: Any) -> int:
        got = search_values(expert, view)
        if got is None:
            chosen = expert.base_act(view)
        else:
            acts, vals, chosen = got
            xs.append(selector_features(view))
            values.append(vals)
            targets.append([a == chosen for a in acts])
        return net.base_act(view) if student_acts else int(chosen)

    info = run_episode(env, int(seed), act=act).info
    if not math.isfinite(float(info["avg_jct_s"])):
        raise ConfigError(f"workload seed {seed}: the episode's avg JCT is {info['avg_jct_s']}")
    k = len(expert.rules)
    if not xs:
        return Labels.empty(k)
    return Labels(np.stack(xs), np.array(values, dtype=np.float64).reshape(-1, k),
                  np.array(targets, dtype=bool).reshape(-1, k))  # fmt: skip


def fit(
    labels: Labels, start: npt.NDArray[np.float64], l2: float, cap: float, steps: int
) -> tuple[npt.NDArray[np.float64], dict[str, float]]:
    """The weights (rule-major, as :meth:`RuleSelector.flat`) that minimise the weighted
    cross-entropy of the rules' softmax to the search's choices plus ``l2`` times the squared
    distance to ``start`` (module docstring, step 3), by full-batch L-BFGS from ``start``;
    and the fit's figures: its loss, and the weighted share of decisions where the highest
    scored rule takes the search's action before and after."""
    k = labels.target.shape[1]
    w0 = th.tensor(start, dtype=th.float64).reshape(k, len(FEATURES))
    x = th.from_numpy(labels.x)
    t = th.from_numpy(labels.target)
    wt = th.from_numpy(labels.weights(cap))
    total = float(wt.sum())

    def agreement(w: th.Tensor) -> float:
        top = (x @ w.T).argmax(1)
        hit = t.gather(1, top[:, None])[:, 0].to(th.float64)
        return float((hit * wt).sum()) / total if total > 0 else 1.0

    before = agreement(w0)
    if total <= 0:
        return start.copy(), {"loss": 0.0, "agree_before": before, "agree_after": before}
    w = w0.clone().requires_grad_(True)
    opt = th.optim.LBFGS([w], lr=1.0, max_iter=int(steps), line_search_fn="strong_wolfe",
                         tolerance_grad=1e-10, tolerance_change=1e-12)  # fmt: skip

    def loss_fn() -> th.Tensor:
        logp = th.log_softmax(x @ w.T, dim=1)
        hit = th.logsumexp(logp.masked_fill(~t, -math.inf), dim=1)
        return -(wt * hit).sum() / total + float(l2) * ((w - w0) ** 2).sum()

    def closure() -> th.Tensor:
        opt.zero_grad()
        loss = loss_fn()
        loss.backward()
        return loss

    opt.step(closure)
    out = w.detach()
    if not bool(th.isfinite(out).all()):
        raise ConfigError("distilling the search gave non-finite weights")
    with th.no_grad():
        loss = float(loss_fn())
    after = agreement(out)
    return out.numpy().reshape(-1).copy(), {"loss": loss, "agree_before": before,
                                            "agree_after": after}  # fmt: skip


class SelectorDistill(EpisodePG):
    """The learner (module docstring); ``net``, a :class:`RuleSelector` of the source's rules,
    is trained in place."""

    def __init__(
        self, env: Any, net: RuleSelector, config: EpisodePGConfig, distill: DistillConfig
    ) -> None:
        if not isinstance(net, RuleSelector):
            raise ConfigError(
                "agent.algo=distill trains a rule selector: set agent.contention.arch=selector"
            )
        source = checked_source(distill, list(net.rules))
        # (EpisodePG's network slot: the selector acts through the env, acts_on_env)
        super().__init__(env, cast(PolicyNet, net), config)
        self.distill = distill
        self.start = source.flat()
        self.expert = (source.describe(), self.start.copy())
        net.set_flat(self.start)
        self.labels = Labels.empty(len(net.rules))

    def training_state(self) -> dict[str, Any]:
        return {**super().training_state(), "labels": self.labels.state()}

    def load_training_state(self, state: dict[str, Any]) -> None:
        super().load_training_state(state)
        self.labels = Labels.from_state(state["labels"])

    def iterate(self) -> dict[str, float]:
        net = self.net
        assert isinstance(net, RuleSelector)
        draws = [self.next_workload() for _ in range(int(self.distill.episodes))]
        if any(env is not self.env for env, _ in draws):
            raise ConfigError("agent.algo=distill draws its workloads from the run's env only")
        student = self.iteration >= int(self.distill.expert_iterations)
        items = [(self.expert, student, seed) for _, seed in draws]
        got = self.rollout_pool().map_env(net, label_episode, items)
        new = Labels.empty(len(net.rules)).extend(*got)
        self.labels = self.labels.extend(new)
        d = self.distill
        flat, figures = fit(self.labels, self.start, float(d.l2), float(d.weight_cap),
                            int(d.steps))  # fmt: skip
        net.set_flat(flat)
        return {
            "labelled": float(len(new)),
            "labelled_total": float(len(self.labels)),
            "student_acted": float(student),
            "decisions": float(len(new)),
            **figures,
        }


def build_distill(
    agent: Any, env: Any, net: RuleSelector, config: EpisodePGConfig
) -> SelectorDistill:
    """The learner of ``agent.algo=distill`` (:data:`agents.learners.LEARNERS`)."""
    return SelectorDistill(env, net, config, agent.distill)
