"""The decision-time plan search (:mod:`agents.plan_search`): its copies know only the jobs
that have arrived (an oracle run on those jobs alone gives the same JCTs; two workloads that
agree up to a slot get the same decisions up to it), a plan's total is the total JCT its
rollout ends with, the network's plan is kept unless another is better, runs are
deterministic, the released ``policies/general_search`` is ``policies/general``'s weights
with the search recorded, and bad settings are one clear error."""

from __future__ import annotations

import math
from dataclasses import replace
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from agents.episode_results import run_episode
from agents.plan_policy import PlanPolicy
from agents.plan_search import (
    PlannedSequence,
    PlanSearch,
    SearchPlanActor,
    block_totals,
    plan_totals,
)
from envs.gym.cluster_env import ClusterEnv
from envs.gym.factory import EnvConfig, coerce_env_config, make_env
from envs.gym.plan_env import SlotPlanner
from envs.sim import ConfigError
from envs.sim.elastic.allocators import make_allocator, parse_allocator_label

ROOT = Path(__file__).resolve().parents[2]
GENERAL = ROOT / "policies" / "general" / "policy.npz"
SEARCH = ROOT / "policies" / "general_search" / "policy.npz"
PLANS = ("esrtf", "optimus", "drf", "esrtf_load")


def _config(setting: str = "medium", **overrides: int) -> EnvConfig:
    return EnvConfig(setting=setting, reward="jct", overrides=dict(overrides) or None)


def _allocators() -> list:
    return [make_allocator(*parse_allocator_label(p)) for p in PLANS]


def _advance(env: ClusterEnv, allocator: object, slots: int) -> None:
    for _ in range(slots):
        *_, term, trunc, _, _ = env.plan_slot(allocator)  # type: ignore[arg-type]
        assert not (term or trunc)


def _first_slot_with_future(env: ClusterEnv, allocator: object) -> int:
    """Advance ``env`` (with ``allocator``) to the first slot where some job has arrived and
    some has not; its index."""
    while True:
        sim = env._require_sim()
        if 0 < sim._next_arrival < len(sim.jobs) and sim.t > 0:
            return sim.t
        _advance(env, allocator, 1)


def test_a_lookahead_copy_runs_exactly_the_jobs_that_have_arrived() -> None:
    """Oracle: the known copy at slot t, run to its end by a plan, gives each known job the
    JCT that a fresh run of only those jobs gives under the same plans."""
    config = _config()
    esrtf, drf = (make_allocator(n) for n in ("esrtf", "drf"))
    env = make_env(config)
    env.reset(seed=100)
    t = _first_slot_with_future(env, esrtf)
    _advance(env, esrtf, 3)
    arrived = env._require_sim()._next_arrival
    assert 0 < arrived < len(env.jobs)
    known = env.lookahead()()
    assert [j.job_id for j in known.jobs] == [j.job_id for j in env._require_sim().jobs[:arrived]]
    assert len(env.jobs) > len(known.jobs)  # the run itself keeps every job
    done = False
    while not done:
        *_, term, trunc, _, _ = known.plan_slot(drf)
        done = term or trunc
    got = known.episode_jcts()[0]
    # the same jobs alone, the same plans: esrtf to slot t + 3, then drf
    alone = ClusterEnv(env.setting, reward="jct", jobs=known.jobs, speed=env.speed)
    alone.reset(seed=0)
    _advance(alone, esrtf, t + 3 - alone._require_sim().t)
    done = False
    while not done:
        *_, term, trunc, _, _ = alone.plan_slot(drf)
        done = term or trunc
    assert got == pytest.approx(alone.episode_jcts()[0], rel=1e-12)
    # the clairvoyant copy keeps every job
    assert len(env.lookahead(known_only=False)().jobs) == len(env.jobs)


