"""Headroom: how far the best heuristic is from a lower bound, per env setting.

    python experiments/headroom.py                       # every setting, validation workloads
    python experiments/headroom.py --settings medium --seeds 100-109

A learned scheduler can only beat the best heuristic by as much as the heuristic leaves above
the optimum.  Per setting, every allocator of the registry (but the bare ``fixed`` gang and
the backlog's ``bundle``) runs through the env (the same window and backlog as a learned
policy) on validation workloads (generator seeds, and for ``medium_traces`` windows of the
training VCs' validation days; never the test workloads), next to two lower bounds of
``envs/sim/elastic/bounds.py``:

- the *window* bound when jobs beyond the env's window get nothing, the *solo* bound when
  they get bundles (``env.backlog``): each job at its fastest from its entry, no competition;
- the *capacity* bound: the same plus the competition (``capacity_bound``: the jobs share the
  cluster's GPUs and CPUs, each holding at least what its allocations need at its rate,
  preemptible and divisible), so it is higher and the headroom it leaves smaller.

The true optimum is higher still (whole tasks on nodes, the window's order).  For
``ada_lwf1`` (contention speed) neither bound applies (n/a): its rates do not come from the
speed model the bounds use.  Avg JCT in slots.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import numpy as np
from _common import markdown_table, seed_list

from envs.gym.factory import EnvConfig
from envs.gym.workloads import TRAIN_VCS, VALIDATION_DAYS, TraceWindows
from envs.sim.elastic.allocators import ALLOCATORS
from evaluation.heldout import heldout_workloads, run_schedulers

#: the heuristics compared by default: every allocator but the bare gang and the backlog rule
HEURISTICS = sorted(set(ALLOCATORS) - {"fixed", "bundle"})

#: name -> (env config, trace windows per run or 0)
SETTINGS: dict[str, tuple[EnvConfig, int]] = {
    "small": (EnvConfig(setting="small"), 0),
    "small_bundle": (EnvConfig(setting="small", backlog="bundle"), 0),
    "medium": (EnvConfig(setting="medium"), 0),
    "medium_traces": (EnvConfig(setting="medium"), 1),
    "large": (EnvConfig(setting="large"), 0),
    "ada_lwf1": (
        EnvConfig(setting="ada", speed="contention", placer="lwf1", reward="jct", max_slots=5000),
        0,
    ),
}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--settings", nargs="+", choices=sorted(SETTINGS), default=list(SETTINGS))
    ap.add_argument("--seeds", type=seed_list, default=seed_list("100-104"))
    ap.add_argument("--heuristics", nargs="+", default=HEURISTICS)
    args = ap.parse_args(argv)
    names = list(args.heuristics)
    kind = "Test" if any(300 <= s <= 319 for s in args.seeds) else "Validation"
    print(f"{kind} workloads: seeds {args.seeds[0]}-{args.seeds[-1]} (or as many windows)\n")
    rows = []
    for name in args.settings:
        t0 = time.perf_counter()
        config, traces = SETTINGS[name]
        if traces:
            spec = TraceWindows(vcs=list(TRAIN_VCS), days=list(VALIDATION_DAYS))
            workloads = heldout_workloads(
                config, windows=len(args.seeds), window_seed=args.seeds[0], trace=spec
            )
        else:
            workloads = heldout_workloads(config, args.seeds)
        table = run_schedulers(config, workloads, heuristics=names)
        means = {h: float(np.mean(table.avg_jct[h])) for h in names}
        best = min(means, key=lambda h: means[h])
        lb = float(np.mean([w.lower_bound(config) for w in workloads]))
        cb = float(np.mean([w.lower_bound(config, capacity=True) for w in workloads]))
        cells = [f"{means[h]:.1f}" + ("*" if table.unfinished[h] else "") for h in names]
        gaps = [
            "n/a" if math.isnan(b) else f"{100 * (means[best] / b - 1):+.1f}%" for b in (lb, cb)
        ]
        rows.append([name, *cells, best, f"{lb:.1f}", gaps[0], f"{cb:.1f}", gaps[1]])
        print(f"<!-- {name}: {time.perf_counter() - t0:.0f} s -->", file=sys.stderr, flush=True)
    head = ["bound", "best vs bound", "capacity bound", "best vs capacity bound"]
    print(markdown_table(rows, ["setting", *names, "best", *head]))
    print("\n(* some jobs unfinished at the horizon, counted as finishing there)")


if __name__ == "__main__":
    main()
