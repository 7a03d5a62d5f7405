"""DL²'s heuristics under the measured, analytical and contention (model-derived) speed modes.

    python experiments/dl2_speed_models.py --setting small --seeds 0-2            # the table
    python experiments/dl2_speed_models.py --setting large --seeds 0-1
    python experiments/dl2_speed_models.py --ada --seeds 0-2    # Ada-SRSF workload, elastic
    python experiments/dl2_speed_models.py --bias               # compression / reuse checks

Why: it shows how much DL²'s heuristics depend on the speed model, from DL²'s measured table
to speeds derived from the contention engine.

**Table** (default): DL²'s small or large setting, dlsched's default (fixed) allocators DRF,
FIFO, SRTF, Tetris, Optimus, one Markdown row per (allocator, speed mode) over the seeds
(``--speeds`` picks the modes; details: :func:`table`).  **--ada**: the Ada-SRSF workload in
the elastic world (:func:`ada`).  **--bias**: a 12-job, 8-node workload with every iteration
simulated (exact) and with time compression / a measurement window: avg JCT / makespan and
engine events for each (:func:`bias`).  **--window-check SLOTS**: per-slot rate error of the
measurement window against the whole slot on the same slot states (DRF and Optimus, the first
SLOTS slots of ``--setting``; :func:`window_check`).
"""

from __future__ import annotations

import argparse
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from _common import DL2_REFERENCE_JCT, markdown_table, seed_list

from envs.sim.elastic.allocators import ALLOCATORS as REGISTRY
from envs.sim.elastic.allocators import DL2_HEURISTICS, Allocator, FixedDemand
from envs.sim.elastic.engine_slots import (
    ContentionConfig,
    ContentionSlotSimulator,
    ContentionSpeed,
)
from envs.sim.elastic.simulator import ElasticResult, SlotSimulator
from envs.sim.elastic.spec import ElasticCluster, ElasticJob
from envs.sim.elastic.speed import AnalyticalSpeed, MeasuredSpeed
from envs.sim.elastic.window_check import window_errors
from envs.sim.elastic.workload import DL2_LARGE, DL2_SMALL, DL2Setting
from envs.sim.errors import ConfigError

ALLOCATORS: dict[str, Callable[[], Allocator]] = {name: REGISTRY[name] for name in DL2_HEURISTICS}
SPEEDS = ("measured", "analytical", "contention")
SETTINGS = {"small": DL2_SMALL, "large": DL2_LARGE}


def run_one(
    setting: DL2Setting,
    allocator: str,
    speed: str,
    seed: int,
    min_steps: int | None,
    window: float | None = None,
    max_slots: int = 100_000,
) -> tuple[dict[str, Any], float, str]:
    """One run: (summary, CPU seconds, engine note)."""
    if allocator not in ALLOCATORS or speed not in SPEEDS:
        raise ConfigError(f"unknown allocator {allocator!r} or speed mode {speed!r}")
    jobs = setting.workload(seed)
    cluster = setting.cluster()
    cpu = time.process_time()
    result: ElasticResult
    note = ""
    if speed == "contention":
        cfg = ContentionConfig(min_steps_per_slot=min_steps, measure_fraction=window)
        sim = ContentionSlotSimulator(
            cluster, jobs, ALLOCATORS[allocator](), cfg, max_slots=max_slots
        )
        result = sim.run()
        note = f"{sim.stats.simulated}/{sim.stats.slots}"
    else:
        model = (
            MeasuredSpeed(max_ps=setting.max_ps, max_workers=setting.max_workers)
            if speed == "measured"
            else AnalyticalSpeed()
        )
        sim0 = SlotSimulator(cluster, jobs, ALLOCATORS[allocator](), model, max_slots=max_slots)
        result = sim0.run()
    return result.summary(), time.process_time() - cpu, note


