"""Expert iteration over the slot's plan (:mod:`agents.expert_iteration`): a plan's value is
the return its continuation really gets, the search leaves the env as it was, the distilled
policy is bit-reproducible from its seed (whatever the worker count), the distillation takes
the search's best plans, and a search that cannot run is one clear error before anything runs."""

from __future__ import annotations

import pickle
import re
from typing import Any

import numpy as np
import pytest
import torch as th

from agents.config import AgentConfig
from agents.episode_pg import EpisodePGConfig, plan_net
from agents.expert_iteration import (
    ExpertConfig,
    ExpertIteration,
    Labelled,
    action_values,
    build_expert,
    plan_values,
    search_workload,
)
from envs.gym.plan_env import PlanEnv
from envs.sim.errors import ConfigError


@pytest.fixture(autouse=True)
def _one_torch_thread() -> Any:
    """Small networks: one thread (two spin against each other on a loaded 2-core machine)."""
    n = th.get_num_threads()
    th.set_num_threads(1)
    yield
    th.set_num_threads(n)


PLANS = ["esrtf", "esrtf(efficiency=0.7)", "optimus", "drf"]


def _env(setting: str = "tiny") -> PlanEnv:
    config = {"setting": setting, "reward": "jct", "features": "extended"}
    return PlanEnv(config=config, plans=PLANS)


def _run_to_end(env: PlanEnv, first: int, rule: Any) -> float:
    obs, r, term, trunc, _ = env.step(first)
    total = float(r)
    while not (term or trunc):
        obs, r, term, trunc, _ = env.step(rule(env, obs))
        total += float(r)
    return total


def test_a_plans_value_is_the_return_its_continuation_gets_and_the_env_is_untouched() -> None:
    env = _env()
    env.reset(seed=2000)
    for _ in range(3):
        env.step(0)
    before = pickle.dumps(env)

    def drf(_e: Any, _o: Any) -> int:
        return 3

    values = plan_values(env, drf)
    assert pickle.dumps(env) == before  # the search stepped copies only
    for k in range(env.K):  # each value: plan k now, DRF to the end, stepped for real
        e = pickle.loads(before)
        assert values[k] == pytest.approx(_run_to_end(e, k, drf), rel=1e-12)
    # the return from the slot on is minus the job-slots still to come: every value is < 0
    assert (values < 0).all()
    # horizon 1: the tried plan's slot and one slot of the base, no more
    one = plan_values(env, drf, horizon=1)
    for k in range(env.K):
        e = pickle.loads(before)
        _, r1, *_ = e.step(k)
        _, r2, *_ = e.step(3)
        assert one[k] == pytest.approx(float(r1) + float(r2), rel=1e-12)


def _learner(seed: int, workers: int = 1, **expert: Any) -> ExpertIteration:
    env = _env("tiny")
    th.manual_seed(seed)
    net = plan_net("set", env, 16)
    cfg = EpisodePGConfig(seed=seed, groups=2, hidden=16, workers=workers, lr=1e-3)
    return ExpertIteration(env, net, cfg, ExpertConfig(states=4, epochs=3, **expert))


def _weights(pg: ExpertIteration) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in pg.net.state_dict().items()}


def test_expert_iteration_is_bit_reproducible_from_its_seed_on_any_worker_count() -> None:
    runs = []
    for workers in (1, 1, 2):
        pg = _learner(5, workers)
        stats: list[dict[str, float]] = []
        try:
            pg.learn(2, lambda _i, st, out=stats: out.append(st))
        finally:
            pg.close()
        runs.append((_weights(pg), stats, pg.data))
    (w0, s0, d0), *others = runs
    for w, s, d in others:
        assert all(np.array_equal(w0[k], w[k]) for k in w0)
        assert s == s0
        assert len(d) == len(d0) == 2
        assert all(np.array_equal(a, b) for x, y in zip(d0, d, strict=True)
                   for a, b in zip(x[0], y[0], strict=True))  # fmt: skip
    assert s0[0]["decisions"] == 8  # 2 workloads x 4 searched slots
    other = _learner(6)
    other.learn(1)
    assert not all(np.array_equal(w0[k], v) for k, v in _weights(other).items())


def test_each_searched_slot_is_labelled_with_the_plans_within_the_tie_margin() -> None:
    env = _env("medium")
    th.manual_seed(0)
    net = plan_net("set", env, 16)
    found = search_workload(net, (env, 2000, 1, ExpertConfig(states=6, tol=0.0)))
    assert isinstance(found, Labelled) and found.searched == 6
    assert len(found.obs) + found.ties == 6 and len(found.obs) >= 1
    for mask, regret in zip(found.best, found.regret, strict=True):
        assert mask.any() and not mask.all()
        assert regret >= 0.0  # the policy's plan is never better than the search's best


