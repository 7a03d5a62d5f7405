"""The slot loop driving the contention engine (``envs.sim.elastic.engine_slots``).

Oracles are computed by hand from the model in the module docstring: an iteration is
``G/W * local_comp_time_s`` of compute then a PS exchange whose busiest NIC carries
``v`` equivalent MB at ``1 / (k b + (k-1) η)`` MB/ms.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from envs.sim.elastic.allocators import DRF, FIFO, SRTF, FixedDemand, JobState, Optimus, Tetris
from envs.sim.elastic.cluster import SlotCluster
from envs.sim.elastic.engine_slots import (
    ContentionConfig,
    ContentionSlotSimulator,
    ContentionSpeed,
    engine_job,
    solo_iteration_s,
)
from envs.sim.elastic.spec import ElasticCluster, ElasticJob, SpeedModel
from envs.sim.elastic.speed import AnalyticalSpeed
from envs.sim.elastic.types import job_type
from envs.sim.elastic.workload import DL2Setting
from envs.sim.errors import ConfigError

RESNET = job_type("resnet-50")  # 0.449 s/batch, 102.2 MB, 91.875 MB/s inter-node
NET_B, NET_ETA = 0.856, 0.235  # NetworkSpec defaults, ms/MB


class Pinned:
    """Places each job's workers and PSs on given nodes (test allocator)."""

    name = "pinned"

    def __init__(self, where: Mapping[int, tuple[Sequence[int], Sequence[int]]]) -> None:
        self.where = where
        self.last_decisions: list[tuple[int, str, int]] = []

    def allocate(
        self, jobs: Sequence[JobState], cluster: SlotCluster, speed: SpeedModel, slot_s: float
    ) -> dict[int, tuple[int, int]]:
        self.last_decisions = []
        out: dict[int, tuple[int, int]] = {}
        for job in jobs:
            workers, ps = self.where[job.job_id]
            for n in workers:
                cluster.place(*job.worker_demand, n)
                self.last_decisions.append((job.job_id, "worker", n))
            for n in ps:
                cluster.place(*job.ps_demand, n)
                self.last_decisions.append((job.job_id, "ps", n))
            out[job.job_id] = (len(workers), len(ps))
        return out


def _job(jid: int, epochs: float = 1e9, arrival: int = 0, ty=RESNET) -> ElasticJob:
    return ElasticJob(jid, ty, arrival, num_epochs=epochs, real_num_epochs=epochs)


def _eff_mb(ty=RESNET) -> float:
    """Equivalent MB the engine moves for one model-size exchange (half duplex: x 2)."""
    return 2.0 * ty.model_size_mb * (1000.0 / ty.inter_bw_mb_s) / NET_B


def _one_slot(sim: ContentionSlotSimulator):
    views = sim.begin_slot()
    assert sim.allocator is not None
    return sim.end_slot(sim.allocator.allocate(views, sim.cluster, sim.speed, sim.spec.slot_s))


EXACT = ContentionConfig(min_steps_per_slot=None, global_batch_workers=1)


def test_single_ps_job_alone_matches_hand_oracle_and_analytical_model() -> None:
    # one worker on node 0, one PS on node 1: iteration = 0.449 s + 2 M / bw (DL²'s t_inter)
    cluster = ElasticCluster(num_nodes=3, slot_s=100.0)
    sim = ContentionSlotSimulator(cluster, [_job(0)], Pinned({0: ([0], [1])}), EXACT)
    rec = _one_slot(sim)
    it_s = RESNET.local_comp_time_s + _eff_mb() * NET_B / 1000.0
    assert it_s == pytest.approx(0.449 + 2 * 102.2 / 91.875)
    epochs = 100.0 / it_s * 1 / RESNET.iterations_per_epoch  # G = 1 batch per iteration
    assert rec.epochs[0] == pytest.approx(epochs, rel=1e-12)
    # at W = G, no co-location, the contention model is DL²'s analytical model
    assert rec.epochs[0] == pytest.approx(AnalyticalSpeed().speed(RESNET, 1, 1) * 100.0 / 115)
    assert ContentionSpeed(EXACT).speed(RESNET, 1, 1) == pytest.approx(1 / it_s)