def table(
    name: str,
    seeds: list[int],
    min_steps: int | None,
    speeds: Sequence[str],
    allocators: list[str],
    window: float | None = None,
    max_slots: int = 100_000,
) -> None:
    """The default table: DL²'s small or large setting, dlsched's default (fixed) allocators.

    DRF, FIFO, SRTF, Tetris, Optimus.  ``measured`` and ``analytical`` are
    :class:`~envs.sim.elastic.simulator.SlotSimulator` with DL²'s measured table (the
    ``fixed`` variant of ``experiments/dl2_heuristics.py``: zeros repaired, clamped to the
    setting's caps) or DL²'s analytical model; ``contention`` is
    :class:`~envs.sim.elastic.engine_slots.ContentionSlotSimulator`: every slot simulated in
    the contention engine with the allocator's own task placement (fair-share NICs, G = 8,
    time compression ``--min-steps``, exact reuse of repeated slot states).  Allocators plan
    with the speed model of their world (for ``contention``: its uncontended speed).  One
    Markdown row per (allocator, speed mode) over the seeds, the table printed when all are
    done (each run's figures as an HTML comment as soon as it ends); ``--speeds`` picks the
    modes.
    """
    setting = SETTINGS[name]
    print(
        f"## {name} setting {setting}, seeds {seeds}, contention min_steps_per_slot={min_steps}, "
        f"measure_fraction={window}"
    )
    headers = ["allocator", "speed mode", "avg JCT (slots)", "sd over seeds", "avg JCT (s)",
               "makespan (slots)", "CPU util", "GPU util", "CPU-s per run",
               "engine slots simulated/total", "DL² reference code (measured)"]  # fmt: skip
    table = []
    for a in allocators:
        for sp in speeds:
            rows = []
            for s in seeds:
                summary, cpu_s, note = run_one(setting, a, sp, s, min_steps, window, max_slots)
                rows.append((summary, cpu_s, note))
                print(
                    f"<!-- run {name} {a} {sp} seed {s}: avg JCT {summary['avg_jct_slots']:.2f} "
                    f"slots, makespan {summary['makespan_slots']:.2f}, CPU {cpu_s:.1f} s, "
                    f"engine {note or '-'} -->",
                    flush=True,
                )
            jct = np.array([r["avg_jct_slots"] for r, _, _ in rows])
            jct_s = np.mean([r["avg_jct_s"] for r, _, _ in rows])
            mk = np.mean([r["makespan_slots"] for r, _, _ in rows])
            cu = np.mean([r["mean_cpu_util"] for r, _, _ in rows])
            gu = np.mean([r["mean_gpu_util"] for r, _, _ in rows])
            cpu_s = float(np.mean([c for _, c, _ in rows]))
            notes = ", ".join(n for _, _, n in rows if n) or "-"
            ref = DL2_REFERENCE_JCT[name][a] if sp == "measured" else math.nan
            table.append([
                a, sp, f"{jct.mean():.1f}", f"{jct.std():.1f}", f"{jct_s:,.0f}", f"{mk:.1f}",
                f"{cu:.1%}", f"{gu:.1%}", f"{cpu_s:.1f}", notes,
                "" if math.isnan(ref) else f"{ref:.1f}",
            ])  # fmt: skip
    print("\n" + markdown_table(table, headers), flush=True)


def bias() -> None:
    """Exact (every iteration) vs time-compressed vs measurement-window contention runs (all
    with exact slot reuse, which the tests show bit-identical to simulating every slot)."""
    setting = DL2Setting(
        num_nodes=8,
        num_jobs=12,
        max_arrivals_per_slot=3,
        J=12,
        max_epochs=2000,
        max_workers=8,
        max_ps=8,
    )
    cluster = setting.cluster()
    headers = ["allocator", "seed", "min_steps_per_slot", "measure_fraction", "avg JCT (slots)",
               "makespan", "slots simulated/total", "engine events", "CPU-s"]  # fmt: skip
    table = []
    for name in ("drf", "optimus"):
        for seed in (0, 1):
            jobs = setting.workload(seed)
            for m, f in ((None, None), (50, None), (10, None), (5, None), (50, 0.3)):
                cfg = ContentionConfig(min_steps_per_slot=m, measure_fraction=f)
                sim = ContentionSlotSimulator(cluster, jobs, ALLOCATORS[name](), cfg)
                cpu = time.process_time()
                r = sim.run()
                table.append([
                    name, str(seed), str(m or "exact"), str(f or "-"), f"{r.avg_jct_slots:.4f}",
                    f"{r.makespan_slots:.4f}", f"{sim.stats.simulated}/{sim.stats.slots}",
                    f"{sim.stats.events:,}", f"{time.process_time() - cpu:.1f}",
                ])  # fmt: skip
    print(markdown_table(table, headers), flush=True)


