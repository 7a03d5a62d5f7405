"""FAST fidelity (iteration merging): what it must keep exactly, whatever its bias."""

from __future__ import annotations

import numpy as np
import pytest

from envs.sim import (
    ClusterSpec,
    Fidelity,
    FidelityOptions,
    RunOptions,
    SimConfig,
    Workload,
    simulate,
)
from envs.sim.errors import ConfigError
from envs.sim.workload import builtin_ada_srsf, scale_workload

CLUSTER = ClusterSpec()


def _subset(w: Workload, every: int = 4) -> Workload:
    return Workload(tuple(j for j in w.jobs if j.job_id % every == 0), name="subset")


@pytest.mark.parametrize("stack", ["lwf1_adasrsf", "lwf1_srsf1", "ff_adasrsf"])
def test_fast_with_one_iteration_per_step_is_full(stack: str) -> None:
    w = _subset(builtin_ada_srsf(0))
    shortest = min(j.iterations for j in w.jobs)
    full = simulate(CLUSTER, w, stack, SimConfig())
    fast = simulate(
        CLUSTER,
        w,
        stack,
        SimConfig(fidelity=FidelityOptions(level=Fidelity.FAST, fast_min_steps=shortest)),
    )
    assert fast.extra["iterations_per_step"] == 1
    np.testing.assert_array_equal(fast.jcts_ms(), full.jcts_ms())


@pytest.mark.parametrize("stack", ["lwf1_adasrsf", "ls_adasrsf", "lwf1_srsf2"])
def test_fast_merges_steps_and_keeps_every_invariant(stack: str) -> None:
    w = scale_workload(_subset(builtin_ada_srsf(1)), 10, 10)
    cfg = SimConfig(
        fidelity=FidelityOptions(level=Fidelity.FAST, fast_min_steps=20),
        run=RunOptions(check_invariants=True),
    )
    res = simulate(CLUSTER, w, stack, cfg)
    k = res.extra["iterations_per_step"]
    assert k == min(j.iterations for j in w.jobs) // 20 > 1
    assert res.config["fidelity"]["level"] == "fast"
    assert sorted(r.job_id for r in res.records) == sorted(j.job_id for j in w.jobs)
    for r, j in zip(res.records, w.jobs, strict=True):
        # merged steps conserve the work: the job still needs its whole compute critical path
        assert r.iterations == j.iterations
        assert r.jct_ms >= j.iterations * j.model.compute_ms - 1e-6
    python = SimConfig(run=RunOptions(engine="python"))  # the same engine as res
    full = simulate(CLUSTER, w, stack, python)
    assert res.events < full.events / 2


def test_fast_needs_continuous_time() -> None:
    with pytest.raises(ConfigError, match="continuous"):
        SimConfig.reference(fidelity=Fidelity.FAST)
    with pytest.raises(ConfigError, match="fast_min_steps"):
        SimConfig(fidelity=FidelityOptions(fast_min_steps=0))
