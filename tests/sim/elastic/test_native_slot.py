"""The native slot transition (``native_alloc.end_slot`` and ``views``, issue 35) against
``SlotSimulator``'s Python code, its specification.

Two simulators of the same jobs go slot by slot in lockstep, one with the native slot and
one in Python (:func:`_python`), and after every ``begin_slot`` and ``end_slot`` everything
observable must be the same, bit for bit: the views, the record (allocation, epochs,
finished, used slots, reward), every field of every run (progress, allocation, slots run,
changes, finish, cached rates, the cached view), the utilisation and reward lists, the
finished count and the active jobs.  Checked on whole runs of DL²'s settings under several
allocators (and a scaling overhead), on random-plan ``ClusterPlan-v0`` episodes, and on
slots the native code must hand to the Python code: every error (which must be the Python
code's, leaving the same state) and every value out of its ordinary (which the Python code
handles).

Without a C compiler the extension is not built and these tests skip, unless
``DLSCHED_REQUIRE_NATIVE=1`` (set by ``.ci/run``), which makes a missing build a failure.
"""

from __future__ import annotations

import dataclasses
import math
import os
import types
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import pytest

from envs.gym.factory import SETTINGS
from envs.gym.plan_env import PlanEnv
from envs.sim.elastic import native_alloc
from envs.sim.elastic.allocators import make_allocator
from envs.sim.elastic.engine_slots import ContentionSlotSimulator
from envs.sim.elastic.simulator import SlotRecord, SlotSimulator
from envs.sim.elastic.spec import ElasticCluster, ElasticJob, JobType
from envs.sim.elastic.speed import MeasuredSpeed
from envs.sim.engine import SimulationError

if not native_alloc.available():
    if os.environ.get("DLSCHED_REQUIRE_NATIVE") == "1":
        raise RuntimeError(
            "DLSCHED_REQUIRE_NATIVE=1 but envs.sim.elastic._alloc_native is not built or stale "
            "(run make setup)"
        )
    pytest.skip("native slot not built (no C compiler at install)", allow_module_level=True)


