"""DL²'s learned scheduler against its baselines: runs, learning curves, ablation (issue 6).

    python experiments/dl2_rl.py run --name sl_rl --steps 200000 -- pretrain=drf
    python experiments/dl2_rl.py run --name rl_only --steps 200000 -- pretrain=none
    python experiments/dl2_rl.py report runs/rl/*         # tables on held-out test workloads

``run`` launches ``train.py +agent=<agent>`` into ``runs/rl/<name>_seed<k>`` (extra Hydra
overrides after ``--``).  ``report`` evaluates every run's final policy, the heuristics, a
uniform-random policy with and without the job-aware exploration rules, and the SL-only clone
(the pretraining weights) on the *test* workloads (seeds 200-204 by default; training draws
31-bit seeds, validation uses 100-102, pretraining 1000-1007), and prints Markdown tables:
average JCT (mean and 95% CI over workloads), ratio to DRF / Optimus / LWF-style fixed demand,
and each run's learning curve (validation average JCT vs decisions and wall seconds).
"""

from __future__ import annotations

import argparse
import csv
import functools
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from _common import markdown_table  # noqa: E402

from agents.checkpoint import load_policy  # noqa: E402
from agents.episode_results import (  # noqa: E402
    EpisodeResult,
    evaluate_allocator,
    evaluate_policy,
    evaluate_random,
)
from agents.exploration import ExplorationConfig  # noqa: E402
from envs.gym.factory import EnvConfig, coerce_env_config, make_env  # noqa: E402
from envs.sim.elastic.allocators import make_allocator  # noqa: E402
from evaluation.heldout import lower_bound  # noqa: E402
from evaluation.stats import mean_ci95  # noqa: E402

HEURISTICS = ("drf", "srtf", "tetris", "optimus", "esrtf", "adasrsf")


def cmd_run(args: argparse.Namespace, extra: list[str]) -> None:
    for seed in args.seeds:
        out = ROOT / "runs" / "rl" / f"{args.name}_seed{seed}"
        cmd = [
            sys.executable,
            "train.py",
            f"+agent={args.agent}",
            f"seed={seed}",
            f"total_timesteps={args.steps}",
            f"eval.every={args.eval_every}",
            f"hydra.run.dir={out}",
            "progress_bar=false",
            *extra,
        ]
        print(" ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=ROOT, check=True)


def _stats(results: list[EpisodeResult]) -> tuple[float, float]:
    """Mean avg JCT over the test workloads and the half-width of its 95% Student-t CI."""
    return mean_ci95([r.avg_jct for r in results])


def _lower_bound(env_cfg: EnvConfig, seed: int) -> float:
    """:func:`evaluation.heldout.lower_bound` of workload ``seed``."""
    env = make_env(env_cfg, seed=seed)
    env.reset(seed=seed)
    return lower_bound(env, env_cfg)


def cmd_report(args: argparse.Namespace) -> None:
    runs = [Path(p) for p in args.runs if (Path(p) / "summary.json").is_file()]
    if not runs:
        sys.exit("no finished runs given")
    env_cfg: EnvConfig = coerce_env_config(
        json.loads((runs[0] / "run.json").read_text())["config"]["env"]
    )
    seeds = list(args.test_seeds)
    rows: list[tuple[str, tuple[float, float], str]] = []
    for name in HEURISTICS:
        res = evaluate_allocator(functools.partial(make_allocator, name), env_cfg, seeds)
        rows.append((name, _stats(res), "heuristic through the env"))
    rows.append(("random", _stats(evaluate_random(env_cfg, seeds)), "uniform over valid actions"))
    rules = ExplorationConfig(eps_start=1.0, eps_end=1.0)
    rows.append(
        (
            "random + rules",
            _stats(evaluate_random(env_cfg, seeds, exploration=rules)),
            "uniform, job-aware exploration rules always on",
        )
    )
    bound = [_lower_bound(env_cfg, s) for s in seeds]
    rows.append(("lower bound", mean_ci95(bound), "no policy can do better"))
    done_clones: set[str] = set()
    curves: list[str] = []
    for run in runs:
        summary = json.loads((run / "summary.json").read_text())
        pre = run / "pretrain" / "policy.pt"
        teacher = (summary.get("pretrain") or {}).get("teacher")
        if pre.is_file() and teacher and teacher not in done_clones:
            done_clones.add(teacher)
            policy, _ = load_policy(pre)
            res = evaluate_policy(policy, env_cfg, seeds, deterministic=True)
            rows.append((f"SL only ({teacher} clone)", _stats(res), "argmax"))
        policy, _ = load_policy(run / "checkpoints" / "final")
        for det in (True, False):
            res = evaluate_policy(policy, env_cfg, seeds, deterministic=det)
            rows.append((f"{run.name}", _stats(res), "argmax" if det else "sampled"))
        curves.append(_curve(run))
    drf = next(r[1][0] for r in rows if r[0] == "drf")
    opt = next(r[1][0] for r in rows if r[0] == "optimus")
    print(f"\nTest workloads: seeds {seeds}; env {env_cfg.as_dict()}\n")
    table = [
        [name, f"{mean:.1f}", f"±{half:.1f}", f"{100 * (mean / drf - 1):+.1f}%",
         f"{100 * (mean / opt - 1):+.1f}%", note]
        for name, (mean, half), note in rows
    ]  # fmt: skip
    headers = ["scheduler", "avg JCT (slots)", "95% CI", "vs DRF", "vs Optimus", "note"]
    print(markdown_table(table, headers))
    print("\n" + "\n\n".join(curves))


def _curve(run: Path) -> str:
    path = run / "learning_curve.csv"
    if not path.is_file():
        return f"{run.name}: no learning curve"
    with path.open() as f:
        rows = list(csv.DictReader(f))
    table = [
        [str(int(float(r["timesteps"]))), f"{float(r['wall_s']):.0f}", f"{float(r['avg_jct']):.1f}",
         f"{float(r.get('ratio_to_drf', 'nan')):.3f}"]
        for r in rows
    ]  # fmt: skip
    headers = ["decisions", "wall s", "avg JCT", "vs DRF"]
    return f"{run.name} (validation, sampled):\n" + markdown_table(table, headers)


def main() -> None:
    argv = sys.argv[1:]
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--name", required=True)
    r.add_argument("--agent", default="a2c")
    r.add_argument("--steps", type=int, default=200_000)
    r.add_argument("--eval-every", type=int, default=25_000)
    r.add_argument("--seeds", type=int, nargs="+", default=[0])
    rep = sub.add_parser("report")
    rep.add_argument("runs", nargs="+")
    rep.add_argument("--test-seeds", type=int, nargs="+", default=[200, 201, 202, 203, 204])
    args = p.parse_args(argv)
    if args.cmd == "run":
        cmd_run(args, extra)
    else:
        cmd_report(args)


if __name__ == "__main__":
    main()
