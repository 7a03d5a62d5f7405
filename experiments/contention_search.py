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
on the given workload seeds (paired).  Paper scale, ``comm=srsf1``, LWF-1 / LS / FF.
"""

from __future__ import annotations

import argparse
import copy
from typing import Any

import numpy as np
from _common import seed_list

from envs.gym.contention_env import ContentionEnv, srsf_exclusive_teacher, srsf_teacher


def finish(env: ContentionEnv, rule: Any = srsf_teacher) -> float:
    """Run ``rule`` to the end of the episode; its avg JCT (s)."""
    while True:
        _, _, term, trunc, info = env.step(rule(env))
        if term or trunc:
            return float(info["avg_jct_s"])


def search(env: ContentionEnv, seed: int, rule: Any = srsf_teacher) -> tuple[float, float, int]:
    env.reset(seed=seed)
    base = finish(copy.deepcopy(env), rule)
    changed, k = 0, 0
    while not env.done:
        b = rule(env)
        cands = [b] + [int(a) for a in np.flatnonzero(env.action_masks()) if a != b]
        vals = []
        for a in cands:
            e = copy.deepcopy(env)
            _, _, term, trunc, info = e.step(a)
            vals.append(float(info["avg_jct_s"]) if term or trunc else finish(e, rule))
        i = int(np.argmin(vals))
        if vals[i] < vals[0] - 1e-6:
            changed += 1
            a = cands[i]
            what = (
                "wait" if a == env.wait_action else f"row {a // env.C} {env.placements[a % env.C]}"
            )
            now = env.sim.now if env.sim is not None else float("nan")
            print(f"decision {k}: t={now / 1000:.0f} s, {len(env.window)} queued -> {what}"
                  f" ({vals[0] - vals[i]:.1f} s better)", flush=True)  # fmt: skip
        _, _, term, trunc, info = env.step(cands[i])
        k += 1
    return base, float(info["avg_jct_s"]), changed


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
        base, best, changed = search(env, args.seed, rule)
        print(f"seed {args.seed}: {args.base} rule {base:.1f} s, rollout search {best:.1f} s "
              f"({best / base - 1:+.2%}), {changed} decisions changed")  # fmt: skip
        return
    rel = []
    for s in args.seeds:
        env.reset(seed=s)
        base = finish(env)
        env.reset(seed=s)
        excl = finish(env, srsf_exclusive_teacher)
        rel.append(excl / base - 1)
        print(f"seed {s}: SRSF {base:.1f} s, exclusive {excl:.1f} s ({rel[-1]:+.2%})", flush=True)
    print(f"mean {np.mean(rel):+.2%} over {len(rel)} seeds, {sum(r < 0 for r in rel)} better")


if __name__ == "__main__":
    main()