class _Counter:
    """Counts a native function's answers: done in C, handed back (``None``)."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.done = self.handed_back = 0

    def __call__(self, *args: Any) -> Any:
        out = self.real(*args)
        if out is None:
            self.handed_back += 1
        else:
            self.done += 1
        return out


@pytest.fixture
def counter(monkeypatch: pytest.MonkeyPatch) -> _Counter:
    """Counts the native slots (``_alloc_native.end_slot``)."""
    c = _Counter(native_alloc._alloc_native.end_slot)
    monkeypatch.setattr(native_alloc._alloc_native, "end_slot", c)
    return c


@pytest.fixture
def obs_counter(monkeypatch: pytest.MonkeyPatch) -> _Counter:
    """Counts the native observations (``_alloc_native.slot_obs``)."""
    c = _Counter(native_alloc._alloc_native.slot_obs)
    monkeypatch.setattr(native_alloc._alloc_native, "slot_obs", c)
    return c


@contextmanager
def _python() -> Iterator[None]:
    """The slot transition and the slot's observation in Python only (the allocators stay
    native: they are checked against their Python code in test_native_alloc.py)."""
    names = {"end_slot": None, "views": None, "slot_obs": False, "open_rows": None,
             "set_counts": False, "decided": None, "any_valid": None,
             "plan_obs": False}  # fmt: skip
    saved = {name: getattr(native_alloc, name) for name in names}
    for name, off in names.items():
        setattr(native_alloc, name, lambda *args, off=off: off)
    try:
        yield
    finally:
        for name, real in saved.items():
            setattr(native_alloc, name, real)


def _bits(x: Any) -> Any:
    """``x`` as a comparable value that tells floats apart bit for bit (``-0.0``, NaN) and
    keeps types and orders (dicts as their item lists)."""
    if type(x) is float:
        return ("float", x.hex())
    if type(x) is bool or type(x) is int or x is None or type(x) is str:
        return (type(x).__name__, x)
    if type(x) is tuple or type(x) is list:
        return (type(x).__name__, [_bits(v) for v in x])
    if type(x) is dict:
        return ("dict", [(_bits(k), _bits(v)) for k, v in x.items()])
    if isinstance(x, ElasticJob):
        return ("spec", x)  # (the same spec, or an equal one drawn by another env)
    if type(x).__name__ == "JobState":
        return ("view", [(k, _bits(v)) for k, v in vars(x).items()])
    if isinstance(x, SlotRecord):
        return ("record", [(k, _bits(v)) for k, v in vars(x).items()])
    raise AssertionError(f"unexpected {type(x)}: {x!r}")


def _state(sim: SlotSimulator) -> Any:
    """Everything of the simulator a caller or a later slot can see."""
    runs = [
        (jid, [(f.name, _bits(getattr(r, f.name))) for f in dataclasses.fields(r)])
        for jid, r in sorted(sim._runs.items())
    ]
    return (
        runs,
        _bits(sim._cpu_util),
        _bits(sim._gpu_util),
        _bits(sim._rewards),
        sim._done,
        sim.t,
        sim._in_slot,
        [r.spec.job_id for r in sim._active],
        list(sim._active_ids),
        list(sim.cluster.free_cpu),
        list(sim.cluster.free_gpu),
    )


def _lockstep(
    make_sim: Any, make_alloc: Any, speed: Any, max_slots: int | None = None
) -> tuple[int, int]:
    """Run two simulators (native, Python) with their own allocator in lockstep, comparing
    after every step; the slots run and the jobs finished."""
    fast, plain = make_sim(make_alloc()), make_sim(make_alloc())
    slots = 0
    while not fast.done and (max_slots is None or slots < max_slots):
        views = fast.begin_slot()
        with _python():
            views_p = plain.begin_slot()
        assert _bits(views) == _bits(views_p)
        assert _state(fast) == _state(plain)
        decided: Mapping[int, tuple[int, int]] = {}
        decided_p: Mapping[int, tuple[int, int]] = {}
        if views:
            slot_s = fast.spec.slot_s
            decided = fast.allocator.allocate(views, fast.cluster, speed, slot_s)
            decided_p = plain.allocator.allocate(views_p, plain.cluster, speed, slot_s)
        record = fast.end_slot(decided)
        with _python():
            record_p = plain.end_slot(decided_p)
        assert _bits(record) == _bits(record_p)
        assert _state(fast) == _state(plain)
        slots += 1
    assert plain.done == fast.done
    if fast.done:
        assert fast.result() == plain.result()
    return slots, fast._done


ALLOCATORS = [
    ("drf", {}),
    ("srtf", {}),
    ("optimus", {}),
    ("optimus", {"oracle_speed_factor": True}),
    ("esrtf", {}),
    ("esrtf", {"backfill": True}),
    ("esrtf", {"efficiency": 0.7, "head": 2, "head_efficiency": 0.8}),
    ("bundle", {}),
    ("tiresias", {}),
]


@pytest.mark.parametrize(("label", "options"), ALLOCATORS)
@pytest.mark.parametrize("overhead", [0.0, 30.0])
def test_whole_runs_slot_for_slot(
    counter: _Counter, label: str, options: dict[str, Any], overhead: float
) -> None:
    """Whole runs of the tiny and medium settings, two workloads each (the second with
    DL²'s estimation error and speed variation: real and declared epochs differ, speed
    factors too), with and without a scaling overhead."""
    for setting in ("tiny", "medium"):
        st = SETTINGS[setting]
        speed = MeasuredSpeed(max_ps=st.max_ps, max_workers=st.max_workers)
        for seed in (0, 1):
            jobs = st.workload(seed, epoch_estimation_error=0.2 * seed, speed_variation=0.3 * seed)

            def make(
                alloc: Any, jobs: Any = jobs, st: Any = st, speed: Any = speed
            ) -> SlotSimulator:
                return SlotSimulator(st.cluster(), jobs, alloc, speed, scaling_overhead_s=overhead)

            slots, finished = _lockstep(make, lambda: make_allocator(label, options), speed)
            assert finished == len(jobs) and slots > 5
    assert counter.done > 20 and counter.handed_back == 0


@pytest.mark.parametrize(("setting", "slots"), [("small", 150), ("large", 40)])
@pytest.mark.parametrize(("label", "options"), [("drf", {}), ("optimus", {}), ("esrtf", {})])
def test_long_runs_first_slots(
    counter: _Counter, setting: str, slots: int, label: str, options: dict[str, Any]
) -> None:
    """The first slots of the small and large settings (estimation error, speed variation
    and a scaling overhead)."""
    st = SETTINGS[setting]
    speed = MeasuredSpeed(max_ps=st.max_ps, max_workers=st.max_workers)
    jobs = st.workload(2, epoch_estimation_error=0.1, speed_variation=0.2)

    def make(alloc: Any) -> SlotSimulator:
        return SlotSimulator(st.cluster(), jobs, alloc, speed, scaling_overhead_s=10.0)

    _lockstep(make, lambda: make_allocator(label, options), speed, max_slots=slots)
    assert counter.done == slots and counter.handed_back == 0


def _env_state(env: PlanEnv) -> Any:
    inner = env.inner
    return (_state(inner.sim), inner._finished, inner._t, inner._empty_total)


EPISODE_CASES = [
    (setting, backlog, "dl2")
    for setting in ("tiny", "small", "medium", "large")
    for backlog in (None, "bundle")
] + [("tiny", None, "extended"), ("medium", "bundle", "extended")]


@pytest.fixture
def glue_counters(monkeypatch: pytest.MonkeyPatch) -> dict[str, _Counter]:
    """Counts the native slot glue of the env (``open_rows``, ``set_counts``, ``decided``,
    ``any_valid``) and the plan observation (``plan_obs``)."""
    out = {}
    for name in ("open_rows", "set_counts", "decided", "any_valid", "plan_obs"):
        out[name] = c = _Counter(getattr(native_alloc._alloc_native, name))
        monkeypatch.setattr(native_alloc._alloc_native, name, c)
    return out


@pytest.mark.parametrize(("setting", "backlog", "features"), EPISODE_CASES)
def test_random_plan_episodes(
    counter: _Counter,
    obs_counter: _Counter,
    glue_counters: dict[str, _Counter],
    setting: str,
    backlog: str | None,
    features: str,
) -> None:
    """Random-plan ``ClusterPlan-v0`` episodes (the benchmark's loop): the same observations,
    rewards, infos and simulator states step by step (``extended``: the observation's two
    more columns, written in Python after the native ones)."""
    config: dict[str, Any] = {"setting": setting, "reward": "jct", "features": features}
    if backlog is not None:
        config["backlog"] = backlog
    fast, plain = PlanEnv(config=config), PlanEnv(config=config)
    rng = np.random.default_rng(len(setting))
    episodes = {"tiny": 3, "small": 1, "medium": 2, "large": 1}[setting]  # ~400 slots on small
    for ep in range(episodes):
        obs, _ = fast.reset(seed=ep)
        with _python():
            obs_p, _ = plain.reset(seed=ep)
        assert obs.tobytes() == obs_p.tobytes()
        steps = 0
        while True:
            k = int(rng.integers(fast.K))
            out = fast.step(k)
            with _python():
                out_p = plain.step(k)
            assert out[0].tobytes() == out_p[0].tobytes()
            assert _bits(out[1:4]) == _bits(out_p[1:4])
            assert out[4] == out_p[4]
            assert _env_state(fast) == _env_state(plain)
            steps += 1
            if out[2] or out[3] or (setting == "large" and steps >= 60):
                break
    assert counter.done > 20 and counter.handed_back == 0
    assert obs_counter.done > 20 and obs_counter.handed_back == 0
    for name, c in glue_counters.items():  # (set_counts: the slots planned on the rule)
        assert c.done > (5 if name == "set_counts" else 20) and c.handed_back == 0, name


# ---------------------------------------------------------------------- hand-backs and errors


def _pair(
    jobs: Any = None, speed: Any = None, **kwargs: Any
) -> tuple[SlotSimulator, SlotSimulator, Any]:
    """Two interactive simulators of the same small workload, advanced through three DRF
    slots (so that jobs have run, changed and cached rates); the workload's speed."""
    st = SETTINGS["tiny"]
    speed = speed or MeasuredSpeed(max_ps=st.max_ps, max_workers=st.max_workers)
    jobs = jobs or st.workload(4)
    sims = [SlotSimulator(st.cluster(), jobs, None, speed, **kwargs) for _ in range(2)]
    drf = make_allocator("drf")
    for _ in range(3):
        for i, sim in enumerate(sims):
            with _python() if i else _nothing():
                views = sim.begin_slot()
                sim.end_slot(drf.allocate(views, sim.cluster, speed, sim.spec.slot_s))
    assert _state(sims[0]) == _state(sims[1])
    for i, sim in enumerate(sims):
        with _python() if i else _nothing():
            sim.begin_slot()
    return sims[0], sims[1], speed


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def _place(sim: SlotSimulator, decided: Mapping[int, Any]) -> None:
    """Place ``decided``'s tasks on ``sim``'s cluster (as an interactive driver does)."""
    for jid, (w, p) in decided.items():
        ty = sim._runs[jid].spec.type
        for _ in range(int(w)):
            assert sim.cluster.take(ty.worker_cpu, ty.worker_gpu) >= 0
        for _ in range(int(p)):
            assert sim.cluster.take(ty.ps_cpu, ty.ps_gpu) >= 0


def _both(
    fast: SlotSimulator, plain: SlotSimulator, decided: Any, place: bool = True
) -> tuple[Any, Any]:
    """``end_slot(decided)`` on both (placing the tasks first): each one's record or error
    message, the states compared afterwards."""
    outs = []
    for i, sim in enumerate((fast, plain)):
        if place:
            _place(sim, decided)
        with _python() if i else _nothing():
            try:
                outs.append(_bits(sim.end_slot(decided)))
            except SimulationError as exc:
                outs.append(str(exc))
    assert outs[0] == outs[1]
    assert _state(fast) == _state(plain)
    return outs[0], outs[1]


def _two_active(sim: SlotSimulator) -> tuple[int, int]:
    assert len(sim._active_ids) >= 2
    return sim._active_ids[0], sim._active_ids[1]


def test_ordinary_slot_runs_natively(counter: _Counter) -> None:
    fast, plain, _ = _pair()
    a, b = _two_active(fast)
    out, _ = _both(fast, plain, {a: (2, 1), b: (1, 1)})
    assert isinstance(out, tuple) and counter.done == 4 and counter.handed_back == 0


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda a, b, s: {a: (s._runs[a].spec.max_workers + 1, 1)}, "caps"),
        (lambda a, b, s: {a: (1, -1)}, "caps"),
        (lambda a, b, s: {a: (1, 1), 999: (1, 0)}, "inactive job(s) [999]"),
        (lambda a, b, s: {a: (1.5, 1)}, "non-integer"),
    ],
)
def test_refused_allocations_raise_the_python_error(
    counter: _Counter, make: Any, message: str
) -> None:
    fast, plain, _ = _pair()
    a, b = _two_active(fast)
    decided = make(a, b, fast)
    err, _ = _both(fast, plain, decided, place=False)
    assert message in err and counter.handed_back == 1