def test_two_bundles_each_nic_carries_one_model_per_iteration() -> None:
    # FixedDemand puts 2 bundles (worker + PS) on nodes 0 and 1.  Node 0 sends w0's push to
    # PS 1 and PS 0's pull to w1 (M/2 each) and receives as much: M per direction, as when
    # every task has its own node (worker: M out; PS: W M / P = M in)
    cfg = ContentionConfig(min_steps_per_slot=None, global_batch_workers=2)
    cluster = ElasticCluster(num_nodes=4, slot_s=100.0)
    job = ElasticJob(0, RESNET, 0, 1e9, 1e9, max_workers=2, max_ps=2)
    sim = ContentionSlotSimulator(cluster, [job], FixedDemand({0: 2}), cfg)
    rec = _one_slot(sim)
    it_s = 0.449 * 2 / 2 + _eff_mb() * NET_B / 1000.0
    assert rec.epochs[0] == pytest.approx(100.0 / it_s * 2 / 115, rel=1e-12)
    assert rec.epochs[0] == pytest.approx(ContentionSpeed(cfg).speed(RESNET, 2, 2) * 100 / 115)


def test_two_jobs_on_one_nic_slow_each_other_by_the_contention_formula() -> None:
    cluster = ElasticCluster(num_nodes=3, slot_s=100.0)
    pinned = Pinned({0: ([0], [1]), 1: ([0], [2])})  # both workers on node 0
    sim = ContentionSlotSimulator(cluster, [_job(0), _job(1)], pinned, EXACT)
    rec = _one_slot(sim)
    # lockstep: both exchanges share node 0's NIC, each at 1 / (2b + η)
    it_s = 0.449 + _eff_mb() * (2 * NET_B + NET_ETA) / 1000.0
    for jid in (0, 1):
        assert rec.epochs[jid] == pytest.approx(100.0 / it_s / 115, rel=1e-12)
    alone = ContentionSlotSimulator(cluster, [_job(0)], Pinned({0: ([0], [1])}), EXACT)
    assert rec.epochs[0] < _one_slot(alone).epochs[0]


def test_global_batch_stays_fixed_when_workers_change() -> None:
    cfg = ContentionConfig(global_batch_workers=8)
    for w in (1, 2, 4, 8, 16):
        spec = engine_job(0, RESNET, w, 1, 10, cfg)
        assert spec.model.batch_size * w == pytest.approx(800, rel=0.06)  # rounded batch
        assert spec.model.compute_ms * w == pytest.approx(449.0 * 8)  # exact time scaling
    # progress per iteration is G batches whatever W: the solo speed is G / iteration time
    for w in (1, 2, 4):
        assert ContentionSpeed(cfg).speed(RESNET, 1, w) == pytest.approx(
            8 / solo_iteration_s(RESNET, w, 1, cfg)
        )


def test_partial_progress_carries_over_and_finish_counts_the_fraction() -> None:
    cluster = ElasticCluster(num_nodes=3, slot_s=100.0)
    it_s = 0.449 + _eff_mb() * NET_B / 1000.0
    per_slot = 100.0 / it_s / 115
    for slots in (0.25, 1.5, 2.75):
        job = _job(0, epochs=slots * per_slot)
        sim = ContentionSlotSimulator(cluster, [job], Pinned({0: ([0], [1])}), EXACT)
        result = sim.run()
        assert result.jobs[0].finish == pytest.approx(slots, rel=1e-9)
        assert result.num_slots == int(slots) + 1


def test_scaling_overhead_delays_a_changed_job() -> None:
    cluster = ElasticCluster(num_nodes=3, slot_s=100.0)

    class Grow(Pinned):
        def allocate(self, jobs, cluster, speed, slot_s):
            self.where = {0: ([0], [1])} if not jobs[0].slots_run else {0: ([0, 0], [1])}
            return super().allocate(jobs, cluster, speed, slot_s)

    sims = [
        ContentionSlotSimulator(cluster, [_job(0)], Grow({}), EXACT, scaling_overhead_s=o)
        for o in (0.0, 10.0)
    ]
    recs = [[_one_slot(s), _one_slot(s)] for s in sims]
    assert recs[0][0].epochs[0] == pytest.approx(recs[1][0].epochs[0])  # first slot: none
    assert recs[1][1].epochs[0] == pytest.approx(recs[0][1].epochs[0] * 0.9, rel=2e-2)