def test_plan_totals_are_the_total_jct_of_each_plans_rollout() -> None:
    """Each total equals a hand-run rollout of that plan then the continuation; equal plans
    (the same allocator twice) give equal totals; the env itself is not stepped."""
    env = make_env(_config())
    env.reset(seed=101)
    _first_slot_with_future(env, make_allocator("esrtf"))
    allocators = _allocators()
    drf = allocators[2]
    before = (env._require_sim().t, env._require_sim()._next_arrival)
    totals = plan_totals(env, [*allocators, allocators[1]], lambda _e, _o: drf)
    assert (env._require_sim().t, env._require_sim()._next_arrival) == before
    assert totals[-1] == totals[1]
    for k, allocator in enumerate(allocators):
        copy = env.lookahead()()
        *_, term, trunc, _, _ = copy.plan_slot(allocator)
        while not (term or trunc):
            *_, term, trunc, _, _ = copy.plan_slot(drf)
        assert totals[k] == sum(copy.episode_jcts()[0])
    assert len(set(totals.tolist())) > 1  # the plans do differ here: the check has power
    # copies that write no observation: the same totals, to the bit
    blind = plan_totals(env, [*allocators, allocators[1]], lambda _e, _o: drf, observe=False)
    assert blind.tolist() == totals.tolist()


def test_with_also_a_plans_total_is_the_best_of_its_continuations() -> None:
    """Oracle: with ``also``, each plan's total is the lowest of its hand-run rollouts under
    each continuation; it is never above the single-continuation total, and here below it for
    some plan (so the check has power)."""
    env = make_env(_config())
    env.reset(seed=101)
    _first_slot_with_future(env, make_allocator("esrtf"))
    allocators = _allocators()
    drf, esrtf_load = allocators[2], allocators[3]
    conts = [lambda _e, _o: drf, lambda _e, _o: esrtf_load, lambda _e, _o: allocators[1]]
    single = plan_totals(env, allocators, conts[0], observe=False)
    multi = plan_totals(env, allocators, conts[0], also=conts[1:], observe=False)
    for k, allocator in enumerate(allocators):
        ends = []
        for held in (drf, esrtf_load, allocators[1]):
            copy = env.lookahead(observe=False)()
            *_, term, trunc, _, _ = copy.plan_slot(allocator)
            while not (term or trunc):
                *_, term, trunc, _, _ = copy.plan_slot(held)
            ends.append(sum(copy.episode_jcts()[0]))
        assert multi[k] == min(ends)
    assert (multi <= single).all() and (multi < single).any()


