"""Speed of the cojob network simulation: wall seconds per policy on Grouper's full trace.

    python benchmarks/bench_grouper.py               # full 40-cojob trace, best of 3
    python benchmarks/bench_grouper.py --repeat 1 --scale 1/20

The target is <= 10 s per policy on the full trace (the upstream slot simulator needs an
estimated 45 CPU-minutes or more per policy; see the shared Grouper note §2.8). Times exclude
the alone runs used for stage slowdown. Prints a Markdown table; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time

from tabulate import tabulate

from envs.sim.grouper import POLICIES, GrouperConfig, builtin_trace, scale_trace, simulate_cojobs

SCALES = {"1/20": (20, 20), "1/10": (40, 10), "full": (40, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scale", default="full", choices=list(SCALES))
    ap.add_argument("--repeat", type=int, default=3, help="best of N")
    ap.add_argument("--queues", type=int, default=None)
    args = ap.parse_args()
    cojobs, divisor = SCALES[args.scale]
    w = scale_trace(builtin_trace(), cojobs=cojobs, divisor=divisor)
    cfg = GrouperConfig(num_queues=args.queues, slowdown=False)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n## Grouper trace, {args.scale} scale ({len(w.jobs)} jobs), best of {args.repeat}")
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs, load average {load:.1f}\n")
    rows = []
    for name in POLICIES:
        best, cpu, res = float("inf"), float("inf"), None
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            res = simulate_cojobs(w, name, cfg)
            best = min(best, time.perf_counter() - t0)
            cpu = min(cpu, time.process_time() - c0)
        assert res is not None
        rows.append([
            name, f"{best:.2f}", f"{cpu:.2f}", str(res.events), f"{res.events / best:,.0f}",
            f"{res.avg_sct_ms() / 1e3:.1f}",
        ])  # fmt: skip
        print(f"{name}: {best:.2f} s", file=sys.stderr, flush=True)
    headers = ["policy", "wall s", "CPU s", "events", "events/s", "avg SCT s"]
    print(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True))


if __name__ == "__main__":
    main()
