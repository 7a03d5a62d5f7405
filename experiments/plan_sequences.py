"""How low can any sequence of a plan policy's plans go on one workload?  A clairvoyant local
search over plan sequences, to measure the room a plan policy (learned or searched) has left.

    python experiments/plan_sequences.py                                  # medium:6, seed 100
    python experiments/plan_sequences.py --settings medium:6 medium small:24 --seeds 100 101 102
    python experiments/plan_sequences.py --policy policies/general --passes 4 --blocks 1 4 16 0

A ``dlsched/ClusterPlan-v0`` policy (default ``policies/general_search``: the released network
inside its search) picks one of its plans (allocators) at every slot.  Whatever it learns, its
schedule is a **sequence of those plans**.  This script starts from the policy's own sequence on
a workload (DL²'s generator, validation seeds by default; a search's per-job options,
``boost``, are left out: they are not plans) and improves it, pass after pass, **seeing the
whole workload** (a measurement, never a scheduler):

- at each slot ``s`` of pass ``i``, every option ``(k, m)``, plan ``k`` for the next ``m``
  slots (``--blocks``; ``0``: to the end), is tried on a copy of the env that keeps the jobs
  still to arrive, continued by pass ``i-1``'s sequence by slot index (its last plan held past
  its end), and valued by the total JCT of every job;
- the slot takes the lowest (ties: pass ``i-1``'s own plan, then the shorter block); a block
  taken rewrites the sequence the later slots continue with.

The option "pass ``i-1``'s plan, then pass ``i-1``'s sequence" is always there and, the
continuation being the same sequence at every slot, is what the run does if nothing is better
(rollout with a fixed base: Bertsekas): each pass is at most the one before, to the bit.  The
passes stop at ``--passes`` or when a pass changes no slot.  Printed per workload: the ratio of
the policy's run and of each pass to the best of ``--heuristics`` on the same workload
(through the same env), and the CPU seconds; last, the mean ratio per setting.
docs/experiments/general-policy.md has the measured figures.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from agents.episode_results import best_heuristic_jct, run_episode
from agents.plan_policy import PlanPolicy
from agents.plan_search import TO_THE_END, SearchPlanActor
from agents.plan_sequences import improve
from envs.gym.factory import EnvConfig, coerce_env_config, make_env

ROOT = Path(__file__).resolve().parents[1]
RELEASED = ROOT / "policies" / "general_search" / "policy.npz"
HEURISTICS = ("esrtf_load", "esrtf(backfill=True)", "optimus")


def _setting(spec: str, base: EnvConfig, backlog: str | None) -> EnvConfig:
    name, _, nodes = spec.partition(":")
    config = replace(base, setting=name, overrides={"num_nodes": int(nodes)} if nodes else {})
    return replace(config, backlog=backlog) if backlog is not None else config


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", type=Path, default=RELEASED)
    ap.add_argument("--settings", nargs="+", default=["medium:6"],
                    help="DL² settings, each optionally :<nodes>")  # fmt: skip
    ap.add_argument("--backlog", default=None, help="the env's backlog (e.g. bundle)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[100])
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--blocks", nargs="+", type=int, default=[1, 4, 16, TO_THE_END],
                    help="block lengths in slots tried at each slot (0: to the end)")  # fmt: skip
    ap.add_argument("--heuristics", nargs="+", default=list(HEURISTICS))
    args = ap.parse_args(argv)
    path = args.policy if args.policy.suffix == ".npz" else args.policy / "policy.npz"
    policy = PlanPolicy.load(path)
    ratios: dict[str, list[float]] = {}
    for spec in args.settings:
        config = _setting(spec, coerce_env_config(policy.env), args.backlog)
        for seed in args.seeds:
            best = best_heuristic_jct(args.heuristics, config, seed)
            start = time.process_time()
            env = make_env(config)
            actor = policy.actor(env)
            if isinstance(actor, SearchPlanActor) and actor.search.boost:  # (not plans)
                no_boost = replace(actor.search, boost=())
                actor = SearchPlanActor(env, policy.chooser(), policy.plans, no_boost)
            own = run_episode(env, actor, seed).avg_jct
            plans = actor.planner.plans  # (with a search's extra plans)
            passes = improve(config, plans, actor.chosen, seed, args.passes, args.blocks)
            line = [f"{spec} seed {seed}: policy {own / best:.4f}"]
            line += [f"pass {i + 1} {jct / best:.4f} ({n} changed)" for i, (jct, n) in
                     enumerate(passes)]  # fmt: skip
            print(" | ".join(line), f"[{time.process_time() - start:.0f} CPU-s]", flush=True)
            ratios.setdefault(f"{spec} policy", []).append(own / best)
            ratios.setdefault(f"{spec} last pass", []).append(passes[-1][0] / best)
    print()
    for name, values in ratios.items():
        print(f"{name}: mean ratio {float(np.mean(values)):.4f} over {len(values)} workload(s)")


if __name__ == "__main__":
    main()
