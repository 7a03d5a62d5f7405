"""The Contention-v0 rules that admit without GPU time-sharing (envs/gym/contention_env.py):
``exclusive`` and ``exclusive_backfill`` on a hand-built state, their invariants at every
decision of whole episodes, and the registry's names."""

from __future__ import annotations

import pytest

from envs.gym.contention_env import (
    CONTENTION_TEACHERS,
    ContentionEnv,
    exclusive_backfill_teacher,
    exclusive_easy_teacher,
    srsf_exclusive_teacher,
    srsf_teacher,
    teacher,
)
from envs.sim.errors import ConfigError
from envs.sim.models import REFERENCE_MODELS
from envs.sim.spec import JobSpec, Workload


def _workers(env: ContentionEnv) -> int:
    assert env.sim is not None
    return sum(len(r) for r in env.sim.residents)


def _hand_built(later: int = 400) -> ContentionEnv:
    """2 servers x 4 GPUs. At t=0 a 6-GPU job of 2,000 iterations starts (the only one
    queued); at t=1 ms a short 7-GPU job and a 2-GPU job of ``later`` iterations arrive. The
    7-GPU job is first in remaining-service order (7 x 10 iterations < 2 x ``later``), but only
    2 GPUs are idle."""
    model = REFERENCE_MODELS["resnet50"]
    jobs = (
        JobSpec(job_id=0, submit_ms=0.0, model=model, iterations=2000, num_gpus=6),
        JobSpec(job_id=1, submit_ms=1.0, model=model, iterations=10, num_gpus=7),
        JobSpec(job_id=2, submit_ms=1.0, model=model, iterations=later, num_gpus=2),
    )
    env = ContentionEnv(workloads=[Workload(jobs, name="hand")], num_servers=2,
                        placements=("lwf1", "ls"), J=4)  # fmt: skip
    env.reset(seed=0)
    assert [j.spec.job_id for j in env.window] == [0]
    env.step(srsf_teacher(env))  # start the 6-GPU job: 6 of 8 GPUs hold a worker
    assert [j.spec.job_id for j in env.window] == [1, 2] and _workers(env) == 6
    return env


def test_on_a_hand_built_state_exclusive_waits_and_backfill_starts_the_job_that_fits() -> None:
    env = _hand_built()
    assert srsf_teacher(env) == 0  # SRSF time-shares: the 7-GPU job on 5 busy GPUs
    assert srsf_exclusive_teacher(env) == env.wait_action  # it waits for the 7-GPU job
    a = exclusive_backfill_teacher(env)
    assert a == 1 * env.C + 0  # the 2-GPU job (window row 1), LWF-1
    env.step(a)
    assert _workers(env) == 8  # on the two idle GPUs: nothing shares a GPU
    assert env.sim is not None
    assert all(len(r) == 1 for r in env.sim.residents)


@pytest.mark.parametrize(("later", "starts"), [(400, True), (1999, True), (2100, False)])
def test_easy_backfills_only_a_job_that_ends_before_the_reservation(
    later: int, starts: bool
) -> None:
    """The 7-GPU job's reservation is at the 6-GPU job's end (its 2,000 iterations), when 8
    GPUs are free and 1 is left over: the 2-GPU job is backfilled only if its iterations end
    by then (the same model: fewer iterations); backfilling without a reservation starts it
    either way."""
    env = _hand_built(later)
    assert exclusive_easy_teacher(env) == (1 * env.C if starts else env.wait_action)
    assert exclusive_backfill_teacher(env) == 1 * env.C


@pytest.mark.parametrize("servers", [8, 16])
def test_backfill_at_every_decision_starts_the_first_job_that_fits_without_sharing(
    servers: int,
) -> None:
    """At every decision where waiting is valid: the rule starts the first window job whose
    GPUs are at most the idle ones, with LWF-1, and waits only when there is none; the
    cluster then never holds more workers than GPUs; where waiting is not valid it is SRSF's
    choice. Its episode finishes every job."""
    env = ContentionEnv(num_jobs=40, num_servers=servers, placements=("lwf1", "ls"))
    for seed in (0, 1, 2):
        env.reset(seed=seed)
        seen = {"start": 0, "wait": 0, "forced": 0}
        while not env.done:
            a = exclusive_backfill_teacher(env)
            mask = env.action_masks()
            if not mask[env.wait_action]:
                assert a == srsf_teacher(env)
                seen["forced"] += 1
            else:
                idle = env.cluster.num_gpus - _workers(env)
                ok = [j for j, job in enumerate(env.window)
                      if mask[j * env.C] and job.spec.num_gpus <= idle]  # fmt: skip
                assert a == (ok[0] * env.C if ok else env.wait_action)
                seen["start" if ok else "wait"] += 1
                if ok:  # no GPU newly shared: the workers stay within the GPUs
                    need = env.window[ok[0]].spec.num_gpus
                    assert _workers(env) + need <= env.cluster.num_gpus
            env.step(a)
        assert env.sim is not None
        assert all(r.finish_ms >= r.start_ms >= r.submit_ms for r in env.sim.result().records)
        assert seen["start"] > 0 and seen["wait"] > 0


def test_the_rules_are_registered_by_name() -> None:
    assert teacher("exclusive_backfill") is exclusive_backfill_teacher
    assert teacher("exclusive_easy") is exclusive_easy_teacher
    assert {"srsf", "exclusive", "exclusive_backfill", "exclusive_easy"} <= set(CONTENTION_TEACHERS)


def test_easy_never_shares_a_gpu_it_could_wait_for_and_starts_what_exclusive_starts() -> None:
    """At every decision where waiting is valid, EASY's start adds no worker beyond the GPUs,
    and where the exclusive rule starts a job EASY starts the same one; its episodes end with
    every job finished, between the exclusive rule's and backfilling's starts."""
    env = ContentionEnv(num_jobs=40, num_servers=8, placements=("lwf1", "ls"))
    backfills = 0
    for seed in (0, 1, 2):
        env.reset(seed=seed)
        while not env.done:
            a = exclusive_easy_teacher(env)
            if env.action_masks()[env.wait_action]:
                ex = srsf_exclusive_teacher(env)
                if ex != env.wait_action:
                    assert a == ex
                elif a != env.wait_action:
                    backfills += 1
                    need = env.window[a // env.C].spec.num_gpus
                    assert _workers(env) + need <= env.cluster.num_gpus
                    assert exclusive_backfill_teacher(env) != env.wait_action
            env.step(a)
        assert env.sim is not None
        assert all(r.finish_ms >= r.start_ms >= r.submit_ms for r in env.sim.result().records)
    assert backfills > 0


def test_a_rule_in_an_env_without_its_placement_is_one_clear_error() -> None:
    env = ContentionEnv(num_jobs=10, placements=("ls", "ff"))
    env.reset(seed=0)
    for rule in (srsf_teacher, srsf_exclusive_teacher, exclusive_backfill_teacher,
                 exclusive_easy_teacher):  # fmt: skip
        with pytest.raises(ConfigError, match=r"'lwf1', which is not among this env's placement"):
            rule(env)
