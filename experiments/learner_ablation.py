"""What each part of the group learner does: baselines, cloning, anchor, trust region.

    python experiments/learner_ablation.py run                 # every variant, seeds 0 1 2
    python experiments/learner_ablation.py run --variants clone clone_anchor --seeds 0
    python experiments/learner_ablation.py report              # tables on held-out workloads

``run`` trains each variant of :data:`VARIANTS` (``train.py +agent=gppo`` on the ``medium``
setting with the ``jct`` reward, ``--steps`` decisions) for every training seed into
``runs/ablation/<variant>_seed<k>``, ``--jobs`` at a time.  ``report`` evaluates every final
policy (masked argmax) and the heuristics through the same env on the *test* workloads
(seeds 300-319 by default: validation uses 100-102, pretraining 1000-1007, training draws
31-bit seeds from its own generator) and prints Markdown tables: mean avg JCT over the test
workloads (the policy's figure per workload averaged over training seeds) with its 95%
Student-t CI; paired differences per workload against EfficientSRTF (the strongest heuristic
on this setting) and against the behaviour-cloned policy, each with its 95% CI; the spread
over training seeds; and the validation learning curves (mean over training seeds).
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agents.checkpoint import load_policy  # noqa: E402
from agents.evaluation import evaluate_allocator, evaluate_policy  # noqa: E402
from envs.gym.factory import EnvConfig  # noqa: E402
from evaluation.stats import mean_ci95  # noqa: E402
from pretrain.teachers import make_teacher  # noqa: E402

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
}
HEURISTICS = ("drf", "optimus", "esrtf")
ENV = EnvConfig(setting="medium", reward="jct")


def cmd_run(args: argparse.Namespace) -> None:
    jobs = []
    for name in args.variants:
        for seed in args.seeds:
            out = OUT / f"{name}_seed{seed}"
            jobs.append(
                [
                    sys.executable,
                    "train.py",
                    *COMMON,
                    *VARIANTS[name],
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


def _fmt(mean: float, half: float) -> str:
    return f"{mean:.2f} ± {half:.2f}"


def _pct(a: np.ndarray, b: np.ndarray) -> str:
    m, h = mean_ci95(list(100 * (a / b - 1)))
    return f"{m:+.1f}% ± {h:.1f}"


def cmd_report(args: argparse.Namespace) -> None:
    seeds = list(args.test_seeds)
    heur = {
        name: np.array(
            [
                r.avg_jct
                for r in evaluate_allocator(functools.partial(make_teacher, name), ENV, seeds)
            ]
        )
        for name in HEURISTICS
    }
    clone_runs = sorted(OUT.glob("clone_seed*/pretrain/policy.pt"))
    clone = None
    if clone_runs:
        policy, _ = load_policy(clone_runs[0])
        clone = np.array([r.avg_jct for r in evaluate_policy(policy, ENV, seeds)])
    print(f"Test workloads: medium, reward jct, seeds {seeds[0]}-{seeds[-1]} ({len(seeds)})\n")
    print(
        "| scheduler | training seeds | avg JCT (slots), 95% CI | vs EfficientSRTF (paired) "
        "| vs ESRTF clone (paired) | per-seed means |"
    )
    print("|---|---|---|---|---|---|")
    for name, v in heur.items():
        print(f"| {name} | - | {_fmt(*mean_ci95(list(v)))} | {_pct(v, heur['esrtf'])} | | |")
    if clone is not None:
        print(
            f"| esrtf clone (SL only, per_job) | - | {_fmt(*mean_ci95(list(clone)))} | "
            f"{_pct(clone, heur['esrtf'])} | | |"
        )
    curves = []
    for name in VARIANTS:
        runs = sorted(p for p in OUT.glob(f"{name}_seed*") if (p / "summary.json").is_file())
        if not runs:
            continue
        per_seed = []
        for run in runs:
            policy, _ = load_policy(run / "checkpoints" / "final")
            per_seed.append([r.avg_jct for r in evaluate_policy(policy, ENV, seeds)])
        m = np.array(per_seed)  # training seeds x workloads
        v = m.mean(axis=0)
        vs_clone = _pct(v, clone) if clone is not None and name.startswith("clone") else ""
        spread = ", ".join(f"{x:.2f}" for x in m.mean(axis=1))
        print(
            f"| {name} | {len(runs)} | {_fmt(*mean_ci95(list(v)))} | {_pct(v, heur['esrtf'])} "
            f"| {vs_clone} | {spread} |"
        )
        curves.append((name, runs))
    print("\nValidation avg JCT (seeds 100-102, argmax) during training, mean over seeds:\n")
    for name, runs in curves:
        rows = [list(csv.DictReader((r / "learning_curve.csv").open())) for r in runs]
        n = min(len(r) for r in rows)
        pts = []
        for i in range(n):
            steps = int(float(rows[0][i]["timesteps"]))
            jct = float(np.mean([float(r[i]["avg_jct"]) for r in rows]))
            pts.append(f"{steps / 1e6:.2f}M: {jct:.2f}")
        print(f"- `{name}`: " + ", ".join(pts))
    summary = {
        r.name: json.loads((r / "summary.json").read_text()).get("train_s")
        for _, rs in curves
        for r in rs
    }
    print(f"\nTraining wall seconds per run: {summary}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    r.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    r.add_argument("--steps", type=int, default=3_000_000)
    r.add_argument("--eval-every", type=int, default=500_000)
    r.add_argument("--jobs", type=int, default=2)
    rep = sub.add_parser("report")
    rep.add_argument("--test-seeds", type=int, nargs="+", default=list(range(300, 320)))
    args = p.parse_args()
    if args.cmd == "run":
        cmd_run(args)
    else:
        cmd_report(args)


if __name__ == "__main__":
    main()
