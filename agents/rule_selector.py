"""A learned choice among ``dlsched/Contention-v0``'s rules, decision by decision
(``agent.contention.arch=selector``).

Why: no registered rule wins every setting (docs/experiments/contention-env.md,
"Backfilling"): the exclusive rule wins where backfilled jobs would hold GPUs the queue behind
the first job needs, backfilling where the cluster idles behind a large job, time-sharing
(``srsf``, LWF-1 + SRSF(1) or, with ``comm=adasrsf``, LWF-1 + Ada-SRSF) on small clusters
with large gang jobs.  Which one is right depends on the cluster and the workload, and can be
read off the state.  :class:`RuleSelector` scores each rule of its ``rules`` (default
:data:`SELECTOR_RULES`) by a linear function of :data:`FEATURES`, a few figures of the state
that do not depend on the cluster's size, and takes the action the rule scored highest
would take (SchedInspector's "accept or veto the base rule", with several rules).  One set of
weights acts on any cluster, window and trace, and its episode is a rule's wherever one rule
wins every comparison.

It has no gradient to follow (its choice is an argmax over rules): it is trained by
:mod:`agents.cem` (the cross-entropy method on whole-episode avg JCTs).  It is saved as a
policy file like the networks (net kind ``rule_selector``: the weights, the rule names and
the feature count), which ``evaluate.py contention:<dir>`` runs on any cluster.  Its
:meth:`~RuleSelector.act` takes the env (``NetActor``'s ``net.act(view, obs)``): the rules
read the engine's state, not the observation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import torch as th
from torch import nn

from agents.rule_search import (
    DEFAULT_SAMPLES,
    check_margin,
    check_margin_by,
    check_model,
    check_samples,
    check_search,
    search_action,
)
from envs.sim.errors import ConfigError

__all__ = ["FEATURES", "SELECTOR_RULES", "RuleSelector", "selector_features"]

#: the rules a selector chooses among by default (registered Contention-v0 rules)
SELECTOR_RULES = ("exclusive", "exclusive_backfill", "exclusive_easy", "srsf")

#: what :func:`selector_features` returns, in order ("first job": the window's first, the job
#: SRSF would start next; every figure is a share or a scaled log, so none grows with the
#: cluster)
FEATURES = (
    "bias (1)",
    "log2(servers) / 6",
    "first job's GPUs / the cluster's GPUs",
    "idle GPUs (no worker) / GPUs",
    "log1p(queued jobs) / 3",
    "jobs still to arrive / jobs",
    "log1p(first job's wait, s) / 10",
    "running jobs / GPUs",
    "first job needs more GPUs than are idle (0 or 1)",
)


def selector_features(env: Any) -> npt.NDArray[np.float64]:
    """:data:`FEATURES` of ``env``'s current decision (a
    :class:`~envs.gym.contention_env.ContentionEnv` between steps): finite, each in [0, 2] for
    any cluster of up to 4,096 servers and waits of up to 30 years."""
    sim = env.sim
    gpus = env.cluster.num_gpus
    idle = max(env.idle_gpus(), 0)
    head = env.window[0] if env.window else None
    need = head.spec.num_gpus if head is not None else 0
    wait_s = (sim.now - head.spec.submit_ms) / 1000.0 if head is not None else 0.0
    return np.array(
        [
            1.0,
            math.log2(env.cluster.num_servers) / 6.0,
            need / gpus,
            idle / gpus,
            math.log1p(len(sim.queue)) / 3.0,
            env.jobs_to_arrive() / max(env.n, 1),
            math.log1p(max(wait_s, 0.0)) / 10.0,
            len(sim.running) / gpus,
            float(need > idle),
        ],
        dtype=np.float64,
    )


class RuleSelector(nn.Module):
    """The selector (module docstring): ``weight[k] @ selector_features(env)`` scores rule
    ``rules[k]``; :meth:`act` returns the action of the rule scored highest (the first on a
    tie).  Built with zero weights (it acts as ``rules[0]``); :meth:`start_as` makes it one
    rule.  An unknown rule name is one :class:`ConfigError` listing the registered ones."""

    arch = "rule_selector"
    #: it acts through the env (the rules read the engine), not on the observation alone
    acts_on_env = True

    def __init__(
        self,
        rules: Sequence[str] = SELECTOR_RULES,
        n_features: int = len(FEATURES),
        search: str = "none",
        samples: int = DEFAULT_SAMPLES,
        margin: float = 0.0,
        margin_by: str = "always",
        model: str = "same",
    ):
        super().__init__()
        from envs.gym.contention_env import teacher

        self.search = check_search(str(search))
        #: ``sampled``: the futures each decision's candidates are rolled out on
        self.samples = check_samples(samples)
        #: the share of the selector's own rollout value another action must beat it by
        #: (0: any gain; a guard against a wrong model's small gains)
        self.margin = check_margin(margin)
        #: ``always`` (the margin in full before the last arrival) or ``arrivals`` (scaled by
        #: the arrivals expected while a job runs: agents.rule_search.margin_share)
        self.margin_by = check_margin_by(margin_by)
        #: the engine the search's rollouts run: ``same`` (the run's fidelity) or ``fast``
        self.model = check_model(model)
        #: the search's last chosen rollout: its value and the decisions it passed through
        #: (agents.rule_search.search_action)
        self.search_memo: tuple[float, set[Any]] | None = None

        names = tuple(str(r) for r in rules)
        if not names or len(set(names)) != len(names):
            raise ConfigError(f"a rule selector needs distinct rule names, got {list(rules)}")
        if int(n_features) != len(FEATURES):
            raise ConfigError(
                f"a rule selector reads {len(FEATURES)} features ({', '.join(FEATURES)}), "
                f"got n_features={n_features}"
            )
        self.rules = names
        self._fns = [teacher(n) for n in names]  # an unknown name: one clear error
        w = th.zeros(len(names), len(FEATURES), dtype=th.float64)
        self.weight = nn.Parameter(w, requires_grad=False)

    def describe(self) -> dict[str, Any]:
        """What rebuilds it (saved with its weights; ``search`` only when it searches, so a
        plain selector's file is as before)."""
        out: dict[str, Any] = {
            "arch": self.arch,
            "rules": list(self.rules),
            "n_features": len(FEATURES),
        }
        if self.search != "none":
            out["search"] = self.search
        if self.search == "sampled":
            out["samples"] = self.samples
        if self.margin:
            out["margin"] = self.margin
        if self.margin_by != "always":
            out["margin_by"] = self.margin_by
        if self.model != "same":
            out["model"] = self.model
        return out

    def with_search(
        self,
        search: str,
        samples: int = DEFAULT_SAMPLES,
        margin: float = 0.0,
        margin_by: str = "always",
        model: str = "same",
    ) -> RuleSelector:
        """A selector of the same rules and weights that acts with ``search`` (one of
        :data:`agents.rule_search.SEARCHES`; another name is one :class:`ConfigError`),
        for ``sampled`` ``samples`` futures per decision (>= 1), and taking another action
        only where it beats its own by ``margin`` of its value (scaled as ``margin_by``
        says), its rollouts on the engine ``model`` says (``same`` or ``fast``)."""
        out = RuleSelector(self.rules, len(FEATURES), search, samples, margin, margin_by, model)
        out.set_flat(self.flat())
        return out

    def _index(self, rule: str) -> int:
        if rule not in self.rules:
            raise ConfigError(f"rule {rule!r} is not one of the selector's {list(self.rules)}")
        return self.rules.index(rule)

    def start_as(self, rule: str) -> None:
        """Weights that choose ``rule`` at every decision (its bias 1, the rest 0)."""
        k = self._index(rule)
        with th.no_grad():
            self.weight.zero_()
            self.weight[k, 0] = 1.0

    def set_flat(self, theta: npt.ArrayLike) -> None:
        """Weights from a flat vector (rule-major), as the cross-entropy method searches them."""
        t = th.as_tensor(np.asarray(theta, dtype=np.float64).reshape(self.weight.shape))
        if not bool(th.isfinite(t).all()):
            raise ConfigError("a rule selector's weights must be finite")
        with th.no_grad():
            self.weight.copy_(t)

    def flat(self) -> npt.NDArray[np.float64]:
        """The weights as one flat vector (rule-major)."""
        return self.weight.detach().numpy().reshape(-1).copy()

    def rule(self, name: str) -> Any:
        """The rule ``name`` of the selector's (``rule(env) -> action``)."""
        return self._fns[self._index(name)]

    def choose(self, env: Any) -> int:
        """The index of the rule that acts at ``env``'s current decision."""
        scores = self.weight.detach().numpy() @ selector_features(env)
        return int(np.argmax(scores))

    def base_act(self, env: Any) -> int:
        """The chosen rule's action at ``env``'s current decision (no search)."""
        return int(self._fns[self.choose(env)](env))

    def act(self, env: Any, obs: Any = None) -> int:
        """The action at ``env``'s current decision: :meth:`base_act`, or with a ``search``
        (``drained``, ``known``, ``sampled``) the search's
        (:func:`agents.rule_search.search_action`)."""
        if self.search == "none":
            return self.base_act(env)
        return search_action(self, env)

    def forward(self, *_args: Any) -> th.Tensor:
        raise ConfigError(
            "a rule selector has no logits over actions: it acts through the env "
            "(act(env, obs)); train it with agent.algo=cem"
        )
