"""The native slot allocators (envs/sim/elastic/_alloc_native.c) against the Python
allocators, their specification.

Every slot must come out the same, bit for bit: the counts, the decision log (job, role,
node, in order), the cluster's free slots and every search answer afterwards, and the
count of placements off the rule (releases).  Checked on DL²'s workloads (every slot of
whole runs), on random small clusters built to fail, fragment and release (mixed CPU-only
and GPU tasks, zero demands, zero PS caps), on every allocator and option the native code
covers and on the four placement rules.  What it does not cover must run in Python.

Without a C compiler the extension is not built and these tests skip, unless
``DLSCHED_REQUIRE_NATIVE=1`` (set by ``.ci/run``), which makes a missing build a failure.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from envs.gym.factory import SETTINGS
from envs.sim.elastic import native_alloc
from envs.sim.elastic.allocators import (
    DRF,
    Allocator,
    EfficientSRTF,
    FixedDemand,
    JobState,
    Optimus,
    make_allocator,
)
from envs.sim.elastic.cluster import Placement, SlotCluster
from envs.sim.elastic.simulator import SlotSimulator
from envs.sim.elastic.spec import ElasticCluster, ElasticJob, JobType
from envs.sim.elastic.speed import AnalyticalSpeed, MeasuredSpeed
from envs.sim.errors import ConfigError

if not native_alloc.available():
    if os.environ.get("DLSCHED_REQUIRE_NATIVE") == "1":
        raise RuntimeError(
            "DLSCHED_REQUIRE_NATIVE=1 but envs.sim.elastic._alloc_native is not built or stale "
            "(run make setup)"
        )
    pytest.skip("native allocators not built (no C compiler at install)", allow_module_level=True)

#: every allocator and option the native code covers (label, options)
COVERED: tuple[tuple[str, dict[str, Any]], ...] = (
    ("drf", {}),
    ("drf", {"stop_at_first_failure": True}),
    ("optimus", {}),
    ("optimus", {"oracle_speed_factor": True}),
    ("optimus", {"stop_at_first_failure": True}),
    ("esrtf", {}),
    ("esrtf", {"efficiency": 1.0}),
    ("esrtf", {"efficiency": 0.7}),
    ("esrtf", {"backfill": True}),
    ("esrtf", {"head": 2, "head_efficiency": 0.8}),
    ("esrtf", {"first": 3}),
    ("esrtf", {"first": 5, "head": 1, "head_efficiency": 0.8, "backfill": True}),
    ("esrtf", {"stop_at_first_failure": True}),
    ("esrtf", {"oracle_speed_factor": True, "backfill": True}),
    ("esrtf", {"backfill": True, "stop_at_first_failure": True}),
    ("esrtf_load", {}),
    ("bundle", {}),
    ("adasrsf", {}),
    ("adasrsf", {"workers": 2, "stop_at_first_failure": True}),
    ("tiresias", {}),
    ("fixed", {}),
    ("fixed", {"stop_at_first_failure": True}),
    ("fixed", {"order": "srsf"}),
)
RULES = tuple(p.value for p in Placement)


def _state(cluster: SlotCluster) -> tuple[Any, ...]:
    """Everything a caller can observe of a cluster: free slots, the set of occupied free
    states, and the node every searching placement would pick for every small demand."""
    finds = tuple(cluster.find_node(c, g) for c in range(0, 9) for g in (0, 1, 2, 4, 8))
    return (list(cluster.free_cpu), list(cluster.free_gpu), cluster.occupied, finds,
            cluster.off_rule, cluster.used_cpu.tolist(), cluster.is_empty())  # fmt: skip


class Both:
    """An allocator that runs every slot natively and in Python (each its own instance, on
    a copy of the cluster) and requires the same outcome; the simulator goes on with it."""

    def __init__(self, make: Callable[[], Allocator]) -> None:
        self.native, self.plain = make(), make()
        self.name = getattr(self.native, "name", "?")
        self.last_decisions: list[Any] = []
        self.slots = 0

    def allocate(
        self, jobs: Any, cluster: SlotCluster, speed: Any, slot_s: float
    ) -> dict[int, tuple[int, int]]:
        other = copy.deepcopy(cluster)
        with native_alloc.use_native(False):
            want = self.plain.allocate(jobs, other, speed, slot_s)
        calls = _calls()
        got = self.native.allocate(jobs, cluster, speed, slot_s)
        assert _calls() > calls, "the native code did not run"
        assert list(got.items()) == list(want.items())
        assert self.native.last_decisions == self.plain.last_decisions  # type: ignore[attr-defined]
        assert _state(cluster) == _state(other)
        self.last_decisions = self.native.last_decisions  # type: ignore[attr-defined]
        self.slots += 1
        return got


_count = {"n": 0}
_real = native_alloc._alloc_native.allocate


def _counting(*args: Any) -> Any:
    _count["n"] += 1
    return _real(*args)


def _calls() -> int:
    return _count["n"]


@pytest.fixture(autouse=True)
def _count_native_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native_alloc._alloc_native, "allocate", _counting)


def _run(setting: str, seed: int, label: str, options: dict[str, Any], placement: str) -> int:
    st = SETTINGS[setting]
    speed = MeasuredSpeed(max_ps=st.max_ps, max_workers=st.max_workers)
    both = Both(lambda: make_allocator(label, options))
    sim = SlotSimulator(st.cluster(), st.workload(seed), both, speed, placement=placement)
    sim.run()
    return both.slots


#: whole tiny runs: each covered allocator and option under one placement rule, the rules in
#: turn (each rule under five or six of them); every option under every rule is checked slot
#: by slot in ``test_random_clusters_every_allocator`` and under ``least_loaded`` in whole
#: medium runs (``test_medium_runs_slot_for_slot``)
TINY_CASES = [(label, options, RULES[i % len(RULES)]) for i, (label, options) in enumerate(COVERED)]


@pytest.mark.parametrize(("label", "options", "placement"), TINY_CASES)
def test_tiny_runs_slot_for_slot(label: str, options: dict[str, Any], placement: str) -> None:
    assert _run("tiny", 1, label, options, placement) > 10


@pytest.mark.parametrize(("label", "options"), COVERED)
def test_medium_runs_slot_for_slot(label: str, options: dict[str, Any]) -> None:
    assert _run("medium", 3, label, options, "least_loaded") > 10


@pytest.mark.parametrize("label", ["drf", "optimus", "esrtf", "bundle"])
def test_small_run_slot_for_slot(label: str) -> None:
    assert _run("small", 5, label, {"backfill": True} if label == "esrtf" else {}, "least_loaded")


def _random_slot(rng: np.random.Generator) -> tuple[ElasticCluster, list[JobState]]:
    """A small cluster and a slot's jobs built to fail and fragment: few nodes, demands up to
    a node's size, CPU-only and GPU tasks, zero demands, small caps, varied progress."""
    cpu, gpu = int(rng.integers(1, 9)), int(rng.integers(0, 9))
    cluster = ElasticCluster(int(rng.integers(1, 6)), cpu, gpu, 60.0)
    jobs = []
    for i in range(int(rng.integers(1, 9))):
        wc, pc = int(rng.integers(0, cpu + 1)), int(rng.integers(0, cpu + 1))
        wg, pg = int(rng.integers(0, gpu + 1)), int(rng.integers(0, min(gpu, 2) + 1))
        ty = JobType(int(rng.integers(0, 3)), f"m{i % 3}", wc, wg, pc, pg, 1.0,
                     int(rng.integers(1, 50)), float(rng.uniform(0.1, 2)),
                     float(rng.uniform(1, 200)), 100.0, 1000.0)  # fmt: skip
        epochs = float(rng.uniform(1, 100))
        spec = ElasticJob(
            i * 7 + 3, ty, int(rng.integers(0, 4)), epochs, epochs,
            max_workers=int(rng.integers(1, 6)), max_ps=int(rng.integers(1, 5)),
            speed_factor=float(rng.uniform(0.5, 1.5)),
        )  # fmt: skip
        progress = float(rng.choice([0.0, rng.uniform(0, epochs), epochs, epochs * 1.1]))
        jobs.append(JobState.of(spec, progress, 0, 0, int(rng.integers(0, 5))))
    return cluster, jobs