def test_the_distillation_takes_the_searchs_best_plans() -> None:
    pg = _learner(0)
    rng = np.random.default_rng(0)
    env = pg.env
    obs, _ = env.reset(seed=2000)
    observations, best = [], []
    for _ in range(40):  # a labelled set: at each of 40 slots the best plan is 2 (Optimus)
        observations.append(obs)
        m = np.zeros(env.K, dtype=bool)
        m[2] = True
        best.append(m)
        obs, _, term, trunc, _ = env.step(int(rng.integers(env.K)))
        if term or trunc:
            break
    pg.expert.epochs = 60
    pg.data.append((observations, [np.ones(env.K, dtype=bool)] * len(best), best))
    out = pg.distil()
    assert out["accuracy"] == 1.0
    assert all(pg.net.act(env, o) == 2 for o in observations)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"states": 0}, "search budget"),
        ({"horizon": -1}, "horizon must be >= 0"),
        ({"horizon": 2000}, "past the episode"),
        ({"base": "srtf"}, "neither 'policy' nor a plan"),
        ({"epochs": 0}, "epochs must be >= 1"),
        ({"tol": float("nan")}, "tol must be in [0, 1)"),
        ({"keep": -1}, "keep must be >= 0"),
        ({"teacher": "oracle"}, "teacher must be one of future, known, got 'oracle'"),
        ({"also": ["drf"]}, "needs agent.expert.teacher=known"),
        ({"teacher": "known"}, "base must be 'hold' (the policy's plan held) or a plan label"),
        ({"teacher": "known", "base": "hold", "horizon": 3}, "set agent.expert.horizon=0"),
        ({"teacher": "known", "base": "hold", "also": ["srtf"]}, "also: 'srtf' is not a plan"),
        ({"teacher": "known", "base": "hold", "also": ["drf", "drf"]}, "names a plan twice"),
        ({"teacher": "known", "base": "sjf"}, "search base 'sjf' is neither"),
    ],
)
def test_a_search_that_cannot_run_is_one_clear_error_before_anything_runs(
    change: dict[str, Any], message: str
) -> None:
    agent = AgentConfig(algo="expert_iteration")
    agent.expert = ExpertConfig(**change)
    env = _env()
    with pytest.raises(ConfigError, match=re.escape(message)):
        build_expert(agent, env, plan_net("set", env, 16), EpisodePGConfig())


def test_a_plan_label_as_the_base_follows_that_constant_plan() -> None:
    env = _env()
    th.manual_seed(1)
    net = plan_net("set", env, 16)
    found = search_workload(net, (env, 2001, 3, ExpertConfig(states=10_000, base="drf", tol=0.0)))
    # every slot of the policy's episode searched; each label is the best set of plan_values
    # with DRF (plan 3) as the continuation, at the policy's own states
    expected = []
    obs, _ = env.reset(seed=2001)
    while True:
        v = plan_values(env, lambda _e, _o: 3)
        if not (v == v.max()).all():
            expected.append(v == v.max())
        obs, _, term, trunc, _ = env.step(net.act(env, obs))
        if term or trunc:
            break
    assert found.searched == len(expected) + found.ties
    assert [m.tolist() for m in found.best] == [m.tolist() for m in expected]


def _known_totals(env: PlanEnv, held: list[int]) -> np.ndarray:
    """Each plan's total JCT of the known jobs, by hand: on copies of the inner env that forget
    the jobs still to come, the plan now and then each plan of ``held`` for every later slot,
    the lowest of those totals."""
    allocators = [d.allocator for d in env.drivers]
    out = np.full(env.K, np.inf)
    for k in range(env.K):
        for h in held:
            copy = pickle.loads(pickle.dumps(env.inner))
            copy.forget_future()
            *_, term, trunc, _, _ = copy.plan_slot(allocators[k])
            while not (term or trunc):
                *_, term, trunc, _, _ = copy.plan_slot(allocators[h])
            out[k] = min(out[k], sum(copy.episode_jcts()[0]))
    return out


