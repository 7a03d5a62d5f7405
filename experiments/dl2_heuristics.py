"""DL²'s heuristic baselines in its measured-speed world (DL² §6 setting, no network model).

    python experiments/dl2_heuristics.py --setting small --seeds 0-9
    python experiments/dl2_heuristics.py --setting large --seeds 0-2
    python experiments/dl2_heuristics.py --setting small --seeds 0-4 --speed analytical

Two variants per allocator:
- ``fixed`` (dlsched defaults): measured zeros repaired, speed clamped beyond the grid, a
  failed placement skips that job (the slot goes on), least-loaded node among those that fit,
  deterministic tie-breaks, Tetris's remaining-work term with the Tetris paper's sign;
- ``reference``: every switch set to what DL²'s code does (zeros kept, linear extrapolation,
  the slot ends at the first failed placement, only the least-loaded node tried, Tetris's sign
  as in the code).
JCT in slots of 1200 s. Also prints allocation decisions per CPU-second (the reference manages
about 8.7k per CPU-second in its small setting, dl2.md §10).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import numpy as np
from _common import DL2_REFERENCE_JCT, markdown_table, seed_list

from envs.sim.elastic.allocators import ALLOCATORS as REGISTRY
from envs.sim.elastic.allocators import DL2_HEURISTICS, Allocator
from envs.sim.elastic.simulator import SlotRecord, SlotSimulator
from envs.sim.elastic.spec import SpeedModel
from envs.sim.elastic.speed import AnalyticalSpeed, MeasuredSpeed
from envs.sim.elastic.workload import DL2_LARGE, DL2_SMALL

#: allocator -> (dlsched default, the reference code's behaviour)
ALLOCATORS: dict[str, tuple[Callable[[], Allocator], Callable[[], Allocator]]] = {
    name: (REGISTRY[name], REGISTRY[name].reference) for name in DL2_HEURISTICS
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--setting", choices=["small", "large"], default="small")
    ap.add_argument("--seeds", type=seed_list, default=list(range(5)))
    ap.add_argument("--speed", choices=["measured", "analytical"], default="measured")
    args = ap.parse_args()
    setting = DL2_SMALL if args.setting == "small" else DL2_LARGE
    speeds: dict[str, SpeedModel] = {
        "fixed": MeasuredSpeed(max_ps=setting.max_ps, max_workers=setting.max_workers),
        "reference": MeasuredSpeed(
            max_ps=setting.max_ps,
            max_workers=setting.max_workers,
            keep_measured_zeros=True,
            extrapolate=True,
        ),
    }
    if args.speed == "analytical":
        speeds = {"fixed": AnalyticalSpeed(), "reference": AnalyticalSpeed()}
    head = f"## DL² heuristics, {args.speed} speed, {args.setting} setting {setting}"
    print(f"{head}, seeds {args.seeds}\n")
    headers = ["allocator", "variant", "avg JCT (slots)", "sd over seeds", "makespan", "CPU util",
               "GPU util", "decisions/CPU-s", "DL² reference code"]  # fmt: skip
    table = []
    for name, (make_fixed, make_reference) in ALLOCATORS.items():
        for variant, speed in speeds.items():
            jct, mk, cpu_u, gpu_u = [], [], [], []
            decisions = 0
            cpu = 0.0
            for seed in args.seeds:
                jobs = setting.workload(seed)
                alloc = make_reference() if variant == "reference" else make_fixed()
                counted = [0]

                def count(rec: SlotRecord, counted: list[int] = counted) -> None:
                    counted[0] += sum(w + p for w, p in rec.allocation.values())

                sim = SlotSimulator(
                    setting.cluster(),
                    jobs,
                    alloc,
                    speed,
                    on_slot=count,
                    strict_reference_placement=variant == "reference",
                )
                t0 = time.process_time()
                res = sim.run()
                cpu += time.process_time() - t0
                decisions += counted[0]
                s = res.summary()
                jct.append(s["avg_jct_slots"])
                mk.append(s["makespan_slots"])
                cpu_u.append(s["mean_cpu_util"])
                gpu_u.append(s["mean_gpu_util"])
            ref = DL2_REFERENCE_JCT[args.setting].get(name, float("nan"))
            table.append([
                name, variant, f"{np.mean(jct):.1f}", f"{np.std(jct):.1f}", f"{np.mean(mk):.1f}",
                f"{100 * np.mean(cpu_u):.1f}%", f"{100 * np.mean(gpu_u):.1f}%",
                f"{decisions / cpu:,.0f}", f"{ref:.1f}",
            ])  # fmt: skip
            print(f"{name} {variant} done", file=sys.stderr, flush=True)
    print(markdown_table(table, headers))


if __name__ == "__main__":
    main()
