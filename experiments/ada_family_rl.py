"""A learned (behaviour-cloned) DL² scheduler against LWF-1 + Ada-SRSF on the Ada-SRSF family.

    python experiments/ada_family_rl.py        # baselines, env checks, BC(DRF), the table
    # (defaults: --test-seeds 9000-9004 --train-seeds 1000-1005 --val-seeds 100,101
    #  --teacher drf --arch per_job --bc-steps 1500 --placer lwf1)
    # the RL fine-tune from the same clone (its pretraining is a cache hit: same config key):
    python train.py +agent=a2c_increments env=ada_lwf1 pretrain=drf pretrain.num_workloads=6 \
        pretrain.seed_offset=1000 'pretrain.eval_seeds=[100,101]' pretrain.bc.steps=1500 \
        agent.policy.arch=per_job agent.exploration.enabled=false agent.ent_coef=0.001 \
        agent.learning_rate=1e-4 eval=quick total_timesteps=120000 torch_threads=1 \
        run_name=_ada_ft
    python experiments/ada_family_rl.py \
        --policy "A2C fine-tune (120k decisions)=runs/<time>_train_a2c_ada_ft/checkpoints/final"
    python experiments/ada_family_rl.py --num-jobs 40 --test-seeds 9000-9002 \
        --train-seeds 1000-1003 --val-seeds 100 --bc-steps 300     # a light-load smoke run

Why: it compares a DL²-style policy cloned from a heuristic with the fixed-demand stack
LWF-1 + Ada-SRSF on fresh draws of the Ada-SRSF workload family (the env's ``ada`` setting,
contention speed mode).  The world: :func:`env_config`; the rows, the check and the JCT
convention: :func:`main`; results: docs/experiments/dl2-actor-critic.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from _common import markdown_table, seed_list

from agents.checkpoint import load_policy
from agents.episode_results import evaluate_policy
from agents.policy import PolicyConfig
from envs.gym.factory import AdaSetting, EnvConfig, contention_config, make_env, setting_of
from envs.gym.heuristic import HeuristicDriver
from envs.sim.elastic.allocators import DRF, Allocator, FixedDemand, Optimus
from envs.sim.elastic.engine_slots import ContentionSlotSimulator
from envs.sim.elastic.simulator import ElasticResult
from evaluation.stats import mean_ci95
from pretrain.bc import BCConfig
from training.pretraining import PretrainConfig, pretrain

#: direct simulator stacks: label -> (allocator factory, core placer, comm)
STACKS: dict[str, tuple[Callable[[], Allocator], str | None, str]] = {
    "LWF-1 + Ada-SRSF": (lambda: FixedDemand(order="srsf"), "lwf1", "adasrsf"),
    "LWF-1 + FS": (lambda: FixedDemand(order="srsf"), "lwf1", "fs"),
    "fixed demand + FF": (lambda: FixedDemand(order="srsf"), "ff", "fs"),
    "DRF": (DRF, None, "fs"),
    "DRF + LWF-1": (DRF, "lwf1", "fs"),
    "Optimus": (Optimus, None, "fs"),
}
BASELINE = "LWF-1 + Ada-SRSF"


def env_config(num_jobs: int, placer: str | None = None, comm: str = "fs") -> EnvConfig:
    """The world of every row: the env's ``ada`` setting in the ``contention`` speed mode.

    (``envs/gym/factory.py`` ``AdaSetting``, ``conf/env/ada.yaml``): workloads
    ``generate_ada_srsf(seed)`` (160 jobs, the Ada-SRSF distribution: 80/14/26/30/8/2 jobs of
    1/2/4/8/16/32 GPUs, 10-60 iterations of VGG-16 / ResNet-50 / Inception-V3 / LSTM, arrivals
    over 12,000 trace ms), the trace's ms read as seconds, 16 nodes x 4 DL² workers, 60-s
    slots, each job's work what it trains alone at its requested GPUs (one PS per worker) in
    its traced duration under the contention model; every slot simulated by the contention
    engine (:class:`~envs.sim.elastic.engine_slots.ContentionSlotSimulator`, 50 merged steps
    per slot).  The same world as ``experiments/dl2_speed_models.py --ada`` but with fresh
    workload draws: training workloads (``--train-seeds``), validation workloads
    (``--val-seeds``, the clone's JCT during pretraining) and test workloads
    (``--test-seeds``) are disjoint seed sets.
    """
    overrides = {} if num_jobs == 160 else {"num_jobs": num_jobs}
    return EnvConfig(
        setting="ada",
        overrides=overrides,
        reward="jct",
        jct_scale=50.0,
        max_slots=5000,
        speed="contention",
        placer=placer,
        comm=comm,
    )


def simulate_direct(cfg: EnvConfig, make: Callable[[], Allocator], seed: int) -> ElasticResult:
    """``make()``'s run on the contention simulator of ``cfg`` (its core placer and comm)."""
    setting = setting_of(cfg)
    return ContentionSlotSimulator(
        setting.cluster(),
        setting.workload(seed),
        make(),
        contention_config(cfg),
        placer=cfg.placer,
        max_slots=20_000,
    ).run()


def run_direct(cfg: EnvConfig, label: str, seed: int) -> tuple[float, float]:
    """(avg JCT from the arrival slot's start in s, CPU s) of a stack on the simulator."""
    make, placer, comm = STACKS[label]
    cpu = time.process_time()
    result = simulate_direct(replace(cfg, placer=placer, comm=comm), make, seed)
    return result.avg_jct_s, time.process_time() - cpu


def learned_where(label: str) -> str:
    if label.endswith("[env placement]"):
        return "env's own (least-loaded) / fair share"
    return "core " + label.rsplit("[", 1)[-1].split()[0].upper() + " / fair share"


def main() -> None:
    """Run every row on the test seeds and print the table.

    **Rows** (all on the test seeds):

    * ``LWF-1 + Ada-SRSF``: fixed demand (each job's requested GPUs as workers, one PS each,
      all or nothing, SRSF order), the core LWF-1 placer in the engine, AdaDUAL admission
      control on the NICs (``comm="adasrsf"``; exact slot reuse is off under admission
      control);
    * ``LWF-1 + FS``, ``fixed demand + FF`` (fair-share NICs); ``DRF``, ``Optimus`` (their own
      task placement, fair-share NICs): run directly on the simulator;
    * ``BC(<teacher>)``: the teacher cloned into a DL² policy (``pretrain/``: teacher episodes
      on the training seeds through the env, :class:`~envs.gym.heuristic.HeuristicDriver`),
      run through the env (``env=ada``: the engine places its tasks where the env put them) by
      masked argmax; ``--policy LABEL=PATH`` adds any saved policy (``policy.pt`` or an SB3
      checkpoint).

    Check (``--check``, default on): DRF and LWF-1 + Ada-SRSF driven through the env on the
    first test seed give the direct simulator's JCT exactly.

    JCT in seconds from submission (the env counts from the arrival slot's start; each
    workload's mean offset inside the slot is taken back).  Mean over the test seeds ± the 95%
    t-interval, and the paired difference to LWF-1 + Ada-SRSF (mean ± 95% t-interval of the
    per-seed differences; negative = better than LWF-1 + Ada-SRSF).
    """
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--test-seeds", type=seed_list, default=list(range(9000, 9005)))
    ap.add_argument("--train-seeds", type=seed_list, default=list(range(1000, 1006)))
    ap.add_argument("--val-seeds", type=seed_list, default=[100, 101])
    ap.add_argument("--num-jobs", type=int, default=160)
    ap.add_argument("--teacher", default="drf")
    ap.add_argument("--arch", default="per_job", choices=("mlp", "per_job"))
    ap.add_argument("--position", action="store_true", help="per_job: row positions too")
    ap.add_argument("--bc-steps", type=int, default=1500)
    ap.add_argument(
        "--placer",
        default="lwf1",
        help="core placer of the learned scheduler's env ('none': the env's own placement)",
    )
    ap.add_argument("--out", default="runs/ada_family_rl")
    ap.add_argument("--cache", default="runs/cache/pretrain")
    ap.add_argument("--skip-bc", action="store_true")
    ap.add_argument("--no-check", action="store_true")
    ap.add_argument(
        "--policy", action="append", default=[], metavar="LABEL=PATH", help="extra policies"
    )
    args = ap.parse_args()
    sets = {
        "train": set(args.train_seeds),
        "val": set(args.val_seeds),
        "test": set(args.test_seeds),
    }
    for a, b in (("train", "test"), ("val", "test"), ("train", "val")):
        if sets[a] & sets[b]:
            ap.error(f"{a} and {b} seeds overlap: {sorted(sets[a] & sets[b])}")
    th.set_num_threads(1)
    cfg = env_config(args.num_jobs)
    placer = None if args.placer.lower() == "none" else args.placer
    learn_cfg = env_config(args.num_jobs, placer=placer)
    setting = setting_of(cfg)
    assert isinstance(setting, AdaSetting)
    seeds = args.test_seeds
    offsets = {s: setting.submit_offset_s(s) for s in seeds}
    slot_s = setting.slot_s
    print(
        f"## Ada-SRSF family, contention mode: {setting.num_jobs} jobs, {setting.num_nodes} "
        f"nodes x 4 workers, {slot_s:.0f}-s slots; test seeds {seeds}, train {args.train_seeds}, "
        f"val {args.val_seeds}",
        flush=True,
    )
    jct: dict[str, list[float]] = {}
    cpu_s: dict[str, float] = {}
    for label in STACKS:
        rows = [run_direct(cfg, label, s) for s in seeds]
        jct[label] = [r[0] - offsets[s] for r, s in zip(rows, seeds, strict=True)]
        cpu_s[label] = float(np.mean([r[1] for r in rows]))
        print(
            f"<!-- {label}: {[round(x, 1) for x in jct[label]]} CPU {cpu_s[label]:.1f} s/run -->",
            flush=True,
        )

    if not args.no_check:
        s = seeds[0]
        for label, driver_cfg in (
            ("DRF", cfg),
            ("DRF + LWF-1", env_config(args.num_jobs, placer="lwf1")),
            (BASELINE, env_config(args.num_jobs, placer="lwf1", comm="adasrsf")),
        ):
            make = STACKS[label][0]
            env = make_env(driver_cfg)
            HeuristicDriver(make(), env).run_episode(seed=s)
            sim = env.simulator
            via_env = [sim.finish_time(j.job_id) for j in env.jobs]
            direct = simulate_direct(driver_cfg, make, s)
            same = via_env == [r.finish for r in direct.jobs]
            print(
                f"<!-- check {label} seed {s}: per-job finish times through the env "
                f"{'equal' if same else 'DIFFERENT'} to the direct simulator's -->",
                flush=True,
            )
            if not same:
                sys.exit(f"check failed: {label} through the env differs from the simulator")

    policies: list[tuple[str, Any]] = []
    if not args.skip_bc:
        pcfg = PretrainConfig(
            teacher=args.teacher,
            num_workloads=len(args.train_seeds),
            seed_offset=args.train_seeds[0],
            val_fraction=0.25,
            bc=BCConfig(steps=args.bc_steps, eval_every=500),
            eval_seeds=list(args.val_seeds),
        )
        if args.train_seeds != list(range(args.train_seeds[0], args.train_seeds[-1] + 1)):
            ap.error("--train-seeds must be a contiguous range (pretrain's seed_offset + i)")
        policy_cfg = PolicyConfig(arch=args.arch, position=args.position)
        cpu = time.process_time()
        summary = pretrain(
            pcfg, learn_cfg, policy_cfg, Path(args.out) / f"bc_{args.teacher}", cache_dir=args.cache
        )
        print(
            f"<!-- BC({args.teacher}) {args.arch}: "
            + json.dumps({k: v for k, v in summary.items() if k != "policy_path"})
            + f" CPU {time.process_time() - cpu:.0f} s -->",
            flush=True,
        )
        policies.append(
            (f"BC({args.teacher}), {args.arch}", load_policy(summary["policy_path"])[0])
        )
    for spec in args.policy:
        label, _, path = spec.partition("=")
        policies.append((label, load_policy(path)[0]))
    runs = [(f"{label} [{placer or 'env'} placement]", p, learn_cfg) for label, p in policies]
    if placer is not None:  # the same policies with the env's own placement
        runs += [(f"{label} [env placement]", p, cfg) for label, p in policies]
    decisions: dict[str, float] = {}
    for label, policy, run_cfg in runs:
        cpu = time.process_time()
        res = evaluate_policy(policy, run_cfg, seeds, deterministic=True)
        cpu_s[label] = (time.process_time() - cpu) / len(seeds)
        jct[label] = [r.avg_jct * slot_s - offsets[r.seed] for r in res]
        decisions[label] = float(np.mean([r.decisions for r in res]))
        unfinished = sum(r.unfinished for r in res)
        print(
            f"<!-- {label}: {[round(x, 1) for x in jct[label]]} unfinished {unfinished} "
            f"CPU {cpu_s[label]:.1f} s/run -->",
            flush=True,
        )

    base = np.asarray(jct[BASELINE])
    headers = [
        "scheduler",
        "placement / NICs",
        "avg JCT (s), mean ± 95% CI",
        "paired diff. to LWF-1 + Ada-SRSF (s)",
        "ratio",
        "per seed",
        "CPU-s per run",
    ]
    where = {
        "LWF-1 + Ada-SRSF": "core LWF-1 / AdaDUAL",
        "LWF-1 + FS": "core LWF-1 / fair share",
        "fixed demand + FF": "core FF / fair share",
        "DRF": "own (least-loaded) / fair share",
        "DRF + LWF-1": "core LWF-1 / fair share",
        "Optimus": "own / fair share",
    }
    table = []
    for label, values in jct.items():
        m, h = mean_ci95(values)
        d, dh = mean_ci95(list(np.asarray(values) - base))
        table.append([
            label, where.get(label, learned_where(label)), f"{m:,.0f} ± {h:,.0f}",
            f"{d:+,.0f} ± {dh:,.0f}", f"{m / base.mean():.3f}",
            ", ".join(f"{v:,.0f}" for v in values), f"{cpu_s[label]:.1f}",
        ])  # fmt: skip
    print("\n" + markdown_table(table, headers), flush=True)


if __name__ == "__main__":
    main()
