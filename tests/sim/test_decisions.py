"""The decision-point API (``envs/sim/decisions.py``): the stacks' own order and placer
driven through it give ``simulate()``'s per-job results exactly; bad decisions change
nothing; a simulation stopped and resumed keeps every invariant."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from envs.sim import ClusterSpec, FidelityOptions, ModelOptions, RunOptions, SimConfig, simulate
from envs.sim.config import Fidelity
from envs.sim.decisions import DecisionError, DecisionSimulator, drive, simulate_decisions
from envs.sim.errors import ConfigError, SimulationError
from envs.sim.spec import Workload
from envs.sim.stacks import TABLE_IV, TABLE_V, make_stack
from envs.sim.workload import generate_ada_srsf, paper_scale_workload

CLUSTER = ClusterSpec()
STACKS = sorted({*TABLE_IV, *TABLE_V, "fifo:lwf4_srsf2", "srsf:count_fs", "srsf:skew_fs"})


def _finishes(result) -> list[tuple[int, float, float, int]]:
    return [(r.job_id, r.start_ms, r.finish_ms, r.servers) for r in result.records]


#: each stack on two of the seeds 0-2, the pair turning with the stack (every seed meets
#: two thirds of the stacks, every pair of seeds a third)
STACK_SEEDS = [(stack, (i + k) % 3) for i, stack in enumerate(STACKS) for k in (0, 1)]


@pytest.mark.parametrize(("stack", "seed"), STACK_SEEDS)
def test_stacks_through_the_api_reproduce_simulate(stack: str, seed: int) -> None:
    workload = generate_ada_srsf(seed)
    cfg = SimConfig(model=ModelOptions(seed=seed), run=RunOptions(engine="python"))
    assert _finishes(simulate_decisions(CLUSTER, workload, stack, cfg)) == _finishes(
        simulate(CLUSTER, workload, stack, cfg)
    )


@pytest.mark.parametrize("mode", ["reference", "reference_fixed_probe"])
def test_reference_modes_through_the_api_reproduce_simulate(mode: str) -> None:
    workload = generate_ada_srsf(4)
    for stack in ("lwf1_adasrsf", "rand_adasrsf", "lwf1_srsf2"):
        cfg = SimConfig.named(mode, seed=4)
        assert _finishes(simulate_decisions(CLUSTER, workload, stack, cfg)) == _finishes(
            simulate(CLUSTER, workload, stack, cfg)
        )


def test_paper_scale_through_the_api_reproduces_simulate() -> None:
    workload = paper_scale_workload(3)
    cfg = SimConfig(fidelity=FidelityOptions(level=Fidelity.FAST), run=RunOptions(engine="python"))
    for stack in ("lwf1_srsf1", "lwf1_adasrsf"):
        assert _finishes(simulate_decisions(CLUSTER, workload, stack, cfg)) == _finishes(
            simulate(CLUSTER, workload, stack, cfg)
        )


def _stopped(seed: int = 0, **cfg) -> DecisionSimulator:
    sim = DecisionSimulator(
        CLUSTER, generate_ada_srsf(seed), make_stack("lwf1_adasrsf"), SimConfig.from_flat(**cfg)
    )
    assert sim.advance()
    return sim


def _state(sim: DecisionSimulator) -> tuple:
    return (
        list(sim.free_mem_mb),
        list(sim.load_ms),
        [j.spec.job_id for j in sim.queued],
        [j.spec.job_id for j in sim.running],
        sim.mem_version,
        len(sim.heap),
    )


def test_bad_decisions_raise_and_change_nothing() -> None:
    sim = _stopped()
    job = sim.queued[0]
    n = job.spec.num_gpus
    before = _state(sim)
    bad = [
        (sim.jobs[-1] if sim.jobs[-1] not in sim.queued else sim.running[0], list(range(n))),
        (job, list(range(n + 1))),  # too many GPUs
        (job, [0] * n if n > 1 else []),  # repeated / too few
        (job, [CLUSTER.num_gpus + k for k in range(n)]),  # outside the cluster
        (job, [-1 - k for k in range(n)]),
        (job, ["a"] * n),
        (job, None),
    ]
    for target, gpus in bad:
        with pytest.raises(DecisionError):
            sim.start(target, gpus)  # type: ignore[arg-type]
        assert _state(sim) == before
    # a GPU without room (GPU 0 made full)
    sim.free_mem_mb[0] = 0.0
    before = _state(sim)
    with pytest.raises(DecisionError, match="MB free"):
        sim.start(job, list(range(n)))
    assert _state(sim) == before


def test_no_decision_outside_a_stop_and_no_result_before_the_end() -> None:
    sim = DecisionSimulator(CLUSTER, generate_ada_srsf(0), make_stack("lwf1_srsf1"))
    with pytest.raises(DecisionError, match="advance"):
        sim.start(sim.jobs[0], [0])
    assert sim.advance()
    with pytest.raises(SimulationError, match="advance"):
        sim.result()


def test_a_caller_that_never_starts_a_job_gets_a_clear_error() -> None:
    sim = DecisionSimulator(CLUSTER, generate_ada_srsf(0), make_stack("lwf1_srsf1"))
    while sim.advance():
        pass
    with pytest.raises(SimulationError, match="never started"):
        sim.result()


def test_preemptive_orders_are_refused() -> None:
    with pytest.raises(ConfigError, match="preemptive"):
        DecisionSimulator(CLUSTER, generate_ada_srsf(0), make_stack("psrsf:count_fs"))


def test_random_decisions_keep_every_invariant() -> None:
    """Fuzz: at each stop, random valid and invalid starts; invariants after every event
    time; every job finishes, and the bad decisions never changed the state."""
    rng = np.random.default_rng(7)
    workload = generate_ada_srsf(5, num_jobs=60)
    sim = DecisionSimulator(
        CLUSTER,
        workload,
        make_stack("lwf1_adasrsf"),
        SimConfig(run=RunOptions(check_invariants=True)),
    )
    while sim.advance():
        sim.check_invariants()
        for _ in range(int(rng.integers(0, 4))):
            queued = sim.queued
            if not queued:
                break
            job = queued[int(rng.integers(len(queued)))]
            n = job.spec.num_gpus
            gpus = [int(g) for g in rng.choice(CLUSTER.num_gpus + 2, size=n, replace=False)]
            if rng.random() < 0.3:
                gpus = gpus[:-1] if n > 1 else gpus + gpus
            before = _state(sim)
            try:
                sim.start(job, gpus)
            except DecisionError:
                assert _state(sim) == before
        if not sim.running and sim.queued:  # idle cluster: start the first that fits
            for job in sim.queued:
                free = [
                    g for g, f in enumerate(sim.free_mem_mb) if f >= job.spec.model.gpu_memory_mb
                ]
                if len(free) >= job.spec.num_gpus:
                    sim.start(job, free[: job.spec.num_gpus])
                    break
    result = sim.result()
    assert all(math.isfinite(r.finish_ms) and r.finish_ms >= r.start_ms for r in result.records)


def test_drive_is_what_simulate_decisions_runs() -> None:
    workload = generate_ada_srsf(1)
    sim = DecisionSimulator(CLUSTER, workload, make_stack("ff_adasrsf"))
    assert _finishes(drive(sim)) == _finishes(simulate(CLUSTER, workload, "ff_adasrsf"))
    assert sim.stops > 0


@pytest.mark.parametrize("fidelity", [Fidelity.FULL, Fidelity.FAST])
def test_skip_quiet_returns_at_the_changed_stops_only(fidelity: Fidelity) -> None:
    """``skip_quiet``: the engine passes over quiet stops itself; a caller that acts only at
    changed stops sees the same stops, counts and per-job results as without it."""
    workload = generate_ada_srsf(2)
    cluster = ClusterSpec(num_servers=8)  # crowded: queued jobs wait through quiet stops
    cfg = SimConfig(fidelity=FidelityOptions(level=fidelity), model=ModelOptions(seed=2))
    runs = []
    for skip in (False, True):
        sim = DecisionSimulator(cluster, workload, make_stack("lwf1_adasrsf"), cfg)
        sim.skip_quiet = skip
        placer, changed_at = sim.stack.placer, []
        while sim.advance():
            if not sim.changed:
                assert not skip
                continue
            changed_at.append((sim.now, sim.paused_phase))
            sim.settle_loads()
            for job in sorted(sim.queued, key=lambda j: j.remaining_compute_ms):
                gpus = placer.place(job.spec, sim, sim.rng)
                if gpus is not None:
                    sim.start(job, gpus)
        result = sim.result()
        runs.append((changed_at, sim.stops, result.events, _finishes(result)))
    assert runs[0] == runs[1]
    assert len(runs[1][0]) < runs[1][1]  # quiet stops were passed over


def _place_as_the_stack(sim: DecisionSimulator) -> None:
    """At a stop: every queued job in the stack's key order asked to ``place`` (as
    :func:`drive` does)."""
    order, placer = sim.stack.order, sim.stack.placer
    queued = sim.queued
    for job in queued:
        job.prio = order.priority(job)
    sim.settle_loads()
    for job in sorted(queued, key=lambda j: j.prio):
        gpus = placer.place(job.spec, sim, sim.rng)
        if gpus is not None:
            sim.start(job, gpus)


@pytest.mark.parametrize("stack", ["lwf1_srsf1", "lwf1_adasrsf"])
def test_forgetting_the_jobs_still_to_arrive_is_the_run_without_them(stack: str) -> None:
    """Stopped at a time T and told to forget the later jobs, the run goes on exactly as the
    run of the workload of the jobs arrived by T does (later jobs change nothing before T);
    its result covers those jobs only, and a second call drops nothing."""
    from dataclasses import replace

    workload = generate_ada_srsf(3)
    cut = sorted(j.submit_ms for j in workload.jobs)[len(workload.jobs) // 2]
    cfg = SimConfig(model=ModelOptions(seed=3), run=RunOptions(engine="python"))
    sim = DecisionSimulator(CLUSTER, workload, make_stack(stack), cfg)
    dropped = 0
    while sim.advance():
        if not dropped and sim.now >= cut:
            dropped = sim.forget_arrivals()
            assert sim.forget_arrivals() == 0
        _place_as_the_stack(sim)
    result = sim.result()
    ran = {r.job_id for r in result.records}
    seen = tuple(j for j in workload.jobs if j.job_id in ran)
    assert 0 < dropped == len(workload.jobs) - len(seen)
    assert all(j.submit_ms > cut for j in workload.jobs if j.job_id not in ran)
    alone = replace(workload, jobs=seen)
    assert _finishes(result) == _finishes(
        drive(DecisionSimulator(CLUSTER, alone, make_stack(stack), cfg))
    )


@pytest.mark.parametrize("stack", ["lwf1_srsf1", "lwf1_adasrsf"])
def test_forgotten_jobs_added_back_give_the_run_that_kept_them(stack: str) -> None:
    """Stopped at T, the later jobs forgotten and then added back as arrivals
    (:meth:`DecisionSimulator.add_arrivals`, what a search's sampled future does with its
    guesses): the run is the one that never forgot them, job for job.  An arrival before
    now or an id the run has is refused and changes nothing."""
    workload = generate_ada_srsf(5)
    cut = sorted(j.submit_ms for j in workload.jobs)[len(workload.jobs) // 2]
    cfg = SimConfig(model=ModelOptions(seed=5), run=RunOptions(engine="python"))
    sim = DecisionSimulator(CLUSTER, workload, make_stack(stack), cfg)
    swapped = False
    while sim.advance():
        if not swapped and sim.now >= cut:
            later = [j.spec for j in sim.jobs if j.spec.submit_ms > sim.now]
            assert sim.forget_arrivals() == len(later) > 0
            early = sim.jobs[0].spec
            with pytest.raises(DecisionError, match="before now"):
                sim.add_arrivals([later[0], replace(later[1], submit_ms=sim.now - 1.0)])
            with pytest.raises(DecisionError, match="already in the run"):
                sim.add_arrivals([replace(later[0], job_id=early.job_id)])
            assert len(sim.jobs) == len(workload.jobs) - len(later)
            assert sim.add_arrivals(later[::-1]) == len(later)  # any order
            swapped = True
        _place_as_the_stack(sim)
    assert swapped
    kept = drive(DecisionSimulator(CLUSTER, workload, make_stack(stack), cfg))
    assert sorted(_finishes(sim.result())) == sorted(_finishes(kept))


def _tenth(seed: int) -> Workload:
    """40 jobs of 100-600 iterations over two minutes (a tenth of the paper's scale): FAST
    merges at least two iterations a step."""
    return generate_ada_srsf(seed, 40, iterations_scale=10.0, arrival_window_ms=120_000.0)


def _drive_coarsened(
    stack: str, seed: int, at: float | None
) -> tuple[DecisionSimulator, set[int], set[int]]:
    """A FULL run of ``stack`` placed as the stack places, gone FAST (:meth:`coarsen`) at its
    first stop at or after ``at`` ms (before its first event when ``at`` is None), every
    invariant checked at every event time; the ids of the jobs running when it went FAST with
    many iterations left, and of those seen running merged steps at a later stop."""
    cfg = SimConfig(model=ModelOptions(seed=seed), run=RunOptions(engine="python"))
    cfg = cfg.override(check_invariants=True)
    sim = DecisionSimulator(CLUSTER, _tenth(seed), make_stack(stack), cfg)
    if at is None:
        assert sim.coarsen() > 1
    before: set[int] = set()
    merged: set[int] = set()
    while sim.advance():
        if at is not None and sim.cfg.fidelity.level is Fidelity.FULL and sim.now >= at:
            k = sim.coarsen()
            assert k > 1
            left = {j.spec.job_id: j.spec.iterations - j.iterations_done for j in sim.running}
            before = {i for i, n in left.items() if n > 4 * k}
        merged |= {j.spec.job_id for j in sim.running if j.chunk > 1}
        _place_as_the_stack(sim)
    assert sim.cfg.fidelity.level is Fidelity.FAST
    return sim, before, merged


@pytest.mark.parametrize("stack", ["lwf1_srsf1", "lwf1_adasrsf"])
def test_a_run_coarsened_before_its_first_event_is_the_fast_run(stack: str) -> None:
    """:meth:`DecisionSimulator.coarsen` before anything ran gives the FAST run of the
    workload, job for job (what a search's model on the cheaper engine relies on)."""
    fast = SimConfig(
        fidelity=FidelityOptions(level=Fidelity.FAST),
        model=ModelOptions(seed=3),
        run=RunOptions(engine="python"),
    )
    coarse, _, _ = _drive_coarsened(stack, 3, None)
    want = drive(DecisionSimulator(CLUSTER, _tenth(3), make_stack(stack), fast))
    assert _finishes(coarse.result()) == _finishes(want)
    full = SimConfig(model=ModelOptions(seed=3), run=RunOptions(engine="python"))
    full_run = drive(DecisionSimulator(CLUSTER, _tenth(3), make_stack(stack), full))
    assert _finishes(want) != _finishes(full_run)  # FAST is another schedule here


@pytest.mark.parametrize("stack", ["lwf1_srsf1", "lwf1_adasrsf"])
def test_a_run_coarsened_midway_keeps_the_jobs_done_and_does_all_the_work(stack: str) -> None:
    """Gone FAST midway: the jobs done by then are the FULL run's, every invariant holds at
    every event time, every job runs all its iterations (merging conserves work), and the
    jobs running then merge their later iterations too."""
    workload = _tenth(4)
    cfg = SimConfig(model=ModelOptions(seed=4), run=RunOptions(engine="python"))
    full = _finishes(drive(DecisionSimulator(CLUSTER, workload, make_stack(stack), cfg)))
    cut = sorted(f for _, _, f, _ in full)[len(full) // 3]
    sim, before, merged = _drive_coarsened(stack, 4, cut)
    assert before and before <= merged
    got = _finishes(sim.result())
    assert {r for r in got if r[2] < cut} == {r for r in full if r[2] < cut} != set()
    assert got != full
    assert all(j.iterations_done == j.spec.iterations for j in sim.jobs)
    assert len(got) == len(workload.jobs)


def test_only_a_full_continuous_run_can_be_coarsened() -> None:
    workload = generate_ada_srsf(0)
    fast = SimConfig(fidelity=FidelityOptions(level=Fidelity.FAST), run=RunOptions(engine="python"))
    sim = DecisionSimulator(CLUSTER, workload, make_stack("lwf1_srsf1"), fast)
    with pytest.raises(ConfigError, match="only a FULL-fidelity run in continuous time"):
        sim.coarsen()
    ticked = SimConfig.reference().override(engine="python")
    sim = DecisionSimulator(CLUSTER, workload, make_stack("lwf1_srsf1"), ticked)
    with pytest.raises(ConfigError, match=r"tick_ms=1\.0"):
        sim.coarsen()
