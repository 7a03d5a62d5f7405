"""DL²'s heuristics under three speed models: measured, analytical, contention (issue 3).

    python experiments/dl2_speed_models.py --seeds 0-1 --min-steps 5 --procs 2
    python experiments/dl2_speed_models.py --bias            # time-compression bias check

DL²'s small setting (48 nodes, 60 jobs, 1200-s slots), dlsched's default (fixed) allocators.
``measured`` and ``analytical`` are :class:`~envs.sim.elastic.simulator.SlotSimulator` with the
table / DL²'s analytical model; ``contention`` is
:class:`~envs.sim.elastic.engine_slots.ContentionSlotSimulator`: every slot simulated in the
contention engine with the allocator's own task placement (fair-share NICs, G = 8, time
compression ``--min-steps``).  Allocators plan with the speed model of their world (for
``contention``: its uncontended speed).  Prints a Markdown table; JCT in slots.

``--ada`` runs the Ada-SRSF workload (shipped seeds) both ways: the event-driven core
(``lwf1_<comm>``: all-reduce jobs, Table III models, GPU time-sharing, continuous time) and the
contention slot loop (FixedDemand with each job's requested GPUs in SRSF order, one PS per
worker, LWF-1 core placement, the same comm policy, ``--slot-s`` slots); the trace's jobs map
to DL² types (``envs.sim.elastic.trace``) with their work set so that a job alone at its
requested allocation trains for its traced duration under the contention model.

``--bias`` runs a 12-job, 8-node workload with every iteration simulated (exact) and with
time compression, and prints avg JCT / makespan for each.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from envs.sim.elastic.allocators import DRF, FIFO, SRTF, Allocator, Optimus, Tetris
from envs.sim.elastic.engine_slots import ContentionConfig, ContentionSlotSimulator
from envs.sim.elastic.simulator import ElasticResult, SlotSimulator
from envs.sim.elastic.spec import ElasticCluster
from envs.sim.elastic.speed import AnalyticalSpeed, MeasuredSpeed
from envs.sim.elastic.workload import DL2_SMALL, DL2Setting

ALLOCATORS: dict[str, Callable[[], Allocator]] = {
    "drf": DRF,
    "fifo": FIFO,
    "srtf": SRTF,
    "tetris": Tetris,
    "optimus": Optimus,
}
SPEEDS = ("measured", "analytical", "contention")


def _seeds(text: str) -> list[int]:
    if "-" in text:
        lo, hi = text.split("-")
        return list(range(int(lo), int(hi) + 1))
    return [int(x) for x in text.split(",")]


def run_one(
    setting: DL2Setting, allocator: str, speed: str, seed: int, min_steps: int | None
) -> tuple[str, str, int, dict[str, float], float]:
    """One run; (allocator, speed, seed, summary, CPU seconds)."""
    jobs = setting.workload(seed)
    cluster = setting.cluster()
    cpu = time.process_time()
    result: ElasticResult
    if speed == "contention":
        cfg = ContentionConfig(min_steps_per_slot=min_steps)
        result = ContentionSlotSimulator(cluster, jobs, ALLOCATORS[allocator](), cfg).run()
    else:
        model = MeasuredSpeed() if speed == "measured" else AnalyticalSpeed()
        result = SlotSimulator(cluster, jobs, ALLOCATORS[allocator](), model).run()
    s = result.summary()
    return allocator, speed, seed, s, time.process_time() - cpu


def table(setting: DL2Setting, seeds: list[int], min_steps: int | None, procs: int) -> None:
    tasks = [(a, sp, s) for a in ALLOCATORS for sp in SPEEDS for s in seeds]
    with ProcessPoolExecutor(max_workers=procs) as pool:
        futures = [pool.submit(run_one, setting, a, sp, s, min_steps) for a, sp, s in tasks]
        results = [f.result() for f in futures]
    by: dict[tuple[str, str], list[tuple[dict[str, float], float]]] = {}
    for a, sp, _, summary, cpu in results:
        by.setdefault((a, sp), []).append((summary, cpu))
    print(f"seeds {seeds}, contention min_steps_per_slot={min_steps}")
    print(
        "| allocator | speed model | avg JCT (slots) | sd over seeds | makespan (slots) "
        "| CPU util | GPU util | CPU-s per run |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for a in ALLOCATORS:
        for sp in SPEEDS:
            rows = by[(a, sp)]
            jct = np.array([r["avg_jct_slots"] for r, _ in rows])
            mk = np.mean([r["makespan_slots"] for r, _ in rows])
            cu = np.mean([r["mean_cpu_util"] for r, _ in rows])
            gu = np.mean([r["mean_gpu_util"] for r, _ in rows])
            cpu_s = np.mean([c for _, c in rows])
            print(
                f"| {a} | {sp} | {jct.mean():.1f} | {jct.std():.1f} | {mk:.1f} | "
                f"{cu:.1%} | {gu:.1%} | {cpu_s:.1f} |"
            )


def bias() -> None:
    """Exact vs time-compressed contention runs on a small workload."""
    setting = DL2Setting(
        num_nodes=8,
        num_jobs=12,
        max_arrivals_per_slot=3,
        J=12,
        max_epochs=2000,
        max_workers=8,
        max_ps=8,
    )
    cluster = ElasticCluster(num_nodes=8, slot_s=1200.0)
    print("| allocator | seed | min_steps_per_slot | avg JCT (slots) | makespan | engine events |")
    print("|---|---|---|---|---|---|")
    for name in ("drf", "optimus"):
        for seed in (0, 1):
            jobs = setting.workload(seed)
            for m in (None, 50, 20, 5):
                sim = ContentionSlotSimulator(
                    cluster, jobs, ALLOCATORS[name](), ContentionConfig(min_steps_per_slot=m)
                )
                r = sim.run()
                print(
                    f"| {name} | {seed} | {m or 'exact'} | {r.avg_jct_slots:.3f} | "
                    f"{r.makespan_slots:.3f} | {sim.stats.events:,} |"
                )


def ada(seeds: list[int], slot_s: float) -> None:
    """Ada-SRSF stacks: event-driven core vs the contention slot loop (avg JCT, seconds)."""
    from envs.sim.elastic.allocators import FixedDemand
    from envs.sim.elastic.engine_slots import ContentionSpeed
    from envs.sim.elastic.trace import elastic_jobs_from_workload
    from envs.sim.engine import Simulator
    from envs.sim.spec import ClusterSpec
    from envs.sim.stacks import make_stack
    from envs.sim.workload import builtin_ada_srsf

    print(f"slot_s = {slot_s} s; 16 servers x 4 GPUs; avg JCT / makespan in seconds")
    print("| seed | comm | core avg JCT | core makespan | slot avg JCT | slot makespan |")
    print("|---|---|---|---|---|---|")
    for seed in seeds:
        wl = builtin_ada_srsf(seed)
        for comm in ("adasrsf", "srsf1", "fs"):
            core = Simulator(ClusterSpec(), wl, make_stack(f"lwf1_{comm}")).run().summary()
            cfg = ContentionConfig(comm=comm, min_steps_per_slot=None)
            jobs = elastic_jobs_from_workload(wl, slot_s=slot_s, speed=ContentionSpeed(cfg))
            cluster = ElasticCluster(num_nodes=16, cpu_slots=16, gpu_slots=16, slot_s=slot_s)
            sim = ContentionSlotSimulator(
                cluster, jobs, FixedDemand(order="srsf"), cfg, placer="lwf1"
            )
            r = sim.run()
            # the slot world's JCT counts from the slot of arrival: add back the offset of
            # each job's submit time inside its arrival slot
            offset = np.mean([j.submit_ms / 1000.0 % slot_s for j in wl.jobs])
            jct, mk = core["avg_jct_ms"] / 1000, core["makespan_ms"] / 1000
            print(
                f"| {seed} | {comm} | {jct:.2f} | {mk:.2f} "
                f"| {r.avg_jct_s - offset:.2f} | {r.makespan_slots * slot_s:.2f} |"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seeds", type=_seeds, default=[0, 1])
    ap.add_argument("--min-steps", type=int, default=5, help="0 = exact (every iteration)")
    ap.add_argument("--procs", type=int, default=2)
    ap.add_argument("--bias", action="store_true")
    ap.add_argument("--ada", action="store_true")
    ap.add_argument("--slot-s", type=float, default=1.0)
    args = ap.parse_args()
    if args.ada:
        ada(args.seeds, args.slot_s)
        return
    if args.bias:
        bias()
        return
    table(DL2_SMALL, args.seeds, args.min_steps or None, args.procs)


if __name__ == "__main__":
    main()
