"""Rollout search over EfficientSRTF on ClusterEnv: how much policy improvement is there to find?

    python experiments/dl2_search.py --setting medium --seeds 2000-2005 --mode slot

Why: RL on an EfficientSRTF clone keeps the clone; expert iteration needs a search that finds
better decisions.  The rollout algorithm (Bertsekas): at chosen decision points the env (with
the base driver) is pickled, each alternative of a small set is tried and continued with the
base heuristic to the episode's end, and the best (lowest avg JCT; ties: the base) is taken;
the search goes on from the new state (``--one-step``: only the best single deviation from the
base's trajectory).  The base is deterministic and always an alternative, so the rollout
policy is never worse than the base on its workload.  ``slot`` mode: at each slot's first
decision, the whole slot planned by another allocator (EfficientSRTF at efficiency
0.7/0.8/0.97/1.0, Optimus, DRF, SRTF).  ``action`` mode: at each decision with probability
``p`` (seeded), void, skip the base's increment, or insert one of at most 6 sampled valid
increments before it (the base's slot plan goes on; increments that no longer fit are
skipped).  ``--base load``: search over
:class:`~envs.sim.elastic.speed_aware.LoadAwareESRTF` (``esrtf_load`` in the registry: the rule
the search's choices suggest, ``--rule``).  Rollouts see the true future (clairvoyant
search).  ``--save`` (a TeacherDataset) refuses validation seeds 100-109; test seeds 300-319
are always refused.
"""

from __future__ import annotations

import argparse
import functools
import math
import pickle
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from _common import markdown_table, seed_list

from envs.gym.cluster_env import ClusterEnv
from envs.gym.factory import EnvConfig, make_env
from envs.gym.heuristic import HeuristicDriver
from envs.sim.elastic.allocators import EfficientSRTF, LoadAwareESRTF, make_allocator
from envs.sim.elastic.bounds import mean_jct, window_bounds
from pretrain.dataset import TeacherDataset

__all__ = [
    "BASES",
    "RULES",
    "SLOT_ALTERNATIVES",
    "Decisions",
    "SearchResult",
    "replay",
    "rollout_search",
    "rule_table",
]

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

