"""Federated training with 1, 2 and 4 clusters (issue 11; the shape of DL² Fig. 18).

``python experiments/federated_scaling.py`` trains, from the same initial weights and seed,

* one global policy on the first 1, 2 and 4 clusters of :data:`CLUSTERS` (A2C over one env per
  cluster, one gradient step per update on every cluster's decisions: synchronous A3C), and
* one policy on each of clusters 1..3 alone (cluster 0 alone is the 1-cluster run),

all for the same number of updates (``--updates``, ``--n-steps`` decisions per cluster per
update).  Every ``--eval-every`` updates each policy is validated on every cluster of
:data:`CLUSTERS` (fixed workload seeds, masked sampling with a fixed seed: DL²'s validation);
the validation JCT is the mean over the four clusters.  Output (``--out``, default
``runs/federated_scaling``): ``curves.csv`` (one row per run, cluster and validation point:
updates, decisions, training wall seconds without validation) and ``results.md``: validation
avg JCT vs updates and vs wall time per run, and per cluster the 4-cluster global policy
against the policy trained on that cluster alone.  Minutes on two cores with the defaults
(``tiny`` clusters).  ``--mode ray`` runs the federated runs' envs in local Ray actors.
"""

from __future__ import annotations

import argparse
import csv
import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from _common import markdown_table

from agents.build import build_agent
from agents.config import AgentConfig
from agents.episode_results import aggregate, evaluate_allocator
from agents.federated import federated_vec_env, init_ray
from agents.federated_callbacks import FederatedMetricsCallback, cluster_label
from envs.gym.factory import EnvConfig
from envs.sim.elastic.allocators import make_allocator
from training.config import ClusterEntry, FederatedConfig

#: Four clusters of the ``tiny`` setting (J = 8, L = 8): different sizes, job counts, arrival
#: patterns and workload seeds.
CLUSTERS = [
    ClusterEntry(EnvConfig(setting="tiny", arrival="google"), seed=0),
    ClusterEntry(
        EnvConfig(setting="tiny", overrides={"num_nodes": 3, "num_jobs": 10}, arrival="poisson"),
        seed=1000,
    ),
    ClusterEntry(
        EnvConfig(setting="tiny", overrides={"num_nodes": 6, "num_jobs": 16}, arrival="uniform"),
        seed=2000,
    ),
    ClusterEntry(
        EnvConfig(setting="tiny", overrides={"num_nodes": 5, "num_jobs": 14}, arrival="google"),
        seed=3000,
    ),
]
VAL_CONFIGS = [c.env for c in CLUSTERS]


@dataclass(frozen=True)
class Run:
    name: str
    clusters: tuple[int, ...]  # indices into CLUSTERS


def runs() -> list[Run]:
    fed = [Run(f"fed{n}", tuple(range(n))) for n in (1, 2, 4)]
    alone = [Run(f"alone{i}", (i,)) for i in (1, 2, 3)]
    return fed + alone


def train_one(run: Run, args: argparse.Namespace, out: Path) -> list[dict[str, Any]]:
    """Train ``run`` and return its validation rows (one per cluster of VAL_CONFIGS)."""
    th.manual_seed(args.seed)
    mode = args.mode if len(run.clusters) > 1 else "local"
    config = FederatedConfig(mode=mode, clusters=[CLUSTERS[i] for i in run.clusters])
    env, _ = federated_vec_env(config, seed=args.seed)
    agent = AgentConfig(name=run.name, n_steps=args.n_steps, learning_rate=args.lr)
    model = build_agent(agent, env, 8, seed=args.seed, tensorboard_log=str(out / "tb"))
    per_update = args.n_steps * len(run.clusters)
    cb = FederatedMetricsCallback(
        VAL_CONFIGS,
        list(args.val_seeds),
        every=args.eval_every * per_update,
        deterministic=False,
        sample_seed=0,
    )
    t0 = time.perf_counter()
    model.learn(args.updates * per_update, callback=cb, tb_log_name=run.name)
    wall = time.perf_counter() - t0
    env.close()
    print(f"{run.name}: {model._n_updates} updates, {model.num_timesteps} decisions, {wall:.1f} s")
    return [{"run": run.name, "n_clusters": len(run.clusters), **r} for r in cb.history]


