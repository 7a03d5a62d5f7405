"""Parameter-server jobs in the contention engine: hand-computed oracles."""

from __future__ import annotations

import numpy as np
import pytest

from envs.sim import (
    ClusterSpec,
    CommArch,
    JobSpec,
    ModelProfile,
    NetworkSpec,
    RunOptions,
    SimConfig,
    Workload,
)
from envs.sim.engine import Simulator
from envs.sim.errors import WorkloadError
from envs.sim.stacks import SchedulerStack, make_stack

B, ETA = 1.0, 0.5  # ms/MB
M = 12.0  # MB
FW, BW = 3.0, 5.0


class Pinned:
    """A placer that puts each job on the GPUs given for its id."""

    name = "pinned"
    comm_estimate_ms_per_mb = None
    reads_load = False
    randomised = False

    def __init__(self, where: dict[int, list[int]]) -> None:
        self.where = where

    def place(self, job, cluster, rng):  # type: ignore[no-untyped-def]
        return list(self.where[job.job_id])


def _cluster(servers: int = 3, gpus: int = 2) -> ClusterSpec:
    return ClusterSpec(servers, gpus, network=NetworkSpec(0.0, B, ETA))


def _model(name: str = "m") -> ModelProfile:
    return ModelProfile(name, M, 1000.0, 16, FW, BW)


def _run(jobs: list[JobSpec], where: dict[int, list[int]], comm: str = "fs") -> dict[int, float]:
    base = make_stack(f"ff_{comm}")
    stack = SchedulerStack("pinned", base.order, Pinned(where), base.comm)
    sim = Simulator(
        _cluster(), Workload(tuple(jobs)), stack, SimConfig(run=RunOptions(check_invariants=True))
    )
    return {r.job_id: r.jct_ms for r in sim.run().records}


def _ps(job_id: int, workers: int, ps: int, iters: int = 1) -> JobSpec:
    return JobSpec(job_id, 0.0, _model(), iters, workers, CommArch.PS, num_ps=ps)


@pytest.mark.parametrize(
    ("gpus", "ps", "busiest_mb"),
    [
        ([0, 2], 1, M),  # w1 on server 1 pushes M to the PS on server 0 and pulls M back
        ([0, 2], 2, M),  # one PS per server: each NIC carries M/2 push + M/2 pull each way
        ([0, 1, 2], 1, M),  # only the remote worker's traffic crosses NICs
        ([0, 1, 2], 3, 4 * M / 3),  # PSs on servers 0, 0, 1: 2 x (M/3) x 2 each way
        ([0, 1], 2, 0.0),  # one server: free
    ],
)
def test_ps_iteration_time(gpus: list[int], ps: int, busiest_mb: float) -> None:
    jct = _run([_ps(0, len(gpus), ps, iters=3)], {0: gpus})[0]
    assert jct == pytest.approx(3 * (FW + BW + B * busiest_mb))


def test_ps_job_contends_with_an_allreduce_on_the_shared_nic() -> None:
    # PS job: workers on servers 0 and 1, PS on server 0 -> M over both NICs.
    # All-reduce job on servers 1 and 2 -> M over both NICs.  Both start after FW + BW and
    # share server 1's NIC (k = 2): each moves at 1/(2B + ETA) until both end together.
    ps = _ps(0, 2, 1)
    ar = JobSpec(1, 0.0, _model("ar"), 1, 2)
    jct = _run([ps, ar], {0: [0, 2], 1: [3, 4]})
    both = FW + BW + M * (2 * B + ETA)
    assert jct[0] == pytest.approx(both)
    assert jct[1] == pytest.approx(both)


def test_srsf1_serialises_a_ps_exchange_behind_an_allreduce() -> None:
    ps = _ps(0, 2, 1)
    ar = JobSpec(1, 0.0, _model("ar"), 1, 2)
    # equal SRSF keys: the earlier-placed job (the PS job) goes first
    jct = _run([ps, ar], {0: [0, 2], 1: [3, 4]}, comm="srsf1")
    assert jct[0] == pytest.approx(FW + BW + B * M)
    assert jct[1] == pytest.approx(FW + BW + 2 * B * M)


def test_unequal_nic_shares() -> None:
    # 3 workers: two on server 0, one on server 1; 3 PSs on servers 0, 0, 1 -> 4M/3 on both
    # NICs.  A concurrent all-reduce over servers 1, 2 doubles server 1's count; the PS task's
    # rate is set there: 1 / ((4/3)(2B + ETA)) of its 4M/3 MB per ms... both end when done.
    ps = _ps(0, 3, 3)
    ar = JobSpec(1, 0.0, _model("ar"), 1, 2)
    jct = _run([ps, ar], {0: [0, 1, 2], 1: [3, 4]})
    # both share server 1 (k=2) from FW+BW on.  PS needs (4M/3)(2B+ETA) ms, all-reduce
    # M(2B+ETA); the all-reduce ends first, then the PS finishes its rest alone at 1/B.
    t_ar = M * (2 * B + ETA)
    assert jct[1] == pytest.approx(FW + BW + t_ar)
    moved = t_ar / (2 * B + ETA)  # MB of the busiest NIC moved by then
    rest = 4 * M / 3 - moved
    assert jct[0] == pytest.approx(FW + BW + t_ar + B * rest)


def test_ps_spec_validation() -> None:
    with pytest.raises(WorkloadError, match="num_ps"):
        JobSpec(7, 0.0, _model(), 1, 2, CommArch.PS)
    with pytest.raises(WorkloadError, match="num_ps"):
        JobSpec(7, 0.0, _model(), 1, 2, num_ps=2)


def test_global_batch_stays_fixed() -> None:
    m = _model().with_batch(4)
    assert (m.forward_ms, m.backward_ms) == (FW / 4, BW / 4)
    assert np.isclose(m.with_batch(16).forward_ms, FW)
