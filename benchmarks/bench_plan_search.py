"""What the plan search costs and gives (``agents/plan_search.py``), on validation workloads.

Usage::

    python benchmarks/bench_plan_search.py                 # medium, small, large; seed 100
    python benchmarks/bench_plan_search.py --settings medium:6 small:24 --seeds 100 101 102
    python benchmarks/bench_plan_search.py --policy policies/general --bases hold drf --json
    python benchmarks/bench_plan_search.py --settings medium:6 small:24 --seeds 100 101 102 \
        --also esrtf_load "esrtf(backfill=True)" optimus      # the released search's choice
    python benchmarks/bench_plan_search.py --bases hold planned --blocks 1 4 16 0
    python benchmarks/bench_plan_search.py --bases planned --extra "esrtf(efficiency=0.6)"
    python benchmarks/bench_plan_search.py --bases planned --extra ... --boost 4 16 \
        --only "extra, boost"                  # the per-job options too, that search alone

For the plan policy of ``--policy`` (default the released ``policies/general``) on each
``setting[:nodes]`` (DL²'s generator; validation seeds by default, never the test seeds
300-319), acting alone and inside the search with each base of ``--bases`` (``hold``,
``policy``, a plan label or ``planned``, the receding-horizon search with ``--blocks``; with
``--also PLAN ...``, each also inside the search whose plans are further continued by those
plans held; with ``--extra PLAN ...``, each also inside the search that tries those plans
beside the policy's own; with ``--boost M ...``, the planned search, with ``--extra``, that
also tries each job of the window served first for ``M`` slots): CPU seconds per episode,
the slots planned, the slots where the search overruled the network, the episode's avg JCT
(slots) and its ratio to the best of ``--heuristics`` on the same workload (through the same
env), and the plan it played in most slots (per-job options counted apart).
``--backlog bundle`` gives the env DL²'s bundle backlog.  ``--future`` adds the clairvoyant
search (the copies keep the jobs still to arrive; ``hold``, and each ``planned`` search so):
what seeing the future would add, not a scheduler.  Last, per setting and way of acting, the
mean ratio over the seeds.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from tabulate import tabulate

from agents.episode_results import best_heuristic_jct, run_episode
from agents.plan_policy import PlanPolicy
from agents.plan_search import PLANNED, PlanSearch, SearchPlanActor
from envs.gym.factory import coerce_env_config, make_env
from envs.gym.plan_env import PlanActor

ROOT = Path(__file__).resolve().parents[1]
RELEASED = ROOT / "policies" / "general" / "policy.npz"
HEURISTICS = ("esrtf_load", "esrtf(backfill=True)", "optimus")


def _setting(spec: str) -> tuple[str, dict[str, int]]:
    name, _, nodes = spec.partition(":")
    return name, ({"num_nodes": int(nodes)} if nodes else {})


def _most_played(actor: PlanActor) -> str:
    """The plan ``actor`` played in most slots of its episode and in how many; a search's
    per-job options count apart from their plan, as one "<plan> + job first" whatever the
    job."""
    labels, boosted = actor.planner.labels, getattr(actor, "boosted", lambda k: None)
    played = Counter(
        labels[k] if (b := boosted(k)) is None else f"{labels[b[0]]} + job first"
        for k in actor.chosen
    )
    if not played:
        return ""
    label, n = played.most_common(1)[0]
    return f"{label} ({n})"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", type=Path, default=RELEASED)
    ap.add_argument("--settings", nargs="+", default=["medium", "small", "large"],
                    help="DL² settings, each optionally :<nodes>")  # fmt: skip
    ap.add_argument("--seeds", nargs="+", type=int, default=[100])
    ap.add_argument("--bases", nargs="+", default=["hold"])
    ap.add_argument(
        "--also",
        nargs="+",
        default=[],
        metavar="PLAN",
        help="each base's search again, these plans held as continuations too",
    )
    ap.add_argument(
        "--blocks",
        nargs="+",
        type=int,
        default=[1, 4, 16, 0],
        metavar="M",
        help="base 'planned': the block lengths tried at each slot (0: to the end)",
    )
    ap.add_argument(
        "--extra",
        nargs="+",
        default=[],
        metavar="PLAN",
        help="each base's search again, trying these plans too (beside the policy's own)",
    )
    ap.add_argument(
        "--boost",
        nargs="+",
        type=int,
        default=[],
        metavar="M",
        help="base 'planned' (with --extra): also the search with these per-job block lengths",
    )
    ap.add_argument(
        "--only",
        nargs="+",
        default=[],
        metavar="TEXT",
        help="run only the ways of acting whose name contains one of these",
    )
    ap.add_argument("--future", action="store_true", help="also the clairvoyant search")
    ap.add_argument("--backlog", default=None, help="the env's backlog (e.g. bundle)")
    ap.add_argument("--heuristics", nargs="*", default=list(HEURISTICS),
                    help="allocator labels the ratio is to (the best per workload)")  # fmt: skip
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    path = args.policy if args.policy.suffix == ".npz" else args.policy / "policy.npz"
    policy = PlanPolicy.load(path)
    searches: list[tuple[str, PlanSearch | None]] = [("alone", None)]
    blocks = {b: tuple(args.blocks) if b == PLANNED else () for b in args.bases}
    searches += [(f"search ({b})", PlanSearch(base=b, blocks=blocks[b])) for b in args.bases]
    if args.also:
        also = tuple(args.also)
        searches += [
            (f"search ({b}, also)", PlanSearch(base=b, also=also))
            for b in args.bases
            if b != PLANNED  # (the planned search continues with its own sequence only)
        ]
    if args.extra:
        extra = tuple(args.extra)
        searches += [
            (f"search ({b}, extra)", PlanSearch(base=b, blocks=blocks[b], extra=extra))
            for b in args.bases
        ]
    if args.boost:
        searches += [
            (f"search ({b}, extra, boost)",
             PlanSearch(base=b, blocks=blocks[b], extra=tuple(args.extra), boost=tuple(args.boost)))
            for b in args.bases
            if b == PLANNED
        ]  # fmt: skip
    if args.future:
        searches += [("clairvoyant (hold)", PlanSearch(future=True))] + [
            (f"clairvoyant {name.removeprefix('search ')}", replace(s, future=True))
            for name, s in searches
            if s is not None and s.base == PLANNED
        ]
    if args.only:
        searches = [(n, s) for n, s in searches if any(t in n for t in args.only)]
    rows: list[dict[str, Any]] = []
    for spec in args.settings:
        setting, overrides = _setting(spec)
        config = replace(coerce_env_config(policy.env), setting=setting, overrides=overrides)
        if args.backlog is not None:
            config = replace(config, backlog=args.backlog)
        for seed in args.seeds:
            best = best_heuristic_jct(args.heuristics, config, seed)
            for name, search in searches:
                env = make_env(config)
                actor: PlanActor = (
                    policy.actor(env)
                    if search is None
                    else SearchPlanActor(env, policy.chooser(), policy.plans, search)
                )
                start = time.process_time()
                result = run_episode(env, actor, seed)
                rows.append(
                    {
                        "setting": spec,
                        "seed": seed,
                        "acting": name,
                        "cpu_s": round(time.process_time() - start, 2),
                        "slots": len(actor.chosen),
                        "overruled": getattr(actor, "changed", 0),
                        "avg_jct": round(result.avg_jct, 3),
                        "ratio": round(result.avg_jct / best, 4),
                        "unfinished": result.unfinished,
                        "most played": _most_played(actor),
                    }
                )
    means = [
        {"setting": spec, "acting": name,
         "mean ratio": round(float(np.mean([r["ratio"] for r in rows
                                            if r["setting"] == spec and r["acting"] == name])), 4)}
        for spec in args.settings for name, _ in searches
    ]  # fmt: skip
    if args.json:
        print(json.dumps({"policy": str(path), "machine": platform.processor(), "rows": rows,
                          "means": means}))  # fmt: skip
    else:
        print(tabulate(rows, headers="keys", tablefmt="github"))
        print()
        print(tabulate(means, headers="keys", tablefmt="github"))


if __name__ == "__main__":
    main()
