"""Trace files that tests share."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from envs.gym.workloads import TraceWindows


def extreme_trace_windows(directory: Path) -> TraceWindows:
    """Windows of an extreme trace written to ``directory/extreme.csv``: 80 jobs of VC ``vcx``,
    durations from 1 s to 10^7 s, requests of 1 to 64 GPUs (64 is clipped), the first 40
    submitted at one instant; windows of 60 jobs, durations capped at 10^4 h."""
    rows = ["job_id,submit_time_s,duration_s,num_gpus,job_type,status,vc,gpu_milli"]
    rng = np.random.default_rng(0)
    for i in range(80):
        submit = 0 if i < 40 else 10 * i
        duration = int(10 ** rng.uniform(0, 7))
        gpus = int(rng.choice([1, 2, 8, 16, 64]))
        rows.append(f"x-{i},{submit},{duration},{gpus},,,vcx,1000")
    path = directory / "extreme.csv"
    path.write_text("\n".join(rows) + "\n")
    return TraceWindows(path=str(path), vcs=["vcx"], days=[0, 1], jobs=60, duration_cap_h=1e4)
