"""Rollout search: the rollout algorithm (Bertsekas) over a base heuristic, in
``dlsched/Cluster-v0`` and ``dlsched/Contention-v0``.

At a decision point the env is copied, every alternative of a small set is tried on a copy and
continued with the base heuristic to the episode's end, and the alternative with the lowest
avg JCT is taken (ties, within ``tol``: the base's own choice, which is always the first
alternative); the search goes on from the new state.  The base is deterministic and always an
alternative, so the rollout policy is never worse than the base on its workload.  Rollouts
see the true future (future arrivals and lengths): the search is a clairvoyant measure of
which decisions matter and of the headroom above a heuristic (and, recorded, a teacher for
expert iteration), not a deployable policy.  :func:`best_alternative` is the one choice rule
both searches share.

``dlsched/Cluster-v0`` (:func:`rollout_search`, ``experiments/dl2_search.py``): the env and
its :class:`~envs.gym.heuristic.HeuristicDriver` are pickled at each point.  ``slot`` mode:
at each slot's first decision the whole slot planned by another allocator
(:data:`SLOT_ALTERNATIVES`).  ``action`` mode: at each decision with probability ``p``
(seeded), void, skip the base's increment, or insert one of at most :data:`MAX_INSERTS`
sampled valid increments before it (the base's slot plan goes on; increments that no longer
fit are skipped).  ``one_step``: only the best single deviation from the base's trajectory.

``dlsched/Contention-v0`` (:class:`RolloutActor`, :func:`contention_search`,
``experiments/contention_search.py``): an actor that, at every decision, tries each valid
action on a deep copy of the env and follows a rule (``(env) -> action``, e.g.
:func:`~envs.gym.contention_env.srsf_teacher`) to the end.
"""

from __future__ import annotations

import copy
import pickle
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from envs.gym.cluster_env import ClusterEnv
from envs.gym.factory import EnvConfig, make_env
from envs.gym.heuristic import HeuristicDriver
from envs.sim.elastic.allocators import EfficientSRTF, LoadAwareESRTF, make_allocator
from envs.sim.errors import ConfigError

__all__ = [
    "BASES",
    "MAX_INSERTS",
    "SLOT_ALTERNATIVES",
    "Decisions",
    "RolloutActor",
    "SearchResult",
    "best_alternative",
    "contention_search",
    "finish_with",
    "replay",
    "rollout_search",
]


def best_alternative(values: Sequence[float], tol: float = 0.0) -> int:
    """The index of the lowest of ``values`` (each alternative's avg JCT, the base's first);
    ``0`` (the base) unless that alternative beats the base by more than ``tol``."""
    k = int(np.argmin(values))
    return k if values[k] < values[0] - tol else 0


# ------------------------------------------------------------------------ dlsched/Cluster-v0
#: slot mode: name -> allocator factory whose plan replaces the base's for one slot
SLOT_ALTERNATIVES: dict[str, Callable[[], Any]] = {
    "esrtf0.7": lambda: EfficientSRTF(0.7),
    "esrtf0.8": lambda: EfficientSRTF(0.8),
    "esrtf0.97": lambda: EfficientSRTF(0.97),
    "esrtf1.0": lambda: EfficientSRTF(1.0),
    "optimus": lambda: make_allocator("optimus"),
    "drf": lambda: make_allocator("drf"),
    "srtf": lambda: make_allocator("srtf"),
}
#: action mode: at most this many inserted increments per decision point
MAX_INSERTS = 6
#: the base heuristics: EfficientSRTF, and the load rule found by searching over it
BASES: dict[str, Callable[[], Any]] = {"esrtf": EfficientSRTF, "load": LoadAwareESRTF}

#: one step of the env: ``step(env, action)`` -> whether the episode ended
Step = Callable[[ClusterEnv, int], bool]
#: an alternative: steps the env of a (env, driver) pair, calling ``step`` per action
Alternative = Callable[[ClusterEnv, HeuristicDriver, Step], None]


@dataclass
class SearchResult:
    """One workload's search: base and improved avg JCT, the improved episode's actions."""

    seed: int
    base_jct: float
    jct: float
    actions: list[int] = field(default_factory=list)
    points: int = 0  # decision points searched
    changed: int = 0  # points where an alternative beat the base
    rollouts: int = 0
    cpu_s: float = 0.0
    chosen: dict[str, int] = field(default_factory=dict)  # alternative name -> times taken
    #: per point of the rollout policy: (slot, active jobs, alternative taken)
    trace: list[tuple[int, int, str]] = field(default_factory=list)

    @property
    def change_pct(self) -> float:
        return 100.0 * (self.jct / self.base_jct - 1.0)


