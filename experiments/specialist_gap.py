"""A policy of any cluster against a per-setting specialist, paired, on held-out generator seeds
(issue 39's "within 1% of the specialists"): each policy acts in its own env (its own
observation features: the general policies read the extended ones), on the same workloads.

Usage::

    python experiments/specialist_gap.py --env medium --specialist policies/medium_plan_pg_backfill
    python experiments/specialist_gap.py --env small --backlog bundle \\
        --specialist policies/small_bundle_plan_pg --seeds 300 301 302

Prints each scheduler's avg JCT (slots) per workload, then the paired differences (mean over
workloads of ``100 (a / b - 1)`` %, 95% CI): the general policy (default the released search)
against the specialist and against ``esrtf_load``, the specialist against ``esrtf_load``.
The seeds default to the test seeds 300-319, which no training, validation or tuning reads.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import Any

import numpy as np

from agents.policy_file import read_meta
from envs.gym.factory import coerce_env_config
from envs.sim.errors import ConfigError
from evaluation.heldout import heldout_workloads, load_policies, paired, run_schedulers


def _avg_jcts(path: str, here: dict[str, Any], seeds: list[int], heuristic: str | None) -> dict:
    """Avg JCT per workload of the policy at ``path`` in its own env (the env its file records,
    with ``here``'s setting and backlog, as ``evaluate.py`` runs a policy), and of
    ``heuristic`` through the same env."""
    config = replace(coerce_env_config(read_meta(path)["env"]["env"]), **here)
    table = run_schedulers(
        config,
        heldout_workloads(config, seeds),
        heuristics=[heuristic] if heuristic else [],
        policies={path: load_policies(path, lambda _p: None)},
    )
    return {name: np.asarray(v).ravel() for name, v in table.avg_jct.items()}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--env", default="medium", help="the DL² setting")
    ap.add_argument("--backlog", default="none", help="env.backlog (bundle: DL²'s)")
    ap.add_argument("--specialist", required=True, help="the per-setting policy file")
    ap.add_argument("--policy", default="policies/general_search", help="the general policy")
    ap.add_argument("--heuristic", default="esrtf_load")
    ap.add_argument("--seeds", type=int, nargs="+", default=list(range(300, 320)))
    args = ap.parse_args(argv)
    here = {"setting": args.env, "backlog": args.backlog}
    try:
        runs = _avg_jcts(args.policy, here, args.seeds, None)
        runs.update(_avg_jcts(args.specialist, here, args.seeds, args.heuristic))
    except (ConfigError, OSError, KeyError) as e:  # a missing file, one that cannot act here
        sys.exit(f"specialist_gap: {e}")
    for name, v in runs.items():
        print(f"{name}: {np.round(v, 3).tolist()} (mean {v.mean():.2f})")
    where = f"{args.env} (backlog {args.backlog}), seeds {args.seeds[0]}-{args.seeds[-1]}"
    for a, b in ((args.policy, args.specialist), (args.policy, args.heuristic),
                 (args.specialist, args.heuristic)):  # fmt: skip
        mean, half = paired(runs[a], runs[b])
        ci = f"± {half:.2f} (paired, 95% CI)" if len(args.seeds) > 1 else "(one workload: no CI)"
        print(f"{where}: {a} vs {b}: {mean:+.2f}% {ci}")


if __name__ == "__main__":
    main()