SMALL = DL2Setting(
    num_nodes=6, num_jobs=8, max_arrivals_per_slot=3, J=8, max_epochs=300, max_workers=6, max_ps=6
)


@pytest.mark.parametrize("alloc", [DRF, FIFO, SRTF, Tetris, Optimus])
def test_invariants_every_job_finishes_once_no_over_commit(alloc) -> None:
    for seed in range(2):
        jobs = SMALL.workload(seed)
        sim = ContentionSlotSimulator(
            ElasticCluster(num_nodes=6), jobs, alloc(), ContentionConfig(min_steps_per_slot=5)
        )
        used: list[tuple[int, int]] = []
        sim.on_slot = lambda rec, used=used: used.append((rec.used_cpu, rec.used_gpu))
        result = sim.run()  # SlotSimulator checks capacity and single completion every slot
        assert sorted(r.job_id for r in result.jobs) == sorted(j.job_id for j in jobs)
        assert all(r.finish > r.arrival for r in result.jobs)
        assert all(c <= 6 * 8 and g <= 6 * 8 for c, g in used)
        assert result.speed_model == "contention"


def test_deterministic_and_core_placers_run() -> None:
    jobs = SMALL.workload(3)
    cfg = ContentionConfig(min_steps_per_slot=5)
    runs = [
        ContentionSlotSimulator(ElasticCluster(num_nodes=6), jobs, DRF(), cfg).run()
        for _ in range(2)
    ]
    assert runs[0] == runs[1]
    for placer in ("ff", "lwf1", "rand"):
        a, b = (
            ContentionSlotSimulator(
                ElasticCluster(num_nodes=6), jobs, DRF(), cfg, placer=placer
            ).run()
            for _ in range(2)
        )
        assert a == b
        assert len(a.jobs) == len(jobs)


def test_time_compression_is_close_to_exact_for_a_lone_job() -> None:
    cluster = ElasticCluster(num_nodes=3, slot_s=1200.0)
    job = _job(0, epochs=30.0)
    exact = ContentionSlotSimulator(cluster, [job], Pinned({0: ([0], [1])}), EXACT).run()
    fast_cfg = ContentionConfig(min_steps_per_slot=5, global_batch_workers=1)
    fast = ContentionSlotSimulator(cluster, [job], Pinned({0: ([0], [1])}), fast_cfg).run()
    assert fast.jobs[0].finish == pytest.approx(exact.jobs[0].finish, rel=1e-9)


def test_bad_config_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="communication scheduler"):
        ContentionConfig(comm="nope")
    with pytest.raises(ConfigError, match="global_batch_workers"):
        ContentionConfig(global_batch_workers=0)
    with pytest.raises(ConfigError, match="min_steps_per_slot"):
        ContentionConfig(min_steps_per_slot=0)
    with pytest.raises(ConfigError, match="placement"):
        ContentionSlotSimulator(ElasticCluster(num_nodes=2), [_job(0)], DRF(), placer="zz")
    with pytest.raises(ConfigError, match="core placer"):
        ContentionSlotSimulator(ElasticCluster(num_nodes=2), [_job(0)], None)
    with pytest.raises(ConfigError, match="1 worker"):
        engine_job(0, RESNET, 0, 1, 5, ContentionConfig())


# ---------------------------------------------------------------- exact reuse of slot states
def _slots(sim: ContentionSlotSimulator, n: int) -> list:
    sim.reset()
    return [_one_slot(sim) for _ in range(n)]


