"""Tiresias stacks next to SRSF and FIFO on the 60-job trace and the Philly slice.

Usage::

    python experiments/tiresias_runs.py            # all four tables (Markdown)
    python experiments/tiresias_runs.py --quick    # skip the FULL-fidelity table

Tables:

1. 60-job trace, 16 GPUs (4 x 4), the upstream simulator's **duration model** (JOB fidelity,
   all-reduce cost ~0): comparable with upstream's published numbers (last column).
2. 60-job trace, 16 GPUs, the **contention model** (FULL fidelity: every iteration, all-reduces
   at 0.856 ms/MB sharing NICs), where placement matters.
3. Philly slice (200 jobs, VC 6c71a0), 32 GPUs (4 x 8), JOB fidelity with the solo all-reduce
   cost; models drawn uniformly from the Tiresias table (seed 0).
4. The 2,400-job stress trace (:func:`stress_workload`: 40 copies of the 60-job trace, copy
   ``k`` shifted by ``7 k`` s) on 60 GPUs (:data:`STRESS_CLUSTER`, 15 x 4), the duration
   model: the benchmark's ``tiresias-2400`` scenario (``workload=tiresias
   workload.copies=40``), whose figures equal these (tested).

Stacks: ``envs.sim.stacks.TIRESIAS_STACKS``.  Deterministic: every run is a pure function of
the workload and the config.
"""

from __future__ import annotations

import argparse
import time

from _common import markdown_table

from envs.sim import (
    ClusterSpec,
    Fidelity,
    FidelityOptions,
    NetworkSpec,
    SimConfig,
    Workload,
    simulate,
)
from envs.sim.models import TIRESIAS_MODELS
from envs.sim.stacks import TIRESIAS_STACKS
from envs.sim.workload import builtin_philly_trace, builtin_tiresias_trace

FREE_NET = NetworkSpec(a_ms=0.0, b_ms_per_mb=1e-9, eta_ms_per_mb=0.0)
#: the duration model: JOB fidelity (with a free network, upstream's all-reduce cost ~0)
JOB = SimConfig(fidelity=FidelityOptions(level=Fidelity.JOB))
#: the stress trace's cluster: 15 servers x 4 GPUs, free network
STRESS_CLUSTER = ClusterSpec(15, 4, network=FREE_NET)
STRESS_COPIES = 40


def stress_workload() -> Workload:
    """The 2,400-job stress trace (:func:`envs.sim.workload.builtin_tiresias_trace`, 40
    copies shifted by 7 s)."""
    return builtin_tiresias_trace(copies=STRESS_COPIES, shift_s=7.0)


#: upstream simulator (SymbioticLab/Tiresias@959f9b0, reference note §1.7), 60 jobs, 16 GPUs:
#: avg JCT s (the policy it corresponds to)
UPSTREAM_60 = {
    "fifo:count_fs": "190.7 (fjf); blocking fifo 200.8",
    "srsf:count_fs": "-",
    "psrsf:count_fs": "195.9 (shortest-gpu)",
    "dlas:count_fs": "190.7 (dlas-gpu-8: knob 8, code thresholds)",
    "dlas:skew_fs": "- (no skew placement upstream)",
    "dlas-upstream:count_fs": "190.7 (dlas-gpu)",
    "dgittins:skew_fs": "-",
    "dgittins-upstream:count_fs": "219.1 (dlas-gpu-gittins)",
}


def table(title: str, cluster: ClusterSpec, w: Workload, cfg: SimConfig, unit: str) -> None:
    scale = 1000.0 if unit == "s" else 3_600_000.0
    print(f"\n### {title}\n")
    headers = ["stack", f"avg JCT {unit}", f"median {unit}", f"p95 {unit}", f"makespan {unit}",
               "preemptions", "wall s"]  # fmt: skip
    upstream = w.name == "tiresias-60" and cfg.fidelity.level is Fidelity.JOB
    if upstream:
        headers.append("upstream avg JCT s")
    rows = []
    for stack in TIRESIAS_STACKS:
        t0 = time.perf_counter()
        r = simulate(cluster, w, stack, cfg)
        wall = time.perf_counter() - t0
        s = r.summary()
        row = [
            f"`{stack}`", f"{s['avg_jct_ms'] / scale:,.1f}", f"{s['median_jct_ms'] / scale:,.1f}",
            f"{s['p95_jct_ms'] / scale:,.1f}", f"{s['makespan_ms'] / scale:,.1f}",
            str(r.extra.get("preemptions", 0)), f"{wall:.2f}",
        ]  # fmt: skip
        if upstream:
            row.append(UPSTREAM_60[stack])
        rows.append(row)
    print(markdown_table(rows, headers))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="skip the FULL-fidelity table")
    args = ap.parse_args()
    w60 = builtin_tiresias_trace()
    table(
        "60-job trace, 16 GPUs, duration model (JOB fidelity, free network)",
        ClusterSpec(4, 4, network=FREE_NET),
        w60,
        JOB,
        "s",
    )
    if not args.quick:
        table(
            "60-job trace, 16 GPUs, contention model (FULL fidelity, 0.856 ms/MB)",
            ClusterSpec(4, 4),
            w60,
            SimConfig(),
            "s",
        )
    philly = builtin_philly_trace(seed=0, models=TIRESIAS_MODELS)
    table(
        "Philly slice (200 jobs), 32 GPUs, JOB fidelity (solo all-reduce)",
        ClusterSpec(4, 8),
        philly,
        JOB,
        "h",
    )
    table(
        "2,400-job stress trace (40 copies, 7 s apart), 60 GPUs, duration model",
        STRESS_CLUSTER,
        stress_workload(),
        JOB,
        "s",
    )


if __name__ == "__main__":
    main()
