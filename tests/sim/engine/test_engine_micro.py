"""Hand-built micro scenarios for the event engine, checked against hand-computed oracles.

Numbers are chosen to be easy: b = 1 ms/MB, eta = 0.5 ms/MB, so one task alone moves
1 MB/ms and two tasks sharing a NIC move 1 / (2b + eta) = 0.4 MB/ms each.  The AdaDUAL
threshold b / (2 (b + eta)) is then exactly 1/3.

The contention oracles are the Ada-SRSF paper's Eqs. (10a)/(10b) (smaller task c1 first,
larger c2 joins at t <= b M1), (11a)/(11b) (larger c2 first, smaller c1 joins at
t <= b (M2 - M1)) and (12a)/(12b) (c1 joins at t > b (M2 - M1)); times are relative to the
first all-reduce's start.  All runs use the default, correct, continuous-time model, except
the tick-mode section at the end.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import numpy as np
import pytest

from envs.sim import (
    ClusterSpec,
    JobSpec,
    ModelProfile,
    NetworkSpec,
    QuirkOptions,
    RunOptions,
    SchedulerStack,
    SimConfig,
    Simulator,
    Workload,
    WorkloadError,
    make_stack,
    simulate,
)
from envs.sim.engine import SimulationError
from envs.sim.policies.comm import AdaDual
from envs.sim.results import SimResult

B, ETA = 1.0, 0.5
NET = NetworkSpec(a_ms=0.0, b_ms_per_mb=B, eta_ms_per_mb=ETA)
CHECKED = SimConfig(run=RunOptions(check_invariants=True))


def approx(x: float) -> object:
    return pytest.approx(x, rel=1e-12, abs=1e-9)


def model(
    size_mb: float = 10.0, fw: float = 1.0, bw: float = 2.0, mem: float = 10.0
) -> ModelProfile:
    return ModelProfile(f"m{size_mb:g}-{fw:g}-{bw:g}", size_mb, mem, 1, fw, bw)


def job(
    job_id: int,
    m: ModelProfile,
    *,
    gpus: int = 1,
    iters: int = 1,
    submit: float = 0.0,
) -> JobSpec:
    return JobSpec(job_id=job_id, submit_ms=submit, model=m, iterations=iters, num_gpus=gpus)


def cluster(
    servers: int, gpus_per_server: int, *, mem: float = 100.0, net: NetworkSpec = NET
) -> ClusterSpec:
    return ClusterSpec(
        num_servers=servers, gpus_per_server=gpus_per_server, gpu_memory_mb=mem, network=net
    )


def jcts(result: SimResult) -> dict[int, float]:
    return {r.job_id: r.jct_ms for r in result.records}


@dataclass
class Pinned:
    """A placer that puts job ``i`` on ``gpus[i]`` (when they have memory), so a test can
    isolate the network from GPU time-sharing."""

    gpus: dict[int, list[int]]
    name: str = "pinned"
    comm_estimate_ms_per_mb: float | None = None
    calls: list[int] = field(default_factory=list)

    def place(self, job: JobSpec, cluster, rng) -> list[int] | None:  # type: ignore[no-untyped-def]
        self.calls.append(job.job_id)
        want = self.gpus[job.job_id]
        need = job.model.gpu_memory_mb
        return list(want) if all(cluster.free_mem_mb[g] >= need for g in want) else None


def pinned(stack_name: str, gpus: dict[int, list[int]]) -> SchedulerStack:
    """The named stack (its order and communication scheduler) with a pinned placer."""
    stack = make_stack(stack_name)
    stack.placer = Pinned(gpus)
    return stack


# 2 servers x 2 GPUs; GPUs 0,1 on server 0 and 2,3 on server 1.  Job 0 on GPUs {0, 2},
# job 1 on GPUs {1, 3}: no GPU is shared, both all-reduces cross the same two NICs.
APART = {0: [0, 2], 1: [1, 3]}


# ------------------------------------------------------------------------------ no contention


@pytest.mark.parametrize("stack", ["ff_fs", "ff_adasrsf", "lwf1_srsf1", "rand_adasrsf"])
def test_single_gpu_job_is_pure_compute(stack: str) -> None:
    # 5 iterations x (3 + 4) ms, no communication; JCT counts from submit.
    w = Workload((job(0, model(fw=3.0, bw=4.0), iters=5, submit=2.5),))
    r = simulate(cluster(1, 1), w, stack, CHECKED)
    (rec,) = r.records
    assert rec.start_ms == 2.5
    assert rec.finish_ms == 2.5 + 35.0
    assert rec.jct_ms == 35.0
    assert rec.servers == 1
    assert r.gpu_utilisation == pytest.approx(35.0 / 37.5)


def test_multi_gpu_job_on_one_server_has_no_communication() -> None:
    w = Workload((job(0, model(size_mb=500.0, fw=3.0, bw=4.0), gpus=4, iters=5),))
    r = simulate(cluster(2, 4), w, "ff_fs", CHECKED)
    (rec,) = r.records
    assert rec.servers == 1
    assert rec.jct_ms == 35.0
    assert rec.gpu_ms == 4 * 35.0


@pytest.mark.parametrize("a_ms", [0.0, 2.0, 0.669])
@pytest.mark.parametrize("stack", ["ff_fs", "ff_adasrsf", "ff_srsf1"])
def test_two_server_job_pays_a_plus_bm_per_iteration(a_ms: float, stack: str) -> None:
    # 2 servers x 1 GPU: the 2-GPU job spans both, so every iteration is
    # fw + bw + (a + b M) = 1 + 2 + (a + 10) ms.
    net = NetworkSpec(a_ms=a_ms, b_ms_per_mb=B, eta_ms_per_mb=ETA)
    w = Workload((job(0, model(size_mb=10.0), gpus=2, iters=3),))
    r = simulate(cluster(2, 1, net=net), w, stack, CHECKED)
    (rec,) = r.records
    assert rec.servers == 2
    assert rec.jct_ms == approx(3 * (3.0 + a_ms + 10.0))


def test_default_network_constants() -> None:
    # b = 0.856 ms/MB: a 2-server job of M = 100 MB, 2 iterations of 1 + 2 ms.
    w = Workload((job(0, model(size_mb=100.0), gpus=2, iters=2),))
    r = simulate(ClusterSpec(num_servers=2, gpus_per_server=1), w, "ff_fs")
    assert r.records[0].jct_ms == approx(2 * (3.0 + 85.6))


# ------------------------------------------------------------------------------ contention


def test_two_equal_transfers_started_together_share_the_nic() -> None:
    # Both all-reduces start at 3 ms; each takes 2 b M + eta M = 25 ms under contention.
    w = Workload((job(0, model(10.0), gpus=2), job(1, model(10.0), gpus=2)))
    r = simulate(cluster(2, 2), w, pinned("ff_fs", APART), CHECKED)
    assert [rec.servers for rec in r.records] == [2, 2]
    assert jcts(r) == {0: approx(3.0 + 25.0), 1: approx(3.0 + 25.0)}


def test_two_transfers_started_together_eq10_t0() -> None:
    # Eq. (10a)/(10b) at t = 0: T1 = (2b + eta) M1 = 25, T2 = T1 + b (M2 - M1) = 45.
    m1, m2 = 10.0, 30.0
    w = Workload((job(0, model(m1), gpus=2), job(1, model(m2), gpus=2)))
    r = simulate(cluster(2, 2), w, pinned("ff_fs", APART), CHECKED)
    t1 = (2 * B + ETA) * m1
    t2 = t1 + B * (m2 - m1)
    assert (t1, t2) == (25.0, 45.0)
    assert jcts(r) == {0: approx(3.0 + t1), 1: approx(3.0 + t2)}


def _staggered(m_first: float, m_second: float, t: float, stack: str = "ff_fs") -> SimResult:
    """Job 0 (M = m_first) all-reduces from 3 ms; job 1 (M = m_second) computes t ms longer
    (backward 2 + t), so its all-reduce is ready at 3 + t."""
    w = Workload(
        (
            job(0, model(m_first, fw=1.0, bw=2.0), gpus=2),
            job(1, model(m_second, fw=1.0, bw=2.0 + t), gpus=2),
        )
    )
    return simulate(cluster(2, 2), w, pinned(stack, APART), CHECKED)


@pytest.mark.parametrize("t", [0.0, 4.0, 7.5, 10.0])
def test_smaller_first_larger_joins_at_t_eq10(t: float) -> None:
    # C1: c1 (M1 = 10) at 0, c2 (M2 = 30) at t in [0, b M1].
    m1, m2 = 10.0, 30.0
    big_t1 = t + 2 * B * (m1 - t / B) + ETA * (m1 - t / B)  # (10a)
    big_t2 = big_t1 + B * (m2 - (m1 - t / B))  # (10b)
    if t == 4.0:
        assert (big_t1, big_t2) == (19.0, 43.0)  # by hand: 4 + 2.5 * 6, then + 24 alone
    r = _staggered(m1, m2, t)
    assert jcts(r) == {0: approx(3.0 + big_t1), 1: approx(3.0 + big_t2)}


@pytest.mark.parametrize("t", [0.0, 4.0, 20.0])
def test_larger_first_smaller_joins_at_t_eq11(t: float) -> None:
    # C2a: c2 (M2 = 30) at 0, c1 (M1 = 10) at t in [0, b (M2 - M1)].
    m1, m2 = 10.0, 30.0
    big_t1 = t + 2 * B * m1 + ETA * m1  # (11a)
    big_t2 = big_t1 + B * (m2 - m1 - t / B)  # (11b)
    if t == 4.0:
        assert (big_t1, big_t2) == (29.0, 45.0)
    r = _staggered(m2, m1, t)
    # job 0 carries c2 (the larger), job 1 carries c1
    assert jcts(r) == {0: approx(3.0 + big_t2), 1: approx(3.0 + big_t1)}


@pytest.mark.parametrize("t", [25.0, 28.0])
def test_larger_first_smaller_joins_late_eq12(t: float) -> None:
    # C2b: c1 joins at t in (b (M2 - M1), b M2]: c2 ends first.
    m1, m2 = 10.0, 30.0
    big_t2 = t + 2 * B * (m2 - t / B) + ETA * (m2 - t / B)  # (12b)
    big_t1 = big_t2 + B * (m1 - (m2 - t / B))  # (12a)
    if t == 25.0:
        assert (big_t2, big_t1) == (37.5, 42.5)
    r = _staggered(m2, m1, t)
    assert jcts(r) == {0: approx(3.0 + big_t2), 1: approx(3.0 + big_t1)}


def test_latency_a_is_paid_after_the_bytes_and_frees_the_nic() -> None:
    # As test_two_transfers_started_together_eq10_t0 with a = 2: job 0's bytes are through at
    # 28 and its barrier passes at 30; job 1 runs alone from 28 (not 30) and ends at 48 + 2.
    net = NetworkSpec(a_ms=2.0, b_ms_per_mb=B, eta_ms_per_mb=ETA)
    w = Workload((job(0, model(10.0), gpus=2), job(1, model(30.0), gpus=2)))
    r = simulate(cluster(2, 2, net=net), w, pinned("ff_fs", APART), CHECKED)
    assert jcts(r) == {0: approx(30.0), 1: approx(50.0)}


def test_three_way_contention_rate() -> None:
    # k = 3: each moves 1 / (3b + 2 eta) = 1/4 MB/ms; 3 x 10 MB end together after 40 ms.
    w = Workload(tuple(job(i, model(10.0), gpus=2) for i in range(3)))
    gpus = {0: [0, 3], 1: [1, 4], 2: [2, 5]}
    r = simulate(cluster(2, 3), w, pinned("ff_fs", gpus), CHECKED)
    assert jcts(r) == {0: approx(43.0), 1: approx(43.0), 2: approx(43.0)}


def test_contention_counts_the_busiest_server() -> None:
    # Job 0 spans servers 0,1; job 1 spans 1,2; job 2 spans 2,0.  Every NIC carries 2 tasks,
    # so all three move at 0.4 MB/ms: 10 MB in 25 ms.
    w = Workload(tuple(job(i, model(10.0), gpus=2) for i in range(3)))
    gpus = {0: [0, 2], 1: [3, 4], 2: [5, 1]}
    r = simulate(cluster(3, 2), w, pinned("ff_fs", gpus), CHECKED)
    assert jcts(r) == {0: approx(28.0), 1: approx(28.0), 2: approx(28.0)}


def test_disjoint_servers_do_not_contend() -> None:
    w = Workload((job(0, model(10.0), gpus=2), job(1, model(10.0), gpus=2)))
    gpus = {0: [0, 1], 1: [2, 3]}
    r = simulate(cluster(4, 1), w, pinned("ff_fs", gpus), CHECKED)
    assert jcts(r) == {0: approx(13.0), 1: approx(13.0)}


# ------------------------------------------------------------------------------ SRSF(n)


def test_srsf1_serialises_transfers_theorem1() -> None:
    # Theorem 1's optimum t = t1: c2 starts exactly when c1 ends; T1 = b M1, T2 = b M1 + b M2.
    m1, m2 = 10.0, 30.0
    w = Workload((job(0, model(m1), gpus=2), job(1, model(m2), gpus=2)))
    r = simulate(cluster(2, 2), w, pinned("ff_srsf1", APART), CHECKED)
    assert jcts(r) == {0: approx(3.0 + B * m1), 1: approx(3.0 + B * m1 + B * m2)}


def test_srsf1_admits_in_srsf_order_not_placement_order() -> None:
    # Job 0 (placed first, at 0) is ready to all-reduce at 2 ms with 2 more iterations of
    # service left (8 GPU-ms); job 1 (submitted at 1, one iteration of 0.5 + 0.5) is ready at 2
    # with none left.  SRSF order: job 1's 10 MB goes first (2 -> 12); job 0's waits (12 -> 22),
    # then 2 more iterations of 2 + 10 ms each: 46.  (Placement order would give job 1 12 -> 22.)
    w = Workload(
        (
            job(0, model(10.0, fw=1.0, bw=1.0), gpus=2, iters=3),
            job(1, model(10.0, fw=0.5, bw=0.5), gpus=2, iters=1, submit=1.0),
        )
    )
    r = simulate(cluster(2, 2), w, pinned("ff_srsf1", APART), CHECKED)
    assert jcts(r) == {0: approx(46.0), 1: approx(11.0)}


def test_srsf2_allows_two_but_not_three() -> None:
    # SRSF(2): two 10 MB tasks share (25 ms, end at 28); the third waits and runs alone.
    w = Workload(tuple(job(i, model(10.0), gpus=2) for i in range(3)))
    gpus = {0: [0, 3], 1: [1, 4], 2: [2, 5]}
    r = simulate(cluster(2, 3), w, pinned("lwf1_srsf2", gpus), CHECKED)
    assert jcts(r) == {0: approx(28.0), 1: approx(28.0), 2: approx(38.0)}


# ------------------------------------------------------------------------------ named FF stacks
# 2 servers x 1 GPU with room for both jobs: both 2-GPU jobs land on GPUs {0, 1} (FF) and
# time-share them.  Equal service, so job 0 (placed first) computes 0 -> 3, job 1 3 -> 6:
# job 1's all-reduce is ready t = 3 ms after job 0's.


def _shared_ff(stack: str, m0: float, m1: float, config: SimConfig = CHECKED) -> SimResult:
    w = Workload((job(0, model(m0), gpus=2), job(1, model(m1), gpus=2)))
    return simulate(cluster(2, 1), w, stack, config)


def test_ff_fs_time_shared_gpus_stagger_eq10() -> None:
    t, m1, m2 = 3.0, 10.0, 30.0
    big_t1 = t + (2 * B + ETA) * (m1 - t / B)  # 20.5
    big_t2 = big_t1 + B * (m2 - (m1 - t / B))  # 43.5
    r = _shared_ff("ff_fs", m1, m2)
    assert [rec.start_ms for rec in r.records] == [0.0, 0.0]
    assert jcts(r) == {0: approx(3.0 + big_t1), 1: approx(3.0 + big_t2)}


@pytest.mark.parametrize("stack", ["ff_srsf1", "ff_adasrsf"])
def test_ff_larger_new_task_waits(stack: str) -> None:
    # At 6 ms job 0 has 7 MB left; 30 / 7 > 1/3, so AdaDUAL waits like SRSF(1):
    # job 0: 3 -> 13, job 1: 13 -> 43.
    r = _shared_ff(stack, 10.0, 30.0)
    assert jcts(r) == {0: approx(13.0), 1: approx(43.0)}


def test_ff_adasrsf_small_new_task_joins_eq11() -> None:
    # Job 0 (30 MB) has 27 MB left at 6 ms; 5 / 27 < 1/3: job 1 starts at once (Eq. 11, t = 3).
    t, m1, m2 = 3.0, 5.0, 30.0
    big_t1 = t + (2 * B + ETA) * m1  # 15.5
    big_t2 = big_t1 + B * (m2 - m1 - t / B)  # 37.5
    r = _shared_ff("ff_adasrsf", m2, m1)
    assert jcts(r) == {0: approx(3.0 + big_t2), 1: approx(3.0 + big_t1)}


# ------------------------------------------------------------------------------ AdaDUAL boundary


def _adadual_outcomes(m_new: float) -> tuple[dict[int, float], dict[int, float]]:
    """(JCTs if admitted, JCTs if rejected) for _shared_ff('ff_adasrsf', 30, m_new): job 0
    has 27 MB left when job 1 (m_new MB) is ready at 6 ms."""
    rest = 27.0
    # admitted: both at 0.4 MB/ms until job 1 is done, then job 0 alone at 1 MB/ms
    t_new = 6.0 + (2 * B + ETA) * m_new
    admitted = {1: t_new, 0: t_new + B * (rest - m_new)}
    # rejected: job 0 alone to 33 ms, then job 1 alone
    rejected = {0: 33.0, 1: 33.0 + B * m_new}
    return admitted, rejected


@pytest.mark.parametrize(
    "factor, admit", [(0.9, True), (0.999, True), (1.001, False), (1.1, False)]
)
def test_adadual_boundary_in_simulation(factor: float, admit: bool) -> None:
    threshold = B / (2 * (B + ETA))  # 1/3
    m_new = factor * threshold * 27.0  # M_new / M_old = factor * threshold
    admitted, rejected = _adadual_outcomes(m_new)
    r = _shared_ff("ff_adasrsf", 30.0, m_new)
    expected = admitted if admit else rejected
    assert jcts(r) == {k: approx(v) for k, v in expected.items()}


def test_adadual_outcome_oracle_by_hand() -> None:
    # M_new = 8.1 (0.9 x threshold): admitted, job 1 moves 8.1 MB at 0.4 MB/ms (6 -> 26.25),
    # job 0 then has 27 - 8.1 = 18.9 MB left alone (-> 45.15).  Rejected (M_new = 9.9): job 0
    # alone 3 -> 33, then job 1 33 -> 42.9.
    admitted, _ = _adadual_outcomes(8.1)
    _, rejected = _adadual_outcomes(9.9)
    assert admitted == {1: approx(26.25), 0: approx(45.15)}
    assert rejected == {0: 33.0, 1: approx(42.9)}


@pytest.mark.parametrize("inclusive", [False, True])
def test_adadual_well_below_boundary_either_way(inclusive: bool) -> None:
    r = _shared_ff(
        "ff_adasrsf", 30.0, 1.0, SimConfig(quirks=QuirkOptions(adadual_inclusive=inclusive))
    )
    admitted, _ = _adadual_outcomes(1.0)
    assert jcts(r) == {k: approx(v) for k, v in admitted.items()}


@pytest.mark.parametrize("inclusive", [False, True])
def test_adadual_exact_boundary_in_simulation(inclusive: bool) -> None:
    # M_new = 9, M_old = 27: ratio exactly 1/3 (exact in binary floating point).
    admitted, rejected = _adadual_outcomes(9.0)
    r = _shared_ff(
        "ff_adasrsf", 30.0, 9.0, SimConfig(quirks=QuirkOptions(adadual_inclusive=inclusive))
    )
    expected = admitted if inclusive else rejected
    assert jcts(r) == {k: approx(v) for k, v in expected.items()}


@dataclass
class FakeTask:
    job: object
    size_mb: float
    rest_mb: float


@dataclass
class FakeJob:
    spec: JobSpec
    servers: list[int]
    remaining_compute_ms: float = 0.0
    iterations_done: int = 0
    placed_order: int = 0


@dataclass
class FakeNet:
    network: NetworkSpec
    nic_tasks: list[list[FakeTask]]
    probes: list[FakeTask] = field(default_factory=list)

    def remaining_mb(self, task: FakeTask) -> float:  # type: ignore[override]
        self.probes.append(task)
        return task.rest_mb


def _new_job(m_new: float, servers: list[int]) -> FakeJob:
    return FakeJob(job(9, model(m_new), gpus=2), servers)


def test_adadual_admit_exact_boundary_inclusive_vs_strict() -> None:
    old = FakeTask(job=None, size_mb=100.0, rest_mb=30.0)
    net = FakeNet(NET, [[old], []])
    new = _new_job(10.0, [0, 1])  # 10 / 30 == b / (2 (b + eta)) exactly
    assert AdaDual().admit(new, net) is False
    assert AdaDual(inclusive=True).admit(new, net) is True
    assert net.probes == [old, old]  # it asked for the remaining size, not the full size
    below = _new_job(9.99, [0, 1])
    above = _new_job(10.01, [0, 1])
    for policy in (AdaDual(), AdaDual(inclusive=True)):
        assert policy.admit(below, net) is True
        assert policy.admit(above, net) is False


def test_adadual_admit_counts() -> None:
    t1 = FakeTask(None, 100.0, 100.0)
    t2 = FakeTask(None, 100.0, 100.0)
    tiny = _new_job(0.001, [0, 1])
    # no running task on its servers: always admitted, whatever the size
    assert AdaDual().admit(_new_job(1e9, [0, 1]), FakeNet(NET, [[], [], [t1]])) is True
    # two tasks on one of its servers: always rejected, however small
    assert AdaDual().admit(tiny, FakeNet(NET, [[], [t1, t2]])) is False
    assert AdaDual(inclusive=True).admit(tiny, FakeNet(NET, [[t1, t2], []])) is False


def test_adadual_inspects_first_busiest_server() -> None:
    # One task per server: Algorithm 2 compares with the task on the first busy server only.
    small_rest = FakeTask(None, 100.0, 3.0)
    big_rest = FakeTask(None, 100.0, 300.0)
    new = _new_job(10.0, [0, 1])
    assert AdaDual().admit(new, FakeNet(NET, [[small_rest], [big_rest]])) is False
    assert AdaDual().admit(new, FakeNet(NET, [[big_rest], [small_rest]])) is True


# ------------------------------------------------------------------------------ GPU sharing


def _one_gpu(stack: str, *, mem: float = 100.0, job_mem: float = 10.0) -> SimResult:
    # Job 0: 5 iterations x (1 + 1) = 10 ms of service from 0; job 1: 2 x (1 + 1) = 4 ms,
    # submitted at 2.5 while job 0's third task (fw, 2 -> 3) is running.
    w = Workload(
        (
            job(0, model(fw=1.0, bw=1.0, mem=job_mem), iters=5),
            job(1, model(fw=1.0, bw=1.0, mem=job_mem), iters=2, submit=2.5),
        )
    )
    return simulate(cluster(1, 1, mem=mem), w, stack, CHECKED)


def test_gpu_time_sharing_srsf_runs_smaller_remaining_first() -> None:
    # No preemption inside a task: job 1 starts at 3 (job 0 then has 7 ms left > 4), runs
    # 3 -> 7; job 0 resumes 7 -> 14.
    r = _one_gpu("ff_fs")
    assert {rec.job_id: rec.start_ms for rec in r.records} == {0: 0.0, 1: 2.5}
    assert {rec.job_id: rec.finish_ms for rec in r.records} == {0: 14.0, 1: 7.0}
    assert jcts(r) == {0: 14.0, 1: 4.5}
    assert r.makespan_ms == 14.0
    assert r.gpu_utilisation == 1.0


def test_gpu_time_sharing_fifo_order() -> None:
    # FIFO: job 0 keeps the GPU to 10, job 1 runs 10 -> 14.
    r = _one_gpu("fifo:ff_fs")
    assert {rec.job_id: rec.finish_ms for rec in r.records} == {0: 10.0, 1: 14.0}


def test_srsf_switches_when_priorities_cross() -> None:
    # Job 0: 3 iterations x (2 + 2) = 12; job 1 arrives at 4 with 2 x (3 + 3) = 12 ms.  At 4
    # job 0 has 8 left < 12: it keeps the GPU to 12; then job 1 runs 12 -> 24.
    w = Workload(
        (
            job(0, model(fw=2.0, bw=2.0), iters=3),
            job(1, model(fw=3.0, bw=3.0), iters=2, submit=4.0),
        )
    )
    r = simulate(cluster(1, 1), w, "ff_fs", CHECKED)
    assert jcts(r) == {0: 12.0, 1: 20.0}


def test_allreduce_waits_for_the_slowest_worker() -> None:
    # 2 servers x 1 GPU.  Job 1 (1 GPU, 2 ms of service) is placed first (on GPU 0) and runs
    # 0 -> 2 there; job 0 (2 GPUs, 6 ms) computes 0 -> 3 on GPU 1 but 2 -> 5 on GPU 0, so its
    # 10 MB all-reduce runs 5 -> 15.
    w = Workload(
        (
            job(0, model(10.0, fw=1.0, bw=2.0), gpus=2),
            job(1, model(10.0, fw=1.0, bw=1.0), gpus=1),
        )
    )
    r = simulate(cluster(2, 1), w, "ff_fs", CHECKED)
    assert jcts(r) == {0: approx(15.0), 1: 2.0}


def test_gpu_computes_for_one_job_while_another_communicates() -> None:
    # 2 servers x 1 GPU.  Job 0 (2 GPUs, 2 x (1 + 1), 10 MB) is placed first; job 1 (1 GPU on
    # GPU 0, 5 + 5 ms) uses GPU 0 while job 0 all-reduces (2 -> 12): job 1 runs 2 -> 12, then
    # job 0's second iteration computes 12 -> 14 and all-reduces 14 -> 24.
    w = Workload(
        (
            job(0, model(10.0, fw=1.0, bw=1.0), gpus=2, iters=2),
            job(1, model(10.0, fw=5.0, bw=5.0), gpus=1),
        )
    )
    r = simulate(cluster(2, 1), w, "ff_fs", CHECKED)
    assert jcts(r) == {0: approx(24.0), 1: 12.0}
    assert r.gpu_utilisation == pytest.approx((8.0 + 10.0) / (2 * 24.0))


def test_memory_blocks_until_release() -> None:
    # Two 60 MB workers do not fit on a 100 MB GPU: job 1 queues until job 0 finishes at 10.
    r = _one_gpu("ff_fs", mem=100.0, job_mem=60.0)
    recs = {rec.job_id: rec for rec in r.records}
    assert recs[0].finish_ms == 10.0
    assert recs[1].start_ms == 10.0
    assert recs[1].queue_ms == 7.5
    assert recs[1].finish_ms == 14.0
    assert recs[1].jct_ms == 11.5


def test_memory_blocks_multi_gpu_job_until_all_gpus_free() -> None:
    # 1 server x 2 GPUs of 100 MB.  Job 0 (1 GPU, 60 MB, 10 ms) takes GPU 0; job 1 (1 GPU,
    # 60 MB, 4 ms) takes GPU 1; job 2 (2 GPUs, 60 MB, 1 x (1 + 1)) waits for both: job 1
    # frees GPU 1 at 4, job 0 frees GPU 0 at 10, so job 2 runs 10 -> 12.
    w = Workload(
        (
            job(0, model(fw=1.0, bw=1.0, mem=60.0), iters=5),
            job(1, model(fw=1.0, bw=1.0, mem=60.0), iters=2),
            job(2, model(fw=1.0, bw=1.0, mem=60.0), gpus=2, iters=1, submit=1.0),
        )
    )
    r = simulate(cluster(1, 2), w, "ff_fs", CHECKED)
    recs = {rec.job_id: rec for rec in r.records}
    assert (recs[0].finish_ms, recs[1].finish_ms) == (10.0, 4.0)
    assert (recs[2].start_ms, recs[2].finish_ms) == (10.0, 12.0)


def test_check_fits_too_many_gpus_names_the_job() -> None:
    w = Workload((job(0, model()), job(7, model(), gpus=3)), name="tiny")
    with pytest.raises(WorkloadError, match=r"job 7 asks for 3 GPUs but the cluster has 2"):
        w.check_fits(cluster(2, 1))
    with pytest.raises(WorkloadError, match=r"job 7"):
        simulate(cluster(2, 1), w, "ff_fs")


def test_check_fits_too_much_memory_names_the_job() -> None:
    w = Workload((job(0, model(mem=50.0)), job(12, model(mem=150.0))), name="tiny")
    with pytest.raises(WorkloadError, match=r"job 12 needs 150\.0 MB per GPU"):
        w.check_fits(cluster(1, 1, mem=100.0))
    with pytest.raises(WorkloadError, match=r"job 12"):
        simulate(cluster(1, 1, mem=100.0), w, "lwf1_adasrsf")
    # exactly a GPU's memory fits
    Workload((job(0, model(mem=100.0)),)).check_fits(cluster(1, 1, mem=100.0))


def test_simulator_runs_once() -> None:
    w = Workload((job(0, model()),))
    sim = Simulator(cluster(1, 1), w, make_stack("ff_fs"), SimConfig())
    sim.run()
    with pytest.raises(SimulationError, match="runs once"):
        sim.run()


def test_pinned_placer_is_consulted_and_rng_is_a_generator() -> None:
    seen: list[object] = []

    class Spy(Pinned):
        def place(self, job, cluster, rng):  # type: ignore[no-untyped-def]
            seen.append(rng)
            return super().place(job, cluster, rng)

    stack = make_stack("ff_fs")
    stack.placer = Spy(APART)
    w = Workload((job(0, model(10.0), gpus=2), job(1, model(10.0), gpus=2)))
    simulate(cluster(2, 2), w, stack)
    assert stack.placer.calls == [0, 1]  # type: ignore[attr-defined]
    assert all(isinstance(g, np.random.Generator) for g in seen)


# ------------------------------------------------------------------------------ tick mode


@pytest.mark.parametrize(
    "b, size, per_iteration",
    [
        (1.0, 10.0, 3.0 + 10.0),  # b M = 10 ms: already on a tick
        (0.856, 10.0, 3.0 + 9.0),  # b M = 8.56 ms: ends at the next whole tick, 9
        (0.856, 100.0, 3.0 + 86.0),  # 85.6 -> 86
    ],
)
def test_tick_mode_rounds_allreduce_end_up_to_a_tick(
    b: float, size: float, per_iteration: float
) -> None:
    net = NetworkSpec(a_ms=0.0, b_ms_per_mb=b, eta_ms_per_mb=ETA)
    w = Workload((job(0, model(size), gpus=2, iters=3),))
    r = simulate(
        cluster(2, 1, net=net),
        w,
        "ff_fs",
        SimConfig(quirks=QuirkOptions(tick_ms=1.0), run=RunOptions(check_invariants=True)),
    )
    assert r.records[0].jct_ms == approx(3 * per_iteration)
    cont = simulate(cluster(2, 1, net=net), w, "ff_fs", CHECKED)
    assert cont.records[0].jct_ms == approx(3 * (3.0 + b * size))


# ------------------------------------------------------------------------------ fluid oracle


def _fluid(tasks: list[tuple[float, float, tuple[int, ...]]]) -> list[float]:
    """Independent fluid model of the network: task i = (ready ms, MB, servers) starts when
    ready and moves at 1 / (k b + (k-1) eta) MB/ms, k = most active tasks on any of its
    servers; returns each task's end time."""
    left = [size for _, size, _ in tasks]
    end = [math.inf] * len(tasks)
    t = 0.0
    while any(e == math.inf for e in end):
        active = [i for i, (r, _, _) in enumerate(tasks) if r <= t and end[i] == math.inf]
        load: dict[int, int] = {}
        for i in active:
            for s in tasks[i][2]:
                load[s] = load.get(s, 0) + 1
        rate = {}
        for i in active:
            k = max(load[s] for s in tasks[i][2])
            rate[i] = 1.0 / (k * B + (k - 1) * ETA)
        later = [r for r, _, _ in tasks if r > t]
        dt = min([left[i] / rate[i] for i in active] + [r - t for r in later])
        for i in active:
            left[i] -= rate[i] * dt
            if left[i] <= 1e-9:
                end[i] = t + dt
        t += dt
    return end


