"""Which plan each plan policy picks at the first slot of every workload of a dlsched-bench run
of the elastic world (issue 39's held-out grid).

Inside the receding-horizon search (``base: planned``, ``policies/general_search``) the network
is read only at an episode's first slot (``tests/agents/test_plan_search.py``); every later
plan is the search's, and the search is deterministic.  So networks that pick the same first
plan on every workload of the grid make the same scheduler inside the search, run for run:
this script says whether they do, without running the search.

```bash
.venv/bin/python benchmarks/grid_first_plans.py runs/bench/v1-<suite>/<code> \\
    policies/general runs/general3/s0/checkpoints/best runs/general3/s2/checkpoints/best
```

The workloads are rebuilt from the records of the cells of one heuristic (``--from``, default
``elastic:esrtf_load``, which runs on every scenario), each env with the features the first
policy was trained with.  Prints one line per workload (the plan, or each policy's where they
differ) and the count of workloads where all agree; exit status 1 where some differ.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace
from pathlib import Path

from grid_headroom import _env_config

from agents.plan_policy import PlanPolicy
from envs.gym.factory import make_env
from envs.gym.plan_env import PlanActor


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path, help="a bench run's directory (runs/bench/v1-*/<code>)")
    ap.add_argument("policies", nargs="+", type=Path, help="plan policies (file or directory)")
    ap.add_argument("--from", dest="source", default="elastic:esrtf_load",
                    help="the scheduler whose cells' records give the workloads")  # fmt: skip
    args = ap.parse_args(argv)
    policies = [
        PlanPolicy.load(p if p.suffix == ".npz" else p / "policy.npz") for p in args.policies
    ]
    features = str((policies[0].env or {}).get("features", "dl2"))
    cells = sorted(args.root.glob(f"*/{args.source.replace(':', '-')}/run.json"))
    if not cells:
        sys.exit(f"error: no cells of {args.source} under {args.root}")
    agree = differ = 0
    for cell in cells:
        run = json.loads(cell.read_text())
        for record in run["runs"]:
            seed = int(record["seed"])
            config = replace(_env_config(record["env"]), features=features)
            firsts = []
            for policy in policies:
                env = make_env(config)
                obs, _ = env.reset(seed=seed)
                actor = PlanActor(env, policy.chooser(), policy.plans)
                firsts.append(actor.planner.labels[actor.plan_for(env, obs)])
            same = len(set(firsts)) == 1
            agree += same
            differ += not same
            shown = firsts[0] if same else " / ".join(firsts)
            print(f"{cell.parent.parent.name} seed {seed}: {shown}")
    print(f"the same first plan on {agree} of {agree + differ} workloads")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
