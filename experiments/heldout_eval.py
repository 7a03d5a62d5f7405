"""Learned policies against the heuristics on held-out workloads, paired, with 95% CIs.

    python experiments/heldout_eval.py --env medium --policy gppo='runs/ablation/clone_seed*'
    python experiments/heldout_eval.py --env medium --features extended --windows 20 \\
        --policy mixture='runs/traces/mix_seed*' --policy clone=runs/traces/mix_seed0/pretrain

One command for the evaluation standard of the learner issue: every scheduler runs through the
same env (:func:`evaluation.heldout.run_schedulers`) on the same test workloads, generator seeds
``--seeds`` (default 300-319: validation uses 100-102, pretraining 1000-1007, training draws
31-bit seeds) and ``--windows`` trace windows of the *held-out* Philly VCs
(:data:`envs.gym.workloads.TEST_VCS`, drawn with ``--window-seed``; ``--split validation``:
the training VCs' validation days instead, for choosing among runs; ``--split time``:
the training VCs' test days, a split in time).  ``--policy NAME=GLOB``:
one learned scheduler, a glob of run directories (one per training seed; their
``checkpoints/final``), pretraining outputs (``.../pretrain`` holding ``policy.pt``) or
``dlsched/ClusterPlan-v0`` policies (a ``policy.npz`` or a directory holding one).
Prints one Markdown table per workload set: mean avg JCT (slots) with its 95% Student-t CI
over workloads (a learned policy: averaged over its training seeds per workload first), the
paired difference against the best heuristic of that set and against DRF, the per-training-
seed means, the paired difference of p95 JCT (each workload's 95th percentile) against the
best heuristic, and unfinished jobs (runs that hit the horizon count them as finishing there).
``--versus NAME`` adds a paired column against that heuristic.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from _common import markdown_table  # noqa: E402

from envs.gym.factory import EnvConfig  # noqa: E402
from envs.gym.workloads import TEST_DAYS, TRAIN_VCS, VALIDATION_DAYS, TraceWindows  # noqa: E402
from envs.sim.errors import ConfigError  # noqa: E402
from evaluation.heldout import (  # noqa: E402
    Table,
    heldout_workloads,
    load_policies,
    paired,
    run_schedulers,
)
from evaluation.stats import mean_ci95  # noqa: E402

HEURISTICS = ("drf", "optimus", "esrtf", "tetris")


def _policies(spec: str) -> tuple[str, list[object]]:
    """``--policy NAME=GLOB``: the name and its policies
    (:func:`evaluation.heldout.load_policies`)."""
    if "=" not in spec:
        sys.exit(f"--policy wants NAME=GLOB, got {spec!r}")
    name, pattern = spec.split("=", 1)

    def skipped(p: Path) -> None:
        print(f"--policy {name}: skipping {p} (no final checkpoint yet)", file=sys.stderr)

    try:
        return name, load_policies(pattern, skipped)
    except ConfigError as e:
        sys.exit(f"--policy {name}: {e}")


def report(table: Table, title: str, versus: str | None = None) -> str:
    """The Markdown table; ``versus``: one more paired column, against that heuristic."""
    heur = {k: v for k, v in table.avg_jct.items() if v.ndim == 1}
    best = min(heur, key=lambda k: float(heur[k].mean()))
    headers = ["scheduler", "avg JCT (slots) ± 95% CI", f"vs {best} (paired)", "vs DRF (paired)",
               *([f"vs {versus} (paired)"] if versus else []), "per-training-seed means",
               f"p95 JCT vs {best} (paired)", "unfinished jobs"]  # fmt: skip
    rows = []
    for name, v in table.avg_jct.items():
        mean, half = mean_ci95(list(v.mean(axis=0) if v.ndim == 2 else v))
        d_best = "" if name == best else "{:+.1f}% ± {:.1f}".format(*paired(v, heur[best]))
        d_drf = "" if name == "drf" else "{:+.1f}% ± {:.1f}".format(*paired(v, heur["drf"]))
        d_vs = []
        if versus:
            d_vs = ["" if name == versus else "{:+.1f}% ± {:.1f}".format(*paired(v, heur[versus]))]
        seeds = ", ".join(f"{x:.2f}" for x in v.mean(axis=1)) if v.ndim == 2 else "-"
        p95 = table.p95_jct
        d_p95 = "" if name == best else "{:+.1f}% ± {:.1f}".format(*paired(p95[name], p95[best]))
        rows.append([
            name, f"{mean:.2f} ± {half:.2f}", d_best, d_drf, *d_vs, seeds, d_p95,
            str(table.unfinished[name]),
        ])  # fmt: skip
    return f"**{title}** (best heuristic: {best})\n\n" + markdown_table(rows, headers)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--env", default="medium")
    ap.add_argument("--features", default="dl2")
    ap.add_argument("--reward", default="jct")
    ap.add_argument("--backlog", default="none", help="env.backlog (e.g. bundle: DL²'s)")
    ap.add_argument("--seeds", type=int, nargs="*", default=list(range(300, 320)))
    ap.add_argument("--windows", type=int, default=0)
    ap.add_argument("--window-seed", type=int, default=12345)
    ap.add_argument(
        "--split",
        choices=("test", "time", "validation"),
        default="test",
        help="trace windows of the held-out VCs (test, any day), of the training VCs' test days "
        "(time: a split in time, days 90-120) or of the training VCs' validation days (for "
        "choosing among runs without touching the test windows)",
    )
    ap.add_argument("--policy", action="append", default=[])
    ap.add_argument("--heuristics", nargs="+", default=list(HEURISTICS))
    ap.add_argument("--sampled", action="store_true", help="sample actions (default argmax)")
    ap.add_argument("--versus", help="one more paired column, against this heuristic (e.g. esrtf)")
    args = ap.parse_args(argv)
    if args.versus and args.versus not in args.heuristics:
        ap.error(f"--versus {args.versus} must be one of --heuristics")
    if "drf" not in args.heuristics:
        ap.error("--heuristics must include drf (the table's paired column against DRF)")
    config = EnvConfig(
        setting=args.env, reward=args.reward, features=args.features, backlog=args.backlog
    )
    policies = dict(_policies(s) for s in args.policy)
    mode = "sampled" if args.sampled else "argmax"
    sets = [("generator", heldout_workloads(config, args.seeds))]
    trace = {
        "validation": TraceWindows(vcs=list(TRAIN_VCS), days=list(VALIDATION_DAYS)),
        "time": TraceWindows(vcs=list(TRAIN_VCS), days=list(TEST_DAYS)),
    }.get(args.split)
    if args.windows:
        sets.append(
            (
                "trace windows",
                heldout_workloads(
                    config, (), windows=args.windows, window_seed=args.window_seed, trace=trace
                ),
            )
        )
    for title, workloads in sets:
        if not workloads:
            continue
        table = run_schedulers(
            config,
            workloads,
            heuristics=args.heuristics,
            policies=policies,
            deterministic=not args.sampled,
        )
        backlog = f", backlog {args.backlog}" if args.backlog != "none" else ""
        head = (
            f"{args.env} ({args.features} features{backlog}), {title}: {len(workloads)} workloads"
        )
        if title == "generator":
            head += f" (seeds {args.seeds[0]}-{args.seeds[-1]})"
        else:
            where = {
                "test": "held-out VCs",
                "time": "training VCs, test days",
                "validation": "training VCs, validation days",
            }[args.split]
            head += f" ({where}, window seed {args.window_seed})"
        print(report(table, f"{head}; learned policies {mode}", args.versus) + "\n", flush=True)


if __name__ == "__main__":
    main()
