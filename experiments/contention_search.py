"""Where the headroom is in ``dlsched/Contention-v0``: a one-step rollout search over the SRSF
teacher, and the exclusive-GPU rule it points at.

    python experiments/contention_search.py --seed 0            # rollout search, one workload
    python experiments/contention_search.py --seed 0 --base exclusive  # over the exclusive rule
    python experiments/contention_search.py --rule --seeds 0-7  # exclusive rule vs SRSF

``--seed``: from every decision of the SRSF teacher's (``--base exclusive``: the exclusive
rule's) episode, each valid action is tried and followed by the same rule to the end (on a
deep copy of the env); the best is taken.  It
sees the future arrivals, so it is not a policy, only a measure of what decisions matter;
about 200 CPU-s per paper-scale episode in fast fidelity.  Prints the decisions it changed.
``--rule``: :func:`~envs.gym.contention_env.srsf_exclusive_teacher` against the SRSF teacher
on the given workload seeds (paired).  Paper scale, ``comm=srsf1``, LWF-1 / LS / FF.  The
search is :class:`agents.search.RolloutActor`; this script prints what it finds.
"""

from __future__ import annotations

import argparse

import numpy as np
from _common import seed_list

from agents.search import contention_search, finish_with
from envs.gym.contention_env import ContentionEnv, srsf_exclusive_teacher, srsf_teacher


def print_change(env: ContentionEnv, k: int, a: int, gain: float) -> None:
    """One decision the search changed: when, the queue, the action taken and its gain."""
    what = "wait" if a == env.wait_action else f"row {a // env.C} {env.placements[a % env.C]}"
    now = env.sim.now if env.sim is not None else float("nan")
    print(f"decision {k}: t={now / 1000:.0f} s, {len(env.window)} queued -> {what}"
          f" ({gain:.1f} s better)", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rule", action="store_true")
    ap.add_argument("--seeds", type=seed_list, default=list(range(8)))
    ap.add_argument("--fidelity", default="fast")
    ap.add_argument("--base", choices=["srsf", "exclusive"], default="srsf",
                    help="the rule the search starts from and follows")  # fmt: skip
    args = ap.parse_args()
    env = ContentionEnv(scale="paper", comm="srsf1", placements=("lwf1", "ls", "ff"),
                        fidelity=args.fidelity)  # fmt: skip
    if not args.rule:
        rule = srsf_exclusive_teacher if args.base == "exclusive" else srsf_teacher
        base, best, changed = contention_search(env, args.seed, rule, print_change)
        print(f"seed {args.seed}: {args.base} rule {base:.1f} s, rollout search {best:.1f} s "
              f"({best / base - 1:+.2%}), {changed} decisions changed")  # fmt: skip
        return
    rel = []
    for s in args.seeds:
        env.reset(seed=s)
        base = finish_with(env, srsf_teacher)
        env.reset(seed=s)
        excl = finish_with(env, srsf_exclusive_teacher)
        rel.append(excl / base - 1)
        print(f"seed {s}: SRSF {base:.1f} s, exclusive {excl:.1f} s ({rel[-1]:+.2%})", flush=True)
    print(f"mean {np.mean(rel):+.2%} over {len(rel)} seeds, {sum(r < 0 for r in rel)} better")


if __name__ == "__main__":
    main()
