"""Compute windows are an exact shortcut: switching them off must not change one number."""

from __future__ import annotations

import numpy as np
import pytest

from envs.sim import ClusterSpec, Fidelity, FidelityOptions, RunOptions, SimConfig, simulate
from envs.sim.stacks import STACKS
from envs.sim.workload import builtin_ada_srsf, scale_workload

CLUSTER = ClusterSpec()


@pytest.mark.parametrize("mode", ["correct", "reference"])
@pytest.mark.parametrize("stack", list(STACKS))
def test_windows_change_nothing(stack: str, mode: str) -> None:
    w = builtin_ada_srsf(1)
    on = simulate(CLUSTER, w, stack, SimConfig.named(mode, engine="python"))
    off = simulate(CLUSTER, w, stack, SimConfig.named(mode, compute_windows=False, engine="python"))
    np.testing.assert_array_equal(on.jcts_ms(), off.jcts_ms())
    assert [r.start_ms for r in on.records] == [r.start_ms for r in off.records]
    assert on.events < off.events  # the shortcut is taken


@pytest.mark.parametrize("stack", ["lwf1_adasrsf", "ff_adasrsf", "ls_adasrsf"])
def test_windows_keep_invariants_with_float_times(stack: str) -> None:
    """Paper (non-integer) fw/bw times and merged steps: windows open, close and get split."""
    from dataclasses import replace

    from envs.sim import Workload
    from envs.sim.models import PAPER_MODELS

    base = scale_workload(builtin_ada_srsf(2), 3, 3)
    jobs = tuple(
        replace(j, model=PAPER_MODELS[j.model.name]) for j in base.jobs if j.job_id % 2 == 0
    )
    w = Workload(jobs, name="paper-times")
    on = simulate(
        CLUSTER, w, stack, SimConfig(run=RunOptions(engine="python", check_invariants=True))
    )
    off = simulate(
        CLUSTER,
        w,
        stack,
        SimConfig(fidelity=FidelityOptions(compute_windows=False), run=RunOptions(engine="python")),
    )
    np.testing.assert_array_equal(on.jcts_ms(), off.jcts_ms())
    fast_on = simulate(
        CLUSTER,
        w,
        stack,
        SimConfig(
            fidelity=FidelityOptions(level=Fidelity.FAST, fast_min_steps=10),
            run=RunOptions(engine="python"),
        ),
    )
    fast_off = simulate(
        CLUSTER,
        w,
        stack,
        SimConfig(
            fidelity=FidelityOptions(level=Fidelity.FAST, fast_min_steps=10, compute_windows=False),
            run=RunOptions(engine="python"),
        ),
    )
    np.testing.assert_array_equal(fast_on.jcts_ms(), fast_off.jcts_ms())
