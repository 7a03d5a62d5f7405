"""One actor protocol and one episode loop (``envs/gym/episode.py``, ``envs/gym/actors.py``):
``run_episode`` is the hand-written loops it replaced, step for step; a rule written once acts
in ``evaluate.py``, as a behaviour-cloning teacher and as a validation baseline; an invalid
action is one error naming the action and the decision time."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from agents.episode_pg import teacher_data
from agents.episode_results import best_heuristic_jct, evaluate_allocator
from envs.gym import contention_env as ce
from envs.gym.actors import AllocatorActor, PlanRuleActor, RuleActor, rule_actor
from envs.gym.contention_env import ContentionEnv
from envs.gym.episode import (
    Actor,
    DecisionLog,
    InvalidActionError,
    Recorder,
    SlotPlanningActor,
    as_actor,
    run_episode,
)
from envs.gym.factory import EnvConfig, make_env
from envs.gym.heuristic import HeuristicDriver
from envs.gym.plan_env import PlanEnv
from envs.sim.elastic import allocators
from envs.sim.elastic.allocators import DRF, FIFO, JobState, allocator_from_label
from envs.sim.errors import ConfigError

TINY = EnvConfig(setting="tiny")


def _old_contention_loop(env: ContentionEnv, rule: Any, seed: int) -> tuple[float, int, dict]:
    """The loop ``evaluation/contention.py`` had (reset, step until the end, sum rewards)."""
    env.reset(seed=seed, options={"workload_seed": seed})
    ret, steps = 0.0, 0
    while True:
        _, r, term, trunc, info = env.step(rule(env))
        ret, steps = ret + r, steps + 1
        if term or trunc:
            return ret, steps, info


def test_a_contention_rule_through_run_episode_is_the_old_loop_golden() -> None:
    env = ContentionEnv(num_jobs=12)
    ret, steps, info = _old_contention_loop(env, ce.srsf_teacher, 3)
    run = run_episode(env, rule_actor(env, "srsf"), 3, options={"workload_seed": 3})
    assert (run.ret, run.steps, run.terminated, run.truncated) == (ret, steps, True, False)
    assert run.info["avg_jct_s"] == info["avg_jct_s"] and run.info["decisions"] == 12
    assert run.ret == pytest.approx(-run.info["avg_jct_s"])  # the env's contract
    assert run.info["avg_jct_s"] == GOLDEN_SRSF_AVG_JCT_S


#: ``srsf`` on ``ContentionEnv(num_jobs=12)``, workload seed 3, recorded with the loop
#: ``agents.episode_pg.run_episode(env, 3, act=...)`` had before ``envs/gym/episode.py``
GOLDEN_SRSF_AVG_JCT_S = 3.4958739999999993


class _Actions(Recorder):
    def __init__(self) -> None:
        self.actions: list[int] = []

    def before(self, obs: Any, action: int, view: Any) -> None:
        self.actions.append(action)


def test_an_allocator_through_run_episode_is_the_old_loop_whole_slots_or_step_by_step() -> None:
    env = make_env(TINY)
    driver = HeuristicDriver(DRF(), env)
    env.reset(seed=2)
    old_actions, steps = [], 0
    while True:  # the loop HeuristicDriver.finish and pretrain.collect had
        a = driver.act()
        old_actions.append(a)
        _, _, term, trunc, info = env.step(a)
        steps += 1
        if term or trunc:
            break
    actor = AllocatorActor(env, DRF)
    assert isinstance(actor, SlotPlanningActor)
    whole = run_episode(env, actor, 2)  # each slot in one call (ClusterEnv.plan_slot)
    rec = _Actions()
    each = run_episode(env, actor, 2, on_step=rec)  # step by step (a recorder sees each)
    assert rec.actions == old_actions
    for run in (whole, each):
        assert run.steps == steps and run.terminated
        assert run.info["avg_jct_slots"] == info["avg_jct_slots"]
    assert HeuristicDriver(DRF(), env).run_episode(2)["avg_jct_slots"] == info["avg_jct_slots"]
    halfway = HeuristicDriver(DRF(), env)  # play_on: from the middle of an episode
    env.reset(seed=2)
    for _ in range(len(old_actions) // 2):
        env.step(halfway.act())
    assert halfway.finish()["avg_jct_slots"] == info["avg_jct_slots"]


def test_one_allocator_label_acts_in_cluster_and_plan_envs_alike() -> None:
    """``esrtf`` through ``Cluster-v0`` and as the always-chosen plan of ``ClusterPlan-v0``:
    the same episode (the plan env's contract), by the same name."""
    cluster = make_env(EnvConfig(setting="tiny", reward="jct"))
    plan = PlanEnv(setting="tiny", plans=["drf", "esrtf"])
    a = run_episode(cluster, rule_actor(cluster, "esrtf"), 1)
    actor = rule_actor(plan, "esrtf")
    assert isinstance(actor, PlanRuleActor) and actor.index == 1
    b = run_episode(plan, actor, 1)
    assert b.info["avg_jct_slots"] == a.info["avg_jct_slots"]
    assert b.ret == pytest.approx(a.ret)
    with pytest.raises(ConfigError, match=r"'fifo' is not one of the env's plans"):
        rule_actor(plan, "fifo")
    with pytest.raises(ConfigError, match="unknown Contention-v0 teacher 'esrtf'; known: "):
        rule_actor(ContentionEnv(num_jobs=4), "esrtf")


def test_teacher_data_is_the_old_loop() -> None:
    env = ContentionEnv(num_jobs=8)
    obs, masks, acts = [], [], []
    for s in (1, 2):  # the loop agents.episode_pg.teacher_data had
        o, _ = env.reset(seed=s, options={"workload_seed": s})
        while True:
            a = ce.srsf_exclusive_teacher(env)
            obs.append(o)
            masks.append(env.action_masks())
            acts.append(a)
            o, _, term, trunc, _ = env.step(a)
            if term or trunc:
                break
    new = teacher_data(env, ce.srsf_exclusive_teacher, [1, 2])
    for got, want in zip(new, (np.array(obs), np.array(masks), np.array(acts)), strict=True):
        assert got.dtype == want.dtype and np.array_equal(got, want)
    actor_form = teacher_data(env, RuleActor(ce.srsf_exclusive_teacher), [1, 2])
    assert all(np.array_equal(x, y) for x, y in zip(actor_form, new, strict=True))


def test_the_decision_log_credits_each_slot_reward_to_its_decisions() -> None:
    env = make_env(TINY)
    log = DecisionLog()
    run = run_episode(env, AllocatorActor(env, DRF), 0, on_step=log)
    assert len(log) == len(log.returns) == len(log.masks) == run.steps
    assert all(m[a] for m, a in zip(log.masks, log.actions, strict=True))
    # every slot's reward counted once per slot: the sum over slots is the return
    firsts = [r for i, r in enumerate(log.returns) if i == 0 or log.returns[i - 1] != r]
    assert sum(firsts) == pytest.approx(run.ret)


# ------------------------------------------------------------------ a rule written once


def _toy_rule(view: Any) -> int:
    """Start the window's last job that fits, with the first placement candidate."""
    mask = view.action_masks()
    for j in reversed(range(len(view.window))):
        if mask[j * view.C]:
            return j * view.C
    return view.wait_action


def test_a_contention_rule_written_once_is_a_scheduler_a_teacher_and_a_baseline(
    tmp_path: Path,
) -> None:
    from evaluation.config import EvaluateConfig
    from evaluation.pipeline import evaluate
    from training.contention import rule_baselines

    ce.contention_teacher("toy_last")(_toy_rule)  # the registration
    try:
        rows = evaluate(  # evaluate.py "stacks=[contention:toy_last]"
            EvaluateConfig(stacks=["contention:toy_last"], seeds=[0], workers=1, plot=False),
            tmp_path / "r",
            {},
        )
        assert rows and all(r["stack"] == "contention:toy_last" for r in rows)
        small = ContentionEnv(num_jobs=8)
        _, masks, acts = teacher_data(small, ce.teacher("toy_last"), [1])  # a teacher
        assert len(acts) == 8 and all(masks[i][a] for i, a in enumerate(acts))
        base = rule_baselines(small, [1])  # train.py's baselines: every registered rule
        run = run_episode(small, rule_actor(small, "toy_last"), 1, options={"workload_seed": 1})
        assert base["toy_last"] == run.info["avg_jct_s"]
    finally:
        ce.CONTENTION_TEACHERS.pop("toy_last", None)


class NewestFirst(FIFO):
    """A toy allocator: the newest job first, each up to its caps."""

    name = "toy_newest"

    def _key(self, job: JobState) -> tuple[float, ...]:
        return (-job.arrival, job.job_id)


def test_an_allocator_written_once_is_a_scheduler_a_teacher_and_a_baseline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from evaluation.config import (
        ClusterConfig,
        DL2Config,
        ElasticConfig,
        EvaluateConfig,
        WorkloadConfig,
    )
    from evaluation.pipeline import evaluate
    from pretrain.dataset import collect
    from training.baselines import baseline_jcts

    monkeypatch.setitem(allocators.ALLOCATORS, "toy_newest", NewestFirst)  # the registration
    [expected] = evaluate_allocator(NewestFirst, TINY, [0])
    assert baseline_jcts(["toy_newest"], TINY, [0]) == {"toy_newest": expected.avg_jct}
    data = collect("toy_newest", TINY, [0])  # a teacher
    [result] = data.meta["teacher_results"]
    assert data.meta["teacher"] == "toy_newest" and result["avg_jct_slots"] == expected.avg_jct
    dl2 = DL2Config(num_jobs=12, max_arrivals_per_slot=2, max_epochs=3000, max_workers=8, max_ps=8)
    cfg = EvaluateConfig(  # (tests/evaluation/test_evaluation_policy.py's tiny-sized dl2 run)
        cluster=ClusterConfig(num_servers=4, gpus_per_server=2),
        workload=WorkloadConfig(kind="dl2", dl2=dl2),
        elastic=ElasticConfig(through_env=True),
        stacks=["elastic:toy_newest"],
        seeds=[0],
        workers=1,
        plot=False,
    )
    [row] = evaluate(cfg, tmp_path / "r", {})  # evaluate.py "stacks=[elastic:toy_newest]"
    env_config = EnvConfig(setting="tiny", overrides={"J": 20}, max_slots=100_000)
    [through_env] = evaluate_allocator(NewestFirst, env_config, [0])
    assert row["avg_jct_s"] == pytest.approx(through_env.avg_jct * 1200.0)  # slots of 1200 s


def test_best_heuristic_jct_is_the_lowest_of_each_label_through_the_env() -> None:
    labels = ["drf", "esrtf", "optimus"]
    each = {
        label: evaluate_allocator(functools.partial(allocator_from_label, label), TINY, [3])[0]
        for label in labels
    }
    assert len({r.avg_jct for r in each.values()}) > 1  # (the minimum is a choice here)
    assert best_heuristic_jct(labels, TINY, 3) == min(r.avg_jct for r in each.values())
    assert best_heuristic_jct([], TINY, 3) == float("inf")
    with pytest.raises(ConfigError, match="nope"):
        best_heuristic_jct(["nope"], TINY, 3)


# ------------------------------------------------------------------ the protocol


class _FirstInvalid:
    """Acts validly until ``at`` decisions, then takes the first masked-out action."""

    def __init__(self, rule: Any, at: int) -> None:
        self.rule, self.at, self.n = rule, at, 0
        self.bad: tuple[int, Any] | None = None

    def reset(self, seed: int | None) -> None:
        self.n = 0

    def act(self, obs: Any, view: Any) -> int:
        self.n += 1
        if self.n <= self.at:
            return int(self.rule(view))
        a = int(np.flatnonzero(~view.action_masks())[0])
        self.bad = (a, view.slot if hasattr(view, "slot") else view.sim.now)
        return a


def test_an_invalid_action_is_one_error_naming_the_action_and_the_time() -> None:
    env = ContentionEnv(num_jobs=8)
    actor = _FirstInvalid(ce.srsf_teacher, 3)
    with pytest.raises(InvalidActionError) as err:
        run_episode(env, actor, 1)
    assert actor.bad is not None
    a, t = actor.bad
    assert str(err.value) == (
        f"action {a} was refused at t={float(t)} ms (invalid under the env's action mask)"
    )
    cluster = make_env(TINY)
    driver = HeuristicDriver(DRF(), cluster)
    actor = _FirstInvalid(lambda _view: driver.act(), 5)
    with pytest.raises(InvalidActionError) as err:
        run_episode(cluster, actor, 0)
    assert actor.bad is not None
    assert str(err.value).startswith(f"action {actor.bad[0]} was refused at slot {actor.bad[1]} ")
    # without strict, Cluster-v0's own rule: a counted no-op
    run = run_episode(cluster, _FirstInvalid(lambda _view: driver.act(), 5), 0, strict=False)
    assert cluster.invalid_actions >= 1 and run.steps > 0


def test_older_actor_forms_are_adapted_and_other_things_refused() -> None:
    calls: list[Any] = []

    def old(env: Any, obs: Any) -> int:
        calls.append(env)
        return int(ce.srsf_teacher(env))

    env = ContentionEnv(num_jobs=4)
    actor = as_actor(old)
    assert isinstance(actor, Actor) and not isinstance(actor, SlotPlanningActor)
    run_episode(env, old, 0)
    assert calls and all(c is env for c in calls)
    with pytest.raises(ConfigError, match=r"an actor has reset\(seed\) and act\(obs, view\)"):
        as_actor(42)  # type: ignore[arg-type]