def later_jobs_longer(jobs: tuple) -> tuple[int, tuple]:
    """A slot ``T`` three quarters through ``jobs``' arrival slots, and ``jobs`` with every job
    arriving at ``T`` or later four times as long (the same workload until ``T``)."""
    arrivals = sorted({j.arrival_slot for j in jobs})
    T = arrivals[3 * len(arrivals) // 4]
    later = tuple(
        replace(j, num_epochs=j.num_epochs * 4.0, real_num_epochs=j.real_num_epochs * 4.0)
        if j.arrival_slot >= T
        else j
        for j in jobs
    )
    return T, later


def _decisions(jobs: tuple, search: PlanSearch, before: int) -> list[tuple[int, int, list]]:
    """The search's plan and plan totals at every slot before ``before`` on ``jobs`` (DL²'s
    tiny setting)."""
    policy = PlanPolicy.load(GENERAL)
    config = coerce_env_config(policy.env)
    setting = make_env(replace(config, setting="tiny")).setting
    env = ClusterEnv(setting, reward="jct", jobs=jobs, features=config.features)
    actor = SearchPlanActor(env, policy.chooser(), policy.plans, search)
    obs, _ = env.reset(seed=0)
    out = []
    while env._t < before:
        allocator = actor.allocator_for(env, obs)
        assert actor.last_totals is not None
        out.append((env._t, actor.chosen[-1], actor.last_totals.tolist()))
        obs, _, term, trunc, _, _ = env.plan_slot(allocator)
        if term or trunc:
            break
    return out


def test_the_known_search_reads_nothing_about_jobs_still_to_arrive() -> None:
    """Two workloads that agree on every job arriving before slot T (the later ones are four
    times as long) get the same plan totals and decisions at every slot before T, to the
    bit; the clairvoyant search, which sees the later jobs, values the plans differently
    before T (so the check has power)."""
    env = make_env(_config("tiny"))
    env.reset(seed=102)
    jobs = env.jobs
    T, later = later_jobs_longer(jobs)
    assert later != jobs
    known = PlanSearch()
    a, b = _decisions(jobs, known, T), _decisions(later, known, T)
    assert a == b and len(a) > 3
    seer = PlanSearch(future=True)
    assert _decisions(jobs, seer, T) != _decisions(later, seer, T)
    # the receding-horizon search too: its planned sequence is made of known-jobs rollouts
    planned = PlanSearch(base="planned", blocks=(1, 4, 0))
    a, b = _decisions(jobs, planned, T), _decisions(later, planned, T)
    assert a == b and len(a) > 3
    seer = replace(planned, future=True)
    assert _decisions(jobs, seer, T) != _decisions(later, seer, T)


def test_the_network_keeps_its_plan_unless_another_is_better() -> None:
    """With a margin no plan can beat (tol close to 1) the search never overrules the
    network, and the run equals the network alone, decision for decision and figure for
    figure; with the default margin it overrules it on some slots and the run is
    deterministic."""
    policy = PlanPolicy.load(GENERAL)
    config = replace(coerce_env_config(policy.env), setting="tiny")
    env = make_env(config)
    plain = policy.actor(env)
    alone = run_episode(env, plain, 100)
    shy = SearchPlanActor(env, policy.chooser(), policy.plans, PlanSearch(tol=0.999))
    assert run_episode(env, shy, 100).avg_jct == alone.avg_jct
    assert shy.chosen == plain.chosen and shy.changed == 0 and shy.searched == len(plain.chosen)
    runs = []
    for _ in range(2):
        actor = SearchPlanActor(env, policy.chooser(), policy.plans, PlanSearch())
        runs.append((run_episode(env, actor, 100).avg_jct, actor.chosen, actor.changed))
    assert runs[0] == runs[1] and runs[0][2] > 0
    # with held heuristics as further continuations: deterministic too, and it acts differently
    also = PlanSearch(also=("esrtf_load", "esrtf(backfill=True)", "optimus"))
    wider = []
    for _ in range(2):
        actor = SearchPlanActor(env, policy.chooser(), policy.plans, also)
        wider.append((run_episode(env, actor, 100).avg_jct, actor.chosen, actor.changed))
    assert wider[0] == wider[1] and wider[0][1] != runs[0][1]
    # a plan label as the base, and the network itself
    for base in ("drf", "policy"):
        actor = SearchPlanActor(env, policy.chooser(), policy.plans, PlanSearch(base=base))
        result = run_episode(env, actor, 100)
        assert result.unfinished == 0 and math.isfinite(result.avg_jct)


def test_the_released_search_policy_is_the_general_weights_with_a_search() -> None:
    """``policies/general_search``: the same arrays as ``policies/general``, bit for bit, its
    training record, and the receding-horizon search (``base: planned``, blocks of 1, 4, 16
    slots and to the end, six extra plans, each job of the window first for 4 or 16 slots),
    recorded with where it comes from."""
    a, b = np.load(GENERAL), np.load(SEARCH)
    assert set(a.files) == set(b.files)
    for k in a.files:
        if k != "__meta__":
            assert np.array_equal(a[k], b[k]) and a[k].dtype == b[k].dtype, k
    general, searched = PlanPolicy.load(GENERAL), PlanPolicy.load(SEARCH)
    assert general.search is None and searched.search == PlanSearch(
        base="planned",
        blocks=(1, 4, 16, 0),
        extra=(
            "esrtf(efficiency=0.6)",
            "esrtf(efficiency=0.5)",
            "esrtf(backfill=True, efficiency=0.6)",
            "esrtf(backfill=True, efficiency=1.0)",
            "esrtf(head=1)",
            "esrtf(backfill=True, head=1)",
        ),
        boost=(4, 16),
    )
    assert searched.meta is not None and general.meta is not None
    assert searched.meta["training"] == general.meta["training"]
    assert searched.meta["derived"]["from"].endswith("general")
    env = make_env(replace(coerce_env_config(searched.env), setting="tiny"))
    assert isinstance(searched.actor(env), SearchPlanActor)


def test_bad_search_settings_are_one_clear_error(tmp_path: Path) -> None:
    from agents.policy_format import with_meta

    env = make_env(_config("tiny"))
    labels = SlotPlanner(env).labels
    with pytest.raises(ConfigError, match="neither one of hold, policy, planned nor a plan"):
        PlanSearch(base="nope").check(labels)
    for tol in (float("nan"), -0.1, 1.0, float("inf")):
        with pytest.raises(ConfigError, match="tol"):
            PlanSearch(tol=tol).check(labels)
    bad = tmp_path / "policy.npz"
    with_meta(GENERAL, bad, {"search": {"base": "hold", "depth": 2}})
    with pytest.raises(ConfigError, match=r"policy\.npz: unknown search key\(s\) depth"):
        PlanPolicy.load(bad)
    with_meta(GENERAL, bad, {"search": {"base": "fifo"}})
    with pytest.raises(ConfigError, match=r"policy\.npz: search base 'fifo'"):
        PlanPolicy.load(bad)
    for also, why in (
        ("drf", "also must be a list of plan labels"),
        (["drf", "fifo"], "also: 'fifo' is not a plan of the policy"),
        (["drf", "drf"], "also names a plan twice"),
        (3, "also must be a list of plan labels"),
    ):
        with_meta(GENERAL, bad, {"search": {"base": "hold", "also": also}})
        with pytest.raises(ConfigError, match=rf"policy\.npz: search {why}"):
            PlanPolicy.load(bad)
    # a search without ``also`` records none (files written before it read the same)
    assert "also" not in PlanSearch().describe()
    assert PlanSearch.of(PlanSearch(also=("drf",)).describe()) == PlanSearch(also=("drf",))
    env.reset(seed=0)
    env.step(0 if env.action_masks()[0] else int(np.flatnonzero(env.action_masks())[0]))
    if not env.slot_untouched():
        with pytest.raises(ConfigError, match="nothing placed yet"):
            plan_totals(env, _allocators(), lambda _e, _o: _allocators()[0])


def test_release_policy_search_writes_the_same_weights_with_a_search(tmp_path: Path) -> None:
    """``tools/release_policy.py --search BASE SRC OUT``: OUT's arrays are SRC's, its search
    the one asked for; an unknown base is one line on exit, and nothing is written."""
    import sys

    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import release_policy
    finally:
        sys.path.pop(0)
    given = ["--search", "drf", "--tol", "0.01", str(GENERAL.parent), str(tmp_path / "a")]
    release_policy.main([*given, "--also", "optimus", "esrtf_load"])
    made = PlanPolicy.load(tmp_path / "a" / "policy.npz")
    assert made.search == PlanSearch(base="drf", tol=0.01, also=("optimus", "esrtf_load"))
    assert made.meta is not None and "--search drf --tol 0.01" in made.meta["derived"]["command"]
    assert "--also optimus esrtf_load" in made.meta["derived"]["command"]
    a, b = np.load(GENERAL), np.load(tmp_path / "a" / "policy.npz")
    assert all(np.array_equal(a[k], b[k]) for k in a.files if k != "__meta__")
    with pytest.raises(SystemExit, match="search base 'nope' is neither"):
        release_policy.main(["--search", "nope", str(GENERAL.parent), str(tmp_path / "b")])
    assert not (tmp_path / "b").exists()
    # --future: the clairvoyant search, and the file says it is a measurement
    release_policy.main(["--search", "hold", "--future", str(GENERAL.parent), str(tmp_path / "f")])
    clairvoyant = PlanPolicy.load(tmp_path / "f" / "policy.npz")
    assert clairvoyant.search == PlanSearch(future=True)
    assert clairvoyant.meta is not None
    assert "not a scheduler" in clairvoyant.meta["derived"]["what"]
    # --extra: plans only the search tries, recorded
    given = ["--search", "planned", str(GENERAL.parent), str(tmp_path / "e"), "--blocks", "1", "0"]
    release_policy.main([*given, "--extra", *EXTRA])
    extra = PlanPolicy.load(tmp_path / "e" / "policy.npz")
    assert extra.search == PlanSearch(base="planned", blocks=(1, 0), extra=EXTRA)
    release_policy.main([*given[:3], str(tmp_path / "g"), *given[4:], "--boost", "4", "16"])
    boosted = PlanPolicy.load(tmp_path / "g" / "policy.npz")
    assert boosted.search == PlanSearch(base="planned", blocks=(1, 0), boost=(4, 16))
    out = str(tmp_path / "d")
    with pytest.raises(SystemExit, match="extra: 'drf' is already a plan"):
        release_policy.main(["--search", "hold", str(GENERAL.parent), out, "--extra", "drf"])
    assert not (tmp_path / "d").exists()


def test_a_planned_sequence_writes_blocks_over_the_slots_ahead() -> None:
    """Hand oracle of :class:`PlannedSequence`: a block over slots 7-9 leaves slot 10 on the
    plan it had; a block to the end replaces everything from its first slot."""
    plan = PlannedSequence(5, 2)
    assert [plan.at(t) for t in (5, 6, 100)] == [2, 2, 2]
    plan.write(7, 9, 4)  # (the slots before 7 are past: dropped)
    assert [plan.at(t) for t in range(7, 12)] == [4, 4, 4, 2, 2]
    assert plan.segments() == [(7, 4), (10, 2)]
    plan.write(8, 8, 1)
    assert plan.segments() == [(8, 1), (9, 4), (10, 2)]
    plan.write(9, None, 3)
    assert plan.segments() == [(9, 3)] and plan.at(50) == 3


def _receding_trace(
    search: PlanSearch, seed: int
) -> tuple[list[tuple[float, float]], float, SearchPlanActor]:
    """Per slot of a run on tiny: (the planned sequence's own total, the chosen option's
    total); the run's total JCT; the actor."""
    policy = PlanPolicy.load(GENERAL)
    env = make_env(replace(coerce_env_config(policy.env), setting="tiny"))
    trace: list[tuple[float, float]] = []

    class Traced(SearchPlanActor):
        def plan_for(self, e: ClusterEnv, obs: np.ndarray) -> int:
            k = super().plan_for(e, obs)
            values = self.last_values
            here = values[next(iter(values))][0]  # (the planned sequence's option comes first)
            trace.append((here, min(v for v, _ in values.values())))
            return k

    actor = Traced(env, policy.chooser(), policy.plans, search)
    run_episode(env, actor, seed)
    return trace, float(sum(env.episode_jcts()[0])), actor


@pytest.mark.parametrize("seed", [100, 102])
def test_the_receding_search_continues_with_what_it_valued(seed: int) -> None:
    """Seeing the whole workload (``future``), each slot's "planned sequence from here" is
    exactly what the slot before chose (the block it took was written into the plan), the
    run ends with the last slot's chosen total, and so never above its first slot's plan
    (the network's plan held); with the known jobs only, the first slot's planned option is
    the plain search's value of the network's plan held."""
    search = PlanSearch(base="planned", blocks=(1, 4, 0), future=True)
    trace, total, actor = _receding_trace(search, seed)
    assert len(trace) > 3 and actor.changed > 0
    for (_, chosen), (here, _) in pairwise(trace):
        assert here == chosen
    assert total == trace[-1][1] and total <= trace[0][0]
    # known jobs: the first slot's options against plan_totals (hold) on the same state
    policy = PlanPolicy.load(GENERAL)
    env = make_env(replace(coerce_env_config(policy.env), setting="tiny"))
    obs, _ = env.reset(seed=seed)
    actor = SearchPlanActor(env, policy.chooser(), policy.plans, replace(search, future=False))
    k0 = PlanPolicy.load(GENERAL).actor(env).plan_for(env, obs)
    allocators = actor.allocators
    held = plan_totals(env, allocators, lambda _e, _o: allocators[k0])
    values = block_totals(env, allocators, (1,), lambda _t: k0)
    assert values[(k0, 1)][0] == held[k0]
    for k in range(len(allocators)):  # one slot of k, then k0 held: the hold search's totals
        assert values[(k, 1)][0] == held[k]
    # the same actor over two episodes decides as fresh ones (the plan restarts)
    again = SearchPlanActor(env, policy.chooser(), policy.plans, replace(search, future=False))
    first = run_episode(env, again, seed).avg_jct
    n = len(again.chosen)
    assert run_episode(env, again, seed).avg_jct == first and again.chosen[n:] == again.chosen[:n]


def test_the_receding_search_reads_the_network_only_at_an_episodes_first_slot() -> None:
    """``base: planned`` starts each episode from the network's plan held and plans every
    later slot itself: a network that answers the same at the first slot and anything after
    it gives the same run, decision for decision (why the released search's grid is the same
    for every training seed, docs/experiments/general-policy.md)."""
    policy = PlanPolicy.load(GENERAL)
    env = make_env(replace(coerce_env_config(policy.env), setting="tiny"))
    search = PlanSearch(base="planned", blocks=(1, 4, 0))
    network = policy.chooser()
    rng = np.random.default_rng(0)
    calls = 0

    def after_the_first_anything(obs: np.ndarray) -> int:
        nonlocal calls
        calls += 1
        return network(obs) if calls == 1 else int(rng.integers(len(policy.plans)))

    runs = []
    for choose in (network, after_the_first_anything):
        actor = SearchPlanActor(env, choose, policy.plans, search)
        runs.append((run_episode(env, actor, 101).avg_jct, list(actor.chosen), actor.changed))
    assert calls > 3  # (it was asked at every slot, and answered at random after the first)
    assert runs[0] == runs[1] and runs[0][2] > 0


def test_bad_receding_search_settings_are_one_clear_error() -> None:
    env = make_env(_config("tiny"))
    labels = SlotPlanner(env).labels
    for search, why in (
        (PlanSearch(base="planned"), "base 'planned' needs blocks"),
        (PlanSearch(base="hold", blocks=(1,)), r"blocks \[1\]: for base 'planned' only"),
        (PlanSearch(base="planned", blocks=(1,), also=("drf",)), "use one or the other"),
        (PlanSearch(base="planned", blocks=(1, -1)), "whole slot counts >= 0"),
        (PlanSearch(base="planned", blocks=(1, True)), "whole slot counts >= 0"),
        (PlanSearch(base="planned", blocks=(2.5,)), "whole slot counts >= 0"),  # type: ignore[arg-type]
        (PlanSearch(base="planned", blocks=(4, 4)), "names a length twice"),
        (PlanSearch(base="planned", blocks=4), "must be a list of slot counts"),  # type: ignore[arg-type]
    ):
        with pytest.raises(ConfigError, match=why):
            search.check(labels)
    made = PlanSearch(base="planned", blocks=(1, 4, 16, 0))
    assert made.describe()["blocks"] == [1, 4, 16, 0] and "blocks" not in PlanSearch().describe()
    assert PlanSearch.of(made.describe()) == made


EXTRA = ("esrtf(efficiency=0.6)", "esrtf(backfill=True, head=1)")


def test_extra_plans_are_searched_beside_the_policys_own() -> None:
    """``extra``: the actor's plans are the policy's, then the extra ones; the network still
    picks among its own; each extra plan is valued by the same rollouts as the policy's (the
    first slot's totals are plan_totals' over all of them), and the search takes one where
    it is lower.  The receding search tries them in blocks too."""
    policy = PlanPolicy.load(GENERAL)
    config = replace(coerce_env_config(policy.env), setting="tiny")
    env = make_env(config)
    picked: list[int] = []
    choose = policy.chooser()

    def network(obs: np.ndarray) -> int:
        picked.append(choose(obs))
        return picked[-1]

    search = PlanSearch(extra=EXTRA)
    actor = SearchPlanActor(env, network, policy.plans, search)
    K = len(policy.plans)
    assert actor.n_own == K and actor.planner.K == K + 2
    assert actor.planner.labels[K:] == EXTRA
    obs, _ = env.reset(seed=100)
    actor.reset(100)
    k = actor.plan_for(env, obs)
    k0 = picked[-1]
    held = plan_totals(env, actor.allocators, lambda _e, _o: actor.allocators[k0])
    assert actor.last_totals is not None and len(actor.last_totals) == K + 2
    assert np.array_equal(actor.last_totals, held)
    best = int(np.argmin(held))
    assert k == (best if held[k0] - held[best] > 1e-9 * held[best] else k0)
    # over whole runs: the network picks only its own plans; the search sometimes an extra one
    for s, seed in (
        (search, 102),
        (PlanSearch(base="planned", blocks=(1, 4, 0), extra=EXTRA), 101),
    ):
        picked.clear()
        actor = SearchPlanActor(env, network, policy.plans, s)
        result = run_episode(env, actor, seed)
        assert result.unfinished == 0 and math.isfinite(result.avg_jct)
        assert picked and max(picked) < K
        assert max(actor.chosen) >= K, s
        if s.base == "planned":
            assert {k for k, _ in actor.last_values} == set(range(K + 2))
    # no extra: the search is the one before, decision for decision
    plain = SearchPlanActor(env, policy.chooser(), policy.plans, PlanSearch())
    wider = SearchPlanActor(env, policy.chooser(), policy.plans, PlanSearch(extra=()))
    assert run_episode(env, plain, 100).avg_jct == run_episode(env, wider, 100).avg_jct
    assert plain.chosen == wider.chosen


def test_bad_extra_plans_are_one_clear_error(tmp_path: Path) -> None:
    from agents.policy_format import with_meta

    labels = SlotPlanner(make_env(_config("tiny"))).labels
    for extra, why in (
        ("drf", "extra must be a list of plan labels"),
        (("nope",), "nope"),
        (("esrtf(efficiency=2.0)",), "efficiency"),
        (("drf",), "'drf' is already a plan of the policy or named twice"),
        (("esrtf(efficiency=0.6)", "esrtf(efficiency=0.60)"), "named twice"),
        ((3,), "3 is not a plan label"),
    ):
        with pytest.raises(ConfigError, match=why):
            PlanSearch(extra=extra).check(labels)  # type: ignore[arg-type]
    bad = tmp_path / "policy.npz"
    with_meta(GENERAL, bad, {"search": {"base": "hold", "extra": ["esrtf_load"]}})
    with pytest.raises(ConfigError, match=r"policy\.npz: search extra: 'esrtf_load' is already"):
        PlanPolicy.load(bad)
    made = PlanSearch(base="planned", blocks=(1, 0), extra=EXTRA)
    assert made.describe()["extra"] == list(EXTRA) and "extra" not in PlanSearch().describe()
    assert PlanSearch.of(made.describe()) == made


def _by_hand(env: ClusterEnv, first: object, m: int, then: object) -> float:
    """The known jobs' total JCT when ``first`` plans ``m`` slots of a known-jobs copy of
    ``env`` and ``then`` every later one."""
    copy = env.lookahead(known_only=True, observe=False)()
    term = trunc = False
    n = 0
    while not (term or trunc):
        allocator = first if n < m else then
        *_, term, trunc, _, _ = copy.plan_slot(allocator)  # type: ignore[arg-type]
        n += 1
    return float(sum(copy.episode_jcts()[0]))


def test_per_job_options_serve_one_job_first_for_a_block() -> None:
    """``boost``: at a slot whose planned plan is an EfficientSRTF, every job of the window
    is tried ahead of the order (the plan's own options and ``first`` = that job) for each
    block of ``boost``, continued by the planned sequence (its value checked against a
    rollout by hand); a run takes some, stays deterministic over episodes, and a planned
    plan that is not an EfficientSRTF gets none."""
    from envs.sim.elastic.speed_aware import EfficientSRTF

    policy = PlanPolicy.load(GENERAL)
    env = make_env(replace(coerce_env_config(policy.env), setting="tiny"))
    search = PlanSearch(base="planned", blocks=(1, 4, 0), boost=(4,))
    esrtf = next(k for k, (n, o) in enumerate(policy.plans) if n == "esrtf" and not o)
    actor = SearchPlanActor(env, lambda _obs: esrtf, policy.plans, search)
    n_plans = actor.n_plans
    obs, _ = env.reset(seed=101)
    actor.reset(101)
    for _ in range(3):  # (a few jobs in the window)
        obs, *_ = env.plan_slot(actor.allocators[esrtf])
    actor.plan_for(env, obs)
    window = [job.job_id for job in env.window_jobs]
    assert window == [job.job_id for job in env.active_jobs[: env.J]]
    boosted = sorted(k for k, _ in actor.last_values if k >= n_plans)
    assert len(window) >= 2 and len(boosted) == len(window)
    assert sorted(actor.boosted(k)[1] for k in boosted) == sorted(window)  # type: ignore[index]
    for k in boosted:
        plan, job_id = actor.boosted(k)  # type: ignore[misc]
        allocator = actor.allocators[k]
        assert plan == esrtf and isinstance(allocator, EfficientSRTF)
        assert allocator.first == job_id
        assert (allocator.efficiency, allocator.backfill) == (0.92, False)
        assert set(m for kk, m in actor.last_values if kk == k) == {4}
        value, last = actor.last_values[(k, 4)]
        assert value == _by_hand(env, allocator, 4, actor.allocators[esrtf])
        assert last == env.slot + 3
    # whole runs: some per-job option taken; the same decisions over two episodes
    actor = SearchPlanActor(env, policy.chooser(), policy.plans, search)
    first = run_episode(env, actor, 101)
    n = len(actor.chosen)
    assert first.unfinished == 0 and math.isfinite(first.avg_jct)
    assert max(actor.chosen) >= n_plans and actor.boosted(max(actor.chosen)) is not None
    again = run_episode(env, actor, 101)
    assert again.avg_jct == first.avg_jct and actor.chosen[n:] == actor.chosen[:n]
    # each (plan, job) made once, its driver acting with the same allocator
    made = [actor.boosted(k) for k in range(n_plans, len(actor.allocators))]
    assert made and None not in made and len(set(made)) == len(made)
    assert [d.allocator for d in actor.planner.drivers] == actor.allocators
    # a planned plan that is not an EfficientSRTF: no per-job options at that slot
    drf = next(k for k, (n, _) in enumerate(policy.plans) if n == "drf")
    actor = SearchPlanActor(env, lambda _obs: drf, policy.plans, search)
    obs, _ = env.reset(seed=101)
    actor.reset(101)
    actor.plan_for(env, obs)
    assert all(k < n_plans for k, _ in actor.last_values)
    # per-job options only add options: on the same state, every plan's option has the value
    # of the search without them, which has no per-job option at all
    values = []
    for s in (search, replace(search, boost=())):
        actor = SearchPlanActor(env, lambda _obs: esrtf, policy.plans, s)
        obs, _ = env.reset(seed=101)
        actor.reset(101)
        actor.plan_for(env, obs)
        values.append(actor.last_values)
    with_boost, without = values
    assert without and all(k < n_plans for k, _ in without)
    assert any(k >= n_plans for k, _ in with_boost)
    assert {km: v for km, v in with_boost.items() if km[0] < n_plans} == without


def test_bad_boost_settings_are_one_clear_error() -> None:
    labels = SlotPlanner(make_env(_config("tiny"))).labels
    planned = PlanSearch(base="planned", blocks=(1, 0))
    for boost, why in (
        ((4, -1), "whole slot counts >= 0"),
        ((True,), "whole slot counts >= 0"),
        ((4, 4), "boost names a length twice"),
        (4, "boost must be a list of slot counts"),
    ):
        with pytest.raises(ConfigError, match=why):
            replace(planned, boost=boost).check(labels)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"boost \[4\]: for base 'planned' only, not 'hold'"):
        PlanSearch(boost=(4,)).check(labels)
    made = replace(planned, boost=(4, 16))
    assert made.describe()["boost"] == [4, 16] and "boost" not in planned.describe()
    assert PlanSearch.of(made.describe()) == made
