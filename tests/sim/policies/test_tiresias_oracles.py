"""Tiresias's worked example and the Gittins index table, as exact oracles.

The 2-GPU, 3-job example (``envs/sim/data/tiresias/tiresias_toy.json``, a reconstruction
checked by exhaustive simulation in the shared reference note §1.5): J1 (2 GPUs, 2 slots),
J2 (1 GPU, 8), J3 (2 GPUs, 6), all at t = 0.  One slot = one iteration = 1,000 ms here, so
each policy that re-ranks every slot uses a 1,000 ms quantum.
"""

from __future__ import annotations

import json
from fractions import Fraction
from importlib import resources
from typing import Any

import pytest

from envs.sim import (
    ClusterSpec,
    Fidelity,
    FidelityOptions,
    JobSpec,
    ModelProfile,
    SimConfig,
    SimResult,
    Simulator,
    Workload,
    simulate,
)
from envs.sim.config import TiresiasConfig
from envs.sim.policies.base import JobOrder
from envs.sim.policies.comm import FairShare
from envs.sim.policies.gittins import GittinsIndex, builtin_distribution
from envs.sim.policies.preemptive import LAS2D, PreemptiveSRSF
from envs.sim.policies.skew import CountPlacer
from envs.sim.policies.tiresias import DiscretizedGittins, DiscretizedLAS
from envs.sim.stacks import SchedulerStack

SLOT = 1000.0  # ms
FIDELITIES = [Fidelity.FULL, Fidelity.JOB]


def _toy() -> dict[str, Any]:
    ref = resources.files("envs.sim") / "data" / "tiresias" / "tiresias_toy.json"
    return dict(json.loads(ref.read_text(encoding="utf-8")))


TOY = _toy()
UNIT = ModelProfile("unit", 1.0, 1000.0, 1, SLOT / 2, SLOT / 2)  # one iteration = one slot


def toy_workload() -> Workload:
    jobs = tuple(
        JobSpec(
            i, float(j["arrival"]) * SLOT, UNIT, int(j["duration"]), int(j["gpus"]), name=j["id"]
        )
        for i, j in enumerate(TOY["jobs"])
    )
    return Workload(jobs, name="tiresias-toy")


CLUSTER = ClusterSpec(1, int(TOY["cluster_gpus"]), gpu_memory_mb=1000.0)


def run_toy(order: JobOrder, fidelity: Fidelity, **cfg: Any) -> SimResult:
    stack = SchedulerStack(order.name, order, CountPlacer(), FairShare())
    config = SimConfig.from_flat(
        fidelity=fidelity, check_invariants=fidelity is Fidelity.FULL, **cfg
    )
    return Simulator(CLUSTER, toy_workload(), stack, config).run()


def jcts(res: SimResult) -> list[float]:
    return [r.jct_ms / SLOT for r in res.records]


def slots(res: SimResult) -> str:
    """The running job in every slot, as the oracle file writes it ("1 1 2 ...")."""
    spans = res.extra["run_spans_ms"]
    out = []
    for k in range(round(res.makespan_ms / SLOT)):
        mid = (k + 0.5) * SLOT
        on = [jid + 1 for jid, ss in spans.items() for a, b in ss if a <= mid < b]
        assert len(on) == 1, f"slot {k + 1}: jobs {on} run (each slot runs one job here)"
        out.append(str(on[0]))
    return " ".join(out)


def expected(prefix: str) -> dict[str, Any]:
    (key,) = [k for k in TOY["expected"] if k.startswith(prefix)]
    return dict(TOY["expected"][key])


def gittins(delta: float) -> DiscretizedGittins:
    """Continuous 2D-Gittins of the example: one queue, textbook index at a fixed
    look-ahead over the duration distribution {2, 6, 8}, age = executed time, per slot."""
    cfg = TiresiasConfig(1, (), 0.0, delta, "textbook")
    return DiscretizedGittins(cfg, [2.0, 6.0, 8.0], gpu_age=False, quantum_ms=SLOT)


@pytest.mark.parametrize("fidelity", FIDELITIES)
def test_srsf_28_over_3(fidelity: Fidelity) -> None:
    res = run_toy(PreemptiveSRSF(quantum_ms=SLOT), fidelity)
    exp = expected("SRSF")
    assert jcts(res) == exp["jct"] == [2, 10, 16]
    assert Fraction(sum(exp["jct"]), 3) == Fraction(28, 3)
    assert slots(res) == exp["slots"]


@pytest.mark.parametrize("fidelity", FIDELITIES)
def test_2d_las_35_over_3(fidelity: Fidelity) -> None:
    res = run_toy(LAS2D(quantum_ms=SLOT), fidelity)
    exp = expected("2D-LAS")
    assert jcts(res) == exp["jct"] == [5, 14, 16]
    assert slots(res) == exp["slots"]
    # every change of running job in the slot sequence is a preemption or a completion
    assert res.extra["preemptions"] == 10 == res.extra["resumes"]


@pytest.mark.parametrize("fidelity", FIDELITIES)
@pytest.mark.parametrize("delta", [2.0, 3.0])
def test_2d_gittins_10(fidelity: Fidelity, delta: float) -> None:
    res = run_toy(gittins(delta), fidelity)
    exp = expected("2D-Gittins")
    assert jcts(res) == exp["jct"] == [2, 12, 16]
    assert sum(jcts(res)) / 3 == 10.0
    assert slots(res) == exp["slots"]


