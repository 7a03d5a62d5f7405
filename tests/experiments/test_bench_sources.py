"""The benchmark's Tiresias 2,400-job and Grouper scenarios are the experiment drivers' own
workloads, job for job, with the same figures for the same scheduler."""

from __future__ import annotations

import grouper_repro
import pytest
import tiresias_runs

from envs.sim import simulate
from envs.sim.grouper import GrouperConfig, simulate_cojobs
from evaluation.bench.scenarios import V1
from evaluation.compose import compose
from evaluation.kinds import run_task
from evaluation.pipeline import Plan, make_plan


def _plan(name: str, stack: str) -> Plan:
    sc = next(s for s in V1 if s.name == name)
    cfg, _ = compose(sc.overrides, {"stacks": [stack], "seeds": list(sc.seeds)})
    return make_plan(cfg)


def test_tiresias_2400_is_the_drivers_stress_trace_with_its_figures() -> None:
    plan = _plan("tiresias-2400", "psrsf:count_fs")
    w = tiresias_runs.stress_workload()
    got = plan.prepared[0].workload
    assert got is not None and len(got) == len(w) == 2400
    assert got.jobs == w.jobs  # job for job: ids, submit times, models, iterations, GPUs
    assert plan.cluster == tiresias_runs.STRESS_CLUSTER
    task = plan.tasks[0]
    assert task.sim_config.fidelity == tiresias_runs.JOB.fidelity
    out = run_task(task)
    ref = simulate(tiresias_runs.STRESS_CLUSTER, w, "psrsf:count_fs", tiresias_runs.JOB)
    assert list(out.finish_s) == [r.finish_ms / 1000.0 for r in ref.records]  # bit for bit
    assert float(out.jct_s.mean()) * 1000.0 == pytest.approx(ref.summary()["avg_jct_ms"], rel=1e-12)


def test_grouper_40cojobs_is_the_drivers_full_scale_workload() -> None:
    plan = _plan("grouper-40cojobs", "grouper:baraat")
    p = plan.prepared[0]
    assert p.cojobs == grouper_repro.workload("full")
    assert p.cojob_config == GrouperConfig()  # grouper_repro's defaults: unlimited, barrier
    out = run_task(plan.tasks[0])
    ref = simulate_cojobs(grouper_repro.workload("full"), "baraat", GrouperConfig())
    assert list(out.finish_s) == [s.complete_ms / 1000.0 for s in ref.stages]  # bit for bit
    assert float(out.jct_s.mean()) * 1000.0 == pytest.approx(ref.avg_sct_ms(), rel=1e-12)
