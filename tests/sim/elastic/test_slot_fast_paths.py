"""The slot transition's fast paths (issue 35) against the plain ones they replace: the
native capacity check and totals against ``SlotCluster.check`` and ``used_*_total``, the
lazily built cluster index (after ``release_all`` and a native slot) against the index built
at once, and the native allocator's ``occupied`` against ``SlotCluster.index_of``."""

from __future__ import annotations

import numpy as np
import pytest

from envs.sim.elastic import native_alloc
from envs.sim.elastic.allocator_base import JobState
from envs.sim.elastic.allocators import DRF, make_allocator
from envs.sim.elastic.cluster import Placement, SlotCluster
from envs.sim.elastic.simulator import SlotSimulator
from envs.sim.elastic.spec import ElasticCluster
from envs.sim.elastic.speed import MeasuredSpeed
from envs.sim.elastic.workload import DL2_SMALL
from envs.sim.engine import SimulationError

needs_native = pytest.mark.skipif(not native_alloc.available(), reason="extension not built")


def _index(c: SlotCluster) -> tuple[list[int], list[list[int]], list[int], int]:
    """The cluster's index as the heads see it (stale heap entries dropped, heaps sorted)."""
    c._search(0, 0)  # builds it when left lazy
    assert c._state is not None
    heaps = [sorted(n for n in (h or []) if c._state[n] == pos) for pos, h in enumerate(c._buckets)]
    return list(c._state), heaps, list(c._count), c.occupied


@needs_native
def test_native_totals_match_the_python_check() -> None:
    rng = np.random.default_rng(0)
    c = SlotCluster(ElasticCluster(9, 6, 3))
    for _ in range(300):
        if rng.random() < 0.1:
            c.release_all()
        c.take(int(rng.integers(0, 4)), int(rng.integers(0, 2)))
        c.check()
        assert native_alloc.used_totals(c) == (c.used_cpu_total, c.used_gpu_total)
    # a node outside its capacity: no totals, the Python check names it
    for bad in (-1, 7):
        c.free_cpu[4] = bad
        assert native_alloc.used_totals(c) is None
        with pytest.raises(SimulationError, match="node 4 holds"):
            c.check()
    c.free_cpu[4] = 6.0  # type: ignore[call-overload]  # not an int: the Python check decides
    assert native_alloc.used_totals(c) is None
    with native_alloc.use_native(False):
        c.free_cpu[4] = 6
        assert native_alloc.used_totals(c) is None  # the plain path when switched off


@needs_native
def test_simulator_check_raises_the_same_error_on_both_paths() -> None:
    """A slot whose cluster holds a node over its capacity fails with the Python check's
    message whether the totals come from C or from Python."""
    from envs.sim.elastic.workload import DL2Setting

    setting = DL2Setting(num_nodes=3, num_jobs=4, max_arrivals_per_slot=2, J=3,
                         max_epochs=30, max_workers=3, max_ps=3)  # fmt: skip
    speed = MeasuredSpeed(max_ps=3, max_workers=3)
    messages = []
    for native in (True, False):
        with native_alloc.use_native(native):
            sim = SlotSimulator(setting.cluster(), setting.workload(0), None, speed)
            sim.begin_slot()
            sim.cluster.free_gpu[1] = -1
            with pytest.raises(SimulationError) as err:
                sim.end_slot({})
            messages.append(str(err.value))
    assert messages[0] == messages[1] and "node 1 holds" in messages[0]


@pytest.mark.parametrize("placement", list(Placement))
def test_lazy_index_is_the_index(placement: Placement) -> None:
    """After release_all (index left unbuilt) and after adopt(occupied=...), every search and
    placement answers as on a cluster whose index was built at once."""
    rng = np.random.default_rng(len(placement))
    spec = ElasticCluster(11, 5, 3)
    lazy, eager = SlotCluster(spec, placement=placement), SlotCluster(spec, placement=placement)
    for step in range(600):
        u = rng.random()
        if u < 0.05:
            lazy.release_all()
            eager.release_all()
            eager._build_index()
            assert lazy.is_empty() and eager.is_empty()
        elif u < 0.12:  # hand over the same state, lazily and built
            fc, fg = list(eager.free_cpu), list(eager.free_gpu)
            occupied = eager.index_of(fc, fg)[3]
            lazy.adopt(list(fc), list(fg), occupied=occupied)
            eager.adopt(fc, fg)
        cpu, gpu = int(rng.integers(0, 4)), int(rng.integers(0, 3))
        if step % 3 == 0:
            assert lazy.find_node(cpu, gpu) == eager.find_node(cpu, gpu)
        assert lazy.take(cpu, gpu) == eager.take(cpu, gpu)
        assert lazy.is_empty() == eager.is_empty()
        assert (lazy.free_cpu, lazy.free_gpu) == (eager.free_cpu, eager.free_gpu)
        assert lazy.occupied == eager.occupied
    assert _index(lazy) == _index(eager)


@needs_native
@pytest.mark.parametrize("placement", list(Placement))
def test_native_occupied_is_the_index(placement: Placement) -> None:
    """The native slot hands back ``occupied`` only; the index built from it later equals
    the one built from the free lists at once, and so does every later search."""
    speed = MeasuredSpeed(max_ps=DL2_SMALL.max_ps, max_workers=DL2_SMALL.max_workers)
    jobs = sorted(DL2_SMALL.workload(3), key=lambda j: (j.arrival_slot, j.job_id))[:14]
    views = [JobState(j) for j in jobs]
    for alloc in (DRF(), make_allocator("esrtf", {}), make_allocator("optimus", {})):
        c = SlotCluster(DL2_SMALL.cluster(), placement=placement)
        alloc.allocate(views, c, speed, 60.0)
        assert c._state is None  # left lazy
        fc, fg = list(c.free_cpu), list(c.free_gpu)
        built = SlotCluster(DL2_SMALL.cluster(), placement=placement)
        built.adopt(fc, fg)
        assert c.occupied == built.occupied
        assert _index(c) == _index(built)
        for cpu, gpu in ((1, 0), (2, 1), (1, 1), (3, 2)):
            assert c.take(cpu, gpu) == built.take(cpu, gpu)


def test_jct_reward_shortcut_is_the_loop() -> None:
    """``jct_reward``'s shortcut for slots where no job finished gives the loop's value, bit
    for bit, on every slot of random-plan episodes."""
    from envs.gym.cluster import rewards
    from envs.gym.plan_env import PlanEnv

    def loop(env, step):  # the plain statement
        in_system = 0.0
        for view in step.active:
            finish = env.sim.finish_time(view.job_id)
            in_system += 1.0 if finish is None else finish - step.t
        return -in_system / env.jct_scale

    seen = []

    def both(env, step):
        fast = rewards.jct_reward(env, step)
        plain = loop(env, step)
        seen.append((fast, plain, bool(step.record.finished)))
        return fast

    env = PlanEnv(config={"setting": "small", "reward": "jct", "jct_scale": 3.0})
    env.inner._reward_fn = both
    rng = np.random.default_rng(0)
    for ep in range(2):
        env.reset(seed=ep)
        while True:
            *_, term, trunc, _ = env.step(int(rng.integers(env.K)))
            if term or trunc:
                break
    assert any(f for *_, f in seen) and not all(f for *_, f in seen)
    assert all(np.float64(a).tobytes() == np.float64(b).tobytes() for a, b, _ in seen)
