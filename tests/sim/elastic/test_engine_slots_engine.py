"""The engine hooks the slot loop uses: ``Simulator.run_until`` and ``ps_servers``."""

from __future__ import annotations

import pytest

from envs.sim import ClusterSpec, CommArch, JobSpec, ModelProfile, NetworkSpec, SimConfig, Workload
from envs.sim.engine import SimulationError, Simulator
from envs.sim.errors import ConfigError
from envs.sim.stacks import make_stack
from envs.sim.workload import builtin_ada_srsf

B, M, FW, BW = 1.0, 12.0, 3.0, 5.0


def _ada(n: int = 40) -> tuple[ClusterSpec, Workload]:
    wl = builtin_ada_srsf(1)
    return ClusterSpec(), Workload(wl.jobs[:n], name="ada-40")


@pytest.mark.parametrize("stack", ["lwf1_adasrsf", "ff_srsf1", "ls_fs"])
def test_run_until_then_run_equals_one_run(stack: str) -> None:
    cluster, wl = _ada()
    whole = Simulator(cluster, wl, make_stack(stack)).run()
    sim = Simulator(cluster, wl, make_stack(stack))
    for until in (0.0, 1234.5, 50_000.0, 50_000.0, 400_000.0):
        sim.run_until(until)
        assert sim.now == until
    paused = sim.run()
    assert paused.records == whole.records
    assert paused.makespan_ms == whole.makespan_ms


def test_run_until_keeps_unfinished_jobs_and_refuses_going_back() -> None:
    cluster = ClusterSpec(2, 1, network=NetworkSpec(0.0, B, 0.0))
    m = ModelProfile("m", M, 1000.0, 16, FW, BW)
    job = JobSpec(0, 0.0, m, 10, 2, CommArch.PS, num_ps=1)  # 8 + 12 ms per iteration
    sim = Simulator(cluster, Workload((job,)), make_stack("ff_fs"))
    sim.run_until(50.0)
    (j,) = sim.jobs
    assert j.iterations_done == 2 and j.last_sync_ms == 40.0
    with pytest.raises(SimulationError, match="before now"):
        sim.run_until(10.0)
    assert sim.run().records[0].jct_ms == pytest.approx(200.0)
    with pytest.raises(SimulationError):
        sim.run_until(500.0)


def test_ps_servers_put_the_ps_where_told() -> None:
    cluster = ClusterSpec(3, 1, network=NetworkSpec(0.0, B, 0.0))
    m = ModelProfile("m", M, 1000.0, 16, FW, BW)
    job = JobSpec(0, 0.0, m, 1, 1, CommArch.PS, num_ps=1)
    # default rule: the PS sits with the only worker -> free exchange, 8 ms
    assert Simulator(cluster, Workload((job,)), make_stack("ff_fs")).run().records[0].jct_ms == 8.0
    sim = Simulator(cluster, Workload((job,)), make_stack("ff_fs"), ps_servers={0: [2]})
    assert sim.run().records[0].jct_ms == pytest.approx(8.0 + M * B)  # push + pull, full duplex
    for bad, match in (({0: [5]}, "servers"), ({0: [1, 2]}, "2 servers"), ({7: [1]}, "not a PS")):
        with pytest.raises(ConfigError, match=match):
            Simulator(cluster, Workload((job,)), make_stack("ff_fs"), SimConfig(), ps_servers=bad)