@pytest.mark.parametrize("placement", RULES)
def test_random_clusters_every_allocator(placement: str) -> None:
    """Failures, fragmentation, releases (Optimus' and EfficientSRTF's first tasks, the
    fixed demands' all or nothing) and pre-loaded clusters, on many random slots."""
    rng = np.random.default_rng(RULES.index(placement))
    released = 0
    speed = AnalyticalSpeed()
    for trial in range(100):
        cluster_spec, jobs = _random_slot(rng)
        for label, options in COVERED:
            both = Both(lambda label=label, options=options: make_allocator(label, options))
            cluster = SlotCluster(cluster_spec, placement=placement)
            if trial % 3 == 0:  # a cluster some tasks already hold (the env's backlog case)
                for _ in range(int(rng.integers(1, 4))):
                    cluster.take(int(rng.integers(0, 3)), int(rng.integers(0, 3)))
            before = cluster.off_rule
            both.allocate(list(jobs), cluster, speed, 60.0)
            released += cluster.off_rule - before
    assert released > 0  # the release paths ran (and matched)


def test_not_covered_runs_in_python() -> None:
    """Subclasses (their overrides), per-job requests and other cluster classes run the
    Python code, as does everything while switched off."""
    st = SETTINGS["tiny"]
    speed = MeasuredSpeed(max_ps=st.max_ps, max_workers=st.max_workers)
    jobs = [JobState.of(j, 0.0, 0, 0, 0) for j in st.workload(0)[:5]]

    class MyDRF(DRF):
        pass

    class MyCluster(SlotCluster):
        pass

    cases: list[tuple[Allocator, type[SlotCluster]]] = [
        (MyDRF(), SlotCluster),
        (FixedDemand({jobs[0].job_id: 2}), SlotCluster),
        (DRF(), MyCluster),
    ]
    for alloc, cls in cases:
        calls = _calls()
        alloc.allocate(jobs, cls(st.cluster()), speed, 60.0)
        assert _calls() == calls, alloc
    with native_alloc.use_native(False):
        calls = _calls()
        EfficientSRTF().allocate(jobs, SlotCluster(st.cluster()), speed, 60.0)
        assert _calls() == calls
    calls = _calls()
    EfficientSRTF().allocate(jobs, SlotCluster(st.cluster()), speed, 60.0)
    assert _calls() > calls


