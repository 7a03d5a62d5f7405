"""What dlsched-bench costs beyond the simulations it runs, in CPU seconds.

Usage::

    python benchmarks/bench_overhead.py                     # run the subset, then analyse it
    python benchmarks/bench_overhead.py --only NAME ...     # another subset of bench/v1
    python benchmarks/bench_overhead.py --profile out.prof  # the same run under cProfile
    python benchmarks/bench_overhead.py --board runs/bench/v1-<version>/<code> [--cpu-s S]

By default it runs ``python -m evaluation.bench --workers 1 --no-plot`` on :data:`SUBSET`
(both worlds, every default scheduler, the released policies where they act) into a fresh
temporary directory, as a child process, and prints

- the command's total CPU: user + system of the child and of its own children (git), from
  ``resource.getrusage(RUSAGE_CHILDREN)`` around it;
- the CPU inside the simulations: each run's ``cpu_s`` in its cell's ``run.json`` (CPU time of
  the simulation, or of the episode through the env with its policy);
- the overhead, ``1 - simulations / total``, split by where it went: the command's
  ``cpu.json`` (interpreter start and imports, each cell's plan, its workload building, the
  pipeline's writing of its run directory, the board; ``other`` is the rest).

``--board`` analyses a finished board instead: its ``cpu.json`` if it has one (a board of
``python -m evaluation.bench`` of this code), else the runs' ``cpu_s`` (or ``wall_s`` for a
board made before runs recorded their CPU) against ``--cpu-s`` (the command's user + system
CPU, e.g. from ``/usr/bin/time``).  CPU, not wall time: on a shared machine wall time is not
a measure of the work.  With ``--profile`` the figures include cProfile's own cost (several
times the simulations' Python): use it to see where the overhead goes, not how big it is.
"""

from __future__ import annotations

import argparse
import json
import math
import pstats
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

#: A subset of bench/v1 covering both worlds, a DL² setting, a Philly window in each world
#: and the Tiresias trace: 68 cells, 170 runs, every default scheduler and the released
#: policies where they act.
SUBSET = (
    "dl2-medium-normal",
    "tiresias-60",
    "philly-e13805-load1-x1-elastic",
    "philly-e13805-load1-x1-contention",
)
#: ``cpu.json``'s parts, in the order printed (``evaluation/bench/run.py``'s ``cpu_record``).
PARTS = {
    "start": "interpreter start-up and imports",
    "plan": "each cell's config and checks (compose, make_plan)",
    "workloads": "building the workloads (traces read, generators drawn)",
    "write": "the pipeline's runs outside the simulation and its run directories",
    "board": "the leaderboard",
    "other": "the rest (schedulers listed, n/a cells checked, cached cells read)",
}


def children_cpu() -> float:
    """User + system CPU seconds of this process's finished children."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_bench(out: Path, only: list[str], profile: Path | None) -> float:
    """Run the benchmark command on ``only`` into ``out``; its total CPU seconds."""
    cmd = [sys.executable]
    if profile is not None:
        cmd += ["-m", "cProfile", "-o", str(profile)]
    cmd += ["-m", "evaluation.bench", "--workers", "1", "--no-plot", "--out", str(out)]
    cmd += ["--only", *only]
    print("$", " ".join(cmd), flush=True)
    c0 = children_cpu()
    proc = subprocess.run(cmd, cwd=Path(__file__).resolve().parents[1], capture_output=True)
    total = children_cpu() - c0
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr.decode(errors="replace")[-4000:])
        raise SystemExit(f"the benchmark command failed (exit {proc.returncode})")
    return total


def simulations(root: Path) -> tuple[int, int, float, str]:
    """Cells, runs and the runs' CPU seconds in a board's cells, and what was summed
    (``cpu_s``, or ``wall_s`` where a run has no ``cpu_s``)."""
    cells = runs = 0
    total = 0.0
    kinds: set[str] = set()
    for record in sorted(root.glob("*/*/run.json")):
        r = json.loads(record.read_text(encoding="utf-8"))
        cells += 1
        for run in r.get("runs", []):
            runs += 1
            key = "cpu_s" if run.get("cpu_s") is not None else "wall_s"
            kinds.add(key)
            total += float(run.get(key) or 0.0)
    return cells, runs, total, " and ".join(sorted(kinds)) or "nothing"


def report(root: Path, total_cpu: float | None) -> float | None:
    """Print the split of ``root``'s command CPU; the overhead (``None``: no total)."""
    cells, runs, sim, what = simulations(root)
    split_file = root / "cpu.json"
    split = json.loads(split_file.read_text(encoding="utf-8")) if split_file.is_file() else {}
    total = total_cpu if total_cpu is not None else split.get("total")
    print(f"{root}: {cells} cells, {runs} runs; simulations ({what} of the runs) {sim:.2f} s")
    if not total:
        print("no total CPU: give --cpu-s (the command's user + system seconds)")
        return None
    overhead = 1.0 - sim / total
    print(f"command CPU {total:.2f} s; outside the simulations {total - sim:.2f} s: "
          f"overhead {100 * overhead:.1f}%")  # fmt: skip
    if split:
        if abs(split.get("runs", sim) - sim) > 1e-6 * max(sim, 1.0):
            print(f"(cpu.json's runs: {split['runs']:.2f} s, of the runs made by that command)")
        parts = dict(PARTS)
        if total_cpu is not None and "total" in split:  # what the command did after cpu.json
            split["exit"] = max(total_cpu - float(split["total"]), 0.0)
            parts["exit"] = "after the board: the last lines, the interpreter's exit"
        for part, what in parts.items():
            s = float(split.get(part, math.nan))
            print(f"  {part:>9} {s:8.2f} s  {100 * s / total:5.1f}%  {what}")
    return overhead


def top(profile: Path, n: int = 30) -> None:
    """The profile's ``n`` costliest functions by cumulative time."""
    stats = pstats.Stats(str(profile))
    stats.sort_stats("cumulative").print_stats(n)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="+", default=list(SUBSET), metavar="NAME",
                   help=f"bench/v1 scenarios to run (default: {' '.join(SUBSET)})")  # fmt: skip
    p.add_argument("--out", type=Path, default=None, help="keep the board here (default: a "
                   "temporary directory, removed)")  # fmt: skip
    p.add_argument("--profile", type=Path, default=None, help="run under cProfile into FILE")
    p.add_argument("--board", type=Path, default=None,
                   help="analyse this finished board (runs/bench/<suite>-<v>/<code>)")  # fmt: skip
    p.add_argument("--cpu-s", type=float, default=None,
                   help="with --board: the total CPU seconds (default: its cpu.json)")  # fmt: skip
    args = p.parse_args()
    if args.board is not None:
        report(args.board, args.cpu_s)
        return
    with tempfile.TemporaryDirectory(prefix="bench_overhead_") as tmp:
        out = args.out if args.out is not None else Path(tmp)
        total = run_bench(out, args.only, args.profile)
        (root,) = [d for d in out.glob("*/*") if (d / "board.csv").is_file()]
        report(root, total)
    if args.profile is not None:
        top(args.profile)


if __name__ == "__main__":
    main()