def _points(rows: list[dict[str, Any]], run: str) -> list[tuple[int, float, float]]:
    """(updates, train seconds, mean validation avg JCT over the clusters) per point."""
    mine = [r for r in rows if r["run"] == run]
    out = []
    for u in sorted({r["updates"] for r in mine}):
        at = [r for r in mine if r["updates"] == u]
        out.append((u, float(at[0]["train_s"]), float(np.mean([r["avg_jct"] for r in at]))))
    return out


def report(
    rows: list[dict[str, Any]], baselines: dict[str, float], args: argparse.Namespace
) -> str:
    names = [r.name for r in runs() if r.name.startswith("fed")]
    curves = [[name, *(f"{j:.2f} ({s:.0f}s)" for _, s, j in _points(rows, name))] for name in names]
    lines = [
        "Validation avg JCT (slots; mean over the 4 clusters' validation workloads, seeds "
        f"{list(args.val_seeds)}) after each update count; wall = training seconds to that "
        "point (validation excluded).",
        "",
        markdown_table(curves, ["run", *(f"u={u}" for u, _, _ in _points(rows, names[0]))]),
    ]
    lines += ["", "Baselines on the same workloads (mean over the 4 clusters): "]
    lines.append(
        ", ".join(f"{k} {v:.2f}" for k, v in baselines.items() if not k.startswith("drf_c"))
    )
    lines += [
        "",
        "Per cluster, final validation avg JCT: the 4-cluster global policy vs a policy trained "
        "on that cluster alone (same updates; cluster 0 alone = fed1).",
        "",
    ]
    last_update = max(r["updates"] for r in rows)
    final = {(r["run"], r["cluster"]): r["avg_jct"] for r in rows if r["updates"] == last_update}
    table = []
    for i, entry in enumerate(CLUSTERS):
        alone = final[("fed1" if i == 0 else f"alone{i}", i)]
        glob = final[("fed4", i)]
        drf = baselines.get(f"drf_c{i}", float("nan"))
        table.append([
            f"{i}: {cluster_label(entry.env)}", f"{glob:.2f}", f"{alone:.2f}",
            f"{glob / alone:.3f}", f"{drf:.2f}",
        ])  # fmt: skip
    lines.append(
        markdown_table(table, ["cluster", "fed4 (global)", "alone", "fed4 / alone", "DRF"])
    )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--updates", type=int, default=60)
    p.add_argument("--n-steps", type=int, default=128)
    p.add_argument("--eval-every", type=int, default=15)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--val-seeds", type=int, nargs="+", default=[100, 101, 102])
    p.add_argument("--mode", choices=("local", "ray"), default="local")
    p.add_argument("--out", type=Path, default=Path("runs/federated_scaling"))
    args = p.parse_args()
    th.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    started = init_ray(None) if args.mode == "ray" else False
    baselines: dict[str, float] = {}
    for name in ("drf", "srtf"):
        per = [
            aggregate(
                evaluate_allocator(functools.partial(make_allocator, name), c, args.val_seeds)
            )["avg_jct"]
            for c in VAL_CONFIGS
        ]
        baselines[name] = float(np.mean(per))
        if name == "drf":
            baselines.update({f"drf_c{i}": v for i, v in enumerate(per)})
    rows: list[dict[str, Any]] = []
    for run in runs():
        rows += train_one(run, args, args.out)
    if started:
        import ray

        ray.shutdown()
    with (args.out / "curves.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    text = report(rows, baselines, args)
    (args.out / "results.md").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
