"""LoadAwareESRTF (``esrtf_load``): EfficientSRTF whose efficiency follows the job count.

Hand-checkable: the stand-in speed of ``test_allocators`` with limit 4 is
``min(w, 4) + 0.5 min(p, 4)``, best 6.0 at (4 workers, 4 PS).  EfficientSRTF's target is the
fewest tasks reaching ``efficiency x 6``: at 0.5 (3.0) (3, 1) = 3.5 (4 tasks; (2, 2) = 3.0
ties on tasks and is slower), at 0.75 (4.5) (4, 1) = 4.5, at 0.92 (5.52) (4, 4) = 6.0.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from envs.gym.factory import EnvConfig, make_env
from envs.gym.heuristic import HeuristicDriver
from envs.sim.elastic.allocators import (
    ALLOCATORS,
    EfficientSRTF,
    JobState,
    LoadAwareESRTF,
    allocator_name,
    make_allocator,
)
from envs.sim.elastic.cluster import SlotCluster
from envs.sim.elastic.spec import ElasticJob
from envs.sim.errors import ConfigError
from tests.sim.elastic.test_allocators import (
    SLOT_S,
    StandInSpeed,
    _random_case,
    check_consistent,
    cluster,
    jtype,
)

SPEED = StandInSpeed({"m": (1.0, 4)})


def jobs(n: int) -> list[JobState]:
    """``n`` jobs of one type, worker (1 CPU, 1 GPU), PS (1 CPU, 0 GPU), caps 8: on a 4-node
    64-CPU 64-GPU cluster every job gets its target."""
    ty = jtype((1, 1), (1, 0), model="m")
    return [
        JobState(ElasticJob(j, ty, j, 10.0 + j, 10.0 + j, max_workers=8, max_ps=8))
        for j in range(n)
    ]


def test_by_hand_each_load_gets_its_efficiency() -> None:
    alloc = LoadAwareESRTF(light=1, heavy=2, eff_light=0.5, eff_heavy=0.75)
    for n, target in ((1, (3, 1)), (2, (4, 4)), (3, (4, 1)), (5, (4, 1))):
        c = cluster(4, 64, 64)
        out = alloc.allocate(jobs(n), c, SPEED, SLOT_S)
        check_consistent(jobs(n), c, out)
        assert out == {j: target for j in range(n)}, n
        assert len(alloc.last_decisions) == n * sum(target)


@pytest.mark.parametrize(
    "params", [{}, {"light": 1, "heavy": 2, "eff_light": 0.5, "eff_heavy": 0.75}]
)
def test_equals_efficient_srtf_of_its_load_on_the_same_state(params: dict) -> None:
    """Allocation and decision log equal EfficientSRTF(eff_light) for n <= light,
    EfficientSRTF() for light < n <= heavy, EfficientSRTF(eff_heavy) above."""
    alloc = LoadAwareESRTF(**params)
    light, heavy = params.get("light", 3), params.get("heavy", 5)
    lo, hi = params.get("eff_light", 1.0), params.get("eff_heavy", 0.7)
    seen = set()
    for seed in range(300):
        spec, state, speed, _ = _random_case(seed)
        state = [j for j in state if j.spec.max_ps >= 1]  # EfficientSRTF needs a PS cap
        for n in range(1, len(state) + 1):
            view = state[:n]
            want = EfficientSRTF(lo if n <= light else 0.92 if n <= heavy else hi)
            c1, c2 = SlotCluster(spec), SlotCluster(spec)
            got = alloc.allocate(view, c1, speed, SLOT_S)
            assert got == want.allocate(view, c2, speed, SLOT_S), (seed, n)
            assert alloc.last_decisions == want.last_decisions, (seed, n)
            assert np.array_equal(c1.load, c2.load)
            check_consistent(view, c1, got)
            seen.add("light" if n <= light else "mid" if n <= heavy else "heavy")
    assert seen == {"light", "mid", "heavy"}  # every branch was exercised


def test_deterministic() -> None:
    for seed in range(50):
        spec, state, speed, _ = _random_case(seed)
        state = [j for j in state if j.spec.max_ps >= 1]
        a, b = LoadAwareESRTF(light=1, heavy=3), LoadAwareESRTF(light=1, heavy=3)
        first = a.allocate(state, SlotCluster(spec), speed, SLOT_S)
        assert a.allocate(state, SlotCluster(spec), speed, SLOT_S) == first
        assert b.allocate(state, SlotCluster(spec), speed, SLOT_S) == first
        assert b.last_decisions == a.last_decisions


def test_registry_round_trip() -> None:
    assert ALLOCATORS["esrtf_load"] is LoadAwareESRTF
    assert allocator_name("ESRTF_LOAD") == "esrtf_load"
    made = make_allocator("esrtf_load")
    assert isinstance(made, LoadAwareESRTF)
    assert (made.light, made.heavy) == (3, 5)
    assert [a.efficiency for a in made.by_load] == [1.0, 0.92, 0.7]
    opts = {"light": 2, "heavy": 6, "eff_light": 0.97, "eff_heavy": 0.8}
    made = make_allocator("esrtf_load", opts)
    assert isinstance(made, LoadAwareESRTF)
    assert (made.light, made.heavy) == (2, 6)
    assert [a.efficiency for a in made.by_load] == [0.97, 0.92, 0.8]
    ref = LoadAwareESRTF.reference()
    assert ref.stop_at_first_failure and all(a.stop_at_first_failure for a in ref.by_load)


@pytest.mark.parametrize(
    ("opts", "match"),
    [
        ({"light": -1}, "light"),
        ({"light": 2.5}, "light"),
        ({"light": True}, "light"),
        ({"heavy": math.inf}, "heavy"),
        ({"light": 6, "heavy": 5}, "light .* <= heavy"),
        ({"eff_light": 0.0}, "eff_light"),
        ({"eff_light": 1.5}, "eff_light"),
        ({"eff_heavy": math.nan}, "eff_heavy"),
        ({"eff_heavy": math.inf}, "eff_heavy"),
        ({"eff_heavy": "0.7"}, "eff_heavy"),
        ({"efficiency": 0.9}, "bad options"),
    ],
)
def test_bad_parameters(opts: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        make_allocator("esrtf_load", opts)


def test_runs_through_cluster_env() -> None:
    # validation workload 100 of DL²'s medium setting (the setting it was tuned on)
    def run(alloc: object) -> dict:
        env = make_env(EnvConfig(setting="medium"), seed=100)
        driver = HeuristicDriver(alloc, env)  # type: ignore[arg-type]
        out = driver.run_episode(seed=100)
        assert driver.shortfalls == 0 and out["invalid_actions"] == 0
        return out

    out = run(make_allocator("esrtf_load"))
    assert out["jobs_finished"] == out["num_jobs"]
    assert run(make_allocator("esrtf_load"))["avg_jct_slots"] == out["avg_jct_slots"]
    assert out["avg_jct_slots"] < run(EfficientSRTF())["avg_jct_slots"]
