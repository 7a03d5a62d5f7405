"""FAST fidelity against FULL: what it saves (events, by count) and what it costs (avg JCT).

The issue asked for a fast path within 2% of FULL's avg JCT *if FULL could not reach 5 s per
stack at paper scale*; FULL now does, on the native event loop (0.5-1.1 CPU s, see
``test_native.py``), so FAST is an exploration tool only.  It does not meet 2%: the merged
steps change which job wins a shared GPU and how transfers overlap, and the schedule that
results differs job by job (measured in EXPERIMENTS.md, "FAST fidelity").  The 2% bar is
kept as a strict xfail so that a fast path that meets it shows up; a loose bound guards
against gross regressions.

FULL itself is not reproducible to 2% under timing noise far below what the inputs are known
to: 0.1% on the models' forward/backward times moves its avg JCT by several percent either way
(``test_full_moves_more_than_two_percent_under_0p1_percent_jitter``), so no approximation can
meet a per-run 2% bar except by luck (EXPERIMENTS.md, "How reproducible is one run").
"""

from __future__ import annotations

import pytest

from envs.sim import (
    ClusterSpec,
    Fidelity,
    FidelityOptions,
    SimConfig,
    SimResult,
    Workload,
    simulate,
)
from envs.sim.engine import CommTask, Simulator
from envs.sim.stacks import STACKS, make_stack
from envs.sim.workload import builtin_ada_srsf, jitter_compute, scale_workload

CLUSTER = ClusterSpec()
#: 10x iterations (shortest job 100) over half the jobs: K = 100 // 50 = 2
STEPS = 50


def _workload() -> Workload:
    w = builtin_ada_srsf(0)
    half = Workload(tuple(j for j in w.jobs if j.job_id % 2 == 0), name="half")
    return scale_workload(half, 10, 10)


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[SimResult, SimResult]]:
    w = _workload()
    fast = SimConfig(fidelity=FidelityOptions(level=Fidelity.FAST, fast_min_steps=STEPS))
    return {
        s: (simulate(CLUSTER, w, s, SimConfig()), simulate(CLUSTER, w, s, fast)) for s in STACKS
    }


def _rel(result: SimResult, ref: SimResult) -> float:
    """Signed relative difference of avg JCT, ``result`` against ``ref``."""
    a, b = result.summary()["avg_jct_ms"], ref.summary()["avg_jct_ms"]
    return (a - b) / b


def _dev(full: SimResult, fast: SimResult) -> float:
    return abs(_rel(fast, full))


def test_fast_merges_and_saves_events(runs: dict[str, tuple[SimResult, SimResult]]) -> None:
    w = _workload()
    for stack, (full, fast) in runs.items():
        assert fast.extra["iterations_per_step"] == 2, stack
        assert full.extra["iterations_per_step"] == 1, stack
        # two iterations per step: about half the events (measured 0.49-0.55)
        assert fast.events < 0.6 * full.events, stack
        for r, j in zip(fast.records, w.jobs, strict=True):
            assert r.iterations == j.iterations
            assert r.jct_ms >= j.iterations * j.model.compute_ms - 1e-6


def test_fast_avg_jct_is_not_grossly_off(runs: dict[str, tuple[SimResult, SimResult]]) -> None:
    # measured: at most 5.6% on this workload; a regression guard, not an accuracy claim
    for stack, (full, fast) in runs.items():
        assert _dev(full, fast) < 0.10, stack


@pytest.mark.xfail(
    strict=True,
    reason="FAST misses the issue's 2% target (up to 5.6% here, 15% at paper scale); FULL "
    "itself moves by more under 0.1% timing jitter",
)
def test_fast_within_two_percent_for_every_stack(
    runs: dict[str, tuple[SimResult, SimResult]],
) -> None:
    worst = max(_dev(full, fast) for full, fast in runs.values())
    assert worst <= 0.02


def test_fast_tells_adadual_the_remainder_per_step_of_the_asking_job() -> None:
    """A running all-reduce of 200 MB at 1 MB/ms, asked about 50 ms after it started: FULL
    (and FAST for a one-iteration step) answers 150 MB; FAST answers a job whose step merges
    5 iterations 150 / 5 = 30 MB, so AdaDUAL's test ``m_new 2(b + η) < b M_old`` compares its
    one-iteration size with 30 MB, i.e. its 5-iteration step with the whole 150 MB."""
    w = _workload()
    cfg = SimConfig(fidelity=FidelityOptions(level=Fidelity.FAST, fast_min_steps=STEPS))
    sim = Simulator(CLUSTER, w, make_stack("lwf1_adasrsf"), cfg)
    old, new = sim.jobs[0], sim.jobs[1]
    task = CommTask(old, 0.0)
    task.size_mb, task.speed = 200.0, 1.0
    sim.now = 50.0
    assert sim.remaining_mb(task) == pytest.approx(150.0)  # nobody asking: the plain remainder
    sim._asking = new
    new.chunk = 5
    assert sim.remaining_mb(task) == pytest.approx(30.0)
    new.chunk = 1
    assert sim.remaining_mb(task) == pytest.approx(150.0)
    sim.now = 0.0  # just started: the whole step, per iteration of the asking job
    new.chunk = 4
    assert sim.remaining_mb(task) == pytest.approx(50.0)


def test_full_moves_more_than_two_percent_under_0p1_percent_jitter() -> None:
    """The shipped workload (seed 0, reference scale), LWF-1 + SRSF(1), full fidelity: two
    draws of at most 0.1% on each model's forward/backward time (the reference code's own
    rounding of Table III is up to 0.6%) move avg JCT by +5.5% and -3.6%.  A run is one
    sample of a quantity with that much spread; compare stacks over seeds or jitter draws."""
    w = builtin_ada_srsf(0)
    base = simulate(CLUSTER, w, "lwf1_srsf1", SimConfig())
    devs = []
    for member in (1, 2):
        r = simulate(CLUSTER, jitter_compute(w, 1e-3, seed=member), "lwf1_srsf1", SimConfig())
        assert [x.job_id for x in r.records] == [x.job_id for x in base.records]
        devs.append(_rel(r, base))
    assert devs[0] > 0.02 and devs[1] < -0.02, devs
    assert max(map(abs, devs)) < 0.10, devs  # sensitive, not erratic
    # jitter 0 is the workload itself: bit-identical
    same = simulate(CLUSTER, jitter_compute(w, 0.0, seed=1), "lwf1_srsf1", SimConfig())
    assert same.records == base.records
