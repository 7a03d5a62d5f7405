"""Lower bounds on avg JCT against DL²'s heuristics: how low can any scheduler go?

    python experiments/dl2_bounds.py --setting small --seeds 200-202

Per workload seed: the solo bound (every job alone at its fastest allocation from its
arrival), the window bound (the same behind the env's first-come-first-served window of J
jobs; ``envs/sim/elastic/bounds.py``), and DRF / Optimus directly on the simulator and
through the env.  The last lines put the issue-6 bars (40% below DRF, 17.5% below Optimus,
both through the env) next to the window bound: a bar below the bound cannot be met by any
policy of the env.  JCT in slots.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from _common import markdown_table, seed_list

from envs.gym.factory import SETTINGS, EnvConfig, make_env
from envs.gym.heuristic import HeuristicDriver
from envs.sim.elastic.allocators import DRF, Optimus
from envs.sim.elastic.bounds import mean_jct, solo_bounds, window_bounds
from envs.sim.elastic.simulator import SlotSimulator
from envs.sim.elastic.speed import MeasuredSpeed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--setting", choices=sorted(SETTINGS), default="small")
    ap.add_argument("--seeds", type=seed_list, default=[200, 201, 202])
    args = ap.parse_args()
    setting = SETTINGS[args.setting]
    speed = MeasuredSpeed(max_ps=setting.max_ps, max_workers=setting.max_workers)
    cl = setting.cluster()
    cols = ["solo bound", "window bound", "drf direct", "optimus direct", "drf env", "optimus env"]
    print(f"## Lower bounds, {args.setting} setting (J = {setting.J}), seeds {args.seeds}\n")
    rows: list[list[float]] = []
    t0 = time.process_time()
    for seed in args.seeds:
        jobs = setting.workload(seed)
        row = [
            mean_jct(solo_bounds(jobs, cl, speed)),
            mean_jct(window_bounds(jobs, cl, speed, setting.J)),
        ]
        for make in (DRF, Optimus):
            row.append(SlotSimulator(cl, jobs, make(), speed).run().avg_jct_slots)
        for make in (DRF, Optimus):
            env = make_env(EnvConfig(setting=args.setting), seed=seed)
            row.append(HeuristicDriver(make(), env).run_episode(seed=seed)["avg_jct_slots"])
        rows.append(row)
        print(f"seed {seed} done", file=sys.stderr, flush=True)
    mean = np.mean(np.array(rows), axis=0)
    table = [[str(s), *(f"{v:.1f}" for v in row)] for s, row in zip(args.seeds, rows, strict=True)]
    table.append(["mean", *(f"{v:.1f}" for v in mean)])
    print(markdown_table(table, ["seed", *cols]))
    _, win, _, _, drf_env, opt_env = (float(v) for v in mean)
    print(f"\n({time.process_time() - t0:.1f} CPU s)\n")
    for label, bar in (
        ("40% below DRF (env)", 0.60 * drf_env),
        ("17.5% below Optimus (env)", 0.825 * opt_env),
    ):
        verdict = (
            "below the window bound: no env policy can reach it" if bar < win else "above the bound"
        )
        print(f"- bar {label}: {bar:.1f} slots; window bound {win:.1f}: {verdict}")
    print(
        f"- best possible through the env vs DRF: at most {100 * (1 - win / drf_env):.1f}% below; "
        f"vs Optimus: at most {100 * (1 - win / opt_env):.1f}% below"
    )


if __name__ == "__main__":
    main()
