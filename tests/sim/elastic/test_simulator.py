"""The elastic slot loop: fractional completions, arrivals, scaling overhead, JCT conventions,
invariants and determinism.

The speed model is a stand-in, ``rate * min(workers, ps)`` iterations/s; with 100 iterations
per epoch and 100 s slots a job at (w, p) trains ``rate * min(w, p)`` epochs per slot.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from envs.sim.elastic.allocators import (
    DRF,
    FIFO,
    SRTF,
    EfficientSRTF,
    FixedDemand,
    JobState,
    Optimus,
    Tetris,
)
from envs.sim.elastic.cluster import SlotCluster
from envs.sim.elastic.simulator import ElasticResult, SlotRecord, SlotSimulator
from envs.sim.elastic.spec import ElasticCluster, ElasticJob, JobType
from envs.sim.engine import SimulationError
from envs.sim.errors import ConfigError, WorkloadError

SLOT_S = 100.0
IPE = 100


class MinSpeed:
    """``rate[model] * min(workers, ps)`` it/s (rate 1 unless listed)."""

    name = "min"

    def __init__(self, rates: dict[str, float] | None = None) -> None:
        self.rates = rates or {}

    def speed(self, job_type: JobType, num_ps: int, num_workers: int) -> float:
        return self.rates.get(job_type.model, 1.0) * min(num_workers, num_ps)


def jtype(model: str = "m", worker: tuple[int, int] = (2, 4), ps: tuple[int, int] = (2, 0)):
    return JobType(
        index=0,
        model=model,
        worker_cpu=worker[0],
        worker_gpu=worker[1],
        ps_cpu=ps[0],
        ps_gpu=ps[1],
        epoch_fraction=1.0,
        iterations_per_epoch=IPE,
        local_comp_time_s=0.1,
        model_size_mb=1.0,
        inter_bw_mb_s=1.0,
        intra_bw_mb_s=1.0,
    )


def job(
    job_id: int,
    ty: JobType,
    arrival: int = 0,
    epochs: float = 10.0,
    *,
    real: float | None = None,
    max_workers: int = 16,
    speed_factor: float = 1.0,
) -> ElasticJob:
    return ElasticJob(
        job_id,
        ty,
        arrival,
        epochs,
        epochs if real is None else real,
        max_workers=max_workers,
        max_ps=16,
        speed_factor=speed_factor,
    )


def cluster(nodes: int = 1, cpu: int = 8, gpu: int = 8) -> ElasticCluster:
    return ElasticCluster(nodes, cpu, gpu, SLOT_S)


class Scripted:
    """Test allocator: ``script(t, job_id) -> (workers, ps)``, placed in bundles."""

    name = "scripted"

    def __init__(self, script) -> None:
        self.script = script
        self.t = -1

    def allocate(self, jobs: Sequence[JobState], c: SlotCluster, speed, slot_s):
        self.t += 1
        out = {}
        for j in jobs:
            w, p = self.script(self.t, j.job_id)
            for _ in range(w):
                assert c.place_bundle(j.worker_demand, j.ps_demand) is not None
            out[j.job_id] = (w, p)
        return out


def reference_jct(arrival: int, epochs_per_slot, real: float) -> tuple[float, float]:
    """DL²'s bookkeeping (scheduler_base/job.py), restated: (JCT, end_time + 1)."""
    progress, ts = 0.0, arrival
    while True:
        e = epochs_per_slot(ts)
        if progress + e > real:
            run_time = (real - progress) / e
            progress = real
        else:
            progress += e
            run_time = 1.0
        if progress >= real:
            end_time = ts - 1 + run_time
            return end_time - arrival + 1.0, end_time + 1.0
        ts += 1


# --------------------------------------------------------------------------- completion


@pytest.mark.parametrize(
    ("rate", "epochs", "arrival"),
    [(4.0, 10.0, 0), (4.0, 10.0, 3), (3.0, 7.0, 0), (0.7, 5.0, 2), (5.0, 5.0, 1)],
)
def test_single_job_finishes_at_the_fractional_slot(rate, epochs, arrival) -> None:
    ty = jtype()
    j = job(0, ty, arrival, epochs, max_workers=1)  # FIFO gives (1, 1)
    res = SlotSimulator(cluster(), [j], FIFO(), MinSpeed({"m": rate})).run()
    per_slot = rate * SLOT_S / IPE
    (rec,) = res.jobs
    assert rec.jct_slots == pytest.approx(epochs / per_slot, rel=1e-12)
    assert rec.finish == pytest.approx(arrival + epochs / per_slot, rel=1e-12)
    assert res.makespan_slots == rec.finish
    assert res.avg_jct_s == pytest.approx(rec.jct_slots * SLOT_S)
    assert rec.slots_run == int(np.ceil(epochs / per_slot - 1e-12))
    # The reference's end_time - arrival + 1 and makespan max(end_time + 1) agree.
    ref_jct, ref_makespan = reference_jct(arrival, lambda ts: per_slot, epochs)
    assert rec.reference_jct_slots == pytest.approx(ref_jct)
    assert rec.jct_slots == pytest.approx(ref_jct)
    assert res.makespan_slots == pytest.approx(ref_makespan)
    # Exactly filling a slot ends at the slot boundary, not a slot later.
    if epochs / per_slot == int(epochs / per_slot):
        assert rec.finish == arrival + epochs / per_slot