@pytest.mark.parametrize("case", range(25))
def test_fair_share_network_matches_fluid_oracle(case: int) -> None:
    # Up to 5 single-iteration jobs on disjoint GPUs of 4 servers x 5 GPUs, each spanning 2-4
    # servers, ready to all-reduce at different times: every JCT equals the fluid model's.
    rnd = random.Random(case)
    servers, per = 4, 5
    n = rnd.randint(2, 5)
    slot = [0] * servers
    specs, gpus, tasks = [], {}, []
    for i in range(n):
        span = tuple(sorted(rnd.sample(range(servers), rnd.randint(2, 4))))
        gpus[i] = [s * per + slot[s] for s in span]
        for s in span:
            slot[s] += 1
        bw = rnd.choice([1.0, 2.0, 4.5, 9.0, 20.0])
        size = rnd.choice([5.0, 10.0, 12.5, 30.0, 64.0])
        specs.append(job(i, model(size, fw=1.0, bw=bw), gpus=len(span)))
        tasks.append((1.0 + bw, size, span))
    r = simulate(cluster(servers, per), Workload(tuple(specs)), pinned("ff_fs", gpus), CHECKED)
    expected = _fluid(tasks)
    assert jcts(r) == {i: pytest.approx(expected[i], rel=1e-9) for i in range(n)}
