"""One actor protocol and one episode loop for the three env ids.

Why: a decision rule, a cloned network, a trained policy and a search all act the same way, so
one loop serves evaluation, behaviour-cloning data, validation and rollouts, and a rule written
once is usable in each of them.

- :class:`Actor`: ``reset(seed)`` at the start of every episode, then ``act(obs, view) ->
  action`` per decision.  ``view`` is the env's public, read-only decision state
  (:func:`decision_view`: the unwrapped env; ``Cluster-v0``: the properties of
  :mod:`envs.gym.cluster.state`, ``action_masks()`` and ``live_mask``; ``Contention-v0``:
  :class:`ContentionView`; ``ClusterPlan-v0``: :class:`PlanView`).  An actor that plans a
  whole ``Cluster-v0`` slot at once also has ``slot_allocator(obs, view) -> Allocator``
  (:class:`SlotPlanningActor`): :func:`run_episode` then applies each slot in one call
  (``ClusterEnv.plan_slot``: the same episode as its increments one step at a time, tested bit
  for bit) unless a recorder needs every step.  The adapters that make each kind of rule an
  actor are in :mod:`envs.gym.actors`; networks' in :mod:`agents.actors`.
- :func:`run_episode`: reset with a workload seed, act until the episode ends, an
  :class:`EpisodeRun` (steps, return, final ``info``); :func:`play_on`: the same from where
  the env is.  A :class:`Recorder` sees each decision before its step and each outcome after
  it.  An invalid action is one :class:`ConfigError` naming the action and the decision time
  (``strict=False``: counted by the env instead, as ``Cluster-v0``'s evaluation counts
  them).
- :func:`step`: the one env step every loop takes (:func:`run_episode` and the batched
  :func:`agents.episode_pg.run_lockstep`), with the invalid-action check.
- :class:`DecisionLog` + :func:`collect_decisions`: the teacher data of behaviour cloning
  (observation, mask and action per decision; per decision the reward of its slot), what
  :func:`pretrain.dataset.collect` and :func:`agents.episode_pg.teacher_data` return.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from envs.sim.errors import ConfigError

if TYPE_CHECKING:
    from envs.sim.elastic.allocators import Allocator

__all__ = [
    "Actor",
    "CallableActor",
    "ContentionView",
    "DecisionLog",
    "EpisodeRun",
    "InvalidActionError",
    "PlanView",
    "Recorder",
    "SlotPlanningActor",
    "as_actor",
    "collect_decisions",
    "decision_time",
    "decision_view",
    "play_on",
    "run_episode",
    "step",
]


@runtime_checkable
class Actor(Protocol):
    """Anything that acts in an env: ``reset(seed)`` before each episode (the episode's
    workload seed, before the env's reset), ``act(obs, view)`` per decision (``view``:
    :func:`decision_view`)."""

    def reset(self, seed: int | None) -> None: ...

    def act(self, obs: Any, view: Any) -> int: ...


@runtime_checkable
class SlotPlanningActor(Actor, Protocol):
    """An actor that plans a whole ``Cluster-v0`` slot: the allocator whose plan it is
    (``act`` is still its increment-by-increment form)."""

    def slot_allocator(self, obs: Any, view: Any) -> Allocator: ...


class ContentionView(Protocol):
    """What a ``Contention-v0`` rule reads of :class:`~envs.gym.contention_env.ContentionEnv`
    (public, read-only): the window of queued jobs (SRSF order), the placement candidates
    (``C`` of them), the action layout (``j * C + c``; ``wait_action``), the masks, whether
    waiting is valid, the cluster and the decision simulator (``sim.now`` in ms,
    ``sim.residents``, ``sim.running``)."""

    window: list[Any]
    placements: tuple[str, ...]
    C: int
    J: int
    wait_action: int
    cluster: Any
    sim: Any

    def action_masks(self) -> npt.NDArray[np.bool_]: ...

    def can_wait(self) -> bool: ...


class PlanView(Protocol):
    """What a ``ClusterPlan-v0`` actor reads of :class:`~envs.gym.plan_env.PlanEnv`: the plans
    (``labels``, ``K``), the masks (all true), the slot clock (``sim.now``) and the inner
    ``Cluster-v0`` env's decision state (``inner``)."""

    labels: tuple[str, ...]
    K: int
    inner: Any
    sim: Any

    def action_masks(self) -> npt.NDArray[np.bool_]: ...