def test_float_accumulation_does_not_add_a_slot() -> None:
    # 0.1 epochs per slot, 1 epoch: ten additions of 0.1 fall short of 1.0 by 1e-16.
    j = job(0, jtype(), 0, 1.0, max_workers=1)
    res = SlotSimulator(cluster(), [j], FIFO(), MinSpeed({"m": 0.1})).run()
    assert res.jobs[0].finish == pytest.approx(10.0)
    assert res.num_slots == 10


def test_arrivals_mid_run_wait_for_the_next_slot() -> None:
    ty = jtype()  # bundle (4, 4); a 4/4 node holds one
    a = job(0, ty, 0, 10.0, max_workers=1)  # 4 epochs/slot: done at 2.5
    b = job(1, ty, 2, 4.0, max_workers=1)  # arrives at 2, node busy, runs slot 3
    res = SlotSimulator(cluster(1, 4, 4), [a, b], FIFO(), MinSpeed({"m": 4.0})).run()
    ra, rb = res.jobs
    assert ra.finish == pytest.approx(2.5) and ra.jct_slots == pytest.approx(2.5)
    assert rb.finish == pytest.approx(4.0) and rb.jct_slots == pytest.approx(2.0)
    assert res.avg_jct_slots == pytest.approx(2.25)
    assert res.num_slots == 4
    assert res.cpu_util == (1.0, 1.0, 1.0, 1.0)
    # With room for both, job 1 starts in its arrival slot.
    res2 = SlotSimulator(cluster(2, 4, 4), [a, b], FIFO(), MinSpeed({"m": 4.0})).run()
    assert res2.jobs[1].finish == pytest.approx(3.0)
    assert res2.cpu_util == pytest.approx((0.5, 0.5, 1.0))


def test_idle_slots_before_the_first_arrival() -> None:
    j = job(0, jtype(), 3, 4.0, max_workers=1)
    res = SlotSimulator(cluster(), [j], FIFO(), MinSpeed({"m": 4.0})).run()
    assert res.jobs[0].finish == pytest.approx(4.0)
    assert res.cpu_util == (0.0, 0.0, 0.0, 0.5)
    assert res.gpu_util == (0.0, 0.0, 0.0, 0.5)
    assert res.mean_cpu_util == pytest.approx(0.125)


# --------------------------------------------------------------------------- overhead


def test_scaling_overhead_delays_completion_by_the_hand_computed_amount() -> None:
    j = job(0, jtype(), 0, 5.0)
    alloc = lambda t, jid: (1, 1) if t == 0 else (2, 2)  # noqa: E731
    speed = MinSpeed()  # (1, 1): 1 epoch/slot; (2, 2): 2 epochs/slot
    free = SlotSimulator(cluster(2), [j], Scripted(alloc), speed).run()
    # 1 + 2 + 2 = 5: done exactly at the end of slot 2.
    assert free.jobs[0].finish == pytest.approx(3.0)
    assert free.jobs[0].num_changes == 1
    paid = SlotSimulator(cluster(2), [j], Scripted(alloc), speed, scaling_overhead_s=50.0).run()
    # Slot 0: first start, no overhead, 1 epoch.  Slot 1: changed, 50 s lost, 2 * 0.5 = 1.
    # Slot 2: unchanged, 2 (total 4).  Slot 3: 1 more epoch takes half the slot.
    assert paid.jobs[0].finish == pytest.approx(3.5)
    assert paid.jobs[0].num_changes == 1
    assert paid.jobs[0].slots_run == 4