def test_unplaced_tasks_raise_the_python_error(counter: _Counter) -> None:
    fast, plain, _ = _pair()
    a, _b = _two_active(fast)
    err, _ = _both(fast, plain, {a: (1, 1)}, place=False)
    assert "every task must be placed through the cluster" in err and counter.handed_back == 1


def test_node_over_capacity_raises_the_python_error(counter: _Counter) -> None:
    fast, plain, _ = _pair()
    for sim in (fast, plain):
        sim.cluster.free_gpu[1] = -1
    err, _ = _both(fast, plain, {}, place=False)
    assert "node 1 holds" in err and counter.handed_back == 1


def test_finished_active_job_raises_the_python_error(counter: _Counter) -> None:
    fast, plain, _ = _pair()
    a, b = _two_active(fast)
    for sim in (fast, plain):
        sim._runs[b].finish = 1.5
    err, _ = _both(fast, plain, {a: (1, 1), b: (1, 1)})
    assert f"job {b} is active but finished" in err and counter.handed_back == 1


@pytest.mark.parametrize("bad", [-1.0, math.nan, 3])
def test_bad_cached_rate_raises_or_runs_as_python(counter: _Counter, bad: Any) -> None:
    """A cached rate that trains negative or NaN epochs: the Python loop's error, after the
    jobs before it trained (the same state on both); a rate not a float: the Python loop
    runs it."""
    fast, plain, _ = _pair()
    a, b = _two_active(fast)
    for sim in (fast, plain):
        sim._runs[b].rates[(1, 1)] = bad
    out, _ = _both(fast, plain, {a: (2, 1), b: (1, 1)})
    if isinstance(bad, float):
        assert f"job {b} trained" in out and "epochs" in out
    else:
        assert isinstance(out, tuple)
    assert counter.handed_back == 1


