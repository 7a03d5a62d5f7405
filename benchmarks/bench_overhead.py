"""What dlsched-bench costs beyond the simulations it runs.

Usage::

    python benchmarks/bench_overhead.py runs/bench/v1-<version>/<code> [--cpu-s SECONDS]

Reads every cell of a finished board and prints the seconds its runs spent simulating (each
run's ``wall_s`` in the cell's ``run.json``: the simulation, or the episode through the env
with its policy), the cells' own ``evaluate`` time (``wall_s_total``: the runs plus the
pipeline's workload building, per-job CSVs and tables), and, with ``--cpu-s`` (the whole
command's user + system CPU, e.g. from ``/usr/bin/time -v``), the share of that CPU that is
not in any run: the benchmark's overhead (process start-up, imports, checking each scheduler
alone, the board) plus the pipeline's own.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("root", type=Path, help="a board's directory: runs/bench/<suite>-<v>/<code>")
    p.add_argument("--cpu-s", type=float, default=None, help="the command's total CPU seconds")
    args = p.parse_args()
    runs = cells = 0
    sim_s = cell_s = 0.0
    for record in sorted(args.root.glob("*/*/run.json")):
        r = json.loads(record.read_text(encoding="utf-8"))
        cells += 1
        cell_s += float(r.get("wall_s_total") or 0.0)
        for run in r.get("runs", []):
            runs += 1
            sim_s += float(run.get("wall_s") or 0.0)
    print(f"{cells} cells, {runs} runs: simulations {sim_s:.1f} s, cells' evaluate {cell_s:.1f} s")
    if args.cpu_s:
        print(
            f"command CPU {args.cpu_s:.1f} s: outside the simulations "
            f"{args.cpu_s - sim_s:.1f} s ({100 * (1 - sim_s / args.cpu_s):.1f}%), outside the "
            f"cells' evaluate {args.cpu_s - cell_s:.1f} s ({100 * (1 - cell_s / args.cpu_s):.1f}%)"
        )


if __name__ == "__main__":
    main()