def test_overhead_counts_inside_the_completion_slot_and_after_a_pause() -> None:
    j = job(0, jtype(), 0, 2.5)
    # (1, 1) in slot 0, nothing in slot 1, (1, 1) again from slot 2: the restart changes
    # the allocation relative to slot 1 and pays 20 s.
    alloc = lambda t, jid: (0, 0) if t == 1 else (1, 1)  # noqa: E731
    res = SlotSimulator(cluster(), [j], Scripted(alloc), MinSpeed(), scaling_overhead_s=20.0).run()
    # Slot 0: 1 epoch.  Slot 2: 0.8.  Slot 3: pays nothing, 0.7 epochs = 70 s -> 3.7.
    rec = res.jobs[0]
    assert rec.finish == pytest.approx(3.7)
    assert rec.slots_run == 3 and rec.num_changes == 1
    # The overhead is part of the used fraction when the job ends in a changed slot.
    j2 = job(0, jtype(), 0, 1.5)
    alloc2 = lambda t, jid: (1, 1) if t == 0 else (2, 2)  # noqa: E731
    res2 = SlotSimulator(
        cluster(2), [j2], Scripted(alloc2), MinSpeed(), scaling_overhead_s=30.0
    ).run()
    # Slot 1: 30 s overhead, then 0.5 epoch at 2 epochs/slot = 25 s -> 1 + 55/100.
    assert res2.jobs[0].finish == pytest.approx(1.55)


# --------------------------------------------------------------------------- errors


def test_max_slots_exceeded_names_the_job() -> None:
    stuck = job(7, jtype("stuck"), 0, 5.0)
    fine = job(1, jtype(), 0, 1.0)
    sim = SlotSimulator(cluster(2), [fine, stuck], DRF(), MinSpeed({"stuck": 0.0}), max_slots=50)
    with pytest.raises(SimulationError, match=r"max_slots=50.*job 7 \(0/5 epochs\)"):
        sim.run()


def test_bad_input_is_refused() -> None:
    ty = jtype()
    with pytest.raises(WorkloadError, match="at least one job"):
        SlotSimulator(cluster(), [], FIFO(), MinSpeed())
    with pytest.raises(WorkloadError, match="appears twice"):
        SlotSimulator(cluster(), [job(1, ty), job(1, ty)], FIFO(), MinSpeed())
    with pytest.raises(WorkloadError, match=r"job 3 .*worker needs \(2 CPU, 4 GPU\)"):
        SlotSimulator(cluster(1, 8, 2), [job(3, ty)], FIFO(), MinSpeed())
    with pytest.raises(ConfigError, match="scaling_overhead_s"):
        SlotSimulator(cluster(), [job(1, ty)], FIFO(), MinSpeed(), scaling_overhead_s=SLOT_S)
    with pytest.raises(ConfigError, match="max_slots"):
        SlotSimulator(cluster(), [job(1, ty)], FIFO(), MinSpeed(), max_slots=0)


class _Cheat:
    name = "cheat"

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def allocate(self, jobs, c: SlotCluster, speed, slot_s):
        j = jobs[0]
        if self.mode == "unplaced":
            return {j.job_id: (1, 1)}  # nothing placed on the cluster
        if self.mode == "over-cap":
            for _ in range(j.spec.max_workers + 1):
                c.place_bundle((0, 0), (0, 0))
            return {j.job_id: (j.spec.max_workers + 1, 1)}
        if self.mode == "stranger":
            return {j.job_id: (0, 0), 99: (1, 1)}
        c.free_cpu[0] -= 100  # bypasses the checks (and the placement index)
        return {j.job_id: (0, 0)}


@pytest.mark.parametrize(
    ("mode", "message"),
    [
        ("unplaced", "placed through the cluster"),
        ("over-cap", "caps"),
        ("stranger", "inactive"),
        ("overfull", "node 0 holds"),
    ],
)
def test_invariants_catch_a_faulty_allocator(mode: str, message: str) -> None:
    sim = SlotSimulator(cluster(), [job(0, jtype(), max_workers=2)], _Cheat(mode), MinSpeed())
    with pytest.raises(SimulationError, match=message):
        sim.run()


def test_bad_speed_is_refused() -> None:
    class Negative:
        name = "neg"

        def speed(self, job_type, num_ps, num_workers):
            return -1.0

    with pytest.raises(SimulationError, match=r"gave -1\.0 it/s for job 0"):
        SlotSimulator(cluster(), [job(0, jtype())], FIFO(), Negative()).run()


# --------------------------------------------------------------------------- callback


def test_on_slot_sees_every_slot_and_rewards_add_up() -> None:
    ty = jtype(worker=(1, 0), ps=(1, 0))
    jobs = [
        job(0, ty, 0, 3.0),
        job(1, ty, 1, 5.0),
        job(2, ty, 1, 2.0, real=2.4),  # trains 20% more than declared
    ]
    seen: list[SlotRecord] = []
    res = SlotSimulator(cluster(1, 4, 0), jobs, DRF(), MinSpeed(), on_slot=seen.append).run()
    assert [s.t for s in seen] == list(range(res.num_slots))
    assert sum(len(s.finished) for s in seen) == 3
    assert sorted(jid for s in seen for jid in s.finished) == [0, 1, 2]
    for s in seen:
        assert s.used_cpu <= 4
        assert sum(w + p for w, p in s.allocation.values()) == s.used_cpu
    # DL²'s slot reward normalises by declared epochs: 1 + 1 + 2.4/2.
    assert sum(res.rewards) == pytest.approx(3.2)
    assert res.rewards == tuple(s.reward for s in seen)
    epochs = {jid: 0.0 for jid in range(3)}
    for s in seen:
        for jid, e in s.epochs.items():
            epochs[jid] += e
    assert epochs == pytest.approx({0: 3.0, 1: 5.0, 2: 2.4})


