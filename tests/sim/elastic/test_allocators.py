"""Slot cluster and per-slot allocators of the elastic world, against hand-computed oracles.

The speed model is a stand-in defined here, ``base * (min(w, limit) + 0.5 * min(p, limit))``
iterations/s for ``w, p >= 1`` (0 otherwise): a worker is worth twice a PS until the
``limit``, after which more of that role adds nothing, so Optimus' utilities are easy to
compute by hand.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pytest

from envs.sim.elastic.allocators import (
    DRF,
    FIFO,
    SRTF,
    Allocator,
    FixedDemand,
    JobState,
    Optimus,
    Tetris,
    dominant_share,
    optimus_utility,
)
from envs.sim.elastic.cluster import SlotCluster
from envs.sim.elastic.spec import ElasticCluster, ElasticJob, JobType
from envs.sim.errors import ConfigError

SLOT_S = 100.0


class StandInSpeed:
    """``base * (min(w, limit) + 0.5 * min(p, limit))`` it/s; ``(base, limit)`` per model."""

    name = "stand-in"

    def __init__(self, table: dict[str, tuple[float, int]] | None = None) -> None:
        self.table = table or {}

    def speed(self, job_type: JobType, num_ps: int, num_workers: int) -> float:
        if num_ps <= 0 or num_workers <= 0:
            return 0.0
        base, limit = self.table.get(job_type.model, (1.0, 2))
        return base * (min(num_workers, limit) + 0.5 * min(num_ps, limit))


def jtype(
    worker: tuple[int, int] = (2, 4),
    ps: tuple[int, int] = (2, 0),
    *,
    model: str = "m",
    ipe: int = 100,
) -> JobType:
    return JobType(
        index=0,
        model=model,
        worker_cpu=worker[0],
        worker_gpu=worker[1],
        ps_cpu=ps[0],
        ps_gpu=ps[1],
        epoch_fraction=1.0,
        iterations_per_epoch=ipe,
        local_comp_time_s=0.1,
        model_size_mb=1.0,
        inter_bw_mb_s=1.0,
        intra_bw_mb_s=1.0,
    )


def state(
    job_id: int,
    ty: JobType,
    *,
    arrival: int = 0,
    epochs: float = 10.0,
    progress: float = 0.0,
    max_workers: int = 16,
    max_ps: int = 16,
) -> JobState:
    spec = ElasticJob(job_id, ty, arrival, epochs, epochs, max_workers, max_ps)
    return JobState(spec, progress)


def cluster(nodes: int = 1, cpu: int = 8, gpu: int = 8, *, strict: bool = False) -> SlotCluster:
    return SlotCluster(ElasticCluster(nodes, cpu, gpu, SLOT_S), strict_reference=strict)


def run(
    alloc: Allocator,
    jobs: Sequence[JobState],
    c: SlotCluster,
    speed: StandInSpeed | None = None,
) -> dict[int, tuple[int, int]]:
    out = alloc.allocate(jobs, c, speed or StandInSpeed(), SLOT_S)
    check_consistent(jobs, c, out)
    return out


def check_consistent(
    jobs: Sequence[JobState], c: SlotCluster, out: dict[int, tuple[int, int]]
) -> None:
    """No node over capacity; the cluster holds exactly the allocated tasks; caps hold."""
    assert sorted(out) == sorted(j.job_id for j in jobs)
    assert np.all(c.used_cpu <= c.cpu_capacity) and np.all(c.used_gpu <= c.gpu_capacity)
    assert np.all(c.used_cpu >= 0) and np.all(c.used_gpu >= 0)
    cpu = gpu = 0
    for j in jobs:
        w, p = out[j.job_id]
        assert 0 <= w <= j.spec.max_workers and 0 <= p <= j.spec.max_ps
        cpu += w * j.worker_demand[0] + p * j.ps_demand[0]
        gpu += w * j.worker_demand[1] + p * j.ps_demand[1]
    assert (int(c.used_cpu.sum()), int(c.used_gpu.sum())) == (cpu, gpu)


def roles(alloc: DRF | FIFO | SRTF | Tetris | Optimus | FixedDemand) -> dict[int, list[int]]:
    """(workers, ps) per job re-counted from the decision log."""
    n: dict[int, list[int]] = {}
    for jid, role, _ in alloc.last_decisions:
        c = n.setdefault(jid, [0, 0])
        c[0] += role in ("worker", "bundle")
        c[1] += role in ("ps", "bundle")
    return n


# --------------------------------------------------------------------------- cluster


def test_cluster_refuses_explicit_over_commit() -> None:
    c = cluster(1, 8, 8)
    c.place(6, 8, 0)
    assert not c.can_place(4, 0, 0) and c.can_place(2, 0, 0)
    with pytest.raises(ConfigError, match=r"over-commit.*node 0"):
        c.place(4, 0, 0)
    assert c.place_bundle((2, 0), (0, 1), node=0) is None  # a search never raises
    with pytest.raises(ConfigError, match="over-commit"):
        c.place(0, 1, 0)
    assert (int(c.used_cpu[0]), int(c.used_gpu[0])) == (6, 8)  # nothing changed
    with pytest.raises(ConfigError, match="out of range"):
        c.place(1, 0, 1)
    with pytest.raises(ConfigError, match="non-negative"):
        c.place(-1, 0, 0)
    with pytest.raises(ConfigError, match="release"):
        c.release(8, 0, 0)
    c.release_all()
    assert c.used_cpu.sum() == 0 and c.used_gpu.sum() == 0


def test_least_loaded_default_vs_strict_reference() -> None:
    for strict in (False, True):
        c = cluster(2, 8, 8, strict=strict)
        c.place(2, 8, 0)  # load 10, room for CPU
        c.place(6, 0, 1)  # load 6 (least loaded), only 2 CPU free
        node = c.place_least_loaded(4, 0)
        # Default: least loaded among the nodes where it fits; reference: node 1 or fail.
        assert node == (None if strict else 0)
        assert c.place_least_loaded(2, 0) == 1  # fits on the least-loaded node: both agree


def test_least_loaded_ties_by_index_and_bundles_share_a_node() -> None:
    c = cluster(3, 8, 8)
    assert c.place_least_loaded(1, 0) == 0
    assert c.place_least_loaded(1, 0) == 1
    assert c.place_bundle((2, 4), (2, 0)) == 2
    assert (int(c.used_cpu[2]), int(c.used_gpu[2])) == (4, 4)
    assert c.place_bundle((2, 4), (2, 0)) == 0  # loads 1, 1, 8 -> node 0
    assert c.place_bundle((2, 4), (2, 0), node=2) == 2
    assert c.place_bundle((2, 4), (2, 0), node=2) is None  # full: no partial placement
    assert (int(c.used_cpu[2]), int(c.used_gpu[2])) == (8, 8)
    assert c.place_bundle((8, 0), (1, 0)) is None


# --------------------------------------------------------------------------- DRF


def test_drf_alternates_bundles_on_two_nodes() -> None:
    ty = jtype()  # bundle (4 CPU, 4 GPU): two per 8/8 node
    jobs = [state(0, ty), state(1, ty)]
    alloc = DRF()
    assert run(alloc, jobs, cluster(2)) == {0: (2, 2), 1: (2, 2)}
    assert [(j, n) for j, _, n in alloc.last_decisions] == [(0, 0), (1, 1), (0, 0), (1, 1)]


def test_drf_follows_dominant_shares() -> None:
    a = state(0, jtype((2, 0), (2, 0)))  # bundle (4, 0): share 4/16 per bundle
    b = state(1, jtype((2, 8), (2, 0)))  # bundle (4, 8): share 8/16 per bundle
    alloc = DRF()
    c = cluster(2)
    assert run(alloc, [a, b], c) == {0: (3, 3), 1: (1, 1)}
    # A (0) -> node 0; B (share 0) -> node 1 (load 0 < 4); A (1/4 < 1/2) -> node 0;
    # A and B at 1/2: tie by arrival then id -> A, node 0 is out of CPU -> node 1; B's bundle
    # fits nowhere, then A's neither.
    assert [(j, n) for j, _, n in alloc.last_decisions] == [(0, 0), (1, 1), (0, 0), (0, 1)]
    assert dominant_share(b, 1, 1, c) == 0.5


def test_ties_never_depend_on_input_order() -> None:
    ty = jtype((1, 0), (1, 0))
    jobs = [state(3, ty), state(1, ty), state(2, ty, arrival=0), state(0, ty, arrival=1)]
    for alloc_cls in (DRF, FIFO, SRTF, Tetris, Optimus, FixedDemand):
        outs = []
        for order in (jobs, jobs[::-1], jobs[1:] + jobs[:1]):
            alloc = alloc_cls()
            outs.append((run(alloc, order, cluster(1, 6, 0)), list(alloc.last_decisions)))
        assert outs[0] == outs[1] == outs[2], alloc_cls.__name__


def test_caps_bound_bundles() -> None:
    ty = jtype((1, 0), (1, 0))
    jobs = [state(0, ty, max_workers=2, max_ps=5), state(1, ty, max_workers=5, max_ps=1)]
    for alloc_cls in (DRF, FIFO, SRTF, Tetris):
        assert run(alloc_cls(), jobs, cluster(4)) == {0: (2, 2), 1: (1, 1)}, alloc_cls.__name__


# --------------------------------------------------------------------------- FIFO / SRTF


def test_fifo_gives_the_first_job_everything_up_to_its_cap() -> None:
    ty = jtype((1, 0), (1, 0))  # bundle (2, 0): 8 bundles on 2 x 8 CPU
    early, late = state(5, ty, arrival=0, max_workers=3), state(2, ty, arrival=1)
    assert run(FIFO(), [late, early], cluster(2)) == {5: (3, 3), 2: (5, 5)}
    big = state(5, ty, arrival=0)  # cap 16 > 8 bundles: takes the whole cluster
    assert run(FIFO(), [late, big], cluster(2)) == {5: (8, 8), 2: (0, 0)}


def test_srtf_orders_by_remaining_fraction() -> None:
    ty = jtype((1, 0), (1, 0))  # 4 bundles fit; each job takes 2
    jobs = [
        state(0, ty, arrival=0, progress=0.0, max_workers=2),  # remaining 1.0
        state(1, ty, arrival=1, progress=5.0, max_workers=2),  # 0.5
        state(2, ty, arrival=2, progress=2.5, max_workers=2),  # 0.75
    ]
    alloc = SRTF()
    assert run(alloc, jobs, cluster(1)) == {0: (0, 0), 1: (2, 2), 2: (2, 2)}
    assert [d[0] for d in alloc.last_decisions] == [1, 1, 2, 2]
    # Equal remaining fraction (job 3 has 20 epochs, 10 done, arrived first): arrival, then
    # id.  Three bundles fit: job 3 gets two, job 1 the last one.
    tie = [*jobs, state(3, ty, arrival=0, epochs=20.0, progress=10.0, max_workers=2)]
    assert run(SRTF(), tie, cluster(1, 6)) == {0: (0, 0), 1: (1, 1), 2: (0, 0), 3: (2, 2)}
    # Remaining fraction is clamped at 0 once the declared epochs are trained.
    over = state(4, ty, arrival=5, progress=12.0, max_workers=2)
    assert over.remaining_fraction == 0.0 and over.remaining_epochs == 0.0
    assert run(SRTF(), [*jobs, over], cluster(1))[4] == (2, 2)


def test_stop_at_first_failure_differs() -> None:
    gpu_heavy = state(0, jtype((1, 6), (1, 0)), arrival=0)  # bundle (2, 6): only one fits
    small = state(1, jtype((1, 0), (1, 0)), arrival=1, max_workers=8)  # bundle (2, 0)
    jobs = [gpu_heavy, small]
    # Default: job 0's second bundle does not fit, job 1 still fills the 6 free CPU slots.
    assert run(FIFO(), jobs, cluster(1)) == {0: (1, 1), 1: (3, 3)}
    # Reference: the slot ends at that failure.
    assert run(FIFO(stop_at_first_failure=True), jobs, cluster(1)) == {0: (1, 1), 1: (0, 0)}
    assert run(FIFO.reference(), jobs, cluster(1)) == {0: (1, 1), 1: (0, 0)}
    assert run(SRTF(stop_at_first_failure=True), jobs, cluster(1)) == {0: (1, 1), 1: (0, 0)}
    assert run(SRTF(), jobs, cluster(1)) == {0: (1, 1), 1: (3, 3)}


def test_drf_stop_at_first_failure_differs() -> None:
    big = state(0, jtype((2, 4), (2, 4)), arrival=0, max_workers=1)  # (4, 8) bundle, cap 1
    small = state(1, jtype((1, 0), (1, 0)), arrival=1)
    late_big = state(2, jtype((2, 4), (2, 4)), arrival=2)
    # Node 8/8: big -> (4, 8); small (share 0) -> (6, 8); late_big (share 0) fails.
    assert run(DRF.reference(), [big, small, late_big], cluster(1)) == {
        0: (1, 1),
        1: (1, 1),
        2: (0, 0),
    }
    assert run(DRF(), [big, small, late_big], cluster(1)) == {0: (1, 1), 1: (2, 2), 2: (0, 0)}


# --------------------------------------------------------------------------- Tetris


def test_tetris_sign_picks_different_jobs() -> None:
    ty = jtype((2, 4), (2, 0))  # bundle (4, 4): exactly one fits on a 4/4 node
    more = state(0, ty, progress=0.0)  # remain 8 * 1.0
    less = state(1, ty, progress=5.0)  # remain 8 * 0.5
    # align = 4*4 + 4*4 = 32 for both, weight = 32 / 6:
    # default 32 - 8w < 32 - 4w -> less remaining; reference 32 + 8w > 32 + 4w -> more.
    assert run(Tetris(), [more, less], cluster(1, 4, 4)) == {0: (0, 0), 1: (1, 1)}
    assert run(Tetris(reference_sign=True), [more, less], cluster(1, 4, 4)) == {
        0: (1, 1),
        1: (0, 0),
    }


def test_tetris_fills_node_by_node_and_failure_rule() -> None:
    a = state(0, jtype((2, 6), (2, 0)))  # bundle (4, 6)
    b = state(1, jtype((1, 0), (1, 0)))  # bundle (2, 0)
    # Node 0: A first (align 80 vs 16); then A scores higher (28 + 3*10 vs 8 + 3*2) but no
    # longer fits.  Reference: give up on the node.  Default: B fills the 4 free CPU.
    ref = Tetris(reference_sign=True, stop_at_first_failure=True)
    assert run(ref, [a, b], cluster(1)) == {0: (1, 1), 1: (0, 0)}
    fixed = Tetris(reference_sign=True)
    assert run(fixed, [a, b], cluster(1)) == {0: (1, 1), 1: (2, 2)}
    # Nodes are filled in index order.
    t = Tetris()
    run(t, [a, b], cluster(3))
    nodes = [n for _, _, n in t.last_decisions]
    assert nodes == sorted(nodes) and set(nodes) == {0, 1, 2}
    assert Tetris.reference().reference_sign and Tetris.reference().stop_at_first_failure


# --------------------------------------------------------------------------- Optimus


def test_optimus_utility_speed_zero_and_nothing_left() -> None:
    assert optimus_utility(10.0, 2.0, 5.0) == pytest.approx(5.0 - 2.0)
    assert optimus_utility(10.0, 0.0, 5.0) == math.inf  # leaving a speed-0 point
    assert optimus_utility(10.0, 5.0, 0.0) == -math.inf  # entering one
    assert optimus_utility(10.0, 0.0, 0.0) == 0.0  # inf - inf: no slot saved, not NaN
    assert optimus_utility(0.0, 0.0, 5.0) == 0.0
    assert optimus_utility(10.0, 5.0, 2.0) == pytest.approx(2.0 - 5.0)


def test_optimus_stops_when_utility_is_not_positive() -> None:
    job = state(0, jtype((1, 0), (1, 0)))
    alloc = Optimus()
    # First worker, first PS; at (1, 1) speed 1.5: +worker -> 2.5, +PS -> 2.0: worker;
    # at (2, 1): +worker -> 2.5 (limit 2, utility 0), +PS -> 3.0: PS; at (2, 2) both 0: stop,
    # although caps and the cluster (32 CPU) would allow much more.
    assert run(alloc, [job], cluster(4)) == {0: (2, 2)}
    assert [r for _, r, _ in alloc.last_decisions] == ["worker", "ps", "worker", "ps"]


def test_optimus_prefers_the_larger_marginal_gain() -> None:
    ty = jtype((1, 0), (1, 0))
    speed = StandInSpeed({"m": (1.0, 4)})
    near_done = state(1, ty, arrival=0, progress=8.0)  # 2 epochs left
    fresh = state(0, ty, arrival=1, progress=0.0)  # 10 epochs left
    alloc = Optimus()
    # 5 CPU slots: first worker/PS for both (arrival order), then one task left.  Utility of
    # +worker = rem * (1/1.5 - 1/2.5) x (ipe/slot_s): 10 epochs beat 2.
    out = run(alloc, [near_done, fresh], cluster(1, 5, 0), speed)
    assert out == {0: (2, 1), 1: (1, 1)}
    assert [d[0] for d in alloc.last_decisions] == [1, 1, 0, 0, 0]


def test_optimus_failures_release_a_job_that_cannot_run() -> None:
    a = state(0, jtype((1, 0), (1, 0)), arrival=0)
    b = state(1, jtype((1, 0), (2, 0)), arrival=1)  # its PS needs 2 CPU
    speed = StandInSpeed({"m": (1.0, 4)})
    # 3 CPU: A worker, A PS, B worker; B's PS does not fit.
    ref = run(Optimus(stop_at_first_failure=True), [a, b], cluster(1, 3, 0), speed)
    assert ref == {0: (1, 1), 1: (1, 0)}  # the reference stops with B's lone worker
    fixed = Optimus()
    out = run(fixed, [a, b], cluster(1, 3, 0), speed)
    assert out == {0: (2, 1), 1: (0, 0)}  # B's worker released, A uses the slot
    assert all(jid == 0 for jid, _, _ in fixed.last_decisions)


def test_optimus_ignores_speed_factor_unless_oracle() -> None:
    ty = jtype((1, 0), (1, 0))
    speed = StandInSpeed({"m": (1.0, 4)})
    slow = JobState(ElasticJob(0, ty, 0, 10.0, 10.0, speed_factor=0.1))
    fast = JobState(ElasticJob(1, ty, 0, 10.0, 10.0, speed_factor=1.0))
    # Same model estimate: tie on utility -> arrival, id -> job 0.  The oracle sees job 0
    # is 10x slower, so each task saves it 10x more slots.
    assert run(Optimus(), [slow, fast], cluster(1, 5, 0), speed)[0] == (2, 1)
    assert run(Optimus(oracle_speed_factor=True), [fast, slow], cluster(1, 5, 0), speed)[0] == (
        2,
        1,
    )
    # Oracle with job 1 the slow one instead picks job 1.
    slow1 = JobState(ElasticJob(1, ty, 0, 10.0, 10.0, speed_factor=0.1))
    fast0 = JobState(ElasticJob(0, ty, 0, 10.0, 10.0))
    out = run(Optimus(oracle_speed_factor=True), [fast0, slow1], cluster(1, 5, 0), speed)
    assert out == {0: (1, 1), 1: (2, 1)}


# --------------------------------------------------------------------------- FixedDemand


def test_fixed_demand_gives_requested_counts_all_or_nothing() -> None:
    ty = jtype((1, 0), (1, 0))  # 8 bundles on 2 x 8 CPU
    jobs = [state(0, ty, arrival=0), state(1, ty, arrival=1), state(2, ty, arrival=2)]
    req = {0: 3, 1: 10, 2: 2}
    # Job 1 wants 10 bundles, 5 fit: it gets nothing (and holds nothing); job 2 backfills.
    c = cluster(2)
    assert run(FixedDemand(req), jobs, c) == {0: (3, 3), 1: (0, 0), 2: (2, 2)}
    assert int(c.used_cpu.sum()) == 10
    strict = FixedDemand(req, stop_at_first_failure=True)
    assert run(strict, jobs, cluster(2)) == {0: (3, 3), 1: (0, 0), 2: (0, 0)}
    # Default request = max_workers; PS capped by max_ps (extra workers placed alone).
    capped = [state(0, ty, max_workers=3, max_ps=1), state(1, ty, max_workers=2)]
    assert run(FixedDemand(), capped, cluster(2)) == {0: (3, 1), 1: (2, 2)}
    assert run(FixedDemand({0: 9}), capped, cluster(2)) == {0: (3, 1), 1: (2, 2)}
    with pytest.raises(ConfigError, match="job 4"):
        FixedDemand({4: 0})


# --------------------------------------------------------------------------- properties


def _random_case(seed: int) -> tuple[ElasticCluster, list[JobState], StandInSpeed, dict[int, int]]:
    rng = np.random.default_rng(seed)
    spec = ElasticCluster(
        int(rng.integers(1, 5)), int(rng.integers(1, 9)), int(rng.integers(0, 9)), SLOT_S
    )
    types = []
    table = {}
    for k in range(int(rng.integers(1, 4))):
        worker = (
            int(rng.integers(0, spec.cpu_slots + 2)),
            int(rng.integers(0, spec.gpu_slots + 2)),
        )
        ps = (int(rng.integers(0, spec.cpu_slots + 1)), int(rng.integers(0, 2)))
        types.append(jtype(worker, ps, model=f"t{k}"))
        table[f"t{k}"] = (float(rng.uniform(0.1, 5.0)), int(rng.integers(1, 6)))
    jobs = []
    for jid in range(int(rng.integers(1, 7))):
        ty = types[int(rng.integers(len(types)))]
        epochs = float(rng.uniform(1.0, 50.0))
        spec_j = ElasticJob(
            jid,
            ty,
            int(rng.integers(0, 4)),
            epochs,
            epochs * float(rng.uniform(0.8, 1.2)),
            max_workers=int(rng.integers(1, 6)),
            max_ps=int(rng.integers(0, 6)),
            speed_factor=float(rng.uniform(0.5, 1.5)),
        )
        jobs.append(JobState(spec_j, float(rng.uniform(0.0, 1.1)) * epochs))
    perm = rng.permutation(len(jobs))
    requested = {j.job_id: int(rng.integers(1, 7)) for j in jobs if rng.random() < 0.5}
    return spec, [jobs[i] for i in perm], StandInSpeed(table), requested


def _variants(
    requested: dict[int, int],
) -> list[DRF | FIFO | SRTF | Tetris | Optimus | FixedDemand]:
    out: list[DRF | FIFO | SRTF | Tetris | Optimus | FixedDemand] = []
    for stop in (False, True):
        out += [
            DRF(stop_at_first_failure=stop),
            FIFO(stop_at_first_failure=stop),
            SRTF(stop_at_first_failure=stop),
            Tetris(stop_at_first_failure=stop),
            Tetris(reference_sign=True, stop_at_first_failure=stop),
            Optimus(stop_at_first_failure=stop),
            Optimus(oracle_speed_factor=True, stop_at_first_failure=stop),
            FixedDemand(requested, stop_at_first_failure=stop),
        ]
    return out


def test_no_allocator_ever_over_commits_a_node() -> None:
    checked = 0
    for seed in range(200):
        spec, jobs, speed, requested = _random_case(seed)
        for strict in (False, True):
            for alloc in _variants(requested):
                c = SlotCluster(spec, strict_reference=strict)
                out = alloc.allocate(jobs, c, speed, SLOT_S)
                check_consistent(jobs, c, out)  # capacity, caps, cluster == allocation
                counted = roles(alloc)
                for jid, (w, p) in out.items():
                    assert tuple(counted.get(jid, [0, 0])) == (w, p), (seed, alloc, jid)
                # Deterministic: the same call on a fresh cluster gives the same answer.
                again = alloc.allocate(
                    jobs, SlotCluster(spec, strict_reference=strict), speed, SLOT_S
                )
                assert again == out
                checked += 1
    assert checked == 200 * 2 * 16


def test_default_fills_at_least_what_the_reference_fills() -> None:
    """Skipping a failed job never leaves more free slots than stopping the slot, for the
    in-turn allocators (the reference's decisions are a prefix of the default's)."""
    for seed in range(200):
        spec, jobs, speed, _ = _random_case(seed)
        for cls in (FIFO, SRTF):
            ref, fixed = cls(stop_at_first_failure=True), cls()
            c_ref, c_fixed = SlotCluster(spec), SlotCluster(spec)
            ref.allocate(jobs, c_ref, speed, SLOT_S)
            fixed.allocate(jobs, c_fixed, speed, SLOT_S)
            assert fixed.last_decisions[: len(ref.last_decisions)] == ref.last_decisions
            assert int(c_fixed.load.sum()) >= int(c_ref.load.sum())


def test_jobstate_of_equals_the_constructor() -> None:
    """The simulator's fast view constructor stores exactly what the dataclass would."""
    spec = state(3, jtype((2, 4), (2, 0)), arrival=2, epochs=7.0).spec
    made = JobState(spec, 1.25, 2, 1, 4)
    fast = JobState.of(spec, 1.25, 2, 1, 4)
    assert fast == made and hash(fast) == hash(made) and repr(fast) == repr(made)
    assert (fast.worker_demand, fast.ps_demand) == ((2, 4), (2, 0))
    assert fast.remaining_fraction == made.remaining_fraction
    with pytest.raises(AttributeError):
        fast.workers = 5  # type: ignore[misc]  # still frozen