def window_check(setting_name: str, seeds: list[int], slots: int, windows: list[float]) -> None:
    """Per-slot rate error of the measurement window against the whole slot (same state:
    :func:`envs.sim.elastic.window_check.window_errors`)."""
    setting = SETTINGS[setting_name]
    headers = ["allocator", "seed", "measure_fraction", "(slot, job) rates", "mean rel. error",
               "p99", "max", "CPU-s"]  # fmt: skip
    table = []
    for name in ("drf", "optimus"):
        for seed in seeds:
            for f in windows:
                cpu = time.process_time()
                e = window_errors(
                    setting.cluster(), setting.workload(seed), ALLOCATORS[name](), f, slots
                )
                table.append([
                    name, str(seed), str(f), f"{e.size:,}", f"{e.mean():.2e}",
                    f"{np.quantile(e, 0.99):.2e}", f"{e.max():.2e}",
                    f"{time.process_time() - cpu:.1f}",
                ])  # fmt: skip
    print(markdown_table(table, headers), flush=True)


def ada_jobs(
    seed: int, slot_s: float, cfg: ContentionConfig, time_unit: float
) -> tuple[ElasticJob, ...]:
    """The Ada-SRSF workload ``seed`` as elastic jobs (work: traced duration when alone);
    ``time_unit``: workload ms per elastic second."""
    from envs.sim.elastic.trace import elastic_jobs_from_workload
    from envs.sim.workload import builtin_ada_srsf

    wl = builtin_ada_srsf(seed)
    return elastic_jobs_from_workload(
        wl, slot_s=slot_s, speed=ContentionSpeed(cfg), time_unit=time_unit
    )


