"""What each part of the group learner does: baselines, cloning, anchor, trust region.

    python experiments/learner_ablation.py run                 # every variant, seeds 0 1 2
    python experiments/learner_ablation.py run --variants clone clone_anchor --seeds 0
    python experiments/learner_ablation.py report              # tables on held-out workloads
    python experiments/learner_ablation.py run --suite traces  # generator-only vs the mixture
    python experiments/learner_ablation.py report --suite traces   # + held-out Philly windows

``run`` trains each variant of :data:`VARIANTS` (``train.py +agent=gppo`` on the ``medium``
setting with the ``jct`` reward, ``--steps`` decisions) for every training seed into
``runs/ablation/<variant>_seed<k>``, ``--jobs`` at a time.  ``report`` evaluates every final
policy, the behaviour-cloned start and the heuristics on the *test* workloads (seeds 300-319
by default) with ``experiments/heldout_eval.py`` (argmax, then sampled: paired differences
with 95% CIs, spread over training seeds) and prints the validation learning curves (mean
over training seeds).
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent


OUT = ROOT / "runs" / "ablation"
COMMON = [
    "+agent=gppo",
    "env=medium",
    "env.reward=jct",
    "eval.deterministic=true",
    "eval.baselines=[drf,optimus,esrtf]",
    "progress_bar=false",
]
CLONE = ["pretrain=esrtf", "agent.policy.arch=per_job", "agent.ent_coef=0.01"]
#: variant -> overrides of train.py (after COMMON)
VARIANTS: dict[str, list[str]] = {
    "scratch_group": ["pretrain=none"],
    "scratch_critic": ["pretrain=none", "agent.group.baseline=critic"],
    "clone": CLONE,
    "clone_anchor": [*CLONE, "agent.group.anchor_coef=1.0", "agent.group.anchor_half_life=1e6"],
    "clone_no_trust_region": [*CLONE, "agent.group.clip_range=100", "agent.group.target_kl=0"],
    "clone_critic_warmup": [*CLONE, "agent.group.baseline=critic", "agent.group.critic_warmup=10"],
    "clone_temperature": [*CLONE, "agent.group.temperature=2.0"],
}
#: item 4 of the learner issue: the same clone fine-tuned on the generator alone or on the
#: mixture (random cluster size / arrival rate + Philly windows of the training VCs), both with
#: the extended features, then tested on held-out VCs' windows and generator seeds; and a clone
#: whose teacher traces come from the mixture too (``ext_mixture_bc``)
EXT = [*CLONE, "env.features=extended"]
TRACE_VARIANTS: dict[str, list[str]] = {
    "ext_generator": EXT,
    "ext_mixture": [
        *EXT,
        "mixture=dl2_philly",
        "mixture.nodes=[8,16]",
        "mixture.arrivals=[1,3]",
    ],
    "ext_mixture_bc": [
        *EXT,
        "mixture=dl2_philly",
        "mixture.nodes=[8,16]",
        "mixture.arrivals=[1,3]",
        "pretrain.on_mixture=true",
        "pretrain.num_workloads=16",
    ],
}
SUITES = {"ablation": VARIANTS, "traces": TRACE_VARIANTS}
HEURISTICS = ("drf", "optimus", "esrtf")


def cmd_run(args: argparse.Namespace) -> None:
    jobs = []
    variants = SUITES[args.suite]
    for name in args.variants or list(variants):
        for seed in args.seeds:
            out = OUT / f"{name}_seed{seed}"
            jobs.append(
                [
                    sys.executable,
                    "train.py",
                    *COMMON,
                    *variants[name],
                    f"seed={seed}",
                    f"total_timesteps={args.steps}",
                    f"eval.every={args.eval_every}",
                    f"hydra.run.dir={out}",
                ]
            )

    def launch(cmd: list[str]) -> int:
        print(" ".join(cmd[1:]), flush=True)
        return subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL).returncode

    with ThreadPoolExecutor(args.jobs) as pool:
        codes = list(pool.map(launch, jobs))
    if any(codes):
        sys.exit(f"{sum(1 for c in codes if c)} run(s) failed")


def cmd_report(args: argparse.Namespace) -> None:
    import heldout_eval  # experiments/heldout_eval.py (one evaluation for every experiment)

    variants = SUITES[args.suite]
    clone = sorted(p for n in variants for p in OUT.glob(f"{n}_seed*/pretrain/policy.pt"))
    specs = [f"esrtf_clone={clone[0].parent}"] if clone else []
    curves = []
    for name in variants:
        runs = sorted(p for p in OUT.glob(f"{name}_seed*") if (p / "summary.json").is_file())
        if runs:
            specs.append(f"{name}={OUT}/{name}_seed*")
            curves.append((name, runs))
    seeds = [str(s) for s in args.test_seeds]
    for mode in ([], ["--sampled"]):
        argv = ["--env", "medium", "--heuristics", *HEURISTICS, "--seeds", *seeds]
        if args.suite == "traces":
            argv += ["--features", "extended", "--windows", str(args.windows)]
        heldout_eval.main(argv + [a for s in specs for a in ("--policy", s)] + mode)
    print("Validation avg JCT (seeds 100-102, argmax) during training, mean over seeds:\n")
    for name, runs in curves:
        rows = [list(csv.DictReader((r / "learning_curve.csv").open())) for r in runs]
        n = min(len(r) for r in rows)
        pts = []
        for i in range(n):
            steps = int(float(rows[0][i]["timesteps"]))
            jct = float(np.mean([float(r[i]["avg_jct"]) for r in rows]))
            pts.append(f"{steps / 1e6:.2f}M: {jct:.2f}")
        print(f"- `{name}`: " + ", ".join(pts))
    wall = {
        r.name: json.loads((r / "summary.json").read_text()).get("train_s")
        for _, rs in curves
        for r in rs
    }
    print(f"\nTraining wall seconds per run: {wall}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--suite", choices=list(SUITES), default="ablation")
    r.add_argument("--variants", nargs="+", default=None, help="default: the suite's all")
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    r.add_argument("--steps", type=int, default=3_000_000)
    r.add_argument("--eval-every", type=int, default=500_000)
    r.add_argument("--jobs", type=int, default=2)
    rep = sub.add_parser("report")
    rep.add_argument("--suite", choices=list(SUITES), default="ablation")
    rep.add_argument("--test-seeds", type=int, nargs="+", default=list(range(300, 320)))
    rep.add_argument("--windows", type=int, default=20)
    args = p.parse_args()
    if args.cmd == "run":
        cmd_run(args)
    else:
        cmd_report(args)


if __name__ == "__main__":
    main()
