"""The engine's admission shortcuts give exactly the generic passes' results, at a cost that
does not grow with the queue.

- Placement (phase 4): with a static-key order (SRSF, FIFO) and a placer that can say whether
  a job fits (``FitIndexedPlacer``: every built-in placer), queued jobs sit in one sorted list
  per (memory, GPU count) class and ``place`` is asked only of jobs that fit.  The generic path
  (every queued job asked, every pass) is what a placer without ``fits`` gets: wrapping a
  placer in :class:`Opaque` selects it, so the two paths run side by side.
- Communication admission (phase 5): without the reference's probes, only the waiting jobs
  that are fresh or sit on a touched server are visited (``_ask_touched``); setting
  ``Simulator.scan_waiting`` walks the whole waiting list as before.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest

from envs.sim import ClusterSpec, FidelityOptions, SimConfig, Workload
from envs.sim.config import Fidelity
from envs.sim.engine import SimulationError, Simulator
from envs.sim.models import REFERENCE_MODELS
from envs.sim.policies.base import ClusterView
from envs.sim.policies.placement import LWF, FirstFit, ListScheduling, RandomPlacer
from envs.sim.policies.skew import CountPlacer, SkewPlacer
from envs.sim.spec import JobSpec, ModelProfile
from envs.sim.stacks import make_stack

CLUSTER = ClusterSpec(num_servers=4, gpus_per_server=4, gpu_memory_mb=10_000.0)


class Opaque:
    """A placer seen only through ``Placer`` (no ``fits``): the engine's generic queue."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.comm_estimate_ms_per_mb = inner.comm_estimate_ms_per_mb
        self.reads_load = inner.reads_load
        self.randomised = inner.randomised

    def place(self, job: JobSpec, cluster: ClusterView, rng: np.random.Generator) -> Any:
        return self.inner.place(job, cluster, rng)


def crowded(seed: int, n: int = 240, models: tuple[str, ...] | None = None) -> Workload:
    """``n`` jobs of 1-8 GPUs arriving within 3 s on 16 GPUs that hold 2-3 workers each:
    the placement queue grows to a large share of the jobs."""
    rng = np.random.default_rng(seed)
    names = list(models or REFERENCE_MODELS)
    jobs = []
    for i in range(n):
        model = REFERENCE_MODELS[names[int(rng.integers(len(names)))]]
        jobs.append(
            JobSpec(
                job_id=i,
                submit_ms=float(rng.integers(0, 3000)),
                model=model,
                iterations=int(rng.integers(3, 25)),
                num_gpus=int(rng.choice([1, 1, 1, 2, 4, 8])),
                name=f"j{i}",
            )
        )
    return Workload(tuple(jobs), name=f"crowded-{seed}")


def run_both(
    stack: str,
    workload: Workload,
    cfg: SimConfig,
    cluster: ClusterSpec = CLUSTER,
    scan_up_to: int | None = None,
) -> tuple[Simulator, Any, Simulator, Any]:
    """The indexed paths (phase 5's per-server index from ``scan_up_to`` waiting jobs on;
    default: the engine's) and the generic ones, on the same inputs."""
    fast = Simulator(cluster, workload, make_stack(stack), cfg)
    assert fast.fitq is not None  # every built-in non-preemptive stack takes the index
    if scan_up_to is not None:
        fast.scan_up_to = scan_up_to
    slow_stack = make_stack(stack)
    slow_stack.placer = Opaque(slow_stack.placer)
    slow = Simulator(cluster, workload, slow_stack, cfg)
    assert slow.fitq is None
    slow.scan_waiting = True  # and the whole waiting list walked in phase 5
    return fast, fast.run(), slow, slow.run()


STACKS = [
    "lwf1_srsf1",
    "lwf2_adasrsf",
    "ls_adasrsf",
    "ff_adasrsf",
    "rand_adasrsf",
    "fifo:lwf1_srsf2",
    "fifo:ff_fs",
    "srsf:count_fs",
]


MODES = ("correct", "reference", "reference_fixed_probe")
#: each stack in two of the three modes, the pair turning with the stack (every mode meets
#: two thirds of the stacks)
STACK_MODES = [(stack, MODES[(i + k) % 3]) for i, stack in enumerate(STACKS) for k in (0, 1)]


