"""The cross-entropy method for a rule selector: ``train.py +agent=contention_cem``
(``agent.algo=cem``).

Why: in ``dlsched/Contention-v0`` one decision rarely changes an episode (a wait defers a start
to the next stop), so policy gradients over sampled actions do not find rules that pay only
when followed throughout (docs/experiments/contention-env.md): EpisodePG from scratch stops at
LWF-1 + SRSF(1), and expert iteration's per-decision labels contradict each other.  The
cross-entropy method searches the *parameters* instead: each candidate is a whole policy,
judged by whole episodes, so a change of rule that pays only when kept is judged as kept.  The
policy it trains is a :class:`~agents.rule_selector.RuleSelector` (a few dozen weights).

One iteration (:meth:`SelectorCEM.iterate`):

1. draw ``agent.cem.episodes`` workload seeds with the learner's generator (from
   [10,000, 2^31); with ``contention=mix`` each seed is also its setting: cluster, load,
   generator or trace window);
2. run each of the selector's rules on them: each workload's best rule is the yardstick;
3. draw ``population - 1`` candidates from the search distribution (mean: the current
   weights; per-weight standard deviation ``sigma``), keep the mean as candidate 0, run each
   on every workload: a candidate's score is its mean ratio of avg JCT to the workload's best
   rule (1: as good as the best rule on every workload);
4. the ``elite`` share of the lowest scores gives the new mean and standard deviation
   (floored at ``sigma_min``), and the selector takes the new mean.

The episodes run over ``agent.contention.workers`` processes.  Everything random comes from
the learner's generator (``default_rng([seed, 1])``), saved with the weights and the search
distribution in the run's state, so a run is bit-reproducible from its seed and resumes bit
for bit.  Validation, checkpoints, TensorBoard, Ctrl-C and ``resume=`` are the ``episodes``
pipeline's (:mod:`training.episodes`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from agents.actors import NetActor
from agents.episode_pg import EpisodePG, EpisodePGConfig, PolicyNet, run_episode
from agents.rule_selector import SELECTOR_RULES, RuleSelector
from envs.gym.actors import RuleActor
from envs.sim.errors import ConfigError

__all__ = ["CEMConfig", "CrossEntropyMethod", "SelectorCEM", "build_cem", "selector_episode"]


@dataclass
class CEMConfig:
    """``agent.cem`` (module docstring): ``population`` candidates per iteration (the mean
    among them), the ``elite`` share that sets the next distribution, the first standard
    deviation ``sigma`` of every weight and its floor ``sigma_min``, ``episodes`` workloads
    per iteration, the rule the selector ``start``\\ s as, and the registered ``rules`` it
    chooses among (its env needs each rule's placement candidates: ``exclusive_overlap``
    needs ``ovl``).  The floor keeps the search exploring: with 4 elites of 20 in 36 weights
    (four rules) the deviations shrink to a tenth in about six iterations, and with a floor
    of 0.05 two of three training seeds stopped at backfilling's score
    (docs/experiments/contention-env.md)."""

    population: int = 20
    elite: float = 0.2
    sigma: float = 1.0
    sigma_min: float = 0.25
    episodes: int = 12
    start: str = "exclusive"
    rules: list[str] = field(default_factory=lambda: list(SELECTOR_RULES))

    def elites(self) -> int:
        """How many candidates set the next distribution."""
        return math.floor(float(self.elite) * int(self.population) + 1e-9)

    def check(self, rules: tuple[str, ...] | None = None) -> None:
        """One :class:`ConfigError` per setting the search cannot run with (``rules``: the
        selector's, which ``start`` must be among)."""
        for key in ("population", "episodes"):
            value = getattr(self, key)
            if isinstance(value, bool) or int(value) < (2 if key == "population" else 1):
                least = 2 if key == "population" else 1
                raise ConfigError(f"agent.cem.{key} must be an integer >= {least}, got {value!r}")
        elite = float(self.elite)
        if not (math.isfinite(elite) and 0.0 < elite < 1.0) or self.elites() < 1:
            raise ConfigError(
                f"agent.cem.elite must be a share in (0, 1) that keeps at least one of the "
                f"{self.population} candidates, got {self.elite!r}"
            )
        for key in ("sigma", "sigma_min"):
            value = float(getattr(self, key))
            if not (math.isfinite(value) and value > 0.0):
                raise ConfigError(f"agent.cem.{key} must be finite and > 0, got {value!r}")
        if rules is not None and self.start not in rules:
            raise ConfigError(
                f"agent.cem.start={self.start!r} is not one of the selector's rules {list(rules)}"
            )


class CrossEntropyMethod:
    """The search distribution (a diagonal Gaussian) and its update: :meth:`ask` draws a
    population with ``rng`` (the mean first), :meth:`tell` refits mean and deviation to the
    elite (lowest scores).  Plain numpy; its :meth:`state` is what a resumed run needs
    besides the generator."""

    def __init__(
        self,
        mean: npt.ArrayLike,
        sigma: float,
        population: int,
        elites: int,
        sigma_min: float,
        rng: np.random.Generator,
    ) -> None:
        self.mean = np.asarray(mean, dtype=np.float64).copy()
        self.sigma = np.full_like(self.mean, float(sigma))
        self.population, self.elites, self.sigma_min = int(population), int(elites), sigma_min
        self.rng = rng

    def ask(self) -> list[npt.NDArray[np.float64]]:
        """The mean, then ``population - 1`` draws around it."""
        draws = self.rng.standard_normal((self.population - 1, self.mean.size))
        return [self.mean.copy(), *(self.mean + self.sigma * d for d in draws)]

    def tell(self, candidates: list[npt.NDArray[np.float64]], scores: npt.ArrayLike) -> None:
        """Refit to the ``elites`` candidates of lowest score (a stable sort: ties to the
        earlier); a non-finite score is one :class:`ConfigError`."""
        s = np.asarray(scores, dtype=np.float64)
        if s.shape != (len(candidates),) or not np.isfinite(s).all():
            raise ConfigError(f"the cross-entropy method needs one finite score per candidate, "
                              f"got {s.tolist()}")  # fmt: skip
        best = np.argsort(s, kind="stable")[: self.elites]
        elite = np.stack([candidates[i] for i in best])
        self.mean = elite.mean(0)
        self.sigma = np.maximum(elite.std(0), self.sigma_min)

    def state(self) -> dict[str, list[float]]:
        return {"mean": self.mean.tolist(), "sigma": self.sigma.tolist()}

    def load_state(self, state: dict[str, Any]) -> None:
        self.mean = np.asarray(state["mean"], dtype=np.float64)
        self.sigma = np.asarray(state["sigma"], dtype=np.float64)


def selector_episode(net: RuleSelector, env: Any, item: tuple[Any, str | None, int]) -> list[float]:
    """One episode of workload seed ``item[2]`` in ``env``: with ``item[1]`` a rule's name,
    that rule of ``net``; else ``net`` with the flat weights ``item[0]``.  ``[avg JCT (s),
    decisions]`` (a module-level function: it runs in the rollout workers)."""
    weights, rule, seed = item
    if rule is None:
        net.set_flat(weights)
    actor = NetActor(net) if rule is None else RuleActor(net.rule(rule))
    info = run_episode(env, int(seed), act=actor).info
    jct = float(info["avg_jct_s"])
    if not math.isfinite(jct):
        raise ConfigError(f"workload seed {seed}: the episode's avg JCT is {jct}")
    return [jct, float(info.get("decisions", 0))]


class SelectorCEM(EpisodePG):
    """The learner (module docstring); ``net``, a :class:`RuleSelector`, is trained in place
    (it holds the search's mean)."""

    def __init__(
        self, env: Any, net: RuleSelector, config: EpisodePGConfig, cem: CEMConfig
    ) -> None:
        if not isinstance(net, RuleSelector):
            raise ConfigError(
                "agent.algo=cem trains a rule selector: set agent.contention.arch=selector"
            )
        cem.check(net.rules)
        # (EpisodePG's network slot: the selector acts through the env, acts_on_env)
        super().__init__(env, cast(PolicyNet, net), config)
        self.cem = cem
        net.start_as(cem.start)
        self.search = CrossEntropyMethod(
            net.flat(), float(cem.sigma), int(cem.population), cem.elites(),
            float(cem.sigma_min), self.rng,
        )  # fmt: skip

    def training_state(self) -> dict[str, Any]:
        return {**super().training_state(), "cem": self.search.state()}

    def load_training_state(self, state: dict[str, Any]) -> None:
        super().load_training_state(state)
        self.search.load_state(state["cem"])

    def iterate(self) -> dict[str, float]:
        net = self.net
        assert isinstance(net, RuleSelector)
        draws = [self.next_workload() for _ in range(int(self.cem.episodes))]
        candidates = self.search.ask()
        items: list[tuple[Any, str | None, int]] = [
            (None, rule, seed) for rule in net.rules for _, seed in draws
        ]
        items += [(c, None, seed) for c in candidates for _, seed in draws]
        envs = [env for env, _ in draws]
        if any(env is not self.env for env in envs):
            raise ConfigError("agent.algo=cem draws its workloads from the run's env only")
        try:
            out = np.array(self.rollout_pool().map_env(net, selector_episode, items))
        finally:
            net.set_flat(self.search.mean)
        n, k = len(draws), len(net.rules)
        jct = out[:, 0]
        rules = jct[: k * n].reshape(k, n)
        best = rules.min(0)
        ratios = jct[k * n :].reshape(len(candidates), n) / best
        scores = ratios.mean(1)
        self.search.tell(candidates, scores)
        net.set_flat(self.search.mean)
        rule_scores = (rules / best).mean(1)
        return {
            "score_mean": float(scores[0]),
            "score_best": float(scores.min()),
            "best_rule_score": float(rule_scores.min()),
            "sigma": float(self.search.sigma.mean()),
            "decisions": float(out[:, 1].sum()),
        }


def build_cem(agent: Any, env: Any, net: RuleSelector, config: EpisodePGConfig) -> SelectorCEM:
    """The learner of ``agent.algo=cem`` (:data:`agents.learners.LEARNERS`)."""
    return SelectorCEM(env, net, config, agent.cem)