class _BadSpeed:
    """A speed model that answers ``value`` for ``workers`` workers (else the measured)."""

    name = "bad"

    def __init__(self, inner: Any, workers: int, value: float) -> None:
        self.inner, self.workers, self.value, self.calls = inner, workers, value, 0

    def speed(self, job_type: JobType, num_ps: int, num_workers: int) -> float:
        self.calls += 1
        if num_workers == self.workers:
            return self.value
        return float(self.inner.speed(job_type, num_ps, num_workers))


@pytest.mark.parametrize("value", [-1.0, math.inf])
def test_bad_speed_model_raises_the_python_error(counter: _Counter, value: float) -> None:
    st = SETTINGS["tiny"]
    inner = MeasuredSpeed(max_ps=st.max_ps, max_workers=st.max_workers)
    fast, plain, _speed = _pair(speed=_BadSpeed(inner, 7, value))
    a, b = _two_active(fast)
    err, _ = _both(fast, plain, {a: (2, 1), b: (7, 1)})
    assert f"speed model 'bad' gave {value} it/s for job {b}" in err
    assert counter.handed_back == 1


@pytest.mark.parametrize(
    "make",
    [
        lambda a, b: {a: (np.int64(2), 1), b: (1, 1)},  # numpy counts
        lambda a, b: {a: (2.0, 1), b: (True, 1)},  # integral floats, bools
        lambda a, b: {a: [2, 1], b: (1, 1)},  # a list
        lambda a, b: types.MappingProxyType({a: (2, 1), b: (1, 1)}),  # not a dict
        lambda a, b: {a: (2, 1), b: (1 << 70, 0)},  # past 64 bits (refused by the caps)
    ],
)
def test_unusual_values_run_in_python(counter: _Counter, make: Any) -> None:
    fast, plain, _ = _pair()
    a, b = _two_active(fast)
    decided = make(a, b)
    done = counter.done
    _both(fast, plain, decided, place=(1 << 70) not in (v[0] for v in decided.values()))
    assert counter.done == done