@pytest.mark.parametrize(("stack", "mode"), STACK_MODES)
def test_indexed_admission_gives_the_generic_results(stack: str, mode: str) -> None:
    for seed in (STACKS.index(stack),):
        wl = crowded(seed, n=150)
        cfg = SimConfig.named(mode, seed=seed)
        fast, a, slow, b = run_both(stack, wl, cfg)
        assert a.records == b.records, (stack, mode, seed)
        # phase 5 through the index and holds whatever the waiting list's length
        indexed = Simulator(CLUSTER, wl, make_stack(stack), cfg)
        indexed.scan_up_to = 0
        assert indexed.run().records == b.records
        assert a.events == b.events
        assert a.makespan_ms == b.makespan_ms
        # the same placements; no more communication questions (fewer where the scheduler
        # says what blocks a refused job) ...
        assert fast.placed_count == slow.placed_count == len(wl)
        assert fast.comm_asks <= slow.comm_asks
        # ... and the queue was long: the generic pass asked many times more often
        assert fast.place_calls == len(wl)  # every job asked to place once, when it fits
        assert slow.place_calls > 5 * fast.place_calls
        assert fast.quick_passes > 0


def test_skew_placer_indexed_like_generic() -> None:
    wl = crowded(3, models=("vgg16", "resnet50", "inception-v3"))  # models with tensor lists
    for stack in ("fifo:skew_fs", "srsf:skew_fs"):
        _, a, _, b = run_both(stack, wl, SimConfig())
        assert a.records == b.records and a.events == b.events


def test_fast_fidelity_and_windows_off_indexed_like_generic() -> None:
    wl = crowded(4, n=120)
    for cfg in (
        SimConfig(fidelity=FidelityOptions(level=Fidelity.FAST)),
        SimConfig(fidelity=FidelityOptions(compute_windows=False)),
    ):
        _, a, _, b = run_both("lwf1_adasrsf", wl, cfg)
        assert a.records == b.records and a.events == b.events