@pytest.mark.parametrize("fidelity", FIDELITIES)
def test_1d_las_check(fidelity: Fidelity) -> None:
    assert jcts(run_toy(LAS2D(quantum_ms=SLOT, gpu_age=False), fidelity)) == [4, 16, 14]


@pytest.mark.parametrize("fidelity", FIDELITIES)
def test_mlfq_thresholds_2_4(fidelity: Fidelity) -> None:
    """Upstream's dlas-gpu with queue limits [2, 4] GPU-s (K = 3, knob off): (5, 12, 16)."""
    res = run_toy(DiscretizedLAS(TiresiasConfig(3, (2.0, 4.0), 0.0)), fidelity)
    up = TOY["upstream_simulator_as_implemented"]
    assert jcts(res) == up["dlas-gpu with queue_limit patched to [2, 4, 18000] (K=3)"]["jct"]
    # hand-derived schedule: J1 [0,1) demoted; J2 [1,3); J3 [3,4); J1 [4,5) done; J2 [5,7);
    # J3 [7,8); J2 [8,12) done; J3 [12,16)
    assert slots(res) == "1 2 2 3 1 2 2 3 2 2 2 2 3 3 3 3"
    assert res.extra["preemptions_by_job"] == {0: 1, 1: 2, 2: 2}


@pytest.mark.parametrize(
    ("stack", "key"),
    [
        ("fifo:count_fs", "fifo"),
        ("psrsf:count_fs", "shortest-gpu"),
        ("dlas-upstream:count_fs", "dlas-gpu (default thresholds 3250/7200)"),
        ("dgittins-upstream:count_fs", "dlas-gpu-gittins"),
    ],
)
def test_named_upstream_stacks_match_upstream_on_toy(stack: str, key: str) -> None:
    """With upstream's default thresholds nothing is demoted: every policy runs FIFO."""
    res = simulate(
        CLUSTER, toy_workload(), stack, SimConfig(fidelity=FidelityOptions(level=Fidelity.JOB))
    )
    assert jcts(res) == TOY["upstream_simulator_as_implemented"][key]


@pytest.mark.parametrize("fidelity", FIDELITIES)
def test_restore_cost_delays_each_resume(fidelity: Fidelity) -> None:
    """MLFQ [2, 4] with a 0.5-slot restore: each of the 5 resumptions costs 0.5 slot of its
    job's time on GPUs, and the schedule is decided again at the new times."""
    res = run_toy(
        DiscretizedLAS(TiresiasConfig(3, (2.0, 4.0), 0.0)), fidelity, preemption_cost_ms=SLOT / 2
    )
    spans = res.extra["run_spans_ms"]
    for rec in res.records:
        held = sum(b - a for a, b in spans[rec.job_id])
        resumes = len(spans[rec.job_id]) - 1
        assert resumes == res.extra["preemptions_by_job"][rec.job_id]
        assert held == pytest.approx(rec.iterations * SLOT + resumes * SLOT / 2)
    assert res.extra["preemptions"] == res.extra["resumes"] > 0


# ---------------------------------------------------------------- the Gittins index table

#: upstream ``get_gittins_index`` over ``yarn-gput1000.csv`` with Δ = 3,250 (reference note
#: §1.2): attained GPU-seconds -> index
UPSTREAM_TABLE = {
    0: 299.701,
    500: 249.818,
    1_000: 191.515,
    2_226: 119.263,
    3_250: 87.449,
    5_000: 58.821,
    10_000: 29.940,
    50_000: 5.463,
    100_000: 4.066,
    1_000_000: 0.904,
}


@pytest.mark.parametrize(("age", "value"), sorted(UPSTREAM_TABLE.items()))
def test_upstream_gittins_table(age: int, value: float) -> None:
    index = GittinsIndex(builtin_distribution(), 3250.0, "upstream")
    assert index(age) == pytest.approx(value, abs=5e-4)


def test_upstream_gittins_is_zero_beyond_the_largest_sample() -> None:
    d = builtin_distribution()
    index = GittinsIndex(d, 3250.0, "upstream")
    assert len(d) == 1001 and d[-1] == 53_294_624
    assert index(d[-1]) == 0.0 and index(2 * d[-1]) == 0.0


def test_textbook_gittins_by_hand() -> None:
    """{2, 6, 8}, Δ = 2: G(0) = (1/3) / 2; G(1) = (1/3) / (5/3); G(2) = G(3) = 0 (no job can
    end within 2 more); G(4) = (1/2) / 2; G(7) = 1 / 1; beyond 8: 0."""
    g = GittinsIndex([2.0, 6.0, 8.0], 2.0)
    assert [g(a) for a in (0, 1, 2, 3, 4, 7, 8)] == pytest.approx([1 / 6, 0.2, 0, 0, 0.25, 1, 0])


def test_named_configs() -> None:
    paper, up = TiresiasConfig.paper(), TiresiasConfig.upstream()
    assert (paper.num_queues, paper.thresholds_gpu_s, paper.promote_knob) == (2, (3600.0,), 8.0)
    assert (up.num_queues, up.thresholds_gpu_s, up.promote_knob) == (3, (3250.0, 7200.0), 0.0)
    assert (up.gittins_delta_gpu_s, up.gittins_formula) == (3250.0, "upstream")
