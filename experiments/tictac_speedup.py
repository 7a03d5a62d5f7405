"""TicTac in the simulator: iteration-time speed-up of TIC/TAC over random transfer order, and
the effect on cluster-level average JCT when PS jobs use TicTac's iteration model.

    python experiments/tictac_speedup.py                      # both parts, 10 GbE (b = 0.856)
    python experiments/tictac_speedup.py --part scaling --b 0.214   # a 4x faster network
    python experiments/tictac_speedup.py --part cluster --seeds 0 1 2

**Scaling** (the shape of the paper's Fig. 9 and 10): one PS job alone on a cluster of
one-GPU servers, ``W`` workers on ``W`` servers, ``P`` parameter servers placed with the
workers (PS ``k`` on worker ``k mod W``'s server), simulated by the contention engine for
``--iters`` iterations under ``SimConfig.model.ps_iteration``.  Speed-up of order X =
``JCT(random) / JCT(X) - 1`` (throughput gain, as the paper reports it).  Fig. 9 scales
workers with PS:worker = 1:4; Fig. 10 scales PSs with 8 workers.  The random baseline draws
a fresh order per worker and iteration (its slowest worker sets the pace).

**Cluster**: the Ada-SRSF 160-job workload (``builtin_ada_srsf(seed)``) with every multi-GPU
job turned into a PS job with ``max(1, W // 4)`` parameter servers, on the default 16x4-GPU
cluster, under one stack; average JCT (the paper's seconds = sim ms / 10) per iteration model.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from _common import markdown_table

from envs.sim import (
    ClusterSpec,
    CommArch,
    JobSpec,
    ModelOptions,
    NetworkSpec,
    SimConfig,
    Workload,
    simulate,
)
from envs.sim.models import PAPER_MODELS
from envs.sim.workload import builtin_ada_srsf

MODES = ("sequential", "random", "tic", "tac")
CNNS = ("vgg16", "resnet50", "inception-v3", "lstm")


def iteration_ms(
    model: str, workers: int, ps: int, mode: str, b: float, iters: int, seed: int
) -> float:
    """Mean iteration time (ms) of one PS job alone on ``workers`` one-GPU servers."""
    cluster = ClusterSpec(workers, 1, network=NetworkSpec(0.0, b, 0.235))
    job = JobSpec(0, 0.0, PAPER_MODELS[model], iters, workers, CommArch.PS, num_ps=ps)
    cfg = SimConfig(model=ModelOptions(seed=seed, ps_iteration=mode))
    return simulate(cluster, Workload((job,)), "ff_fs", cfg).records[0].jct_ms / iters


def _row(model: str, w: int, p: int, b: float, iters: int, seed: int) -> list[str]:
    t = {m: iteration_ms(model, w, p, m, b, iters, seed) for m in MODES}
    gain = {m: 100 * (t["random"] / t[m] - 1) for m in ("tic", "tac")}
    return [
        model, str(w), str(p), f"{t['sequential']:.1f}", f"{t['random']:.1f}", f"{t['tic']:.1f}",
        f"{t['tac']:.1f}", f"{gain['tic']:+.1f}%", f"{gain['tac']:+.1f}%",
    ]  # fmt: skip


#: the columns of :func:`_row`
ROW_HEADERS = ["model", "workers", "PSs", "sequential ms", "random ms", "TIC ms", "TAC ms",
               "TIC vs random", "TAC vs random"]  # fmt: skip


def scaling(b: float, iters: int, seed: int, models: Sequence[str]) -> None:
    print(
        f"\n### Workers scale, PS:worker = 1:4 (Fig. 9 shape); b = {b} ms/MB, {iters} iterations\n"
    )
    rows = [
        _row(model, w, max(1, w // 4), b, iters, seed) for model in models for w in (2, 4, 8, 16)
    ]
    print(markdown_table(rows, ROW_HEADERS))
    print(f"\n### PSs scale, 8 workers (Fig. 10 shape); b = {b} ms/MB\n")
    rows = [_row(model, 8, p, b, iters, seed) for model in models for p in (1, 2, 4, 8)]
    print(markdown_table(rows, ROW_HEADERS))


def as_ps(w: Workload) -> Workload:
    """Every multi-GPU job becomes a PS job with one PS per four workers (at least one)."""
    jobs = tuple(
        replace(j, comm=CommArch.PS, num_ps=max(1, j.num_gpus // 4)) if j.num_gpus > 1 else j
        for j in w.jobs
    )
    return replace(w, jobs=jobs, name=f"{w.name}-ps")


def cluster(seeds: Sequence[int], stack: str) -> None:
    print(f"\n### Ada-SRSF 160 jobs, multi-GPU jobs as PS jobs, stack {stack}: avg JCT (s)\n")
    rows = []
    table = []
    for seed in seeds:
        w = as_ps(builtin_ada_srsf(seed))
        avg = {}
        for m in MODES:
            r = simulate(
                ClusterSpec(), w, stack, SimConfig(model=ModelOptions(seed=seed, ps_iteration=m))
            )
            avg[m] = float(np.mean(r.jcts_ms())) / 10.0
        rows.append(avg)
        table.append(_cluster_row(str(seed), avg))
    if len(rows) > 1:
        mean = {m: float(np.mean([r[m] for r in rows])) for m in MODES}
        table.append(_cluster_row("mean", mean))
    headers = ["seed", "sequential", "random", "TIC", "TAC", "TIC vs rand", "TAC vs rand",
               "TAC vs seq"]  # fmt: skip
    print(markdown_table(table, headers))


def _cluster_row(label: str, a: dict[str, float]) -> list[str]:
    def rel(x: str, y: str) -> str:
        return f"{100 * (a[x] / a[y] - 1):+.1f}%"

    return [
        label, f"{a['sequential']:.1f}", f"{a['random']:.1f}", f"{a['tic']:.1f}",
        f"{a['tac']:.1f}", rel("tic", "random"), rel("tac", "random"), rel("tac", "sequential"),
    ]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("scaling", "cluster", "both"), default="both")
    ap.add_argument("--b", type=float, default=0.856, help="NIC cost, ms/MB (0.856 = 10 GbE)")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--models", nargs="*", default=list(CNNS))
    ap.add_argument("--seeds", type=int, nargs="*", default=[0, 1, 2])
    ap.add_argument("--stack", default="lwf1_adasrsf")
    args = ap.parse_args(argv)
    if args.part in ("scaling", "both"):
        scaling(args.b, args.iters, args.seed, args.models)
    if args.part in ("cluster", "both"):
        cluster(args.seeds, args.stack)


if __name__ == "__main__":
    main()