def _jobs_of(num_epochs: Any, real: Any) -> list[ElasticJob]:
    ty = SETTINGS["tiny"].workload(0)[0].type
    return [ElasticJob(i, ty, i // 2, num_epochs, real, max_workers=4, max_ps=4) for i in range(4)]


@pytest.mark.parametrize(
    ("num_epochs", "real", "native"),
    [
        (500, 600, True),  # ints: the doubles they convert to
        (500.5, 400.25, True),
        (500, float(1 << 60), True),  # a float beyond 2**53
        (500, (1 << 60) + 1, False),  # an int a double does not hold: Python's arithmetic
    ],
)
def test_epoch_counts_of_every_kind(
    counter: _Counter, num_epochs: Any, real: Any, native: bool
) -> None:
    st = SETTINGS["tiny"]
    speed = MeasuredSpeed(max_ps=st.max_ps, max_workers=st.max_workers)
    jobs = _jobs_of(num_epochs, real)

    def make(alloc: Any) -> SlotSimulator:
        return SlotSimulator(ElasticCluster(4, 8, 8, 1200), jobs, alloc, speed, max_slots=50)

    _lockstep(make, lambda: make_allocator("drf"), speed, max_slots=40)
    assert (counter.done > 0) == native and (counter.handed_back > 0) == (not native)


def test_subclass_hooks_keep_the_python_code(counter: _Counter) -> None:
    """A subclass that changes the slot, its checks, its rates or a job's rate runs the
    Python code (its overrides are called), as does the contention simulator."""

    class Rated(SlotSimulator):
        def _rate(self, r: Any, alloc: tuple[int, int]) -> float:
            return 2.0 * super()._rate(r, alloc)

    st = SETTINGS["tiny"]
    speed = MeasuredSpeed(max_ps=st.max_ps, max_workers=st.max_workers)
    sim = Rated(st.cluster(), st.workload(0), make_allocator("drf"), speed)
    assert not sim._native_slot
    sim.run()
    plain = SlotSimulator(st.cluster(), st.workload(0), make_allocator("drf"), speed)
    assert plain._native_slot
    assert sim.result().makespan_slots < plain.run().makespan_slots
    contention = ContentionSlotSimulator(st.cluster(), st.workload(0), make_allocator("drf"))
    assert not contention._native_slot
    assert counter.done > 0  # the plain simulator's slots only
    done = counter.done
    with native_alloc.use_native(False):
        SlotSimulator(st.cluster(), st.workload(0), make_allocator("drf"), speed).run()
    assert counter.done == done  # switched off: not even asked


def test_slot_obs_is_the_python_loop(obs_counter: _Counter) -> None:
    """The native observation rows against the Python loop on slots built to reach every
    branch: stays past the scale (clipped), progress past the epochs (remaining clipped at
    0), negative progress (clipped at 1), progress of other number types (the Python code);
    and the buffers and rows it leaves to the Python code."""
    from envs.sim.elastic.allocator_base import JobState

    env = PlanEnv(config={"setting": "tiny", "reward": "jct"})
    env.reset(seed=3)
    inner = env.inner
    specs = [v.spec for v in inner._window]
    rng = np.random.default_rng(0)
    done = obs_counter.done
    for trial in range(40):
        inner._t = int(rng.integers(0, 400))
        progress: list[Any] = [
            float(rng.choice([0.0, rng.uniform(0, 2) * s.num_epochs, -rng.uniform(0, 50)]))
            for s in specs
        ]
        if trial % 4 == 3:
            progress[0] = int(progress[0])  # an int: converted as Python's division does
        if trial % 8 == 7:
            progress[-1] = np.float64(progress[-1])  # not a float: the Python code's
        inner._window = [JobState.of(s, p, 0, 0, 0) for s, p in zip(specs, progress, strict=True)]
        inner._write_slot_obs()
        fast = inner._obs_flat.tobytes()
        with native_alloc.use_native(False):
            inner._obs_flat[:] = np.nan
            inner._write_slot_obs()
        assert fast == inner._obs_flat.tobytes()
    assert obs_counter.done - done == 35 and obs_counter.handed_back == 5
    rows, window = inner._rows, inner._window[:-1]  # lengths differ
    args = (inner._t, inner.L, inner._width, 100.0)
    assert not native_alloc.slot_obs(inner._obs_flat, rows, window, *args)
    wrong = np.zeros(inner._obs_flat.shape, dtype=np.float64)  # not float32
    assert not native_alloc.slot_obs(wrong, rows, inner._window, *args)
    short = np.zeros(inner._width, dtype=np.float32)  # too short for the rows
    assert not native_alloc.slot_obs(short, rows, inner._window, *args)
    with native_alloc.use_native(False):
        assert not native_alloc.slot_obs(inner._obs_flat, rows, inner._window, *args)


# ---------------------------------------------------------------------- the env's slot glue


def _slot_env() -> Any:
    """A ``tiny`` env with a slot open, a few jobs in the window."""
    env = PlanEnv(config={"setting": "tiny", "reward": "jct"})
    env.reset(seed=3)
    for _ in range(3):
        env.step(4)
    assert len(env.inner._window) >= 2
    return env.inner


def test_open_rows_is_the_comprehensions() -> None:
    """``open_rows``: the alloc dict (fresh ``[0, 0]`` lists, the counts list holding the same
    lists), rows and counts the Python code builds; a job id missing from the rows, or not a
    plain int, hands back (None)."""
    inner = _slot_env()
    window, static = inner._window, inner._static
    alloc, rows, counts, joined, n_valid = native_alloc.open_rows(window, static)  # type: ignore[misc]
    assert alloc == {v.spec.job_id: [0, 0] for v in window}
    assert list(alloc) == [v.spec.job_id for v in window]
    assert rows == [static[v.spec.job_id] for v in window]
    assert all(a is b for a, b in zip(rows, [static[v.spec.job_id] for v in window], strict=True))
    assert counts == list(alloc.values()) and all(
        a is b for a, b in zip(counts, alloc.values(), strict=True)
    )
    assert len({id(c) for c in counts}) == len(counts)  # one list per job
    assert joined == b"".join([row.open_mask for row in rows]) and len(joined) == 3 * len(rows)
    assert n_valid == sum([row.open_valid for row in rows]) and type(n_valid) is int
    partial = {k: v for k, v in static.items() if k != window[-1].spec.job_id}
    assert native_alloc.open_rows(window, partial) is None
    odd = [types.SimpleNamespace(spec=types.SimpleNamespace(job_id=float(window[0].job_id)))]
    assert native_alloc.open_rows(odd, static) is None  # (Python: the float finds the row)
    assert native_alloc.open_rows([object()], static) is None  # no spec: Python's error
    with native_alloc.use_native(False):
        assert native_alloc.open_rows(window, static) is None


def test_set_counts_and_decided_are_the_loops() -> None:
    """``set_counts`` writes every target pair into the window's lists (nothing when a job is
    missing from the target or a value is not a pair: the Python loop then runs and raises);
    ``decided`` is the dict of pairs, None for lists of another length."""
    alloc = {3: [0, 0], 7: [0, 0], 1: [0, 0]}
    target = {1: (2, 1), 3: (0, 0), 7: (5, 2), 9: (1, 1)}
    assert native_alloc.set_counts(alloc, target)
    assert alloc == {3: [0, 0], 7: [5, 2], 1: [2, 1]}
    got = native_alloc.decided(alloc)
    assert got == {jid: (c[0], c[1]) for jid, c in alloc.items()}
    assert got is not None and list(got) == [3, 7, 1]
    assert all(type(v) is tuple for v in got.values())
    for bad in ({1: (1, 1), 3: (1, 1)}, {1: (1, 1), 3: (1, 1), 7: [1, 1]}, {1: (1, 1, 1)}):
        before = {k: list(v) for k, v in alloc.items()}
        assert not native_alloc.set_counts(alloc, bad)
        assert alloc == before  # nothing written
    assert not native_alloc.set_counts(alloc, [(1, 1)])  # not a dict
    assert native_alloc.decided({1: [1, 2, 3]}) is None
    assert native_alloc.decided({1: (1, 2)}) is None
    with native_alloc.use_native(False):
        assert not native_alloc.set_counts(alloc, target)
        assert native_alloc.decided(alloc) is None


def test_any_valid_is_the_loop() -> None:
    """``any_valid`` against ``ClusterEnv._any_valid``'s Python loop on random counts and fit
    states of a real window; lengths, indices and values out of the ordinary hand back."""
    inner = _slot_env()
    rows = inner._rows
    rng = np.random.default_rng(1)
    n_fits = len(inner._fit_masks)
    answers = set()
    for _ in range(300):
        fits = [bool(x) for x in rng.random(n_fits) < rng.uniform(0, 0.6)]
        counts = [
            [int(rng.integers(0, r.max_w + 1)), int(rng.integers(0, r.max_p + 1))] for r in rows
        ]
        expected = False
        for row, (w, p) in zip(rows, counts, strict=True):
            w_ok, p_ok = w < row.max_w, p < row.max_p
            if (w_ok and fits[row.iw]) or (p_ok and (fits[row.ip] or (w_ok and fits[row.ib]))):
                expected = True
                break
        assert native_alloc.any_valid(fits, rows, counts) is expected
        answers.add(expected)
    assert answers == {True, False}
    fits = [False] * n_fits
    counts = [[0, 0] for _ in rows]
    assert native_alloc.any_valid(fits, rows, counts[:-1]) is None  # zip(strict=True)
    assert native_alloc.any_valid(fits[:1], rows, counts) is None  # an index past the fits
    assert native_alloc.any_valid([0] * n_fits, rows, counts) is None  # not bools
    assert native_alloc.any_valid(fits, rows, [(0, 0)] * len(rows)) is None  # not lists
    assert native_alloc.any_valid(fits, [object()] * len(rows), counts) is None
    with native_alloc.use_native(False):
        assert native_alloc.any_valid(fits, rows, counts) is None


def test_open_rows_hands_back_unusual_rows() -> None:
    """Rows whose open mask or valid count is out of the ordinary (or rows of two classes)
    hand the whole slot back to the Python code."""
    inner = _slot_env()
    window, static = inner._window, inner._static
    jid = window[0].spec.job_id
    for change in ({"open_valid": 4}, {"open_valid": True}, {"open_mask": b"\x01\x01"},
                   {"open_mask": bytearray(3)}):  # fmt: skip
        odd = dict(static)
        odd[jid] = dataclasses.replace(static[jid], **change)
        assert native_alloc.open_rows(window, odd) is None, change

    @dataclasses.dataclass(frozen=True, slots=True)
    class OtherRow:  # the same fields, another class
        max_w: int
        max_p: int
        iw: int
        ip: int
        ib: int
        open_mask: bytes
        open_valid: int

    if len(window) > 1:
        odd = dict(static)
        r = static[window[1].spec.job_id]
        odd[window[1].spec.job_id] = OtherRow(r.max_w, r.max_p, r.iw, r.ip, r.ib, r.open_mask,
                                              r.open_valid)  # fmt: skip
        assert native_alloc.open_rows(window, odd) is None


def _python_observe(planner: Any, inner_obs: Any) -> Any:
    planner._native = False
    try:
        return planner.observe(inner_obs)
    finally:
        planner._native = True


def test_plan_obs_is_the_python_features() -> None:
    """``plan_obs`` against ``SlotPlanner.observe``'s Python code on states built to reach
    every branch (no slot run yet, utilisations of 0 and 1, more jobs beyond the window
    than J, finished jobs, a late slot), bit for bit; inputs out of the ordinary hand back."""
    env = PlanEnv(config={"setting": "tiny", "reward": "jct"})
    env.reset(seed=2)
    planner, inner = env.planner, env.inner
    inner_obs = inner._obs_flat.copy()
    sim = inner.sim
    rng = np.random.default_rng(5)
    views = list(inner._views)
    for trial in range(60):
        inner._t = int(rng.integers(0, 5000))
        inner._finished = int(rng.integers(0, inner._num_jobs + 1))
        inner._views = views * int(rng.integers(1, 4))
        inner._window = inner._views[: int(rng.integers(0, len(inner._views) + 1))]
        if trial % 3:
            sim._cpu_util.append(float(rng.choice([0.0, 1.0, rng.uniform()])))
            sim._gpu_util.append(float(rng.choice([0.0, 1.0, rng.uniform()])))
        inner_obs = rng.uniform(-0.5, 1.5, inner_obs.shape).astype(np.float32)
        fast = planner.observe(inner_obs)
        assert fast.tobytes() == _python_observe(planner, inner_obs).tobytes()
        assert fast.dtype == np.float32 and fast.shape == (planner.obs_size,)
    out = np.empty(planner.obs_size, dtype=np.float32)
    assert native_alloc.plan_obs(out, inner_obs, inner)
    assert not native_alloc.plan_obs(out, inner_obs[:-1], inner)  # sizes differ
    assert not native_alloc.plan_obs(out, inner_obs.astype(np.float64), inner)  # not float32
    assert not native_alloc.plan_obs(out.astype(np.float64), inner_obs, inner)
    assert not native_alloc.plan_obs(out, inner_obs[::-1][::-1].reshape(1, -1), inner)  # 2-D
    sim._cpu_util.append(1)  # an int utilisation: the Python code's
    assert not native_alloc.plan_obs(out, inner_obs, inner)
    got = planner.observe(inner_obs)
    assert got.tobytes() == _python_observe(planner, inner_obs).tobytes()
    sim._cpu_util[-1] = 0.5
    inner.J, J = 0, inner.J  # a division by zero: the Python code raises it
    assert not native_alloc.plan_obs(out, inner_obs, inner)
    inner.J = J
    inner.sim = None  # no simulator: the Python code raises ResetNeeded
    assert not native_alloc.plan_obs(out, inner_obs, inner)
    inner.sim = sim
    with native_alloc.use_native(False):
        assert not native_alloc.plan_obs(out, inner_obs, inner)


def test_rates_from_the_speed_memo(counter: _Counter, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rate not cached yet is read from the MeasuredSpeed memo in C: ``_rate`` is called
    only on a memo miss (a warm memo: never), and always for a speed model whose ``speed``
    is overridden; the records and states are the Python code's, bit for bit."""
    st = SETTINGS["tiny"]
    jobs = st.workload(1, epoch_estimation_error=0.2, speed_variation=0.3)
    calls: list[Any] = []
    real_rate = SlotSimulator._rate

    def rate(self: Any, r: Any, alloc: Any) -> float:
        calls.append(alloc)
        return real_rate(self, r, alloc)

    class Overriding(MeasuredSpeed):
        def speed(self, job_type: JobType, num_ps: int, num_workers: int) -> float:
            return super().speed(job_type, num_ps, num_workers)

    def run(speed: Any) -> tuple[list[Any], Any]:
        sim = SlotSimulator(st.cluster(), jobs, make_allocator("drf"), speed)  # (no speeds asked)
        records = []
        while not sim.done:
            views = sim.begin_slot()
            decided = sim.allocator.allocate(views, sim.cluster, speed, sim.spec.slot_s)
            records.append(_bits(sim.end_slot(decided)))
        return records, (sim.result(), _state(sim))

    kw = {"max_ps": st.max_ps, "max_workers": st.max_workers}
    with _python():
        expected = run(MeasuredSpeed(**kw))
    speed = MeasuredSpeed(**kw)
    monkeypatch.setattr(SlotSimulator, "_rate", rate)  # (after the sims' hook checks: C calls it)
    assert run(speed) == expected  # a cold memo: the misses call _rate (and fill the memo)
    assert calls and speed._memo
    calls.clear()
    assert run(speed) == expected  # a warm memo: every rate in C
    assert not calls
    assert run(Overriding(**kw)) == expected  # overridden: every rate from _rate
    assert calls
    assert counter.done > 20 and counter.handed_back == 0


def test_slot_obs_rows_of_another_class() -> None:
    """Rows that are not the env's ``_Row`` (their fields read as attributes) and specs the
    spec cache does not hold give the Python loop's observation too."""
    env = PlanEnv(config={"setting": "tiny", "reward": "jct"})
    env.reset(seed=3)
    inner = env.inner
    rows = [types.SimpleNamespace(arrival=r.arrival, type_index=r.type_index) for r in inner._rows]
    args = (inner._t + 7, inner.L, inner._width, 100.0)
    fast = np.full(inner._obs_flat.shape, np.nan, dtype=np.float32)
    assert native_alloc.slot_obs(fast, rows, inner._window, *args)
    with native_alloc.use_native(False):
        inner._rows, saved = rows, inner._rows  # type: ignore[assignment]
        inner._t += 7
        inner._write_slot_obs()
        inner._t -= 7
        inner._rows = saved
    assert fast.tobytes() == inner._obs_flat.tobytes()
