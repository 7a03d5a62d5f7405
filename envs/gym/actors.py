"""Every kind of rule as an :class:`~envs.gym.episode.Actor`, so that a rule written once acts
in ``evaluate.py``, as a behaviour-cloning teacher and as a validation baseline.

- an allocator of :data:`~envs.sim.elastic.allocators.ALLOCATORS` in ``Cluster-v0``:
  :class:`AllocatorActor` (a fresh allocator per episode, driven by a
  :class:`~envs.gym.heuristic.HeuristicDriver`; a slot planner), or :class:`DriverActor` of
  a given driver;
- the same allocator in ``ClusterPlan-v0``: :class:`PlanRuleActor`, always the plan of that
  label (the env's plans must include it);
- a ``Contention-v0`` rule registered by
  :func:`~envs.gym.contention_env.contention_teacher` (any ``(view) -> action`` function):
  :class:`RuleActor`.

:func:`rule_actor` picks the adapter for the env: ``rule_actor(env, "esrtf")``,
``rule_actor(plan_env, "esrtf(efficiency=0.8)")``, ``rule_actor(contention_env, "srsf")``.
Networks' actors are in :mod:`agents.actors`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy.typing as npt

from envs.gym.cluster_env import ClusterEnv
from envs.gym.contention_env import ContentionEnv, teacher
from envs.gym.episode import decision_view
from envs.gym.heuristic import HeuristicDriver
from envs.gym.plan_env import PlanEnv, parse_plan, plan_label
from envs.sim.elastic.allocators import Allocator, make_allocator, parse_allocator_label
from envs.sim.errors import ConfigError

__all__ = [
    "AllocatorActor",
    "DriverActor",
    "PlanRuleActor",
    "RuleActor",
    "rule_actor",
]


class DriverActor:
    """An actor that lets ``driver`` (a heuristic on the same env) pick every increment; as a
    slot planner (:meth:`slot_allocator`) its allocator plans each slot whole.  Also the older
    ``(env, obs) -> action`` form (``__call__``, ``allocator_for``)."""

    def __init__(self, driver: HeuristicDriver) -> None:
        self.driver = driver

    def reset(self, seed: int | None) -> None:
        """Nothing: the driver plans each new slot (of a new episode too) afresh."""

    def act(self, _obs: Any, _view: Any) -> int:
        return self.driver.act()

    def slot_allocator(self, _obs: Any, _view: Any) -> Allocator:
        return self.driver.allocator

    def __call__(self, _env: ClusterEnv, _obs: npt.NDArray[Any]) -> int:
        return self.driver.act()

    def allocator_for(self, _env: ClusterEnv, _obs: npt.NDArray[Any]) -> Allocator:
        return self.driver.allocator


class AllocatorActor(DriverActor):
    """An allocator through ``env`` (a ``Cluster-v0`` env), a fresh one per episode
    (``factory()`` at every :meth:`reset`, before the env's reset: as a caller that makes a
    new :class:`HeuristicDriver` per episode)."""

    def __init__(self, env: Any, factory: Callable[[], Allocator]) -> None:
        self.env, self.factory = env, factory
        super().__init__(HeuristicDriver(factory(), env))
        self._fresh = True  # the driver made above has not acted yet

    def reset(self, seed: int | None) -> None:
        if not self._fresh:
            self.driver = HeuristicDriver(self.factory(), self.env)
        self._fresh = False


class PlanRuleActor:
    """An allocator in ``ClusterPlan-v0``: always the plan ``label`` (one of the env's
    plans; its index among them is the action)."""

    def __init__(self, env: Any, label: str) -> None:
        view = decision_view(env)
        wanted = plan_label(*parse_plan(label))
        if wanted not in view.labels:
            raise ConfigError(f"{label!r} is not one of the env's plans {list(view.labels)}")
        self.label = wanted
        self.index = list(view.labels).index(wanted)

    def reset(self, seed: int | None) -> None:
        """Nothing: the same plan every slot."""

    def act(self, _obs: Any, _view: Any) -> int:
        return self.index


class RuleActor:
    """A rule ``(view) -> action`` as an actor: a ``Contention-v0`` rule (registered by
    :func:`~envs.gym.contention_env.contention_teacher`), or any function of the decision
    state alone."""

    def __init__(self, rule: Callable[[Any], int]) -> None:
        self.rule = rule

    def reset(self, seed: int | None) -> None:
        """Nothing: a rule reads only the view."""

    def act(self, _obs: Any, view: Any) -> int:
        return self.rule(view)


def _allocator(env: Any, name: str, options: Mapping[str, Any] | None, role: str) -> Any:
    key, opts = parse_allocator_label(name, role=role)
    opts = {**opts, **dict(options or {})}
    return AllocatorActor(env, lambda: make_allocator(key, opts, role=role))


def _plan(env: Any, name: str, options: Mapping[str, Any] | None, role: str) -> Any:
    label = plan_label(*parse_plan(name)) if not options else plan_label(name, dict(options))
    return PlanRuleActor(env, label)


def _contention(env: Any, name: str, options: Mapping[str, Any] | None, role: str) -> Any:
    if options:
        raise ConfigError(f"{role} {name!r}: a Contention-v0 rule takes no options")
    return RuleActor(teacher(name))


#: the env classes rules act in, and how a rule's name becomes an actor there
_ADAPTERS: tuple[tuple[type, Callable[[Any, str, Mapping[str, Any] | None, str], Any]], ...] = (
    (PlanEnv, _plan),
    (ContentionEnv, _contention),
    (ClusterEnv, _allocator),
)


def rule_actor(
    env: Any, name: str, options: Mapping[str, Any] | None = None, *, role: str = "rule"
) -> DriverActor | PlanRuleActor | RuleActor:
    """The registered rule ``name`` acting in ``env`` (see the module docstring): an
    allocator label in ``Cluster-v0`` or ``ClusterPlan-v0``, a ``Contention-v0`` rule's name
    there.  ``options``: an allocator's constructor options.  An unknown name is one
    :class:`ConfigError` naming the known ones (``role`` names what it is for)."""
    view = decision_view(env)
    for cls, adapt in _ADAPTERS:
        if isinstance(view, cls):
            return adapt(env, str(name), options, role)
    raise ConfigError(
        f"{role} {name!r}: rules act in {', '.join(c.__name__ for c, _ in _ADAPTERS)}, "
        f"not {type(view).__name__}"
    )