@dataclass
class Decisions:
    """Every decision of improved episodes, in the fields of
    :class:`~pretrain.dataset.TeacherDataset` (``returns``: the reward of the decision's slot,
    DL²'s rule): ``TeacherDataset(*decisions.arrays(), meta=...)``."""

    obs: list[npt.NDArray[np.float32]] = field(default_factory=list)
    masks: list[npt.NDArray[np.bool_]] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    episodes: list[int] = field(default_factory=list)
    returns: list[float] = field(default_factory=list)

    def arrays(
        self,
    ) -> tuple[
        npt.NDArray[np.float32],
        npt.NDArray[np.bool_],
        npt.NDArray[np.int64],
        npt.NDArray[np.int32],
        npt.NDArray[np.float32],
    ]:
        """``(obs, masks, actions, episodes, returns)`` as TeacherDataset's dtypes."""
        return (
            np.asarray(self.obs, dtype=np.float32),
            np.asarray(self.masks, dtype=bool),
            np.asarray(self.actions, dtype=np.int64),
            np.asarray(self.episodes, dtype=np.int32),
            np.asarray(self.returns, dtype=np.float32),
        )


def _finish(env: ClusterEnv, drv: HeuristicDriver) -> float:
    """Drive the base to the end of the episode; its avg JCT (slots)."""
    if env.ended:
        return float(env.simulator.result().avg_jct_slots)
    return float(drv.finish()["avg_jct_slots"])


def _plain_step(env: ClusterEnv, a: int) -> bool:
    _, _, term, trunc, _ = env.step(a)
    return bool(term or trunc)


def _slot_alternative(name: str) -> Alternative:
    def apply(env: ClusterEnv, drv: HeuristicDriver, step: Step) -> None:
        other = HeuristicDriver(SLOT_ALTERNATIVES[name](), env)
        t = env.slot
        while env.slot_open and env.slot == t:
            if step(env, other.act()):
                return

    return apply


def _base_step(env: ClusterEnv, drv: HeuristicDriver, step: Step) -> None:
    step(env, drv.act())


def _void(env: ClusterEnv, drv: HeuristicDriver, step: Step) -> None:
    step(env, env.void_action)


def _skip(env: ClusterEnv, drv: HeuristicDriver, step: Step) -> None:
    drv.act()  # the base's increment, dropped
    step(env, drv.act())


def _insert(b: int) -> Alternative:
    def apply(env: ClusterEnv, drv: HeuristicDriver, step: Step) -> None:
        step(env, b)

    return apply


def _action_alternatives(
    env: ClusterEnv, drv: HeuristicDriver, rng: np.random.Generator
) -> list[tuple[str, Alternative]]:
    """The base's next action first, then void, skip and sampled insertions."""
    probe_env, probe = pickle.loads(pickle.dumps((env, drv)))
    a = probe.act()
    alts: list[tuple[str, Alternative]] = [("base", _base_step)]
    if a == env.void_action:
        others = np.flatnonzero(env.action_masks()[:-1])
    else:
        alts += [("void", _void), ("skip", _skip)]
        others = np.flatnonzero(env.action_masks()[:-1])
        others = others[others != a]
    del probe_env
    if len(others) > MAX_INSERTS:
        others = np.sort(rng.choice(others, MAX_INSERTS, replace=False))
    alts += [(f"insert{['w', 'p', 'b'][int(b) % 3]}", _insert(int(b))) for b in others]
    return alts


def rollout_search(
    config: EnvConfig,
    seed: int,
    *,
    mode: str = "slot",
    p: float = 0.05,
    search_seed: int = 0,
    one_step: bool = False,
    record: Decisions | None = None,
    episode: int = 0,
    base: str = "esrtf",
) -> SearchResult:
    """The rollout policy over a base heuristic on workload ``seed`` of ``config`` (module
    docstring: ``mode`` ``"slot"`` or ``"action"``, ``p`` and ``search_seed`` for the
    latter).

    ``record``: gets every decision of the improved episode (as episode ``episode``).
    ``base``: the heuristic of :data:`BASES` that the rollouts continue with.
    ``one_step``: search the base's own trajectory and apply only the best single deviation
    (the first-order improvement)."""
    if mode not in ("slot", "action"):
        raise ConfigError(f"mode must be 'slot' or 'action', got {mode!r}")
    if base not in BASES:
        raise ConfigError(f"unknown search base {base!r}; known: {', '.join(BASES)}")
    cpu0 = time.process_time()
    rng = np.random.default_rng(search_seed)
    env = make_env(config)
    drv = HeuristicDriver(BASES[base](), env)
    env.reset(seed=seed)
    root = pickle.dumps((env, drv))
    e0, d0 = pickle.loads(root)
    base_jct = _finish(e0, d0)
    res = SearchResult(seed=seed, base_jct=base_jct, jct=base_jct)
    actions: list[int] = []

    pending = [0]  # recorded decisions of the open slot, waiting for its reward

    def rec_step(e: ClusterEnv, a: int) -> bool:
        if record is not None:
            record.obs.append(e.observation())
            record.masks.append(e.action_masks())
            record.actions.append(int(a))
            record.episodes.append(episode)
            pending[0] += 1
        actions.append(int(a))
        _, reward, term, trunc, info = e.step(a)
        if record is not None and (info["slot_ended"] or term or trunc):
            record.returns.extend([float(reward)] * pending[0])
            pending[0] = 0
        return bool(term or trunc)

    best_single: tuple[float, int, str] = (base_jct, -1, "base")  # (jct, decision index, alt)
    slot_t = -1
    while not env.ended:
        if mode == "slot":
            is_point = env.slot_open and env.slot != slot_t
            slot_t = env.slot
        else:
            is_point = bool(rng.random() < p)
        if not is_point:
            rec_step(env, drv.act())
            continue
        if mode == "slot":
            alts: list[tuple[str, Alternative]] = [("base", _base_step)]
            alts += [(n, _slot_alternative(n)) for n in SLOT_ALTERNATIVES]
        else:
            alts = _action_alternatives(env, drv, rng)
        snap = pickle.dumps((env, drv))
        res.points += 1
        values = []
        for _name, alt in alts:
            e, d = pickle.loads(snap)
            alt(e, d, _plain_step)
            values.append(_finish(e, d))
            res.rollouts += 1
        k = best_alternative(values)
        if one_step:
            if values[k] < best_single[0]:
                best_single = (values[k], len(actions), alts[k][0])
            rec_step(env, drv.act())
            continue
        if k:
            res.changed += 1
        name, alt = alts[k]
        res.chosen[name] = res.chosen.get(name, 0) + 1
        res.trace.append((env.slot, len(env.active_jobs), name))
        env, drv = pickle.loads(snap)
        alt(env, drv, rec_step)
    if one_step:
        res.jct = best_single[0]
        res.changed = int(best_single[1] >= 0)
        res.chosen = {best_single[2]: 1}
        res.actions = []
    else:
        res.jct = float(env.simulator.result().avg_jct_slots)
        res.actions = actions
    res.cpu_s = time.process_time() - cpu0
    return res


