"""SL + RL over the slot's plan (``dlsched/ClusterPlan-v0``): does RL beat its own clone?

    python experiments/plan_rl.py --setting medium --seeds 0-2 --iterations 60
    python experiments/plan_rl.py --setting small --backlog bundle --seeds 0-2 --iterations 40

Per training seed, one ``train.py +agent=plan_pg`` run (:func:`training.plan.train_plan`, its
config from the arguments: :func:`plan_config`) into ``--out``/``seed<N>``: behaviour-clone
the constant EfficientSRTF teacher (always action 0) into
:class:`~agents.episode_pg.MaskedMLP` on workloads ``--bc-seeds`` (2000-2007), with label
smoothing ``--bc-smoothing`` so that rollouts still try the other plans; the clone's argmax is
EfficientSRTF.  Then :class:`~agents.episode_pg.EpisodePG` on workloads it draws from
[10,000, 2^31) (never validation 100-109 or test 300-319); every ``--val-every`` iterations
the argmax policy is measured on validation seeds ``--val-seeds`` (100-104) and the best
validation checkpoint is kept.  Finally (unless ``--no-test``) every scheduler runs through
the same env on test seeds ``--test-seeds`` (300-319): the kept policies (argmax), their
clones, and the heuristics ``--heuristics`` (a one-plan ClusterPlan env, constant action 0,
i.e. the allocator through ClusterEnv's HeuristicDriver); paired differences with 95% CIs
(:func:`evaluation.heldout.paired`).  Writes ``--out``/``curves.json`` (per-run validation
curves), ``results.json`` and ``table.md``.  Results: docs/experiments/against-heuristics.md
("One decision per slot").
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from _common import markdown_table, seed_list

from agents.config import AgentConfig, PlanPGConfig
from agents.episode_pg import MaskedMLP, load_episode_pg, run_episode
from envs.gym.factory import EnvConfig
from envs.gym.plan_env import PlanEnv
from evaluation.heldout import paired
from evaluation.stats import mean_ci95
from training.config import EvalConfig, TrainConfig
from training.plan import train_plan
from training.pretraining import PretrainConfig

RESERVED = set(range(100, 110)) | set(range(300, 320))
RUN_KEYS = ("seed", "curve", "best_val", "best_iteration", "clone_val", "seconds")


def make(args: argparse.Namespace, plans: Any = None) -> PlanEnv:
    return PlanEnv(args.setting, reward="jct", backlog=args.backlog, plans=plans)


def avg_jct(env: PlanEnv, seed: int, net: MaskedMLP | None = None) -> float:
    """Avg JCT (slots) of one episode: ``net``'s argmax, or constant action 0."""
    ep = run_episode(env, seed, net) if net is not None else run_episode(env, seed, act=_zero)
    if ep.info.get("unfinished_jobs", 1):
        raise RuntimeError(f"workload {seed}: the episode hit the horizon")
    return float(ep.info["avg_jct_slots"])


def _zero(_env: Any, _obs: Any) -> int:
    return 0


def plan_config(args: argparse.Namespace, seed: int) -> TrainConfig:
    """The arguments as ``train.py +agent=plan_pg``'s config: the clone of EfficientSRTF's
    plan (``pretrain.teacher=esrtf``) on workloads ``--bc-seeds`` (consecutive), EpisodePG
    in one process, validation by argmax on ``--val-seeds``, the ``--heuristics`` as
    baselines."""
    agent = AgentConfig(
        name="plan_pg", algo="plan_pg", learning_rate=args.lr, ent_coef=args.ent_coef,
        plan=PlanPGConfig(iterations=args.iterations, groups=args.groups,
                          group_size=args.group_size, epsilon=args.epsilon,
                          val_every=args.val_every, bc_epochs=args.bc_epochs,
                          bc_smoothing=args.bc_smoothing, hidden=args.hidden, workers=1),
    )  # fmt: skip
    pretrain = PretrainConfig(teacher="esrtf", num_workloads=len(args.bc_seeds),
                              seed_offset=args.bc_seeds[0])  # fmt: skip
    return TrainConfig(
        agent=agent, env=EnvConfig(setting=args.setting, reward="jct", backlog=args.backlog),
        pretrain=pretrain, seed=seed, torch_threads=1,
        eval=EvalConfig(seeds=list(args.val_seeds), deterministic=True,
                        baselines=list(args.heuristics)),
    )  # fmt: skip


def _state(path: Path) -> dict[str, th.Tensor]:
    net, _ = load_episode_pg(path)
    return net.state_dict()


