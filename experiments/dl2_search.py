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
search).  The search is :func:`agents.search.rollout_search`; this script prints its table.
``--save`` (a TeacherDataset) refuses validation seeds 100-109; test seeds 300-319 are always
refused.
"""

from __future__ import annotations

import argparse
import functools
import math
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _common import markdown_table, seed_list

from agents.search import BASES, Decisions, replay, rollout_search
from envs.gym.factory import EnvConfig, make_env
from envs.gym.heuristic import HeuristicDriver
from envs.sim.elastic.allocators import EfficientSRTF, LoadAwareESRTF
from evaluation.heldout import lower_bound
from pretrain.dataset import TeacherDataset

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


def _bound(config: EnvConfig, seed: int) -> float:
    env = make_env(config)
    env.reset(seed=seed)
    return lower_bound(env, config)


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
        path = TeacherDataset(*record.arrays(), meta=meta).save(args.save)
        print(f"\n{len(record.actions)} decisions -> {path}")


if __name__ == "__main__":
    main()