def test_reuse_lone_job_simulates_only_the_first_and_the_finishing_slot() -> None:
    # alone on fixed nodes every slot is the same engine run until the job can finish in it
    cluster = ElasticCluster(num_nodes=3, slot_s=100.0)
    it_s = 0.449 + _eff_mb() * NET_B / 1000.0
    job = _job(0, epochs=3.5 * 100.0 / it_s / 115)
    results = []
    for reuse in (True, False):
        cfg = ContentionConfig(min_steps_per_slot=None, global_batch_workers=1, reuse_slots=reuse)
        sim = ContentionSlotSimulator(cluster, [job], Pinned({0: ([0], [1])}), cfg)
        results.append(sim.run())
        if reuse:
            # slot 0 simulated, slots 1-2 reused, slot 3 (the job finishes) simulated again
            assert (sim.stats.simulated, sim.stats.reused, sim.stats.slots) == (2, 2, 4)
    assert results[0] == results[1]
    assert results[0].jobs[0].finish == pytest.approx(3.5, rel=1e-9)


def test_reuse_is_up_to_node_relabelling_and_not_across_co_location() -> None:
    cluster = ElasticCluster(num_nodes=4, slot_s=100.0)
    layouts = [
        {0: ([0], [1]), 1: ([2], [3])},  # both jobs spread
        {0: ([3], [2]), 1: ([1], [0])},  # the same up to renaming nodes: reused
        {0: ([0], [1]), 1: ([0], [3])},  # both workers on node 0: a different run
    ]

    class Cycle(Pinned):
        def allocate(self, jobs, cluster, speed, slot_s):
            self.where = layouts[min(jobs[0].slots_run, 2)]
            return super().allocate(jobs, cluster, speed, slot_s)

    recs = {}
    for reuse in (True, False):
        cfg = ContentionConfig(min_steps_per_slot=None, global_batch_workers=1, reuse_slots=reuse)
        sim = ContentionSlotSimulator(cluster, [_job(0), _job(1)], Cycle({}), cfg)
        recs[reuse] = _slots(sim, 3)
        assert sim.stats.reused == (1 if reuse else 0)
    assert [r.epochs for r in recs[True]] == [r.epochs for r in recs[False]]
    alone = 100.0 / (0.449 + _eff_mb() * NET_B / 1000.0) / 115
    shared = 100.0 / (0.449 + _eff_mb() * (2 * NET_B + NET_ETA) / 1000.0) / 115
    for rec, want in zip(recs[True], (alone, alone, shared), strict=True):
        assert rec.epochs[0] == pytest.approx(want, rel=1e-12)
        assert rec.epochs[1] == pytest.approx(want, rel=1e-12)


LONG = DL2Setting(
    num_nodes=6, num_jobs=8, max_arrivals_per_slot=3, J=8, max_epochs=3000, max_workers=6, max_ps=6
)
TINY = DL2Setting(
    num_nodes=6, num_jobs=6, max_arrivals_per_slot=3, J=6, max_epochs=40, max_workers=4, max_ps=4
)


@pytest.mark.parametrize(
    ("alloc", "min_steps"),
    [(a, 5) for a in (DRF, FIFO, SRTF, Tetris, Optimus)] + [(DRF, None), (Optimus, None)],
)
def test_reuse_gives_bit_identical_runs(alloc, min_steps) -> None:
    # compressed: 1200-s slots of the 8-job workload; exact (every iteration): 60-s slots of
    # a 6-job one
    cluster = ElasticCluster(num_nodes=6, slot_s=1200.0 if min_steps else 60.0)
    for seed in range(2):
        jobs = (SMALL if min_steps else TINY).workload(seed)
        runs, stats = [], []
        for reuse in (True, False):
            cfg = ContentionConfig(min_steps_per_slot=min_steps, reuse_slots=reuse)
            sim = ContentionSlotSimulator(cluster, jobs, alloc(), cfg)
            runs.append(sim.run())
            stats.append(sim.stats)
        assert runs[0] == runs[1]
        on, off = stats
        assert on.slots == off.slots == on.simulated + on.reused
        assert off.reused == 0 and on.events <= off.events
    assert on.reused > 0  # the slot state repeats in these runs


