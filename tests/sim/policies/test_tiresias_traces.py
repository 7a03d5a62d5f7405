"""Tiresias stacks on real workloads: the 60-job trace (against the upstream simulator's own
published numbers) and the Philly slice.

Upstream's simulator takes each job's traced duration as given and ignores the network.  Our
"duration model" is the same: JOB fidelity (each job runs at its solo speed) on a network
whose all-reduce costs ~0 (b = 1e-9 ms/MB), each trace duration rounded to whole iterations
of the model's per-iteration time (so JCTs differ from upstream's by well under a second).
Upstream figures (reference note §1.7, 16 GPUs, ``--scheme=count``): ``fjf`` avg 190.7 s,
median 130.0, makespan 3,271; ``shortest-gpu`` 195.9 / 126.5 / 3,315; ``dlas-gpu`` 190.7
(same as ``fjf``: no job reaches 3,250 GPU-s); ``dlas-gpu-gittins`` 219.1 / 128.5 / 3,271 with
35 preemptions; on 60 GPUs nothing queues and every policy averages the mean duration 178.4.
"""

from __future__ import annotations

import pytest

from envs.sim import (
    ClusterSpec,
    Fidelity,
    FidelityOptions,
    NetworkSpec,
    SimConfig,
    SimResult,
    simulate,
)
from envs.sim.models import TIRESIAS_MODELS
from envs.sim.stacks import TIRESIAS_STACKS
from envs.sim.workload import builtin_philly_trace, builtin_tiresias_trace

FREE_NET = NetworkSpec(a_ms=0.0, b_ms_per_mb=1e-9, eta_ms_per_mb=0.0)
JOB = SimConfig(fidelity=FidelityOptions(level=Fidelity.JOB))


def seconds(res: SimResult) -> tuple[float, float, float]:
    s = res.summary()
    return (s["avg_jct_ms"] / 1000, s["median_jct_ms"] / 1000, s["makespan_ms"] / 1000)


@pytest.mark.parametrize(
    ("stack", "avg", "median", "makespan", "preemptions"),
    [
        ("fifo:count_fs", 190.7, 130.0, 3271, None),  # upstream fjf
        ("dlas-upstream:count_fs", 190.7, 130.0, 3271, 0),  # dlas-gpu
        ("dlas:count_fs", 190.7, 130.0, 3271, 0),  # paper defaults: same, nothing demoted
        ("psrsf:count_fs", 195.9, 126.5, 3315, None),  # shortest-gpu
        ("dgittins-upstream:count_fs", 219.1, 128.5, 3271, 35),  # dlas-gpu-gittins
    ],
)
def test_60_job_trace_reproduces_upstream(
    stack: str, avg: float, median: float, makespan: float, preemptions: int | None
) -> None:
    res = simulate(ClusterSpec(4, 4, network=FREE_NET), builtin_tiresias_trace(), stack, JOB)
    got = seconds(res)
    assert got[0] == pytest.approx(avg, abs=0.15)
    assert got[1] == pytest.approx(median, abs=0.5)
    assert got[2] == pytest.approx(makespan, abs=1.0)
    if preemptions is not None:
        assert res.extra["preemptions"] == preemptions


def test_60_job_trace_without_queueing_gives_the_mean_duration() -> None:
    w = builtin_tiresias_trace()
    for stack in TIRESIAS_STACKS:
        res = simulate(ClusterSpec(15, 4, network=FREE_NET), w, stack, JOB)
        assert seconds(res)[0] == pytest.approx(178.4, abs=0.05)
        assert all(r.queue_ms == 0 for r in res.records)


def test_contention_model_runs_every_stack_at_full_fidelity() -> None:
    """The same trace with the real network (0.856 ms/MB) and FULL fidelity: multi-server
    jobs pay their all-reduces, so every job takes at least its traced duration."""
    w = builtin_tiresias_trace()
    for stack in ("dlas:skew_fs", "dgittins:skew_fs"):
        res = simulate(ClusterSpec(4, 4), w, stack, SimConfig())
        assert len(res.records) == 60
        for r, j in zip(res.records, w.jobs, strict=True):
            assert r.finish_ms - r.start_ms >= j.iterations * j.model.compute_ms * (1 - 1e-12)


def test_philly_slice_runs_and_las_beats_fifo() -> None:
    """200 Philly jobs (heavy-tailed durations), models drawn from the Tiresias table, on
    32 GPUs: every stack finishes every job; least-attained-service (which needs no size
    knowledge) cuts the average JCT of FIFO by more than half, as Tiresias reports for
    production traces."""
    w = builtin_philly_trace(seed=0, models=TIRESIAS_MODELS)
    c = ClusterSpec(4, 8)
    avg = {}
    for stack in TIRESIAS_STACKS:
        res = simulate(c, w, stack, JOB)
        assert len(res.records) == 200 and all(r.finish_ms > r.submit_ms for r in res.records)
        avg[stack] = seconds(res)[0]
    assert avg["dlas:skew_fs"] < 0.5 * avg["fifo:count_fs"]
    assert avg["dgittins:skew_fs"] < 0.5 * avg["fifo:count_fs"]
    again = simulate(c, w, "dlas:skew_fs", JOB)
    assert seconds(again)[0] == avg["dlas:skew_fs"]


@pytest.mark.parametrize(
    ("name", "seed"),
    # the second trace is slow only (the default suite keeps to 10 minutes on 2 cores)
    [("long_trace_a.csv", 1), pytest.param("long_trace_b.csv", 0, marks=pytest.mark.slow)],
)
def test_mlfq_makes_progress_at_large_simulated_times(name: str, seed: int, tmp_path) -> None:
    """Weeks-long traces drive the clock to ~1e9 ms, where a crossing a few ns away rounds to
    ``now``: 2D-LAS and 2D-Gittins used to re-push such a demotion forever.  Both now finish
    every job (in a subprocess with a time limit, so a regression fails instead of hanging)."""
    import csv

    from tests.cli import ROOT, run_script

    out = tmp_path / "r"
    proc = run_script(
        "evaluate.py",
        "workload=trace",
        f"workload.path={ROOT / 'tests' / 'data' / name}",
        "workload.trace.max_iterations=200",
        "cluster.num_servers=64",
        "stacks=[dlas:count_fs,dgittins:count_fs]",
        f"seeds=[{seed}]",
        "workers=1",
        "plot=false",
        f"out_dir={out}",
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out / "summary.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["seed"] == str(seed)]
    assert {r["stack"] for r in rows} == {"dlas:count_fs", "dgittins:count_fs"}
    for r in rows:
        assert float(r["jobs"]) == 300
        assert 0 < float(r["avg_jct_s"]) <= float(r["makespan_s"]) < float("inf")


def test_due_bound_is_beyond_now_at_every_scale() -> None:
    """The bound of "due now" is strictly after ``now`` whatever its magnitude, never closer
    than :data:`_EPS`, and no wider than a few units of the clock's resolution beyond that."""
    import math

    from envs.sim.policies.tiresias import _EPS, _due_bound

    for now in (0.0, 1.0, 1e6, 1e9, 1e12, 1e15, 1e18):
        b = _due_bound(now)
        assert b > now
        assert b >= now + _EPS
        assert b - now <= max(2 * _EPS, 8 * math.ulp(now))