def test_errors_are_the_python_codes() -> None:
    """A job given twice and EfficientSRTF's job without a PS cap fail as in Python."""
    st = SETTINGS["tiny"]
    speed = MeasuredSpeed(max_ps=st.max_ps, max_workers=st.max_workers)
    job = JobState.of(st.workload(0)[0], 0.0, 0, 0, 0)
    for alloc in (DRF(), Optimus(), EfficientSRTF(), make_allocator("bundle")):
        with pytest.raises(ConfigError, match="given twice"):
            alloc.allocate([job, job], SlotCluster(st.cluster()), speed, 60.0)
    spec = job.spec
    no_ps = ElasticJob(spec.job_id, spec.type, spec.arrival_slot, spec.num_epochs,
                       spec.real_num_epochs, max_workers=2, max_ps=0)  # fmt: skip
    with native_alloc.use_native(False), pytest.raises(ValueError) as plain:
        EfficientSRTF().allocate([JobState.of(no_ps, 0.0, 0, 0, 0)], SlotCluster(st.cluster()),
                                 speed, 60.0)  # fmt: skip
    with pytest.raises(ValueError) as native:
        EfficientSRTF().allocate([JobState.of(no_ps, 0.0, 0, 0, 0)], SlotCluster(st.cluster()),
                                 speed, 60.0)  # fmt: skip
    assert str(native.value) == str(plain.value)


def test_adopted_cluster_keeps_working() -> None:
    """After a native slot the cluster's own methods go on from its state: a further take,
    a release and release_all behave as on the Python allocator's cluster."""
    st = SETTINGS["medium"]
    speed = MeasuredSpeed(max_ps=st.max_ps, max_workers=st.max_workers)
    jobs = [JobState.of(j, 0.0, 0, 0, 0) for j in st.workload(1)[:6]]
    a, b = SlotCluster(st.cluster()), SlotCluster(st.cluster())
    EfficientSRTF().allocate(jobs, a, speed, 60.0)
    with native_alloc.use_native(False):
        EfficientSRTF().allocate(jobs, b, speed, 60.0)
    for c in (a, b):
        node = c.take(1, 0)
        if node >= 0:
            c.release(1, 0, node)
        c.check()
    assert _state(a) == _state(b)
    a.release_all()
    assert a.is_empty() and a.used_cpu_total == 0