class InvalidActionError(ConfigError):
    """An action the env refused (its mask forbids it)."""


def decision_view(env: Any) -> Any:
    """The env's public decision state that actors read: the unwrapped env (Gymnasium
    wrappers only change what ``step`` returns, not the state decided on)."""
    return getattr(env, "unwrapped", env)


def decision_time(view: Any) -> str:
    """The decision time of ``view``'s open decision, with its unit: ``Cluster-v0``'s slot,
    otherwise the decision clock ``sim.now`` (``Contention-v0``: ms; ``ClusterPlan-v0``: the
    slot)."""
    slot = getattr(view, "slot", None)
    if slot is not None:
        return f"slot {slot}"
    sim = getattr(view, "sim", None)
    now = getattr(sim, "now", None)
    if now is None:
        return "an unknown time"
    return f"slot {int(now)}" if hasattr(view, "inner") else f"t={float(now)} ms"


def step(
    env: Any, action: int, view: Any, strict: bool = True
) -> tuple[Any, float, bool, bool, dict[str, Any]]:
    """``env.step(action)``; with ``strict``, an action the env refused (``info
    ["invalid_action"]``: an invalid action is a no-op that leaves the decision state as it
    was) is an :class:`InvalidActionError` naming it and the decision time."""
    out = env.step(action)
    if strict and out[4].get("invalid_action"):
        raise InvalidActionError(
            f"action {action} was refused at {decision_time(view)} (invalid under the env's "
            "action mask)"
        )
    return out


class Recorder:
    """What :func:`run_episode` shows of each step: :meth:`before` (the decision: the
    observation acted on, the action, the view before the step) and :meth:`after` (the step's
    reward, whether the episode ended, its ``info``, the view after it).  Both do nothing
    here; subclasses keep what they need."""

    def before(self, obs: Any, action: int, view: Any) -> None:
        """A decision, before its step (the view still shows its mask and time)."""

    def after(self, reward: float, done: bool, info: dict[str, Any], view: Any) -> None:
        """The outcome of the step just taken."""


@dataclass
class EpisodeRun:
    """One episode of :func:`run_episode`: its workload ``seed`` (``None``: the env's draw),
    the env ``steps`` taken, ``ret`` (the sum of the step rewards in order; a slot applied at
    once adds its total), how it ended, the reset's and the last step's ``info``."""

    seed: int | None
    steps: int
    ret: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]
    reset_info: dict[str, Any] = field(default_factory=dict)


class CallableActor:
    """An ``(env, obs) -> action`` callable (the older actor signature: a
    :class:`~envs.gym.plan_env.PlanActor`, a ``Cluster-v0`` policy's closure) as an
    :class:`Actor`; a slot planner among them (``allocator_for(env, obs)``) stays one."""

    def __init__(self, fn: Callable[[Any, Any], int]) -> None:
        self.fn = fn

    def reset(self, seed: int | None) -> None:
        reset = getattr(self.fn, "reset", None)
        if reset is not None:
            reset(seed)

    def act(self, obs: Any, view: Any) -> int:
        return self.fn(view, obs)


class _CallablePlanner(CallableActor):
    """:class:`CallableActor` of a slot planner: ``allocator_for(env, obs)`` as
    :meth:`slot_allocator`."""

    def slot_allocator(self, obs: Any, view: Any) -> Allocator:
        return self.fn.allocator_for(view, obs)  # type: ignore[attr-defined]


def as_actor(actor: Actor | Callable[[Any, Any], int]) -> Actor:
    """``actor`` itself if it is an :class:`Actor`, an ``(env, obs) -> action`` callable as
    one (:class:`CallableActor`); anything else is a :class:`ConfigError`."""
    if isinstance(actor, Actor):
        return actor
    if callable(actor):
        if getattr(actor, "allocator_for", None) is not None:
            return _CallablePlanner(actor)
        return CallableActor(actor)
    raise ConfigError(
        f"an actor has reset(seed) and act(obs, view), or is an (env, obs) -> action "
        f"callable; got {type(actor).__name__}"
    )


