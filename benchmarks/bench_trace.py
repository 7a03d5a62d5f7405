"""Trace-driven speed benchmark: a synthetic heavy-tailed 10,000-job trace, read through the
normalised-CSV reader, windowed and converted, then run through heuristic schedulers.

Usage::

    python benchmarks/bench_trace.py                         # 10,000 jobs, lwf1_srsf1 + DRF
    python benchmarks/bench_trace.py --jobs 2000 --stacks ff_adasrsf elastic:drf

The trace is Philly-like and seeded: Poisson arrivals, log-normal durations (median ~50 min,
clipped to 10 s .. 30 days), 80% one-GPU jobs and the rest 2, 4 or 8 GPUs.  It is capped at
``--cap-s`` seconds per job, scaled to ``--load`` of an 8 x 8-GPU cluster (Philly's 8-GPU
servers) and run as at most ``--max-iterations`` macro-iterations per job (see
``envs/sim/traces/convert.py``).  Figures are printed as a Markdown table: wall and CPU
seconds of the run, CPU ms per job, events (engine) or slots (elastic), events per CPU second
and the process's peak RSS after each run (bounded memory: it stays roughly flat as runs
accumulate).  CPU time is the figure to compare on a shared machine.  Nothing here asserts on
time.
"""

from __future__ import annotations

import argparse
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import cast

import numpy as np
from tabulate import tabulate

from envs.sim import ClusterSpec, SimConfig, simulate
from envs.sim.elastic.allocators import ALLOCATORS, Allocator
from envs.sim.elastic.simulator import SlotSimulator
from envs.sim.elastic.spec import ElasticCluster
from envs.sim.elastic.speed import MeasuredSpeed
from envs.sim.elastic.trace import elastic_jobs_from_workload
from envs.sim.traces import ConvertOptions, TraceWindow, convert_trace, prepare, read_trace


def write_trace(path: Path, jobs: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    submit = np.cumsum(rng.exponential(60.0, size=jobs)).round()
    submit -= submit[0]
    duration = np.clip(rng.lognormal(np.log(3000.0), 2.0, size=jobs), 10, 30 * 86400).round()
    gpus = rng.choice([1, 2, 4, 8], p=[0.8, 0.05, 0.05, 0.1], size=jobs)
    with path.open("w") as f:
        f.write("job_id,submit_time_s,duration_s,num_gpus,job_type,status,vc,gpu_milli\n")
        for i in range(jobs):
            f.write(f"j{i},{submit[i]:.0f},{duration[i]:.0f},{gpus[i]},,,vc,1000\n")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--stacks", nargs="+", default=["lwf1_srsf1", "elastic:drf"])
    ap.add_argument("--cap-s", type=float, default=2 * 86400.0)
    ap.add_argument("--load", type=float, default=0.8)
    ap.add_argument("--max-iterations", type=int, default=50)
    args = ap.parse_args()

    # Philly's large servers: 8 GPUs each, so every job fits inside one server
    cluster = ClusterSpec(num_servers=8, gpus_per_server=8)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "synthetic.csv"
        write_trace(path, args.jobs, args.seed)
        t0 = time.perf_counter()
        trace = read_trace(path)
        window = TraceWindow(duration_cap_s=args.cap_s, target_load=args.load)
        trace = prepare(trace, window, cluster.num_gpus)
        options = ConvertOptions(max_iterations=args.max_iterations)
        workload, rules = convert_trace(trace, seed=args.seed, options=options)
        read_s = time.perf_counter() - t0

    print(f"\n## Trace benchmark ({platform.python_version()}, {platform.machine()})\n")
    print(
        f"{len(workload)} jobs; read + window + convert {read_s:.2f} s "
        f"({1000 * read_s / len(workload):.3f} ms/job); {rules['merged_jobs']} jobs as "
        f"macro-iterations (K <= {rules['max_merge_factor']}); cluster 8x8 GPUs, "
        f"load {args.load}, cap {args.cap_s:g} s\n"
    )
    headers = ["scheduler", "wall s", "CPU s", "CPU ms per job", "events / slots",
               "events per CPU s", "avg JCT (h)", "peak RSS (MB)"]  # fmt: skip
    rows = []
    for stack in args.stacks:
        t0 = time.perf_counter()
        c0 = time.process_time()
        if stack.startswith("elastic:"):
            speed = MeasuredSpeed()
            jobs = elastic_jobs_from_workload(workload, speed=speed)
            ecl = ElasticCluster(num_nodes=8, cpu_slots=32, gpu_slots=32)
            res = SlotSimulator(
                ecl, jobs, cast(Allocator, ALLOCATORS[stack.split(":", 1)[1]]()), speed
            ).run()
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            count, jct_h = res.num_slots, res.avg_jct_s / 3600.0
        else:
            sim = simulate(cluster, workload, stack, SimConfig())
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            count, jct_h = sim.events, float(sim.jcts_ms().mean()) / 3.6e6
        per_job = 1000.0 * cpu / len(workload)
        rate = count / cpu if cpu > 0 else float("nan")
        rows.append([
            stack, f"{wall:.2f}", f"{cpu:.2f}", f"{per_job:.3f}", str(count), f"{rate:,.0f}",
            f"{jct_h:.2f}", f"{peak_rss_mb():.0f}",
        ])  # fmt: skip
        print(f"{stack}: {wall:.2f} s", file=sys.stderr, flush=True)
    # numbers right-aligned in the text (GitHub's format has no alignment marks)
    align = ["left"] + ["right"] * (len(headers) - 1)
    print(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True, colalign=align))


if __name__ == "__main__":
    main()