def test_the_known_teacher_labels_by_the_known_jobs_as_the_released_search_values_them() -> None:
    env = _env("tiny")
    th.manual_seed(2)
    net = plan_net("set", env, 16)
    cfg = ExpertConfig(states=10_000, teacher="known", base="hold", also=["drf"], tol=0.0)
    found = search_workload(net, (env, 2004, 3, cfg))
    # every slot of the policy's episode searched; each label is the best set of the hand-run
    # known-jobs totals: the policy's plan held, and DRF (plan 3) held, the lower of the two
    expected, differ = [], 0
    obs, _ = env.reset(seed=2004)
    while True:
        k0 = net.act(env, obs)
        totals = _known_totals(env, [k0, 3])
        if not (totals == totals.min()).all():
            expected.append(totals == totals.min())
            future = plan_values(env, net.act)
            differ += not np.array_equal(expected[-1], future == future.max())
        obs, _, term, trunc, _ = env.step(k0)
        if term or trunc:
            break
    assert found.searched == len(expected) + found.ties and expected
    assert [m.tolist() for m in found.best] == [m.tolist() for m in expected]
    # the future teacher (jobs to come in view, the policy as the base) labels some slot
    # otherwise: the check has power
    assert differ > 0


# ------------------------------------------------------------------------ dlsched/Contention-v0
def _contention(servers: int = 4) -> Any:
    from envs.gym.contention_env import ContentionConfig

    return ContentionConfig(scale="small", num_jobs=10, num_servers=servers).make()


def test_in_contention_an_actions_value_is_the_return_its_continuation_gets() -> None:
    from envs.gym.contention_env import srsf_exclusive_teacher

    env = _contention()
    env.reset(seed=3)
    for _ in range(4):
        env.step(srsf_exclusive_teacher(env))
    before = pickle.dumps(env)
    valid = np.flatnonzero(env.action_masks()).tolist()

    def rule(e: Any, _o: Any) -> int:
        return srsf_exclusive_teacher(e)

    values = action_values(env, rule)
    assert pickle.dumps(env) == before and len(values) == len(valid) >= 2
    for a, v in zip(valid, values, strict=True):
        e = pickle.loads(before)
        _, r, term, trunc, _ = e.step(a)
        total = float(r) + (0.0 if term or trunc else _run_to_end(e, rule(e, None), rule))
        assert v == pytest.approx(total, rel=1e-12)


def test_in_contention_the_search_tries_the_policys_top_candidates_and_reproduces() -> None:
    from agents.episode_pg import contention_net

    env = _contention()
    th.manual_seed(0)
    net = contention_net("set", env, 16)
    cfg = ExpertConfig(states=5, candidates=3, tol=0.0)
    found = search_workload(net, (env, 7, 11, cfg))
    again = search_workload(net, (env, 7, 11, cfg))
    assert found.searched == 5
    assert [b.tolist() for b in found.best] == [b.tolist() for b in again.best]
    for mask, best in zip(found.masks, found.best, strict=True):
        assert best.any() and not (best & ~mask).any()  # only valid actions are ever best
        assert best.sum() <= 3
    pg = ExpertIteration(env, net, EpisodePGConfig(seed=2, groups=1, hidden=16, lr=1e-3), cfg)
    pg.learn(1)
    assert pg.iteration == 1 and len(pg.data) == 1
    # the same weights act on 4 and 16 servers
    for servers in (4, 16):
        e = _contention(servers)
        obs, _ = e.reset(seed=1)
        assert e.action_masks()[net.act(e, obs)]


def test_in_contention_a_horizon_or_an_unknown_rule_is_refused() -> None:
    with pytest.raises(ConfigError, match="Contention-v0 has teacher=future only"):
        ExpertConfig(teacher="known", base="hold").check(contention=True)
    env = _contention()
    with pytest.raises(ConfigError, match="run to the episode's end"):
        ExpertConfig(horizon=5).check(env)
    with pytest.raises(ConfigError, match="unknown Contention-v0 teacher 'nope'"):
        ExpertConfig(base="nope").check(contention=True)
    ExpertConfig(base="exclusive").check(env)


def test_the_anchor_keeps_the_policys_own_unlabelled_decisions() -> None:
    env = _env("medium")
    th.manual_seed(0)
    net = plan_net("set", env, 16)
    found = search_workload(net, (env, 2000, 1, ExpertConfig(states=6, anchor=1.0)))
    none = search_workload(net, (env, 2000, 1, ExpertConfig(states=6)))
    assert none.kept == [] and [b.tolist() for b in none.best] == [b.tolist() for b in found.best]
    # every decision of the policy's episode is either labelled or kept, with its own action
    obs, _ = env.reset(seed=2000)
    episode = 0
    while True:
        a = net.act(env, obs)
        episode += 1
        obs, _, term, trunc, _ = env.step(a)
        if term or trunc:
            break
    assert len(found.kept) + len(found.obs) == episode
    assert all(net.act(env, o) == a for o, _m, a in found.kept[:20])
    with pytest.raises(ConfigError, match="anchor must be finite and >= 0"):
        ExpertConfig(anchor=float("inf")).check()