def run_episode(
    env: Any,
    actor: Actor | Callable[[Any, Any], int],
    seed: int | None,
    *,
    options: dict[str, Any] | None = None,
    on_step: Recorder | None = None,
    on_reset: Callable[[Any], None] | None = None,
    strict: bool = True,
) -> EpisodeRun:
    """Reset ``env`` with workload ``seed`` (and ``options``; ``None``: the env draws one)
    and let ``actor`` decide until the episode ends (terminated or truncated).

    ``on_step``: a :class:`Recorder` shown every step (the episode then runs step by step
    even for a slot-planning actor).  ``on_reset(view)`` runs after the reset, before the
    first decision.  ``strict``: an invalid action is an :class:`InvalidActionError` naming
    the action and the decision time; without it the env's own rule holds (``Cluster-v0``:
    a counted no-op; ``Contention-v0``: a no-op, and too many in a row truncate).
    """
    act = as_actor(actor)
    seed = None if seed is None else int(seed)
    act.reset(seed)
    obs, reset_info = env.reset(seed=seed, options=options)
    if on_reset is not None:
        on_reset(decision_view(env))
    run = play_on(env, act, obs, on_step=on_step, strict=strict)
    run.seed, run.reset_info = seed, reset_info
    return run


def play_on(
    env: Any,
    actor: Actor | Callable[[Any, Any], int],
    obs: Any,
    *,
    on_step: Recorder | None = None,
    strict: bool = True,
) -> EpisodeRun:
    """:func:`run_episode` from where ``env`` is (``obs``: its current observation; no
    reset, no ``actor.reset``) to the end of its episode; the run's ``seed`` is ``None``."""
    act = as_actor(actor)
    view = decision_view(env)
    n = 0
    ret = 0.0
    planner = getattr(act, "slot_allocator", None) if on_step is None else None
    if planner is not None and hasattr(view, "plan_slot"):
        plan_slot = view.plan_slot
        while True:
            obs, r, term, trunc, info, steps = plan_slot(planner(obs, view))
            n += steps
            ret += r
            if term or trunc:
                return EpisodeRun(None, n, float(ret), bool(term), bool(trunc), info)
    decide = act.act
    while True:
        a = decide(obs, view)
        if on_step is not None:
            on_step.before(obs, a, view)
        obs, r, term, trunc, info = step(env, a, view, strict)
        n += 1
        ret += r
        done = bool(term or trunc)
        if on_step is not None:
            on_step.after(r, done, info, view)
        if done:
            return EpisodeRun(None, n, float(ret), bool(term), bool(trunc), info)


class DecisionLog(Recorder):
    """Teacher data as :func:`run_episode` records it: per decision the observation acted on,
    the action mask (``view.action_masks()``, a copy), the action, the episode's index
    (:attr:`episode`, set by the caller), and the reward credited to it: the reward of the
    step that closed its slot (``info["slot_ended"]``, or the episode's end; DL²'s rule) in
    ``Cluster-v0``, its own step's reward in an env without slots."""

    def __init__(self) -> None:
        self.obs: list[Any] = []
        self.masks: list[npt.NDArray[np.bool_]] = []
        self.actions: list[int] = []
        self.episodes: list[int] = []
        self.returns: list[float] = []
        self.episode = 0
        self._pending = 0  # decisions of the open slot, waiting for its reward

    def before(self, obs: Any, action: int, view: Any) -> None:
        self.obs.append(obs)
        self.masks.append(view.action_masks())
        self.actions.append(action)
        self.episodes.append(self.episode)
        self._pending += 1

    def after(self, reward: float, done: bool, info: dict[str, Any], view: Any) -> None:
        if info.get("slot_ended", True) or done:  # the slot's reward, credited to its decisions
            self.returns.extend([float(reward)] * self._pending)
            self._pending = 0

    def __len__(self) -> int:
        return len(self.actions)


def collect_decisions(
    episodes: Iterable[tuple[Any, Actor | Callable[[Any, Any], int], int]],
    *,
    workload_options: bool = False,
    strict: bool = True,
) -> tuple[DecisionLog, list[EpisodeRun]]:
    """Behaviour-cloning data: each ``(env, actor, workload seed)`` of ``episodes`` run to its
    end by :func:`run_episode` with every decision recorded (:class:`DecisionLog`, episode
    ``e`` the ``e``-th entry); also each episode's :class:`EpisodeRun`.
    ``workload_options``: reset with ``options={"workload_seed": seed}`` too (what
    ``Contention-v0`` and the plan env's learners pass)."""
    log = DecisionLog()
    runs = []
    for e, (env, actor, seed) in enumerate(episodes):
        log.episode = e
        options = {"workload_seed": int(seed)} if workload_options else None
        runs.append(run_episode(env, actor, int(seed), options=options, on_step=log,
                                strict=strict))  # fmt: skip
    return log, runs
