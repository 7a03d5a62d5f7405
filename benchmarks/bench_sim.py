"""Simulator speed benchmark: events per second and seconds per stack.

Usage::

    python benchmarks/bench_sim.py                 # reference scale (1/100), all 7 stacks
    python benchmarks/bench_sim.py --paper-scale   # + the paper's full iteration counts,
                                                   #   FAST fidelity and (with --full) FULL
    python benchmarks/bench_sim.py --paper-scale --full --seeds 0,1,2
                                                   # FAST vs FULL per stack and seed, CPU s

Reference scale (best-of-N wall seconds) compares with the reference simulator's own CPU
seconds on the same workload (``user_cpu_s`` in the shipped
``reference_results/summary.csv``, CPython 2.7, 1 ms ticks).  Paper scale reports CPU seconds
(``time.process_time``) of one run, FAST's avg JCT deviation from FULL per stack and seed,
and the largest one.
Figures are printed as Markdown tables; nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable
from dataclasses import replace

from envs.sim import ClusterSpec, Fidelity, SimConfig, SimResult, Workload, simulate
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
    print("| stack | mode | wall s | events | events/s | reference CPU s | speed-up |")
    print("|---|---|---|---|---|---|---|")
    for stack in STACKS:
        for mode in ("reference", "correct"):
            wall, res = _timed(stack, w, SimConfig.named(mode), repeat)
            cpu = ref_cpu.get(("original", seed, REFERENCE_ALGO[stack]))
            cmp = f"{cpu:.1f} | {cpu / wall:.0f}x" if cpu and mode == "reference" else "- | -"
            rate = res.events / wall
            print(f"| {stack} | {mode} | {wall:.3f} | {res.events} | {rate:,.0f} | {cmp} |")


def paper_scale(seeds: list[int], full: bool, steps: int) -> None:
    """FAST (and with ``full`` FULL) at the paper's scale, CPU seconds per run; with FULL,
    the deviation of FAST's avg JCT per stack and seed and the largest one."""
    print(
        f"\n## Paper scale (x100: 1000-6000 iterations over 20 min), correct mode, "
        f"fast_min_steps={steps}\n"
    )
    head = "| stack | seed | FAST avg JCT s | FAST events | FAST CPU s |"
    if full:
        head += " FULL avg JCT s | FULL events | FULL CPU s | FAST - FULL |"
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    fast_cfg = SimConfig(fidelity=Fidelity.FAST, fast_min_steps=steps)
    worst = 0.0
    for seed in seeds:
        w = scale_workload(builtin_ada_srsf(seed), 100, 100)
        for stack in STACKS:
            cf, rf = _timed(stack, w, fast_cfg, clock=time.process_time)
            jf = rf.summary()["avg_jct_ms"] / 1000
            row = f"| {stack} | {seed} | {jf:.1f} | {rf.events} | {cf:.2f} |"
            if full:
                cl, rl = _timed(
                    stack, w, replace(fast_cfg, fidelity=Fidelity.FULL), clock=time.process_time
                )
                jl = rl.summary()["avg_jct_ms"] / 1000
                dev = 100 * (jf - jl) / jl
                worst = max(worst, abs(dev))
                row += f" {jl:.1f} | {rl.events} | {cl:.2f} | {dev:+.2f}% |"
            print(row, flush=True)
    if full:
        print(f"\nlargest |FAST - FULL|: {worst:.2f}%")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--seed", type=int, default=0, help="workload seed at reference scale")
    ap.add_argument(
        "--seeds", default="0", help="workload seeds at paper scale, comma-separated (0,1,2)"
    )
    ap.add_argument("--repeat", type=int, default=3, help="best of N at reference scale")
    ap.add_argument("--paper-scale", action="store_true")
    ap.add_argument("--full", action="store_true", help="also FULL fidelity at paper scale")
    ap.add_argument("--steps", type=int, default=SimConfig().fast_min_steps)
    args = ap.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}")
    reference_scale(args.seed, args.repeat)
    if args.paper_scale:
        seeds = [int(x) for x in args.seeds.split(",") if x.strip()]
        paper_scale(seeds, args.full, args.steps)


if __name__ == "__main__":
    main()