State = tuple[ClusterEnv, HeuristicDriver]
#: an alternative: steps the env of a (env, driver) pair; calls ``step(env, a)`` per action
Alternative = Callable[[ClusterEnv, HeuristicDriver, Callable[[ClusterEnv, int], bool]], None]


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
    """Every decision of improved episodes, as :class:`~pretrain.dataset.TeacherDataset` has
    them (``returns``: the reward of the decision's slot, DL²'s rule)."""

    obs: list[np.ndarray] = field(default_factory=list)
    masks: list[np.ndarray] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    episodes: list[int] = field(default_factory=list)
    returns: list[float] = field(default_factory=list)

    def dataset(self, meta: dict[str, Any]) -> TeacherDataset:
        return TeacherDataset(
            np.asarray(self.obs, dtype=np.float32),
            np.asarray(self.masks, dtype=bool),
            np.asarray(self.actions, dtype=np.int64),
            np.asarray(self.episodes, dtype=np.int32),
            np.asarray(self.returns, dtype=np.float32),
            meta=meta,
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
    def apply(env: ClusterEnv, drv: HeuristicDriver, step: Callable[[ClusterEnv, int], bool]):
        other = HeuristicDriver(SLOT_ALTERNATIVES[name](), env)
        t = env.slot
        while env.slot_open and env.slot == t:
            if step(env, other.act()):
                return

    return apply


def _base_step(env: ClusterEnv, drv: HeuristicDriver, step: Callable[[ClusterEnv, int], bool]):
    step(env, drv.act())


def _void(env: ClusterEnv, drv: HeuristicDriver, step: Callable[[ClusterEnv, int], bool]):
    step(env, env.void_action)


def _skip(env: ClusterEnv, drv: HeuristicDriver, step: Callable[[ClusterEnv, int], bool]):
    drv.act()  # the base's increment, dropped
    step(env, drv.act())


def _insert(b: int) -> Alternative:
    def apply(env: ClusterEnv, drv: HeuristicDriver, step: Callable[[ClusterEnv, int], bool]):
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
    """The rollout policy over EfficientSRTF on workload ``seed`` of ``config`` (module doc).

    ``record``: gets every decision of the improved episode (as episode ``episode``).
    ``base``: the heuristic of :data:`BASES` that the rollouts continue with.
    ``one_step``: search the base's own trajectory and apply only the best single deviation
    (the first-order improvement)."""
    if mode not in ("slot", "action"):
        raise ValueError(f"mode must be 'slot' or 'action', got {mode!r}")
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
        k = int(np.argmin(values))
        if values[k] >= values[0]:  # ties keep the base
            k = 0
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


#: the base heuristics: EfficientSRTF, and the load rule found by searching over it
BASES: dict[str, Callable[[], Any]] = {"esrtf": EfficientSRTF, "load": LoadAwareESRTF}

#: (light, heavy, eff_light, eff_heavy) of the LoadAwareESRTF variants ``--rule`` evaluates
RULES = ((3, 5, 1.0, 0.92), (3, 5, 1.0, 0.8), (3, 5, 1.0, 0.7), (3, 3, 1.0, 0.75), (2, 5, 1.0, 0.8))


def rule_table(config: EnvConfig, seeds: Sequence[int]) -> None:
    """Avg JCT of EfficientSRTF and of the :data:`RULES` variants of
    :class:`~envs.sim.elastic.speed_aware.LoadAwareESRTF`."""
    env = make_env(config)

    def run(make: Callable[[], Any]) -> np.ndarray:
        return np.array(
            [HeuristicDriver(make(), env).run_episode(s)["avg_jct_slots"] for s in seeds]
        )

    base = run(EfficientSRTF)
    table = [["esrtf", f"{base.mean():.2f}", ""]]
    for light, heavy, lo, hi in RULES:
        r = run(functools.partial(LoadAwareESRTF, light, heavy, lo, hi))
        table.append(
            [
                f"n<={light}: {lo}, n>{heavy}: {hi}",
                f"{r.mean():.2f}",
                f"{100 * np.mean(r / base - 1):+.1f}%",
            ]
        )
    headers = [f"rule (seeds {seeds[0]}-{seeds[-1]})", "avg JCT", "vs esrtf (mean of ratios)"]
    print("\n" + markdown_table(table, headers))


def replay(config: EnvConfig, seed: int, actions: Sequence[int]) -> float:
    """Avg JCT of replaying ``actions`` from ``reset(seed)`` in a fresh env (must end it)."""
    env = make_env(config)
    env.reset(seed=seed)
    done = False
    for i, a in enumerate(actions):
        if done:
            raise RuntimeError(f"the episode ended before action {i} of {len(actions)}")
        _, _, term, trunc, info = env.step(int(a))
        done = bool(term or trunc)
    if not done:
        raise RuntimeError("the actions did not end the episode")
    return float(info["avg_jct_slots"])


def _bound(config: EnvConfig, seed: int) -> float:
    env = make_env(config)
    env.reset(seed=seed)
    return mean_jct(window_bounds(env.jobs, env.cluster_spec, env.speed, env.J))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--setting", default="medium")
    ap.add_argument("--seeds", type=seed_list, default=seed_list("2000-2003"))
    ap.add_argument("--mode", choices=("slot", "action"), default="slot")
    ap.add_argument("--base", choices=sorted(BASES), default="esrtf", help="the base heuristic")
    ap.add_argument("--p", type=float, default=0.05, help="action mode: P(decision is a point)")
    ap.add_argument("--search-seed", type=int, default=0)
    ap.add_argument("--one-step", action="store_true", help="best single deviation only")
    ap.add_argument(
        "--save", type=Path, help="the improved episodes' decisions as a TeacherDataset (.npz)"
    )
    ap.add_argument(
        "--rule",
        type=seed_list,
        help="also evaluate the load rule (LoadAwareESRTF variants) on these seeds",
    )
    args = ap.parse_args(argv)
    if any(300 <= s <= 319 for s in args.seeds):
        ap.error("seeds 300-319 are the test workloads")
    if args.save and any(100 <= s <= 109 for s in args.seeds):
        ap.error("seeds 100-109 are validation workloads: measure the search there, never train")
    config = EnvConfig(setting=args.setting)
    what = "best single deviation" if args.one_step else "rollout policy"
    extra = f", p={args.p}" if args.mode == "action" else ""
    print(
        f"{args.setting}, base {args.base}, {args.mode} mode{extra}, {what}, "
        f"search seed {args.search_seed}\n"
    )
    headers = ["seed", f"base ({args.base})", "improved", "change", "window bound", "points",
               "changed", "rollouts", "CPU-s", "alternatives taken"]  # fmt: skip
    rows = []
    table: list[list[str]] = []
    by_load: dict[int, dict[str, int]] = {}
    if args.save and args.one_step:
        ap.error("--save records the rollout policy, not --one-step")
    record = Decisions() if args.save else None
    for e, s in enumerate(args.seeds):
        r = rollout_search(
            config,
            s,
            mode=args.mode,
            p=args.p,
            search_seed=args.search_seed + s,
            one_step=args.one_step,
            record=record,
            episode=e,
            base=args.base,
        )
        if not args.one_step:
            again = replay(config, s, r.actions)
            if not math.isclose(again, r.jct, rel_tol=1e-9):
                raise RuntimeError(f"seed {s}: replay gives {again}, search {r.jct}")
        b = _bound(config, s)
        taken = ", ".join(f"{k} {v}" for k, v in sorted(r.chosen.items()) if k != "base")
        table.append([
            str(s), f"{r.base_jct:.2f}", f"{r.jct:.2f}", f"{r.change_pct:+.1f}%", f"{b:.2f}",
            str(r.points), str(r.changed), str(r.rollouts), f"{r.cpu_s:.0f}", taken or "-",
        ])  # fmt: skip
        print(f"seed {s}: {r.base_jct:.2f} -> {r.jct:.2f}", file=sys.stderr, flush=True)
        rows.append((r.base_jct, r.jct, b, r.cpu_s))
        for _t, n, name in r.trace:
            got = by_load.setdefault(min(n, 12), {})
            got[name] = got.get(name, 0) + 1
    a = np.array(rows)
    table.append([
        "mean", f"{a[:, 0].mean():.2f}", f"{a[:, 1].mean():.2f}",
        f"{np.mean(a[:, 1] / a[:, 0] - 1) * 100:+.1f}%", f"{a[:, 2].mean():.2f}", "", "", "",
        f"{a[:, 3].sum():.0f} (total)", "",
    ])  # fmt: skip
    print(markdown_table(table, headers))
    if by_load:
        loads = [
            [str(n), ", ".join(f"{k} {v}" for k, v in sorted(got.items()))]
            for n, got in sorted(by_load.items())
        ]
        print("\n" + markdown_table(loads, ["active jobs (12: 12+)", "alternatives taken"]))
    if args.rule:
        if any(300 <= s <= 319 for s in args.rule):
            ap.error("seeds 300-319 are the test workloads")
        rule_table(config, args.rule)
    if args.save and record is not None:
        env = make_env(config)
        meta = {
            "teacher": f"rollout(esrtf, {args.mode})",
            "env": config.as_dict(),
            "seeds": [int(s) for s in args.seeds],
            "J": env.J,
            "L": env.L,
            "search": {"mode": args.mode, "p": args.p, "search_seed": args.search_seed},
        }
        path = record.dataset(meta).save(args.save)
        print(f"\n{len(record.actions)} decisions -> {path}")


if __name__ == "__main__":
    main()