# --------------------------------------------------------------------------- properties


def _random_workload(seed: int) -> tuple[ElasticCluster, list[ElasticJob], MinSpeed]:
    rng = np.random.default_rng(seed)
    spec = ElasticCluster(int(rng.integers(1, 4)), 8, 8, SLOT_S)
    types = [
        jtype("a", (2, 4), (2, 0)),
        jtype("b", (2, 0), (2, 0)),
        jtype("c", (1, 2), (1, 0)),
    ]
    rates = {"a": float(rng.uniform(0.5, 3)), "b": float(rng.uniform(0.5, 3)), "c": 1.0}
    jobs = []
    for jid in rng.permutation(int(rng.integers(1, 9))):
        epochs = float(rng.uniform(0.5, 20.0))
        jobs.append(
            job(
                int(jid),
                types[int(rng.integers(3))],
                int(rng.integers(0, 6)),
                epochs,
                real=epochs * float(rng.uniform(0.8, 1.2)),
                max_workers=int(rng.integers(1, 5)),
                speed_factor=float(rng.uniform(0.5, 1.5)),
            )
        )
    return spec, jobs, MinSpeed(rates)


def _fixed(jobs: Sequence[ElasticJob], stop: bool) -> FixedDemand:
    # Requests of 1 or 2 bundles always fit on one empty node (a job asking for more than
    # the cluster holds would wait forever under a fixed-demand scheduler, by design).
    return FixedDemand({j.job_id: 1 + j.job_id % 2 for j in jobs}, stop_at_first_failure=stop)


ALLOCATORS = [
    lambda jobs: DRF(),
    lambda jobs: DRF.reference(),
    lambda jobs: FIFO(),
    lambda jobs: FIFO.reference(),
    lambda jobs: SRTF(),
    lambda jobs: SRTF.reference(),
    lambda jobs: Tetris(),
    lambda jobs: Tetris.reference(),
    lambda jobs: Optimus(),
    lambda jobs: Optimus.reference(),
    lambda jobs: EfficientSRTF(),
    lambda jobs: EfficientSRTF.reference(),
    lambda jobs: _fixed(jobs, False),
    lambda jobs: _fixed(jobs, True),
]


def test_every_allocator_finishes_every_job_once() -> None:
    for seed in range(30):
        spec, jobs, speed = _random_workload(seed)
        for make in ALLOCATORS:
            for strict in (False, True):
                for overhead in (0.0, 30.0):
                    res = SlotSimulator(
                        spec,
                        jobs,
                        make(jobs),
                        speed,
                        scaling_overhead_s=overhead,
                        max_slots=5000,
                        strict_reference_placement=strict,
                    ).run()
                    assert [r.job_id for r in res.jobs] == sorted(j.job_id for j in jobs)
                    by_id = {j.job_id: j for j in jobs}
                    for r in res.jobs:
                        assert r.finish > r.arrival == by_id[r.job_id].arrival_slot
                        assert r.slots_run >= 1 and r.num_changes <= r.slots_run - 1
                    assert all(0 <= u <= 1 for u in res.cpu_util + res.gpu_util)
                    assert res.num_slots == len(res.cpu_util) == int(np.ceil(res.makespan_slots))


def test_same_input_same_output() -> None:
    spec, jobs, speed = _random_workload(4)
    spec = ElasticCluster(2, 8, 8, SLOT_S)
    results: list[ElasticResult] = []
    logs: list[list[SlotRecord]] = []
    for _ in range(2):
        for make in (DRF, Optimus, Tetris):
            log: list[SlotRecord] = []
            sim = SlotSimulator(
                spec, jobs, make(), speed, scaling_overhead_s=10.0, on_slot=log.append
            )
            results.append(sim.run())
            logs.append(log)
    assert results[:3] == results[3:]
    assert logs[:3] == logs[3:]
    # Same simulator object run twice; job order in the input does not matter.
    sim = SlotSimulator(spec, jobs[::-1], DRF(), speed, scaling_overhead_s=10.0)
    assert sim.run() == sim.run() == results[0]
    summary = results[0].summary()
    assert summary["allocator"] == "drf" and summary["num_jobs"] == len(jobs)
    assert summary["avg_jct_s"] == pytest.approx(summary["avg_jct_slots"] * SLOT_S)