def test_srtf_equals_fifo_on_small_and_differs_where_capacity_binds() -> None:
    """Documented (SRTF's docstring): DL²'s remaining-fraction SRTF ranks unstarted jobs by
    arrival, as FIFO does; on tiny/small the results are identical job by job, on medium a
    younger job that has run through more of its epochs goes first and the results differ."""
    from envs.gym.factory import SETTINGS
    from envs.sim.elastic.allocators import FIFO, SRTF
    from envs.sim.elastic.simulator import SlotSimulator
    from envs.sim.elastic.speed import MeasuredSpeed

    def both(name: str, seed: int) -> tuple[object, object]:
        st = SETTINGS[name]
        jobs = st.workload(seed)
        return tuple(  # type: ignore[return-value]
            SlotSimulator(st.cluster(), jobs, make(), MeasuredSpeed()).run()
            for make in (FIFO, SRTF)
        )

    for seed in (0, 1):
        fifo, srtf = both("small", seed)
        assert [(r.job_id, r.finish) for r in fifo.jobs] == [
            (r.job_id, r.finish) for r in srtf.jobs
        ]
    fifo, srtf = both("medium", 0)
    assert round(fifo.avg_jct_slots, 1) == 127.4 and round(srtf.avg_jct_slots, 1) == 124.9
