"""Preemption in the one event loop: hand-computed schedules and invariants.

Invariants checked on every run here: at no time do running jobs hold more GPUs than the
cluster has; every job's time on GPUs, less the restore that opens each resumed run, is its
solo run time (work is never lost: eviction happens at an iteration boundary, or in JOB
fidelity is fluid); a job is preempted exactly as often as it resumes; FULL runs check the
engine's own invariants after every event.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace

import pytest

from envs.sim import (
    ClusterSpec,
    Fidelity,
    FidelityOptions,
    JobSpec,
    ModelOptions,
    ModelProfile,
    NetworkSpec,
    QuirkOptions,
    RunOptions,
    SimConfig,
    SimResult,
    Simulator,
    Workload,
    simulate,
)
from envs.sim.config import TiresiasConfig
from envs.sim.engine import SimulationError
from envs.sim.errors import ConfigError
from envs.sim.policies.base import JobOrder
from envs.sim.policies.comm import FairShare
from envs.sim.policies.job_order import SRSF
from envs.sim.policies.placement import FirstFit
from envs.sim.policies.preemptive import LAS2D, PreemptiveSRSF
from envs.sim.policies.skew import CountPlacer, SkewPlacer
from envs.sim.policies.tiresias import DiscretizedGittins, DiscretizedLAS
from envs.sim.stacks import SchedulerStack
from envs.sim.workload import builtin_tiresias_trace

S = 1000.0  # ms per second
UNIT = ModelProfile("unit", 1.0, 1000.0, 1, S / 2, S / 2)  # one iteration = 1 s
FIDELITIES = [Fidelity.FULL, Fidelity.JOB]


def run(
    order: JobOrder,
    workload: Workload,
    cluster: ClusterSpec,
    fidelity: Fidelity,
    preemption_cost_ms: float = 0.0,
) -> SimResult:
    stack = SchedulerStack(order.name, order, CountPlacer(), FairShare())
    config = SimConfig(
        fidelity=FidelityOptions(level=fidelity),
        model=ModelOptions(preemption_cost_ms=preemption_cost_ms),
        run=RunOptions(check_invariants=fidelity is Fidelity.FULL),
    )
    return Simulator(cluster, workload, stack, config).run()


def check_spans(res: SimResult, cluster: ClusterSpec, cost_ms: float = 0.0) -> None:
    """GPU capacity over time; time on GPUs minus restores = solo compute (one server)."""
    spans = res.extra["run_spans_ms"]
    events = []
    for rec in res.records:
        ss = spans[rec.job_id]
        assert ss[0][0] == rec.start_ms and ss[-1][1] == rec.finish_ms
        assert all(b[0] >= a[1] for a, b in itertools.pairwise(ss))  # in order
        resumes = len(ss) - 1
        assert resumes == res.extra["preemptions_by_job"][rec.job_id]
        # a resumed span first restores for cost_ms (a job evicted while restoring did no work)
        work = sum(max(0.0, b - a - (cost_ms if k else 0.0)) for k, (a, b) in enumerate(ss))
        solo = rec.gpu_ms / rec.num_gpus  # iterations x (fw + bw): no comm on one server
        assert work == pytest.approx(solo, rel=1e-9, abs=1e-6)
        for a, b in ss:
            events += [(a, rec.num_gpus), (b, -rec.num_gpus)]
    used = 0
    for _, d in sorted(events, key=lambda e: (e[0], e[1])):  # releases first at a tie
        used += d
        assert used <= cluster.num_gpus
    assert res.extra["preemptions"] == res.extra["resumes"]


@pytest.mark.parametrize("fidelity", FIDELITIES)
def test_promote_knob_by_hand(fidelity: Fidelity) -> None:
    """1 GPU; K = 2 at 2 GPU-s; PROMOTEKNOB 1.  A (5 s) and B (10 s) at t = 0.
    A runs [0,2) and is demoted; B runs [2,4); at 4 A has waited 2 >= 1 x 2 executed: it is
    promoted to Q0 and B (demoted at 4) waits; A [4,6), demoted; B promoted at 6 (waited 2);
    B [6,8), demoted; A promoted at 8 runs [8,9) and ends; B runs [9,15)."""
    w = Workload((JobSpec(0, 0.0, UNIT, 5, 1), JobSpec(1, 0.0, UNIT, 10, 1)))
    c = ClusterSpec(1, 1, gpu_memory_mb=1000.0)
    res = run(DiscretizedLAS(TiresiasConfig(2, (2.0,), 1.0)), w, c, fidelity)
    assert res.extra["run_spans_ms"] == {
        0: [(0.0, 2 * S), (4 * S, 6 * S), (8 * S, 9 * S)],
        1: [(2 * S, 4 * S), (6 * S, 8 * S), (9 * S, 15 * S)],
    }
    assert res.extra["order_stats"] == {"demotions": 4, "promotions": 3}
    # knob off: A is demoted at 2 and never comes back before B is done with Q0
    res0 = run(DiscretizedLAS(TiresiasConfig(2, (2.0,), 0.0)), w, c, fidelity)
    assert res0.extra["run_spans_ms"] == {
        0: [(0.0, 2 * S), (4 * S, 7 * S)],
        1: [(2 * S, 4 * S), (7 * S, 15 * S)],
    }
    check_spans(res, c)
    check_spans(res0, c)


@pytest.mark.parametrize("fidelity", FIDELITIES)
def test_demotion_at_exact_crossing_of_2d_service(fidelity: Fidelity) -> None:
    """2 GPUs; threshold 6 GPU-s.  A (2 GPUs, 10 s) at 0 reaches 6 GPU-s at t = 3 and is
    demoted; B (2 GPUs, 1 s) waiting since 0.5 in Q0 then runs [3,4); A resumes at 4."""
    w = Workload((JobSpec(0, 0.0, UNIT, 10, 2), JobSpec(1, 0.5 * S, UNIT, 1, 2)))
    c = ClusterSpec(1, 2, gpu_memory_mb=1000.0)
    res = run(DiscretizedLAS(TiresiasConfig(2, (6.0,), 0.0)), w, c, fidelity)
    assert res.extra["run_spans_ms"] == {0: [(0.0, 3 * S), (4 * S, 11 * S)], 1: [(3 * S, 4 * S)]}


def test_full_fidelity_defers_eviction_to_the_iteration_boundary() -> None:
    """Iterations of 4 s, limit 1 GPU-s: A (2 iterations) crosses it at t = 1, mid iteration,
    with B (1 iteration) waiting since 0.5.  FULL stops A at its boundary (4); B crosses at 5
    and is stopped at 8, when A resumes.  JOB stops A at 1; B crosses at 2 and goes to the
    end of Q1, behind A (which was preempted first), so A runs [2, 9) and B [9, 12)."""
    slow = ModelProfile("slow", 1.0, 1000.0, 1, 2 * S, 2 * S)
    w = Workload((JobSpec(0, 0.0, slow, 2, 1), JobSpec(1, 0.5 * S, slow, 1, 1)))
    c = ClusterSpec(1, 1, gpu_memory_mb=1000.0)
    order = DiscretizedLAS(TiresiasConfig(2, (1.0,), 0.0))
    full = run(order, w, c, Fidelity.FULL)
    assert full.extra["run_spans_ms"] == {0: [(0.0, 4 * S), (8 * S, 12 * S)], 1: [(4 * S, 8 * S)]}
    job = run(DiscretizedLAS(TiresiasConfig(2, (1.0,), 0.0)), w, c, Fidelity.JOB)
    assert job.extra["run_spans_ms"] == {
        0: [(0.0, 1 * S), (2 * S, 9 * S)],
        1: [(1 * S, 2 * S), (9 * S, 12 * S)],
    }


@pytest.mark.parametrize("fidelity", FIDELITIES)
@pytest.mark.parametrize("cost", [0.0, 2500.0])
@pytest.mark.parametrize(
    "make",
    [
        lambda: DiscretizedLAS(TiresiasConfig(3, (15.0, 150.0), 2.0)),
        lambda: DiscretizedGittins(TiresiasConfig(3, (15.0, 150.0), 2.0, 150.0)),
        lambda: DiscretizedGittins(TiresiasConfig(3, (800.0, 1800.0), 0.0, 800.0, "upstream")),
        lambda: LAS2D(quantum_ms=10 * S),
        lambda: PreemptiveSRSF(quantum_ms=5 * S),
    ],
    ids=["dlas", "dgittins", "dgittins-upstream", "las", "psrsf"],
)
def test_invariants_on_the_60_job_trace(
    make: Callable[[], JobOrder], cost: float, fidelity: Fidelity
) -> None:
    """The 60-job trace at a quarter of its iterations arriving 8x as fast (twice the load),
    small thresholds and a knob, so that jobs are preempted tens to hundreds of times; one
    16-GPU server, so no job communicates."""
    c = ClusterSpec(1, 16)
    w = quarter_trace()
    res = run(make(), w, c, fidelity, preemption_cost_ms=cost)
    assert res.extra["preemptions"] >= 5
    check_spans(res, c, cost)


def quarter_trace() -> Workload:
    w = builtin_tiresias_trace()
    jobs = tuple(
        replace(j, iterations=max(1, j.iterations // 4), submit_ms=j.submit_ms / 8) for j in w.jobs
    )
    return Workload(jobs, name="tiresias-60/4")


def test_preemptive_runs_are_deterministic() -> None:
    w = quarter_trace()
    c = ClusterSpec(4, 4)
    a = simulate(c, w, "dlas:skew_fs", SimConfig(model=ModelOptions(preemption_cost_ms=1000.0)))
    b = simulate(c, w, "dlas:skew_fs", SimConfig(model=ModelOptions(preemption_cost_ms=1000.0)))
    assert [r.finish_ms for r in a.records] == [r.finish_ms for r in b.records]
    assert a.extra["run_spans_ms"] == b.extra["run_spans_ms"]


def test_job_fidelity_equals_full_when_nothing_is_shared() -> None:
    """Non-preemptive FIFO on a 16-GPU server: no GPU or NIC is shared, so the fluid JOB
    fidelity is exact (up to float rounding of summed iterations)."""
    c = ClusterSpec(1, 16)
    w = builtin_tiresias_trace()
    full = simulate(c, w, "fifo:count_fs", SimConfig())
    job = simulate(c, w, "fifo:count_fs", SimConfig(fidelity=FidelityOptions(level=Fidelity.JOB)))
    for a, b in zip(full.records, job.records, strict=True):
        assert a.finish_ms == pytest.approx(b.finish_ms, rel=1e-9)


def test_job_fidelity_charges_the_solo_all_reduce() -> None:
    """A 2-GPU job forced onto two servers: each iteration is fw + bw + a + M b."""
    m = ModelProfile("m", 100.0, 1000.0, 1, 10.0, 20.0)
    net = NetworkSpec(a_ms=1.0, b_ms_per_mb=0.5, eta_ms_per_mb=0.1)
    c = ClusterSpec(2, 1, gpu_memory_mb=1000.0, network=net)
    w = Workload((JobSpec(0, 0.0, m, 7, 2),))
    res = simulate(c, w, "fifo:count_fs", SimConfig(fidelity=FidelityOptions(level=Fidelity.JOB)))
    assert res.records[0].finish_ms == pytest.approx(7 * (30.0 + 1.0 + 50.0))
    full = simulate(c, w, "fifo:count_fs", SimConfig())
    assert full.records[0].finish_ms == pytest.approx(7 * (30.0 + 1.0 + 50.0))


def test_job_fidelity_refuses_shared_gpus() -> None:
    w = Workload((JobSpec(0, 0.0, UNIT, 3, 1), JobSpec(1, 0.0, UNIT, 3, 1)))
    c = ClusterSpec(1, 1, gpu_memory_mb=4000.0)  # FF time-shares the one GPU
    stack = SchedulerStack("ff", SRSF(), FirstFit(), FairShare())
    with pytest.raises(SimulationError, match="exclusive GPUs"):
        Simulator(c, w, stack, SimConfig(fidelity=FidelityOptions(level=Fidelity.JOB))).run()


def test_preemptive_order_needs_continuous_time() -> None:
    stack = SchedulerStack("x", PreemptiveSRSF(), CountPlacer(), FairShare())
    w = Workload((JobSpec(0, 0.0, UNIT, 1, 1),))
    with pytest.raises(ConfigError, match="continuous time"):
        Simulator(ClusterSpec(1, 1), w, stack, SimConfig(quirks=QuirkOptions(tick_ms=1.0)))


def test_queue_length_does_not_grow_the_cost_of_a_pass() -> None:
    """10 and 40 stacked copies of the 60-job trace on 60 GPUs: the queue grows to hundreds
    and thousands of jobs, but the candidates one pass compares stay bounded by the running
    jobs and the GPU-count classes (not the queue)."""
    seen = {}
    for copies in (10, 40):
        order = DiscretizedLAS(TiresiasConfig.paper())
        stack = SchedulerStack("dlas", order, SkewPlacer(), FairShare())
        w = builtin_tiresias_trace(copies=copies)
        Simulator(
            ClusterSpec(15, 4), w, stack, SimConfig(fidelity=FidelityOptions(level=Fidelity.JOB))
        ).run()
        seen[copies] = (order.max_pending, order.max_compared, order.passes)
    assert seen[40][0] > 1500 and seen[10][0] > 200  # long queues
    # at most 60 running jobs and 4 size classes: 60 + 60 x 4 comparisons, whatever the queue
    assert seen[10][1] <= 300 and seen[40][1] <= 300
    assert seen[40][2] < 2.2 * 40 * 60  # passes: about one per arrival and completion
