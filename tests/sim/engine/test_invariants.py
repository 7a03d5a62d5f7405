"""Model invariants on real workloads, for every stack of the paper, in both modes.

The engine checks its own per-event invariants with ``RunOptions(check_invariants=True)``
(memory, one compute task per GPU, NIC capacity).  These tests run every stack that way and
add what only the outcome can show: every job finished once, event times never decrease,
utilisation is a fraction, and no job beats its critical path.  The last tests show that the
engine's checker really fires on a fault.
"""

from __future__ import annotations

import itertools
import math
from functools import cache

import pytest

from envs.sim import (
    STACKS,
    ClusterSpec,
    JobSpec,
    ModelProfile,
    NetworkSpec,
    RunOptions,
    SimConfig,
    Simulator,
    Workload,
    make_stack,
    simulate,
)
from envs.sim.engine import SimulationError
from envs.sim.policies.placement import FirstFit
from envs.sim.results import SimResult
from envs.sim.workload import builtin_ada_srsf

CLUSTER = ClusterSpec()  # the paper's 16 x 4 V100s, reference network constants


@cache
def workload(kind: str) -> Workload:
    jobs = sorted(builtin_ada_srsf(0).jobs, key=lambda j: j.job_id)
    # first60: ids 0-59, all single-GPU jobs (GPU sharing, placement, memory);
    # mixed60: ids = 0, 3, 6 mod 8, every GPU count 1..32 (communication too)
    first = kind == "first60"
    chosen = jobs[:60] if first else [j for j in jobs if j.job_id % 8 in (0, 3, 6)]
    assert len(chosen) == 60
    return Workload(tuple(chosen), name=f"ada-srsf-seed0-{kind}")


MODES = {
    "correct": lambda: SimConfig(run=RunOptions(check_invariants=True)),
    "reference": lambda: SimConfig.reference(check_invariants=True),
}


class RecordingSimulator(Simulator):
    """Records the time of every event step (check_invariants runs after each one)."""

    def __init__(self, *args, **kwargs) -> None:  # type: ignore[no-untyped-def]
        super().__init__(*args, **kwargs)
        self.step_times: list[float] = []

    def check_invariants(self) -> None:
        self.step_times.append(self.now)
        super().check_invariants()


def run_recording(stack_name: str, w: Workload, cfg: SimConfig) -> tuple[SimResult, list[float]]:
    stack = make_stack(
        stack_name,
        lwf_comm_ms_per_mb=cfg.quirks.lwf_comm_ms_per_mb,
        adadual_inclusive=cfg.quirks.adadual_inclusive,
    )
    sim = RecordingSimulator(CLUSTER, w, stack, cfg)
    return sim.run(), sim.step_times


@pytest.mark.parametrize("kind", ["first60", "mixed60"])
@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("stack", list(STACKS))
def test_stack_invariants(stack: str, mode: str, kind: str) -> None:
    w = workload(kind)
    cfg = MODES[mode]()
    result, times = run_recording(stack, w, cfg)  # raises SimulationError on any violation
    specs = {j.job_id: j for j in w.jobs}

    # every job finished exactly once
    assert len(result.records) == 60
    assert sorted(r.job_id for r in result.records) == sorted(specs)
    for r in result.records:
        spec = specs[r.job_id]
        assert math.isfinite(r.start_ms) and math.isfinite(r.finish_ms)
        assert r.finish_ms >= r.start_ms >= r.submit_ms == spec.submit_ms
        assert r.jct_ms > 0
        assert r.iterations == spec.iterations and r.num_gpus == spec.num_gpus
        assert r.gpu_ms == spec.num_gpus * spec.iterations * spec.model.compute_ms
        assert 1 <= r.servers <= min(spec.num_gpus, CLUSTER.num_servers)
        # critical path: each iteration's forward and backward run one after the other on
        # each worker, so no job finishes faster than iterations x (fw + bw) after placement
        critical = spec.iterations * spec.model.compute_ms
        assert r.finish_ms - r.start_ms >= critical - 1e-9, r
        assert r.jct_ms >= critical - 1e-9

    # event times never decrease; the last event is the last finish
    assert times, "check_invariants was never called"
    assert all(a <= b for a, b in itertools.pairwise(times))
    assert times[0] >= min(j.submit_ms for j in w.jobs)
    assert result.makespan_ms == max(r.finish_ms for r in result.records)
    if cfg.quirks.lagged_release:  # the reference releases the last job's memory a tick later
        assert result.makespan_ms <= times[-1] <= result.makespan_ms + cfg.quirks.tick_ms
    else:
        assert times[-1] == result.makespan_ms

    assert 0.0 < result.gpu_utilisation <= 1.0
    assert result.busy_gpu_ms == pytest.approx(sum(r.gpu_ms for r in result.records))
    if kind == "first60":
        assert all(r.servers == 1 for r in result.records)
    else:
        assert any(r.servers > 1 for r in result.records)
    if cfg.quirks.tick_ms is not None:  # the reference's clock: every event on a whole tick
        assert all(t == round(t) for t in times)