def test_lwf_refusals_reorder_servers_as_in_the_generic_pass() -> None:
    # Jobs above κ that are refused still re-sort LWF's persistent server order (ties keep
    # the previous order): the index replays them with refuse().  Equal models and
    # iterations make exact load ties between servers common.
    model = REFERENCE_MODELS["resnet50"]
    jobs = tuple(
        JobSpec(i, float(10 * (i // 6)), model, 6, [1, 2, 4][i % 3], name=f"j{i}")
        for i in range(150)
    )
    wl = Workload(jobs, name="ties")
    for mode in ("correct", "reference"):
        fast, a, slow, b = run_both("lwf1_srsf1", wl, SimConfig.named(mode))
        assert a.records == b.records
        assert state(fast.placer) == state(slow.placer.inner)  # type: ignore[attr-defined]


def test_admission_pass_cost_does_not_grow_with_the_queue() -> None:
    # 600 one-GPU jobs at t=0 on 2 GPUs that hold one job each: up to 598 wait at every pass.
    big = ModelProfile("big", 100.0, 6_000.0, 16, 5.0, 7.0)
    small = ModelProfile("small", 50.0, 4_000.0, 16, 3.0, 4.0)
    n = 600
    jobs = tuple(
        JobSpec(i, 0.0, big if i % 2 else small, 2 + i % 5, 1 + (i % 3 == 0), name=f"j{i}")
        for i in range(n)
    )
    cluster = ClusterSpec(num_servers=1, gpus_per_server=2, gpu_memory_mb=8_000.0)
    fast, a, slow, b = run_both("ff_fs", Workload(jobs, name="queue"), SimConfig(), cluster)
    assert a.records == b.records
    classes = 4  # (memory, GPU count): 2 models x 1 or 2 GPUs
    passes = fast.alloc_passes + fast.quick_passes
    assert passes >= n // 2  # a pass after (nearly) every completion
    # every job asked to place exactly once, when it fits; fits() asked at most once per
    # class per stretch between placements, whatever the queue length
    assert fast.place_calls == n
    assert fast.fit_checks <= classes * (fast.alloc_passes + fast.place_calls)
    # the generic pass asks every queued job at every pass: quadratic in the queue
    assert slow.place_calls > n * n // 8
    assert fast.fit_checks + fast.place_calls < slow.place_calls // 20


def test_comm_admission_visits_only_touched_waiting_jobs() -> None:
    # 2-GPU jobs on 1-GPU servers all span two servers; SRSF(1) admits one all-reduce per NIC
    # at a time, so many jobs wait, each touching 2 of 16 servers.
    cluster = ClusterSpec(num_servers=16, gpus_per_server=1, gpu_memory_mb=10_000.0)
    # VGG-16's large all-reduces next to ResNet-50's small ones: AdaDUAL lets a small one
    # join a large one, so NICs reach two tasks and refused jobs are held on them
    models = [REFERENCE_MODELS["vgg16"], REFERENCE_MODELS["resnet50"]]
    rng = np.random.default_rng(7)
    jobs = tuple(
        JobSpec(
            i,
            float(rng.integers(0, 500)),
            models[int(rng.integers(2))],
            int(rng.integers(5, 20)),
            int(rng.choice([2, 3])),
            name=f"j{i}",
        )
        for i in range(120)
    )
    for stack in ("lwf2_srsf1", "lwf2_adasrsf"):
        for mode in ("correct", "reference_fixed_probe"):
            fast, a, slow, b = run_both(
                stack, Workload(jobs, name="comm"), SimConfig.named(mode), cluster, scan_up_to=0
            )
            assert a.records == b.records and a.events == b.events
            assert fast.waiting_visits == 0
            # the scan walks past most waiting jobs ...
            assert slow.waiting_visits > 3 * slow.comm_asks
            # ... and asks again jobs whose blocking server is still busy (SRSF(1) on
            # one-GPU servers: a NIC's one task ending always frees it; nothing to skip)
            assert fast.comm_asks <= slow.comm_asks
            if stack == "lwf2_adasrsf":
                assert fast.comm_asks < slow.comm_asks


class Net:
    """A NetView over given per-server task lists; reading a remaining size is recorded."""

    def __init__(self, tasks: list[list[Any]]) -> None:
        self.network = CLUSTER.network
        self.nic_tasks = tasks
        self.probes = 0

    def remaining_mb(self, task: Any) -> float:
        self.probes += 1
        return float(task.size_mb)


class Task:
    def __init__(self, size_mb: float) -> None:
        self.size_mb = size_mb
        self.job = None


class WaitingJob:
    def __init__(self, servers: list[int], size_mb: float) -> None:
        self.servers = servers
        self.spec = JobSpec(0, 0.0, ModelProfile("m", size_mb, 1.0, 1, 1.0, 1.0), 1, 1)


@pytest.mark.parametrize("comm", ["adasrsf", "srsf1", "srsf2"])
def test_blocker_keeps_refusing_without_probes(comm: str) -> None:
    # BlockingCommScheduler contract: after a refusal with blocker (s, k), every state in
    # which s still carries >= k tasks (tasks started anywhere, ended elsewhere) is refused
    # without reading a remaining size.
    sched = make_stack(f"ff_{comm}").comm
    rng = np.random.default_rng(3)
    held = 0
    for _ in range(2000):
        tasks = [
            [Task(float(rng.uniform(1, 600))) for _ in range(rng.integers(0, 4))] for _ in range(6)
        ]
        job = WaitingJob(
            sorted(rng.choice(6, size=int(rng.integers(2, 5)), replace=False).tolist()),
            float(rng.uniform(1, 600)),
        )
        net = Net(tasks)
        if sched.admit(job, net):  # type: ignore[arg-type]
            continue
        block = sched.blocker(job, net)  # type: ignore[attr-defined]
        if block is None:
            continue
        held += 1
        s, k = block
        assert s in job.servers and len(tasks[s]) >= k
        for _ in range(5):
            r = int(rng.integers(6))
            if rng.random() < 0.5:
                tasks[r].append(Task(float(rng.uniform(1, 600))))
            elif r != s and tasks[r]:
                tasks[r].pop(int(rng.integers(len(tasks[r]))))
            net.probes = 0
            assert not sched.admit(job, net)  # type: ignore[arg-type]
            assert net.probes == 0
    assert held > 200


class View:
    def __init__(self, spec: ClusterSpec, free: list[float], load: list[float]) -> None:
        self.spec, self.free_mem_mb, self.load_ms = spec, free, load


def state(placer: Any) -> dict[str, Any]:
    """A placer's state; LWF's deferred refusal sorts applied (``LWF.refuse``)."""
    if isinstance(placer, LWF):
        placer._apply_pending()
    return dict(vars(placer))


def test_lwf_deferred_refusal_sorts_equal_eager_sorts() -> None:
    # Sorting at every refusal (what the reference does) and deferring the sorts to the
    # next read give the same server order, ties between servers included.
    rng = np.random.default_rng(5)
    spec = ClusterSpec(num_servers=6, gpus_per_server=2, gpu_memory_mb=10_000.0)
    job = JobSpec(0, 0.0, REFERENCE_MODELS["vgg16"], 5, 4)
    for trial in range(200):
        lazy = LWF(1)
        eager = list(range(6))
        for _ in range(int(rng.integers(1, 400))):  # crosses the 256-refusal compaction
            load = [float(x) for x in rng.choice([0.0, 1.0, 2.0], size=12)]
            view = View(spec, [0.0] * 12, load)  # nothing fits: every call is a refusal
            assert lazy.place(job, view, rng) is None
            mean = [sum(load[2 * s : 2 * s + 2]) / 2 for s in range(6)]
            eager.sort(key=mean.__getitem__)
        assert state(lazy)["_server_order"] == eager, trial
        assert lazy._pending == []


PLACERS = [
    RandomPlacer,
    FirstFit,
    lambda: LWF(1),
    lambda: LWF(2),
    ListScheduling,
    CountPlacer,
    lambda: SkewPlacer(),
]


@pytest.mark.parametrize("make", PLACERS)
def test_fits_is_exactly_whether_place_succeeds(make: Any) -> None:
    rng = np.random.default_rng(11)
    spec = ClusterSpec(num_servers=4, gpus_per_server=4, gpu_memory_mb=10_000.0)
    models = [REFERENCE_MODELS[m] for m in ("vgg16", "resnet50", "inception-v3")]
    for trial in range(300):
        placer = make()
        # exact load ties between servers are common (loads drawn from a few values)
        load = [float(x) for x in rng.choice([0.0, 100.0, 250.0], size=16)]
        free = [float(x) for x in rng.choice([0.0, 3_300.0, 4_600.0, 6_000.0, 10_000.0], size=16)]
        view = View(spec, free, load)
        job = JobSpec(trial, 0.0, models[trial % 3], 5, int(rng.choice([1, 2, 3, 4, 8, 12])))
        before = copy.deepcopy(placer)
        fits = placer.fits(job, view)
        assert state(placer) == state(before)  # fits() changes nothing
        got = placer.place(job, view, np.random.default_rng(trial))
        assert fits == (got is not None), (trial, job, free)
        if got is None:
            # a refusal changes the placer exactly as refuse() does (and only if it says so)
            replay = before
            if before.refusal_changes_state(job):
                replay.refuse(view)
                replay.refuse(view)  # idempotent
            assert state(replay) == state(placer)


def test_placer_breaking_the_fits_contract_is_reported() -> None:
    class Liar(FirstFit):
        def fits(self, job: JobSpec, cluster: ClusterView) -> bool:
            return True  # but place() refuses when there is no room

    stack = make_stack("ff_fs")
    stack.placer = Liar()
    wl = Workload(
        tuple(JobSpec(i, 0.0, REFERENCE_MODELS["vgg16"], 3, 2, name=f"j{i}") for i in range(3)),
        name="liar",
    )
    cluster = ClusterSpec(num_servers=1, gpus_per_server=2, gpu_memory_mb=5_000.0)
    with pytest.raises(SimulationError, match=r"placer ff refused job 1 although its fits"):
        Simulator(cluster, wl, stack, SimConfig()).run()