def test_reuse_with_core_placers_only_where_the_run_is_a_function_of_the_key() -> None:
    jobs = LONG.workload(1)
    for placer, comm, reusable in (
        ("ff", "fs", True),
        ("lwf1", "fs", False),  # reads the GPUs' load (remaining work)
        ("rand", "fs", False),  # seeded per slot
        ("ff", "srsf1", False),  # admission reads priorities that move within a slot
    ):
        runs = []
        for reuse in (True, False):
            cfg = ContentionConfig(min_steps_per_slot=5, comm=comm, reuse_slots=reuse)
            sim = ContentionSlotSimulator(
                ElasticCluster(num_nodes=6), jobs, DRF(), cfg, placer=placer
            )
            runs.append(sim.run())
            if reuse:
                assert (sim.stats.reused > 0) == reusable, (placer, comm)
        assert runs[0] == runs[1]


# ---------------------------------------------------------------- measurement window
def test_window_is_exact_for_a_lone_job_and_simulates_the_finishing_slot() -> None:
    # identical iterations: the rate over the window's second half is the slot's rate
    cluster = ElasticCluster(num_nodes=3, slot_s=100.0)
    it_s = 0.449 + _eff_mb() * NET_B / 1000.0
    job = _job(0, epochs=3.5 * 100.0 / it_s / 115)
    cfg = ContentionConfig(
        min_steps_per_slot=None, global_batch_workers=1, measure_fraction=0.2, reuse_slots=False
    )
    sim = ContentionSlotSimulator(cluster, [job], Pinned({0: ([0], [1])}), cfg)
    result = sim.run()
    assert result.jobs[0].finish == pytest.approx(3.5, rel=1e-9)
    # slots 0-2 from the window; slot 3, where the job finishes, simulated to its end
    assert (sim.stats.windowed, sim.stats.simulated) == (3, 4)
    first = 100.0 / it_s / 115
    sim.reset()
    assert _one_slot(sim).epochs[0] == pytest.approx(first, rel=1e-9)


def test_window_error_against_the_whole_slot_is_bounded() -> None:
    # the same slot states rated both ways (the whole-slot rates drive the run)
    errors: list[float] = []

    class Shadow(ContentionSlotSimulator):
        def _slot_rates(self, t, allocation):
            full = self.config
            self.config = ContentionConfig(min_steps_per_slot=5, measure_fraction=0.3)
            self._cache = {}
            approx = super()._slot_rates(t, allocation)
            self.config = full
            rates = super()._slot_rates(t, allocation)
            assert rates is not None and approx is not None
            errors.extend(abs(approx[j] - r) / r for j, r in rates.items() if r > 0)
            return rates

    cfg = ContentionConfig(min_steps_per_slot=5, reuse_slots=False)
    for alloc in (DRF, Optimus):
        for seed in range(2):
            Shadow(ElasticCluster(num_nodes=6), LONG.workload(seed), alloc(), cfg).run()
    mean = sum(errors) / len(errors)
    assert len(errors) > 200
    assert mean < 0.05 and max(errors) < 0.5, (mean, max(errors))


def test_bad_window_is_a_clear_error() -> None:
    for bad in (0.0, -0.1, 1.5, "half"):
        with pytest.raises(ConfigError, match="measure_fraction"):
            ContentionConfig(measure_fraction=bad)  # type: ignore[arg-type]


def test_a_fractional_last_step_longer_than_the_slot_finishes() -> None:
    # one step = 0.449 s + 2.22 s of exchange > the 1-s slot; the job needs half a step:
    # 0.3745 of a step in slot 0, the remaining 0.1255 step at solo speed in slot 1
    cluster = ElasticCluster(num_nodes=3, slot_s=1.0)
    it_s = 0.449 + _eff_mb() * NET_B / 1000.0
    assert it_s > 1.0
    job = _job(0, epochs=0.5 / 115)
    sim = ContentionSlotSimulator(cluster, [job], Pinned({0: ([0], [1])}), EXACT)
    result = sim.run()
    assert result.jobs[0].finish == pytest.approx(0.5 * it_s, rel=1e-9)
    assert result.num_slots == 2