def _comm_bound_violations(result: SimResult, w: Workload, net: NetworkSpec) -> list[int]:
    """Jobs spanning servers that finished faster than iterations x (fw + bw + a + b M), the
    fastest any job can go when every all-reduce has its NIC to itself."""
    specs = {j.job_id: j for j in w.jobs}
    bad = []
    for r in result.records:
        if r.servers > 1:
            m = specs[r.job_id].model
            bound = r.iterations * (m.compute_ms + net.a_ms + net.b_ms_per_mb * m.model_size_mb)
            if r.finish_ms - r.start_ms < bound - 1e-6:
                bad.append(r.job_id)
    return bad


@pytest.mark.parametrize("mode", ["correct", "reference_fixed_probe"])
@pytest.mark.parametrize("stack", ["lwf1_adasrsf", "ls_adasrsf", "rand_adasrsf", "lwf1_srsf2"])
def test_multi_server_jobs_never_beat_uncontended_network(stack: str, mode: str) -> None:
    w = workload("mixed60")
    result = simulate(CLUSTER, w, stack, SimConfig.named(mode))
    assert _comm_bound_violations(result, w, CLUSTER.network) == []


# ------------------------------------------------------------------------------ fault injection

MODEL = ModelProfile("m", 10.0, 60.0, 1, 1.0, 1.0)


def _tiny(gpus: int = 1, n: int = 2) -> Workload:
    return Workload(
        tuple(JobSpec(i, float(i), MODEL, iterations=3, num_gpus=gpus) for i in range(n))
    )


def test_placer_returning_a_gpu_twice_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def twice(self, job, cluster, rng):  # type: ignore[no-untyped-def]
        return [0] * job.num_gpus

    monkeypatch.setattr(FirstFit, "place", twice)
    cluster = ClusterSpec(num_servers=2, gpus_per_server=2, gpu_memory_mb=200.0)
    with pytest.raises(SimulationError, match=r"job 0 GPUs \[0, 0\]; needs 2 distinct"):
        simulate(cluster, _tiny(gpus=2), "ff_fs", SimConfig(run=RunOptions(check_invariants=True)))


def test_placer_ignoring_memory_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    def greedy(self, job, cluster, rng):  # type: ignore[no-untyped-def]
        return list(range(job.num_gpus))  # never looks at free memory

    monkeypatch.setattr(FirstFit, "place", greedy)
    # and whose fits() agrees (else the indexed queue never asks it: see test_fit_queue.py)
    monkeypatch.setattr(FirstFit, "fits", lambda self, job, cluster: True)
    # two 60 MB workers on one 100 MB GPU
    cluster = ClusterSpec(num_servers=1, gpus_per_server=1, gpu_memory_mb=100.0)
    with pytest.raises(SimulationError, match=r"job 1 on GPU 0 without memory"):
        simulate(cluster, _tiny(), "ff_fs", SimConfig(run=RunOptions(check_invariants=True)))


def test_check_invariants_catches_corrupted_memory_accounting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A placer that writes to its read-only view: the free-memory ledger no longer matches
    # the jobs resident on the GPU.  Only the invariant checker notices.
    real = FirstFit.place

    def leaky(self, job, cluster, rng):  # type: ignore[no-untyped-def]
        gpus = real(self, job, cluster, rng)
        cluster.free_mem_mb[0] += 1.0
        return gpus

    monkeypatch.setattr(FirstFit, "place", leaky)
    cluster = ClusterSpec(num_servers=1, gpus_per_server=1, gpu_memory_mb=200.0)
    simulate(cluster, _tiny(), "ff_fs", SimConfig())  # unnoticed without the checker
    with pytest.raises(SimulationError, match=r"GPU 0 memory over-committed or inconsistent"):
        simulate(cluster, _tiny(), "ff_fs", SimConfig(run=RunOptions(check_invariants=True)))


class NoContention(NetworkSpec):
    """A broken network model: every task gets the full NIC whatever k is."""

    def rate(self, k: int) -> float:
        return 1.0 / self.b_ms_per_mb


def test_check_invariants_catches_nic_over_capacity() -> None:
    net = NoContention(a_ms=0.0, b_ms_per_mb=1.0, eta_ms_per_mb=0.5)
    cluster = ClusterSpec(num_servers=2, gpus_per_server=2, gpu_memory_mb=200.0, network=net)
    # two 2-GPU jobs on {0, 2} and {1, 3}: FF with GPUs 0 and 1 nearly full of memory
    w = Workload(
        tuple(
            JobSpec(i, 0.0, ModelProfile("m", 10.0, 150.0, 1, 1.0, 1.0), 1, num_gpus=2)
            for i in range(2)
        )
    )
    stack = make_stack("ff_fs")

    class Apart:
        name = "apart"
        comm_estimate_ms_per_mb = None

        def place(self, job, cluster, rng):  # type: ignore[no-untyped-def]
            return [[0, 2], [1, 3]][job.job_id]

    stack.placer = Apart()
    ok = simulate(cluster, w, stack, SimConfig())
    assert [r.jct_ms for r in ok.records] == [12.0, 12.0]  # too fast: 2 x 10 MB at 1 MB/ms
    stack = make_stack("ff_fs")
    stack.placer = Apart()
    with pytest.raises(SimulationError, match=r"NIC \d carries more than its capacity"):
        simulate(cluster, w, stack, SimConfig(run=RunOptions(check_invariants=True)))
