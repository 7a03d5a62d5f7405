"""Reproduce Grouper's trace comparison: average stage completion time (SCT) per policy.

    python experiments/grouper_repro.py                    # 1/20, 1/10 and full scale
    python experiments/grouper_repro.py --scales 1/20      # one scale
    python experiments/grouper_repro.py --queues 8 --no-barrier

Workload: Grouper's 40-cojob trace (8 jobs per cojob, stages 20-40-80-480 iterations,
successive halving from its ``maxStage``, 10 hosts at 1 Gbps). Scales follow the shared note:
1/20 = first 20 cojobs with stage plans / 20; 1/10 = all 40 / 10; full = all 40 as is.
All times are seconds from each cojob's arrival (the note's ``SCT*`` and ``JCT*``).

For each scale the table gives avg SCT, avg stage-1 SCT, avg cojob completion time, avg JCT,
avg stage slowdown (vs the cojob alone under FS) and the SCT change against FS, next to the
upstream slot simulator's SCT* where the note has it (1/20 and 1/10 scale). Upstream's
simulator has no cojob barrier and unlimited priority levels; by default this runs with the
barrier (successive halving needs every result of a stage) and unlimited levels.
"""

from __future__ import annotations

import argparse
import time

from _common import markdown_table

from envs.sim.grouper import (
    CojobWorkload,
    GrouperConfig,
    GrouperResult,
    builtin_trace,
    scale_trace,
    simulate_cojobs,
)

POLICY_ORDER = ("grouper-offline", "grouper", "fs", "baraat", "sincronia", "sptf")
LABEL = {
    "grouper-offline": "Grouper offline",
    "grouper": "Grouper online",
    "fs": "FS",
    "baraat": "Baraat (stage FIFO)",
    "sincronia": "Sincronia",
    "sptf": "SPTF (job size)",
}
#: upstream avg SCT* in s (shared note §2.7): GrouperOffline, GrouperOnline, Fairshare,
#: FIFO-LM, Sincrona
UPSTREAM = {
    "1/20": {
        "grouper-offline": 259.6,
        "grouper": 284.1,
        "fs": 353.2,
        "baraat": 360.5,
        "sincronia": 370.0,
    },
    "1/10": {
        "grouper-offline": 1432.6,
        "grouper": 1537.5,
        "fs": 1975.7,
        "baraat": 1781.6,
        "sincronia": 1869.4,
    },
}
SCALES = {"1/20": (20, 20), "1/10": (40, 10), "full": (40, 1)}


def workload(scale: str) -> CojobWorkload:
    cojobs, divisor = SCALES[scale]
    return scale_trace(builtin_trace(), cojobs=cojobs, divisor=divisor)


def table(scale: str, cfg: GrouperConfig) -> None:
    w = workload(scale)
    results: dict[str, tuple[GrouperResult, float]] = {}
    for name in POLICY_ORDER:
        t0 = time.perf_counter()
        res = simulate_cojobs(w, name, cfg)
        results[name] = (res, time.perf_counter() - t0)
    fs = results["fs"][0].avg_sct_ms()
    up = UPSTREAM.get(scale, {})
    q = "unlimited" if cfg.num_queues is None else cfg.num_queues
    print(
        f"\n### {scale} scale ({len(w.cojobs)} cojobs, {len(w.jobs)} jobs), queues {q}, "
        f"barrier {'on' if cfg.barrier else 'off'}\n"
    )
    headers = ["policy", "avg SCT s", "vs FS", "stage-1 SCT s", "cojob CT s", "JCT s", "slowdown",
               "upstream SCT* s", "upstream vs FS", "wall s"]  # fmt: skip
    table = []
    for name, (res, wall) in results.items():
        sct = res.avg_sct_ms()
        u = (
            [f"{up[name]:.1f}", f"{100 * (up[name] / up['fs'] - 1):+.0f}%"]
            if name in up
            else ["-", "-"]
        )
        table.append([
            LABEL[name], f"{sct / 1e3:.1f}", f"{100 * (sct / fs - 1):+.0f}%",
            f"{res.avg_sct_ms(1) / 1e3:.1f}", f"{res.avg_cojob_ct_ms() / 1e3:.1f}",
            f"{res.avg_jct_ms() / 1e3:.1f}", f"{res.avg_stage_slowdown():.2f}", *u, f"{wall:.2f}",
        ])  # fmt: skip
    print(markdown_table(table, headers), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--scales", nargs="+", default=list(SCALES), choices=list(SCALES))
    ap.add_argument("--queues", type=int, default=None, help="priority queues per port (q)")
    ap.add_argument("--no-barrier", action="store_true", help="upstream: no cojob stage barrier")
    args = ap.parse_args()
    cfg = GrouperConfig(num_queues=args.queues, barrier=not args.no_barrier)
    for scale in args.scales:
        table(scale, cfg)


if __name__ == "__main__":
    main()