def ada(seeds: list[int], slot_s: float, min_steps: int | None, time_unit: float) -> None:
    """The Ada-SRSF workload in the elastic contention world (avg JCT / makespan, seconds).

    ``--ada``: the Ada-SRSF workload (shipped seeds, 160 jobs, 16 servers x 4 GPUs) in the
    elastic world, ``--slot-s`` slots (default 60 s), the trace's milliseconds read as seconds
    (``--time-unit 1``: durations 0.9-5.4 k s, arrivals over 12 k s; at the trace's own scale
    a DL² iteration, seconds long, would not fit a job).  The trace's jobs map to DL² types
    (``envs.sim.elastic.trace``) with their work set so that a job alone at its requested
    allocation (one PS per worker) trains for its traced duration under the speed mode's
    model.  Rows, contention mode (fair-share NICs): the five allocators with their own
    placement, and FixedDemand (each job's requested GPUs, SRSF order, one PS per worker: how
    a fixed-demand stack such as Ada-SRSF runs in the elastic world) with its own placement
    and with the core placers ``lwf1`` and ``ff``; measured mode: the same six allocators;
    last, the event-driven core stacks ``lwf1_fs`` / ``lwf1_adasrsf`` (all-reduce jobs, Table
    III models, continuous time, the trace's ms shown as s) for reference.  JCT in seconds
    from submission.
    """
    from envs.sim.engine import Simulator
    from envs.sim.spec import ClusterSpec
    from envs.sim.stacks import make_stack
    from envs.sim.workload import builtin_ada_srsf

    cfg = ContentionConfig(min_steps_per_slot=min_steps)
    # 16 servers x 4 GPUs: a DL² worker takes 4 GPU slots, so 16 GPU slots = 4 workers/node
    cluster = ElasticCluster(num_nodes=16, cpu_slots=16, gpu_slots=16, slot_s=slot_s)
    print(
        f"## Ada-SRSF workload, elastic world: slot_s = {slot_s} s, {time_unit} workload ms "
        f"per s, 16 nodes x 4 workers, fair-share NICs, min_steps_per_slot={min_steps}, "
        f"seeds {seeds}"
    )
    headers = ["stack", "speed mode", "placement", "avg JCT (s)", "sd over seeds", "makespan (s)",
               "CPU util", "GPU util", "CPU-s per run", "engine slots simulated/total"]  # fmt: skip
    table = []
    stacks: list[tuple[str, Callable[[], Allocator], str | None]] = [
        (name, make, None) for name, make in ALLOCATORS.items()
    ]
    fixed = "fixed-demand (srsf)"
    stacks += [(fixed, lambda: FixedDemand(order="srsf"), p) for p in (None, "lwf1", "ff")]
    # measured mode: the same trace with its work set by the measured table (a job alone at
    # its requested allocation trains for its traced duration there); no placement effect
    from envs.sim.elastic.trace import elastic_jobs_from_workload

    runs = [(label, make, placer, "contention") for label, make, placer in stacks]
    runs += [(label, make, None, "measured") for label, make, p in stacks if p is None]
    for label, make, placer, mode in runs:
        rows = []
        for seed in seeds:
            cpu = time.process_time()
            if mode == "contention":
                jobs = ada_jobs(seed, slot_s, cfg, time_unit)
                sim = ContentionSlotSimulator(cluster, jobs, make(), cfg, placer=placer)
                r = sim.run()
                note = f"{sim.stats.simulated}/{sim.stats.slots}"
            else:
                measured = MeasuredSpeed()
                jobs = elastic_jobs_from_workload(
                    builtin_ada_srsf(seed), slot_s=slot_s, speed=measured, time_unit=time_unit
                )
                r = SlotSimulator(cluster, jobs, make(), measured).run()
                note = "-"
            cpu = time.process_time() - cpu
            # JCT counts from the start of the arrival slot: take back each job's offset
            # inside it (its submit time minus the slot start) to compare with the core
            wl = builtin_ada_srsf(seed)
            offset = float(np.mean([j.submit_ms / time_unit % slot_s for j in wl.jobs]))
            rows.append((r, cpu, offset, note))
            print(
                f"<!-- run {label} {mode} {placer or 'slot'} seed {seed}: avg JCT "
                f"{r.avg_jct_s - offset:.3f} s, makespan {r.makespan_slots * slot_s:.3f} s, "
                f"CPU {cpu:.1f} s -->",
                flush=True,
            )
        jct = np.array([r.avg_jct_s - off for r, _, off, _ in rows])
        mk = np.mean([r.makespan_slots * slot_s for r, _, _, _ in rows])
        cu = np.mean([r.mean_cpu_util for r, _, _, _ in rows])
        gu = np.mean([r.mean_gpu_util for r, _, _, _ in rows])
        cpu_s = np.mean([c for _, c, _, _ in rows])
        notes = ", ".join(n for _, _, _, n in rows)
        table.append([
            label, mode, placer or "allocator", f"{jct.mean():.2f}", f"{jct.std():.2f}",
            f"{mk:.2f}", f"{cu:.1%}", f"{gu:.1%}", f"{cpu_s:.1f}", notes,
        ])  # fmt: skip
    for stack in ("lwf1_fs", "lwf1_adasrsf"):
        res = [
            Simulator(ClusterSpec(), builtin_ada_srsf(s), make_stack(stack)).run().summary()
            for s in seeds
        ]
        jcts = np.array([x["avg_jct_ms"] / time_unit for x in res])
        mks = np.mean([x["makespan_ms"] / time_unit for x in res])
        table.append([
            f"core `{stack}` (all-reduce, continuous time)", "engine", "lwf1",
            f"{jcts.mean():.2f}", f"{jcts.std():.2f}", f"{mks:.2f}", "", "", "", "",
        ])  # fmt: skip
    print("\n" + markdown_table(table, headers), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--setting", choices=sorted(SETTINGS), default="small")
    ap.add_argument("--seeds", type=seed_list, default=[0, 1, 2])
    ap.add_argument("--min-steps", type=int, default=50, help="0 = exact (every iteration)")
    ap.add_argument("--speeds", default="measured,contention", help="comma list of " + str(SPEEDS))
    ap.add_argument("--allocators", default=",".join(ALLOCATORS))
    ap.add_argument(
        "--window", type=float, default=None, help="measure_fraction (default: whole slot)"
    )
    ap.add_argument("--max-slots", type=int, default=1_000_000)
    ap.add_argument("--bias", action="store_true")
    ap.add_argument(
        "--window-check",
        type=int,
        default=0,
        metavar="SLOTS",
        help="per-slot rate error of --window fractions 0.1,0.2,0.3 over the first SLOTS slots",
    )
    ap.add_argument("--ada", action="store_true")
    ap.add_argument("--slot-s", type=float, default=60.0, help="--ada slot length, s")
    ap.add_argument(
        "--time-unit",
        type=float,
        default=1.0,
        help="--ada: workload ms per elastic second (1 = the trace's ms taken as seconds)",
    )
    args = ap.parse_args()
    if args.min_steps < 0:
        ap.error("--min-steps must be >= 0 (0 = exact)")
    speeds = [s for s in args.speeds.split(",") if s]
    allocators = [a for a in args.allocators.split(",") if a]
    unknown = [s for s in speeds if s not in SPEEDS] + [
        a for a in allocators if a not in ALLOCATORS
    ]
    for bad in unknown:
        ap.error(f"unknown speed mode or allocator {bad!r}")
    min_steps = args.min_steps or None
    if args.ada:
        ada(args.seeds, args.slot_s, min_steps, args.time_unit)
    elif args.bias:
        bias()
    elif args.window_check:
        window_check(args.setting, args.seeds, args.window_check, [0.1, 0.2, 0.3])
    else:
        table(args.setting, args.seeds, min_steps, speeds, allocators, args.window, args.max_slots)


if __name__ == "__main__":
    main()
