"""Simulator speed benchmark: events per second and seconds per stack.

Usage::

    python benchmarks/bench_sim.py                 # reference scale (1/100), all 7 stacks
    python benchmarks/bench_sim.py --paper-scale   # + the paper's full iteration counts,
                                                   #   FULL fidelity on the native loop
    python benchmarks/bench_sim.py --paper-scale --python --fast --seeds 0,1,2
                                                   # + the Python engine (same results?)
                                                   #   and FAST fidelity, CPU s

Reference scale (best-of-N wall seconds) compares with the reference simulator's own CPU
seconds on the same workload (``user_cpu_s`` in the shipped
``reference_results/summary.csv``, CPython 2.7, 1 ms ticks); the reference mode runs on the
Python engine (ticks), the correct mode on both engines.  Paper scale reports CPU seconds
(``time.process_time``) of one FULL run on the native loop (and on the Python engine with
``--python``, checking that the per-job times agree) and FAST's avg JCT deviation from FULL
per stack and seed (``--fast``).
Figures are printed as Markdown tables; nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import replace

from tabulate import tabulate

from envs.sim import (
    ClusterSpec,
    Fidelity,
    FidelityOptions,
    RunOptions,
    SimConfig,
    SimResult,
    Workload,
    native,
    simulate,
)
from envs.sim.stacks import REFERENCE_ALGO, STACKS
from envs.sim.workload import builtin_ada_srsf, load_reference_summary, scale_workload


def _timed(
    stack: str,
    workload: Workload,
    cfg: SimConfig,
    repeat: int = 1,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[float, SimResult]:
    """Best of ``repeat`` runs by ``clock`` (wall by default) and the last result."""
    best = float("inf")
    result: SimResult | None = None
    for _ in range(repeat):
        t0 = clock()
        result = simulate(ClusterSpec(), workload, stack, cfg)
        best = min(best, clock() - t0)
    assert result is not None
    return best, result


def reference_scale(seed: int, repeat: int) -> None:
    ref_cpu = {
        (r["variant"], r["seed"], r["algo_string"]): float(r["user_cpu_s"])
        for r in load_reference_summary()
    }
    w = builtin_ada_srsf(seed)
    print(f"\n## Reference scale (workload seed {seed}, 160 jobs, 1/100 iterations)\n")
    rows = []
    runs = (("reference", "python"), ("correct", "python"), ("correct", "native"))
    for stack in STACKS:
        for mode, engine in runs:
            if engine == "native" and not native.available():
                continue
            wall, res = _timed(stack, w, SimConfig.named(mode, engine=engine), repeat)
            cpu = ref_cpu.get(("original", seed, REFERENCE_ALGO[stack]))
            cmp = (
                [f"{cpu:.1f}", f"{cpu / wall:.0f}x"] if cpu and mode == "reference" else ["-", "-"]
            )
            rate = res.events / wall
            rows.append([stack, mode, engine, f"{wall:.3f}", str(res.events), f"{rate:,.0f}", *cmp])
    headers = ["stack", "mode", "engine", "wall s", "events", "events/s", "reference CPU s",
               "speed-up"]  # fmt: skip
    print(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True))


def paper_scale(seeds: list[int], python: bool, fast: bool, steps: int) -> None:
    """FULL fidelity at the paper's scale on the native loop, CPU seconds per run; with
    ``python`` also on the Python engine (same results required), with ``fast`` also FAST
    fidelity and its avg JCT deviation from FULL."""
    engine = "native" if native.available() else "python"
    print("\n## Paper scale (x100: 1000-6000 iterations over 20 min), correct mode, FULL\n")
    headers = ["stack", "seed", "avg JCT s", "events", f"{engine} CPU s", "events/s"]
    if python and engine == "native":
        headers += ["python CPU s", "same per-job times"]
    if fast:
        headers += [f"FAST(K from {steps} steps) CPU s", "FAST - FULL"]
    rows = []
    full_cfg = SimConfig(run=RunOptions(engine=engine))
    worst = 0.0
    for seed in seeds:
        w = scale_workload(builtin_ada_srsf(seed), 100, 100)
        for stack in STACKS:
            cl, rl = _timed(stack, w, full_cfg, clock=time.process_time)
            jl = rl.summary()["avg_jct_ms"] / 1000
            row = [
                stack,
                str(seed),
                f"{jl:.1f}",
                str(rl.events),
                f"{cl:.2f}",
                f"{rl.events / cl:,.0f}",
            ]
            if python and engine == "native":
                cp, rp = _timed(
                    stack, w, full_cfg.override(engine="python"), clock=time.process_time
                )
                same = [(r.start_ms, r.finish_ms) for r in rp.records] == [
                    (r.start_ms, r.finish_ms) for r in rl.records
                ]
                row += [f"{cp:.2f}", "yes" if same else "NO"]
            if fast:
                cfg = replace(
                    full_cfg, fidelity=FidelityOptions(level=Fidelity.FAST, fast_min_steps=steps)
                )
                cf, rf = _timed(stack, w, cfg, clock=time.process_time)
                dev = 100 * (rf.summary()["avg_jct_ms"] / 1000 - jl) / jl
                worst = max(worst, abs(dev))
                row += [f"{cf:.2f}", f"{dev:+.2f}%"]
            rows.append(row)
            print(f"{stack} seed {seed}: {cl:.2f} CPU s", file=sys.stderr, flush=True)
    print(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True))
    if fast:
        print(f"\nlargest |FAST - FULL|: {worst:.2f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seed", type=int, default=0, help="workload seed at reference scale")
    ap.add_argument(
        "--seeds", default="0", help="workload seeds at paper scale, comma-separated (0,1,2)"
    )
    ap.add_argument("--repeat", type=int, default=3, help="best of N at reference scale")
    ap.add_argument("--paper-scale", action="store_true")
    ap.add_argument(
        "--python", action="store_true", help="paper scale: also the Python engine (slow)"
    )
    ap.add_argument("--fast", action="store_true", help="paper scale: also FAST fidelity")
    ap.add_argument("--steps", type=int, default=FidelityOptions().fast_min_steps)
    args = ap.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}")
    reference_scale(args.seed, args.repeat)
    if args.paper_scale:
        seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
        paper_scale(seeds, args.python, args.fast, args.steps)


if __name__ == "__main__":
    main()
