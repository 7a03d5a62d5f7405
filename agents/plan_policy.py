"""A trained ``dlsched/ClusterPlan-v0`` policy: its network, plans and training env, acting in
the plain ``Cluster-v0`` env.

:class:`PlanPolicy` is what every consumer of a plan policy uses: training's validation
(:mod:`training.plan`), ``evaluate.py``'s ``policy:<path>`` kind (:mod:`evaluation.policy`) and
the held-out tables (:mod:`evaluation.heldout`).  :meth:`PlanPolicy.actor` wraps it in a
:class:`~envs.gym.plan_env.PlanActor`, so each of them runs the policy through the same env,
with the same per-increment decisions, as the heuristics it is compared with.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import torch as th

from agents.episode_pg import PolicyNet, load_episode_pg
from agents.set_plan import SetPlanNet
from envs.gym.cluster_env import ClusterEnv
from envs.gym.plan_env import PLAN_ENV_ID, PlanActor, plan_label
from envs.sim.errors import ConfigError

if TYPE_CHECKING:
    from agents.plan_search import PlanSearch

__all__ = ["PlanPolicy"]


@dataclass
class PlanPolicy:
    """``net`` (plan observation -> logits over ``plans``), the ``plans`` it picks from, the
    inner env config it was trained in (``env``, :meth:`EnvConfig.as_dict`; ``None`` if
    unknown) and the saved file's metadata (``meta``; empty for a policy in training)."""

    net: PolicyNet
    plans: Sequence[Any]
    env: dict[str, Any] | None = None
    meta: dict[str, Any] | None = None

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> PlanPolicy:
        """A policy saved by :func:`agents.episode_pg.save_episode_pg` from a ``PlanEnv``; a
        policy of another env is a :class:`ConfigError` that says how to evaluate it."""
        net, meta = load_episode_pg(path)
        layout = meta.get("env")
        if not isinstance(layout, dict) or layout.get("id") != PLAN_ENV_ID:
            raise ConfigError(
                f"{path}: not a {PLAN_ENV_ID} policy (a dlsched/Contention-v0 policy is "
                "evaluated as contention:<path>)"
            )
        if not isinstance(layout.get("env"), dict) or not isinstance(layout.get("plans"), list):
            raise ConfigError(f"{path}: its layout lacks the inner env config or the plans")
        plans = [(str(n), dict(o)) for n, o in layout["plans"]]
        policy = cls(net, plans, dict(layout["env"]), meta)
        try:
            policy.search  # noqa: B018  (a malformed search is refused on loading)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None
        return policy

    def chooser(
        self, deterministic: bool = True, rng: np.random.Generator | None = None
    ) -> Callable[[npt.NDArray[np.float32]], int]:
        """Plan observation -> plan: the argmax, or a draw from the softmax with ``rng``."""
        if not deterministic and rng is None:
            raise ConfigError("a sampling plan policy needs a seeded generator (rng)")
        net = self.net
        every: npt.NDArray[np.bool_] = np.ones(len(self.plans), dtype=np.bool_)  # (one a plan)

        def choose(obs: npt.NDArray[np.float32]) -> int:
            # the network's layers on one observation (the same torch operations as
            # net.net(obs[None])[0], bit for bit; no mask: every plan is valid)
            logits = net.logits_one(obs, every).double()
            if deterministic:
                return int(logits.argmax())
            assert rng is not None
            p = th.softmax(logits, -1).numpy()
            return int(rng.choice(len(p), p=p / p.sum()))

        return choose

    def actor(
        self,
        env: ClusterEnv,
        deterministic: bool = True,
        rng: np.random.Generator | None = None,
    ) -> PlanActor:
        """A fresh :class:`PlanActor` for one episode of ``env``; a plan observation of
        another size than the network's input (for a size-agnostic network: rows of another
        width) is a :class:`ConfigError`."""
        search = self.search
        if search is None:
            actor = PlanActor(env, self.chooser(deterministic, rng), self.plans)
        else:  # (the network inside a decision-time search: agents.plan_search)
            from agents.plan_search import SearchPlanActor

            actor = SearchPlanActor(env, self.chooser(deterministic, rng), self.plans, search)
        size = actor.planner.obs_size
        if isinstance(self.net, SetPlanNet):
            try:
                self.net.window_of(size)
            except ConfigError as exc:
                raise ConfigError(f"{exc} (env features {env.features!r})") from None
        elif size != self.net.obs_size:
            raise ConfigError(
                f"the plan policy takes {self.net.obs_size} inputs, the env's plan observation "
                f"has {size} (window J={env.J}, features {env.features!r})"
            )
        return actor

    @property
    def search(self) -> PlanSearch | None:
        """The decision-time search the file records (``meta["search"]``,
        :mod:`agents.plan_search`), or ``None``: the network acts alone."""
        spec = (self.meta or {}).get("search")
        if spec is None:
            return None
        from agents.plan_search import PlanSearch

        out = PlanSearch.of(spec)
        out.check(self.labels)
        return out

    @property
    def labels(self) -> list[str]:
        """The labels of :attr:`plans` (``esrtf(efficiency=0.8)``), in their order."""
        return [plan_label(n, o) for n, o in self.plans]

    @property
    def any_window(self) -> bool:
        """Whether the network acts on any window ``J`` and cluster (the set network)."""
        return isinstance(self.net, SetPlanNet)
