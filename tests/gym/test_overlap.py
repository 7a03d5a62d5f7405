"""Compute overlapped with communication: the ``ovl`` placement (envs/sim/policies/placement.py
``Overlap``) on hand-built GPU states, and the Contention-v0 rule ``exclusive_overlap`` on a
hand-built state and at every decision of whole episodes."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from envs.gym.contention_env import (
    CONTENTION_TEACHERS,
    ContentionEnv,
    exclusive_backfill_teacher,
    exclusive_overlap_teacher,
    srsf_teacher,
    teacher,
)
from envs.sim import ClusterSpec, SimConfig, simulate
from envs.sim.errors import ConfigError
from envs.sim.models import REFERENCE_MODELS
from envs.sim.policies.placement import BUSY, COMM_ONLY, IDLE, Overlap, gpu_rank
from envs.sim.spec import JobSpec, Workload
from envs.sim.workload import generate_ada_srsf

MODEL = REFERENCE_MODELS["resnet50"]


@dataclass
class _View:
    """A ClusterView by hand: 2 servers x 4 GPUs."""

    residents: list[list[tuple[Any, int]]]
    load_ms: list[float]
    free_mem_mb: list[float] = field(default_factory=lambda: [32768.0] * 8)
    spec: ClusterSpec = field(default_factory=lambda: ClusterSpec(2, 4))


def _view() -> _View:
    """GPUs 0-1: a job spanning servers; GPU 2: a one-server job; GPU 3: idle; GPUs 4-7: one
    one-server job each.  Loads rise with the index, but GPU 1 is below GPU 0."""
    multi, single = SimpleNamespace(multi=True), SimpleNamespace(multi=False)
    res: list[list[tuple[Any, int]]] = [[(multi, 0)], [(multi, 1)], [(single, 0)], []]
    res += [[(single, w)] for w in range(4)]
    return _View(res, [5.0, 4.0, 6.0, 0.0, 7.0, 8.0, 9.0, 10.0])


def _spec(gpus: int) -> JobSpec:
    return JobSpec(job_id=0, submit_ms=0.0, model=MODEL, iterations=10, num_gpus=gpus)


def test_the_ranks_of_a_hand_built_state() -> None:
    v = _view()
    assert [gpu_rank(v, g) for g in range(8)] == [COMM_ONLY, COMM_ONLY, BUSY, IDLE] + [BUSY] * 4


@pytest.mark.parametrize(
    ("gpus", "chosen", "worst"),
    [
        (1, [3], IDLE),  # the idle GPU
        (2, [3, 1], COMM_ONLY),  # then the communicating job's GPUs, least workload first
        (3, [3, 1, 0], COMM_ONLY),
        # all of server 0 (worst rank BUSY, as server 1's, but a lower sum of ranks)
        (4, [3, 1, 0, 2], BUSY),
        # beyond a server: the server with the most idle GPUs first, then the other's by load
        (6, [3, 1, 0, 2, 4, 5], BUSY),
    ],
)
def test_overlap_places_on_idle_then_communicating_gpus(
    gpus: int, chosen: list[int], worst: int
) -> None:
    got = Overlap().choose(_spec(gpus), _view())
    assert got == (chosen, worst)
    assert Overlap().place(_spec(gpus), _view(), np.random.default_rng(0)) == chosen


def test_overlap_skips_gpus_without_room_and_refuses_when_too_few_have_it() -> None:
    v = _view()
    v.free_mem_mb[3] = MODEL.gpu_memory_mb - 1.0  # the idle GPU is full
    assert Overlap().choose(_spec(1), v) == ([1], COMM_ONLY)
    v.free_mem_mb[:] = [0.0] * 7 + [32768.0]
    assert Overlap().choose(_spec(1), v) == ([7], BUSY)
    assert Overlap().choose(_spec(2), v) is None
    assert Overlap().place(_spec(2), v, np.random.default_rng(0)) is None


def _env(span: bool, placements: tuple[str, ...] = ("lwf1", "ovl")) -> ContentionEnv:
    """2 servers x 4 GPUs, every GPU busy: at t=0 an 8-GPU job (``span``: across both servers)
    or two 4-GPU jobs (one per server) start; at t=1 ms a 2-GPU job arrives."""
    big = [(8, 2000)] if span else [(4, 2000), (4, 2000)]
    jobs = [
        JobSpec(job_id=i, submit_ms=0.0, model=MODEL, iterations=it, num_gpus=g)
        for i, (g, it) in enumerate(big)
    ]
    jobs.append(JobSpec(job_id=len(jobs), submit_ms=1.0, model=MODEL, iterations=50, num_gpus=2))
    env = ContentionEnv(
        workloads=[Workload(tuple(jobs), name="hand")],
        num_servers=2,
        placements=placements,
        J=4,
    )
    env.reset(seed=0)
    while env.window and env.window[0].spec.num_gpus >= 4:
        env.step(srsf_teacher(env))  # the big jobs start, on every GPU
    assert env.idle_gpus() == 0 and [j.spec.num_gpus for j in env.window] == [2]
    return env


def test_the_rule_shares_with_a_communicating_job_and_waits_behind_computing_ones() -> None:
    env = _env(span=True)
    assert exclusive_backfill_teacher(env) == env.wait_action  # nothing is idle
    a = exclusive_overlap_teacher(env)
    assert a == 0 * env.C + 1  # the 2-GPU job, with the ovl candidate
    job = env.window[0]
    env.step(a)
    assert len(job.gpus) == 2 and len({g // 4 for g in job.gpus}) == 1  # one server, shared
    while not env.done:
        env.step(exclusive_overlap_teacher(env))
    assert env.sim is not None
    rec = {r.job_id: r for r in env.sim.result().records}
    assert rec[1].start_ms == pytest.approx(1.0)  # at once, not after the 8-GPU job
    assert rec[1].finish_ms < rec[0].finish_ms
    # two one-server jobs compute on every GPU: nothing to overlap with, so it waits
    env = _env(span=False)
    assert exclusive_overlap_teacher(env) == env.wait_action


@pytest.mark.parametrize("servers", [8, 16])
def test_at_every_decision_the_rule_is_backfill_or_an_overlap_on_one_server(servers: int) -> None:
    """Where backfilling starts a job the rule starts the same; where it waits, the rule
    either waits or starts a job of at most one server's GPUs on one server whose GPUs are
    idle or hold only jobs that span servers; it does both on these episodes, and every job
    finishes."""
    env = ContentionEnv(num_jobs=40, num_servers=servers, placements=("lwf1", "ovl"))
    seen = {"backfill": 0, "overlap": 0, "wait": 0}
    for seed in (0, 1, 2):
        env.reset(seed=seed)
        while not env.done:
            a = exclusive_overlap_teacher(env)
            base = exclusive_backfill_teacher(env)
            sim = env.sim
            assert sim is not None
            if base != env.wait_action or not env.action_masks()[env.wait_action]:
                assert a == base
                seen["backfill"] += 1
            elif a == env.wait_action:
                seen["wait"] += 1
            else:
                assert a % env.C == 1
                job = env.window[a // env.C]
                before = [list(r) for r in sim.residents]
                env.step(a)
                assert len(job.gpus) == job.spec.num_gpus and len({g // 4 for g in job.gpus}) == 1
                assert all(all(j.multi for j, _ in before[g]) for g in job.gpus)
                seen["overlap"] += 1
                continue
            env.step(a)
        assert sim is not None
        assert all(r.finish_ms >= r.start_ms >= r.submit_ms for r in sim.result().records)
    assert min(seen.values()) > 0, seen


def test_the_rule_is_registered_and_needs_the_ovl_candidate() -> None:
    assert teacher("exclusive_overlap") is exclusive_overlap_teacher
    assert "exclusive_overlap" in CONTENTION_TEACHERS
    env = _env(span=True, placements=("lwf1", "ls"))
    with pytest.raises(ConfigError, match=r"'ovl', which is not among this env's placement"):
        exclusive_overlap_teacher(env)


def test_ovl_is_a_stack_placement() -> None:
    w = generate_ada_srsf(0, num_jobs=30, iterations_scale=1.0, arrival_window_ms=3_000)
    out = simulate(ClusterSpec(4, 4), w, "ovl_adasrsf", SimConfig())
    assert len(out.records) == 30 and np.isfinite(out.jcts_ms()).all()