def replay(config: EnvConfig, seed: int, actions: Sequence[int]) -> float:
    """Avg JCT of replaying ``actions`` from ``reset(seed)`` in a fresh env (must end it)."""
    env = make_env(config)
    env.reset(seed=seed)
    done = False
    info: dict[str, Any] = {}
    for i, a in enumerate(actions):
        if done:
            raise RuntimeError(f"the episode ended before action {i} of {len(actions)}")
        _, _, term, trunc, info = env.step(int(a))
        done = bool(term or trunc)
    if not done:
        raise RuntimeError("the actions did not end the episode")
    return float(info["avg_jct_slots"])


# --------------------------------------------------------------------- dlsched/Contention-v0
#: a Contention-v0 rule: ``(env) -> action``
Rule = Callable[[Any], int]


def finish_with(env: Any, rule: Rule) -> float:
    """Run ``rule`` in ``env`` (a ``dlsched/Contention-v0`` env) from its current state to the
    end of the episode; the episode's avg JCT (s)."""
    while True:
        _, _, term, trunc, info = env.step(rule(env))
        if term or trunc:
            return float(info["avg_jct_s"])


class RolloutActor:
    """The rollout policy over ``rule`` in ``dlsched/Contention-v0``, as an actor
    ``(env, obs) -> action``: the rule's action and every other valid action, each stepped on
    a deep copy of the env and followed by ``rule`` to the end; the lowest avg JCT wins
    (:func:`best_alternative`, ties within ``tol`` s: the rule's).  ``on_change(env, decision,
    action, gain_s)`` is called, before the action is taken, at each decision where an
    alternative beat the rule; ``decisions`` and ``changed`` count them."""

    def __init__(
        self,
        rule: Rule,
        on_change: Callable[[Any, int, int, float], None] | None = None,
        tol: float = 1e-6,
    ) -> None:
        self.rule, self.on_change, self.tol = rule, on_change, tol
        self.decisions = 0
        self.changed = 0

    def values(self, env: Any) -> tuple[list[int], list[float]]:
        """The candidate actions (the rule's first) and each one's avg JCT (s) followed by
        the rule to the end."""
        b = self.rule(env)
        cands = [b] + [int(a) for a in np.flatnonzero(env.action_masks()) if a != b]
        vals = []
        for a in cands:
            e = copy.deepcopy(env)
            _, _, term, trunc, info = e.step(a)
            vals.append(float(info["avg_jct_s"]) if term or trunc else finish_with(e, self.rule))
        return cands, vals

    def __call__(self, env: Any, _obs: Any = None) -> int:
        cands, vals = self.values(env)
        i = best_alternative(vals, self.tol)
        if i:
            self.changed += 1
            if self.on_change is not None:
                self.on_change(env, self.decisions, cands[i], vals[0] - vals[i])
        self.decisions += 1
        return cands[i]


def contention_search(
    env: Any,
    seed: int,
    rule: Rule,
    on_change: Callable[[Any, int, int, float], None] | None = None,
) -> tuple[float, float, int]:
    """Workload ``seed`` of a ``dlsched/Contention-v0`` env: the rule's avg JCT (s), the
    :class:`RolloutActor`'s over it, and the decisions it changed."""
    env.reset(seed=seed)
    base = finish_with(copy.deepcopy(env), rule)
    actor = RolloutActor(rule, on_change)
    return base, finish_with(env, actor), actor.changed