def train(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    """One training seed: :func:`training.plan.train_plan` into ``--out``/``seed<seed>``; its
    curve, best and clone states and figures."""
    cfg = plan_config(args, seed)
    run = args.out / f"seed{seed}"
    run.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    summary = train_plan(cfg, run, asdict(cfg))
    with open(run / "learning_curve.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    curve = [{"iteration": int(r["iteration"]), "val_avg_jct": float(r["avg_jct"]),
              "s": float(r["wall_s"])} for r in rows]  # fmt: skip
    best = summary["best"]
    print(f"seed {seed}: clone val {curve[0]['val_avg_jct']:.2f}", file=sys.stderr, flush=True)
    return {"seed": seed, "curve": curve, "best_val": float(best["avg_jct"]),
            "best_iteration": int(best["iteration"]),
            "best_state": _state(run / "checkpoints" / "best" / "policy.npz"),
            "bc_state": _state(run / "checkpoints" / "clone" / "policy.npz"),
            "clone_val": curve[0]["val_avg_jct"],
            "seconds": round(time.perf_counter() - t0, 1)}  # fmt: skip


def test(args: argparse.Namespace, runs: list[dict[str, Any]]) -> dict[str, Any]:
    env = make(args)
    jct: dict[str, np.ndarray] = {}
    for key, name in (("best_state", "learned"), ("bc_state", "clone")):
        rows = []
        for r in runs:
            net = MaskedMLP(env.obs_size, env.K, args.hidden)
            net.load_state_dict(r[key])
            rows.append([avg_jct(env, s, net) for s in args.test_seeds])
        jct[name] = np.asarray(rows)
    for name in args.heuristics:
        one = make(args, plans=[name])
        jct[name] = np.asarray([avg_jct(one, s) for s in args.test_seeds])
    return jct


def table(jct: dict[str, np.ndarray], versus: list[str]) -> str:
    headers = ["scheduler", "avg JCT ± 95% CI", *(f"vs {v} (paired)" for v in versus),
               "per-training-seed means"]  # fmt: skip
    rows = []
    for name, v in jct.items():
        mean, half = mean_ci95(list(v.mean(axis=0) if v.ndim == 2 else v))
        cols = ["" if name == w else "{:+.1f}% ± {:.1f}".format(*paired(v, jct[w])) for w in versus]
        seeds = ", ".join(f"{x:.2f}" for x in v.mean(axis=1)) if v.ndim == 2 else "-"
        rows.append([name, f"{mean:.2f} ± {half:.2f}", *cols, seeds])
    return markdown_table(rows, headers)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setting", default="medium")
    ap.add_argument("--backlog", default="none")
    ap.add_argument("--seeds", type=seed_list, default=[0, 1, 2], help="training seeds")
    ap.add_argument("--iterations", type=int, default=60)
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--epsilon", type=float, default=0.0)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--ent-coef", type=float, default=0.0)
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--val-every", type=int, default=5)
    ap.add_argument("--val-seeds", type=seed_list, default=list(range(100, 105)))
    ap.add_argument("--bc-seeds", type=seed_list, default=list(range(2000, 2008)))
    ap.add_argument("--bc-epochs", type=int, default=30)
    ap.add_argument("--bc-smoothing", type=float, default=0.3)
    ap.add_argument("--test-seeds", type=seed_list, default=list(range(300, 320)))
    ap.add_argument("--heuristics", nargs="+", default=["esrtf", "esrtf_load", "optimus", "drf"])
    ap.add_argument("--no-test", action="store_true")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    if RESERVED & set(args.bc_seeds):
        ap.error("--bc-seeds must avoid validation 100-109 and test 300-319")
    if args.bc_seeds != list(range(args.bc_seeds[0], args.bc_seeds[0] + len(args.bc_seeds))):
        ap.error("--bc-seeds must be consecutive (train.py's pretrain.seed_offset + i)")
    th.set_num_threads(1)
    out = args.out = args.out or Path("runs/plan_rl") / f"{args.setting}_{args.backlog}"
    out.mkdir(parents=True, exist_ok=True)
    runs = [train(args, s) for s in args.seeds]
    for r in runs:
        th.save({"best": r["best_state"], "clone": r["bc_state"]}, out / f"seed{r['seed']}.pt")
    record: dict[str, Any] = {
        "args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "runs": [{k: r[k] for k in RUN_KEYS} for r in runs],
    }
    (out / "curves.json").write_text(json.dumps(record, indent=1))
    for r in runs:
        print(f"seed {r['seed']}: clone val {r['clone_val']:.2f} -> best {r['best_val']:.2f} "
              f"(it {r['best_iteration']}), {r['seconds']:.0f}s")  # fmt: skip
    if args.no_test:
        return
    jct = test(args, runs)
    md = table(jct, ["clone", "esrtf", "esrtf_load"] if "esrtf_load" in jct else ["clone"])
    title = f"{args.setting} (backlog {args.backlog}), test seeds {args.test_seeds[0]}-"
    md = f"**{title}{args.test_seeds[-1]}** ({len(args.test_seeds)} workloads)\n\n{md}"
    print(md)
    (out / "table.md").write_text(md + "\n")
    record["test"] = {k: v.tolist() for k, v in jct.items()}
    (out / "results.json").write_text(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
