"""The rule selector's searches (agents/rule_search.py) and their policy files
(agents/selector_search.py).  ``drained``: the selector until the last arrival, an exact model
after it (the episode ends at the value the search predicted), so never worse than the
selector on the same workload; ``known``: the same after the last arrival; neither acts on a
job before it arrives.  They repeat themselves; the policy file round-trips and runs in
``evaluate.py``; bad names and files are one clear error."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from agents.episode_pg import load_episode_pg, save_episode_pg
from agents.rule_search import (
    AUTO_FAST_FROM,
    candidates,
    check_search,
    drained,
    rollout_value,
    search_action,
)
from agents.rule_selector import FEATURES, RuleSelector
from agents.selector_search import main, with_search
from envs.gym.contention_env import ContentionEnv
from envs.sim.errors import ConfigError
from tests.cli import run_script

PLACEMENTS = ("lwf1", "ls", "ff", "ovl")
RULES = ("exclusive", "exclusive_backfill", "exclusive_easy", "srsf", "exclusive_overlap")


def _selector(seed: int, search: str = "none", **kw: float) -> RuleSelector:
    """Weights drawn at random: several rules get chosen in an episode (``kw``: the
    search's ``samples`` or ``margin``)."""
    sel = RuleSelector(RULES, search=search, **kw)  # type: ignore[arg-type]
    sel.set_flat(np.random.default_rng(seed).standard_normal(len(RULES) * len(FEATURES)))
    return sel


def _env(servers: int = 8, jobs: int = 30) -> ContentionEnv:
    return ContentionEnv(num_jobs=jobs, num_servers=servers, placements=PLACEMENTS)


def _episode(env: ContentionEnv, seed: int, act) -> float:  # type: ignore[no-untyped-def]
    env.reset(seed=seed)
    while True:
        _, _, term, trunc, info = env.step(act(env))
        assert not trunc
        if term:
            return float(info["avg_jct_s"])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_search_is_the_selector_before_the_last_arrival_and_exact_after(seed: int) -> None:
    """At every decision before the last arrival it takes the selector's action; after it,
    the lowest of its candidates' rollout values never rises from one decision to the next,
    and the episode ends at exactly the last predicted value (the model is exact): so it is
    never worse than the selector, and here it is better at least once."""
    plain, searched = _selector(seed), _selector(seed, "drained")
    env = _env()
    env.reset(seed=seed)
    predicted: list[float] = []
    searched_at = 0
    while True:
        if not drained(env):
            a = searched.act(env)
            assert a == plain.act(env)
        else:
            cands = candidates(plain, env)
            assert cands[0] == plain.act(env) and len(set(cands)) == len(cands)
            assert all(env.action_masks()[c] for c in cands)
            values = [rollout_value(plain, env, c) for c in cands]
            a = searched.act(env)
            assert a == search_action(plain, env) and a in cands
            assert values[cands.index(a)] == min(values)
            if predicted:
                assert min(values) <= predicted[-1] + 1e-9
            predicted.append(min(values))
            searched_at += len(cands) > 1
        _, _, term, _, info = env.step(a)
        if term:
            break
    assert searched_at > 0 and predicted
    assert info["avg_jct_s"] == pytest.approx(predicted[-1], rel=1e-12)
    base = _episode(_env(), seed, plain.act)
    assert info["avg_jct_s"] <= base + 1e-9


def test_it_is_never_worse_than_the_selector_and_repeats_itself() -> None:
    env = _env(4, 24)
    gains = []
    for seed in range(4):
        base = _episode(env, seed, _selector(seed).act)
        one = _episode(env, seed, _selector(seed, "drained").act)
        two = _episode(env, seed, _selector(seed, "drained").act)
        assert one == two  # bit for bit
        assert one <= base + 1e-9
        gains.append(base - one)
    assert max(gains) > 0


def test_rollouts_leave_the_env_as_it_was() -> None:
    env = _env()
    env.reset(seed=5)
    sel = _selector(5)
    while not drained(env):
        env.step(sel.act(env))
    before = (env.sim.now, env.decisions, [j.spec.job_id for j in env.window])
    for a in candidates(sel, env):
        assert math.isfinite(rollout_value(sel, env, a))
    assert (env.sim.now, env.decisions, [j.spec.job_id for j in env.window]) == before


def test_its_policy_file_round_trips_and_a_plain_one_is_unchanged(tmp_path: Path) -> None:
    sel = _selector(7)
    env = _env()
    env.reset(seed=0)
    src = save_episode_pg(tmp_path / "plain.npz", sel, env, {"seed": 7})
    net, meta = load_episode_pg(src)
    assert "search" not in meta["net"] and isinstance(net, RuleSelector) and net.search == "none"
    out = with_search(str(src), str(tmp_path / "searched"))
    assert out == tmp_path / "searched" / "policy.npz"
    net2, meta2 = load_episode_pg(out)
    assert isinstance(net2, RuleSelector) and net2.search == "drained"
    assert meta2["net"]["search"] == "drained" and net2.rules == RULES
    assert np.array_equal(net2.flat(), sel.flat())
    assert meta2["training"]["seed"] == 7 and meta2["training"]["search_of"]["file"] == str(src)
    assert meta2["env"] == meta["env"] and meta2["layout"] == meta["layout"]
    assert "samples" not in meta2["net"]
    out3 = with_search(str(src), str(tmp_path / "sampled.npz"), "sampled", samples=3)
    net3, meta3 = load_episode_pg(out3)
    assert isinstance(net3, RuleSelector) and (net3.search, net3.samples) == ("sampled", 3)
    assert meta3["net"]["samples"] == 3 and meta3["training"]["search_of"]["samples"] == 3


def test_bad_names_and_files_are_one_clear_error(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="unknown rule-selector search 'deep'; known"):
        check_search("deep")
    with pytest.raises(ConfigError, match="unknown rule-selector search"):
        RuleSelector(RULES, search="deep")
    for m in (-0.1, 1.0, float("nan"), float("inf"), "x", True):
        with pytest.raises(ConfigError, match=r"margin .* must be a number in \[0, 1\)"):
            RuleSelector(RULES, search="known", margin=m)  # type: ignore[arg-type]
    for k in (0, -1, 1.5, "two", True):
        with pytest.raises(ConfigError, match=r"samples \(futures per decision\) must be an int"):
            RuleSelector(RULES, search="sampled", samples=k)  # type: ignore[arg-type]
    plain = save_episode_pg(tmp_path / "plain.npz", _selector(1), _env(), {})
    assert main([str(plain), str(tmp_path / "s"), "--search", "sampled", "--samples", "0"]) == 2
    assert "got 0" in capsys.readouterr().err and not (tmp_path / "s").exists()
    bad = tmp_path / "x.npz"
    bad.write_bytes(b"not a policy")
    assert main([str(bad), str(tmp_path / "out")]) == 2
    assert "x.npz" in capsys.readouterr().err
    from agents.episode_pg import MaskedMLP

    env = _env()
    env.reset(seed=0)
    mlp = save_episode_pg(
        tmp_path / "mlp.npz", MaskedMLP(env.obs_size, env.wait_action + 1, 8), env, {}
    )
    with pytest.raises(ConfigError, match=r"mlp\.npz: a 'mlp' network, not a rule selector"):
        with_search(str(mlp), str(tmp_path / "o"))


def test_a_searched_selector_runs_in_evaluate_py(tmp_path: Path) -> None:
    """Made by the command line, run as ``contention:<dir>`` on a cluster of 4 servers; never
    worse than the plain selector on the same workloads."""
    sel = _selector(3)
    env = _env()
    env.reset(seed=0)
    plain = save_episode_pg(tmp_path / "plain" / "policy.npz", sel, env, {"seed": 3})
    assert main([str(plain.parent), str(tmp_path / "searched")]) == 0
    proc = run_script(
        "evaluate.py", "workload=generated", "workload.num_jobs=24", "cluster.num_servers=4",
        "seeds=[0,1]", f"stacks=[contention:{plain.parent},contention:{tmp_path / 'searched'}]",
        f"baseline=contention:{plain.parent}", "workers=1", "plot=false",
        f"out_dir={tmp_path / 'ev'}", timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"contention:{tmp_path / 'searched'}" in proc.stdout
    import csv

    jct: dict[str, list[float]] = {"plain": [], "searched": []}
    for name in jct:
        for seed in (0, 1):
            (f,) = (tmp_path / "ev").glob(f"jobs_contention-*-{name}_seed{seed}.csv")
            with open(f, newline="") as fh:
                jct[name].append(float(np.mean([float(r["jct_s"]) for r in csv.DictReader(fh)])))
    assert all(s <= p + 1e-9 for s, p in zip(jct["searched"], jct["plain"], strict=True))


@pytest.mark.parametrize(("search", "seeds"), [("drained", (0, 1)), ("sampled", (1,))])
def test_reusing_the_chosen_rollout_changes_nothing(monkeypatch, search: str, seeds) -> None:  # type: ignore[no-untyped-def]
    """Where the last chosen rollout passes through the decision, its value stands for the
    selector's own action's: the episode is the one that rolls every candidate out, with
    fewer rollouts."""
    import agents.rule_search as ss

    calls = [0]
    rollout = ss._rollout

    def counted(*args):  # type: ignore[no-untyped-def]
        calls[0] += 1
        return rollout(*args)

    monkeypatch.setattr(ss, "_rollout", counted)
    env = _env(4, 24)
    for seed in seeds:
        calls[0] = 0
        reused = _episode(env, seed, _selector(seed, search).act)
        n_reused = calls[0]
        fresh_sel = _selector(seed, search)

        def fresh(e: ContentionEnv, sel: RuleSelector = fresh_sel) -> int:
            sel.search_memo = None
            return sel.act(e)

        calls[0] = 0
        assert _episode(env, seed, fresh) == reused
        assert 0 < n_reused < calls[0]


def test_the_command_line_records_itself_without_a_machine_path(tmp_path: Path) -> None:
    env = _env()
    env.reset(seed=0)
    src = save_episode_pg(tmp_path / "p.npz", _selector(1), env, {"seed": 1})
    assert main([str(src), str(tmp_path / "s.npz")]) == 0
    _, meta = load_episode_pg(tmp_path / "s.npz")
    made = meta["training"]["search_of"]
    assert made["command"] == [
        "python",
        "-m",
        "agents.selector_search",
        str(src),
        str(tmp_path / "s.npz"),
    ]
    assert made["search"] == "drained" and "git_commit" in made and "versions" in made


@pytest.mark.parametrize(
    "name, search, margin, margin_by, model",
    [
        ("contention_search", "drained", 0.0, "always", "same"),
        ("contention_known", "known", 0.01, "arrivals", "auto"),
    ],
)
def test_the_released_searches_are_the_released_selector_with_the_search(
    name: str, search: str, margin: float, margin_by: str, model: str
) -> None:
    """``policies/contention_search`` and ``contention_known``: ``policies/contention_selector``'s
    weights, rules and env, with their search (margin, model), made by the command line from
    a clean tree; documented."""
    root = Path(__file__).resolve().parents[2]
    net, meta = load_episode_pg(root / "policies" / name / "policy.npz")
    base, base_meta = load_episode_pg(root / "policies" / "contention_selector" / "policy.npz")
    assert isinstance(net, RuleSelector) and isinstance(base, RuleSelector)
    assert (net.search, net.margin, net.margin_by, net.model) == (search, margin, margin_by, model)
    assert base.search == "none" and net.rules == base.rules
    assert np.array_equal(net.flat(), base.flat())
    assert meta["env"] == base_meta["env"] and meta["training"]["seed"] == 2
    made = meta["training"]["search_of"]
    assert made["file"] == "policies/contention_selector/policy.npz"
    assert made["git_dirty"] is False and made["command"][:3] == [
        "python",
        "-m",
        "agents.selector_search",
    ]
    assert f"`{name}`" in (root / "policies" / "README.md").read_text()


def _decisions_before(env: ContentionEnv, act, until_ms: float) -> list[tuple[float, int]]:  # type: ignore[no-untyped-def]
    """(time, action) of every decision of the episode before ``until_ms``."""
    env.reset(seed=0)
    out = []
    while not env.done and env.sim.now < until_ms:
        a = int(act(env))
        out.append((env.sim.now, a))
        env.step(a)
    return out


def _agreeing_until(
    longer_by: float = 3.0, iterations_scale: float = 1.0
) -> tuple[list[ContentionEnv], float]:
    """Envs of two workloads that agree up to a time T (the later jobs arrive at the same
    times, but ``longer_by`` times as long), and T (``iterations_scale``: the generator's)."""
    from dataclasses import replace

    from envs.sim.spec import Workload
    from envs.sim.workload import generate_ada_srsf

    w = generate_ada_srsf(4, num_jobs=30, iterations_scale=iterations_scale)
    cut = sorted(j.submit_ms for j in w.jobs)[18]
    longer = tuple(
        replace(j, iterations=int(longer_by * j.iterations)) if j.submit_ms > cut else j
        for j in w.jobs
    )
    envs = [
        ContentionEnv(workloads=[x], num_servers=4, placements=PLACEMENTS, fidelity="full")
        for x in (w, Workload(longer, name=w.name))
    ]
    return envs, cut


@pytest.mark.parametrize("search", ["drained", "known", "sampled"])
def test_no_search_acts_on_a_job_before_it_arrives(search: str) -> None:
    """On two workloads that agree up to T, every decision before T is the same."""
    envs, cut = _agreeing_until()
    sels = [_selector(4, search, samples=1) for _ in envs]  # one future: the check, cheaper
    seen = [_decisions_before(e, sel.act, cut) for e, sel in zip(envs, sels, strict=True)]
    assert len(seen[0]) > 10 and seen[0] == seen[1]


@pytest.mark.parametrize("model", ["fast", "auto"])
def test_a_search_on_the_fast_engine_reads_no_job_before_it_arrives(model: str) -> None:
    """The FAST engine's merge factor K comes from the shortest job: the copies take it
    from the jobs they have seen.  Later jobs a fifth as long (K 19 -> 3) change no rollout
    value before T, for ``fast`` and for ``auto`` (which also picks the engine by K)."""
    envs, cut = _agreeing_until(longer_by=0.2, iterations_scale=50.0)
    for e in envs:
        e.reset(seed=0)
    assert [e.fast_factor() for e in envs] == [19, 3]
    sel = _selector(4, "known")
    sel.model = model
    compared = 0
    while envs[0].sim.now < cut and compared < 4:
        assert envs[1].sim.now == envs[0].sim.now
        cands = candidates(sel, envs[0])
        if len(cands) > 1:
            values = [[rollout_value(sel, e, a) for a in cands] for e in envs]
            assert values[0] == values[1]
            compared += 1
        a = sel.base_act(envs[0])
        for e in envs:
            e.step(a)
    assert compared == 4


def test_the_known_search_would_see_the_future_without_forgetting_arrivals(
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    """The check above can fail: with the copies keeping the jobs still to arrive, the known
    search's rollouts see the later jobs' lengths and decide differently before T."""
    monkeypatch.setattr(ContentionEnv, "forget_future", lambda self: 0)
    envs, cut = _agreeing_until()
    seen = [_decisions_before(e, _selector(4, "known").act, cut) for e in envs]
    assert seen[0] != seen[1]


def test_the_known_search_is_the_drained_search_after_the_last_arrival() -> None:
    """From the last arrival on, the jobs it forgets are none: both searches roll out the
    same copies and take the same actions."""
    env = _env()
    known, drained_sel = _selector(6, "known"), _selector(6, "drained")
    env.reset(seed=6)
    n = 0
    while not env.done:
        a = known.act(env)
        if drained(env):
            assert a == drained_sel.act(env)
            n += 1
        env.step(a)
    assert n > 0


def test_a_margin_guards_the_guessed_model_only() -> None:
    """``margin``: another action must beat the selector's own by that share of its value
    while jobs are still to arrive (the model is a guess); once none is (exact), any gain
    counts.  A margin no gain reaches makes the known search the drained one, decision for
    decision; the policy file's description keeps a margin (and only a set one)."""
    env = _env(4, 24)
    for seed in (0, 1):
        drained_run = _episode(env, seed, _selector(seed, "drained").act)
        assert _episode(env, seed, _selector(seed, "known", margin=0.9).act) == drained_run
    sel = _selector(2, "known", margin=0.02)
    assert sel.describe()["margin"] == 0.02 and "margin" not in _selector(2, "known").describe()
    from agents.episode_pg import build_net

    again = build_net(sel.describe())
    assert isinstance(again, RuleSelector) and (again.search, again.margin) == ("known", 0.02)


def test_margin_by_arrivals_scales_the_margin_by_the_arrivals_expected_while_a_job_runs(
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    """``margin_by: arrivals``: none of the margin where fewer than NO_MARGIN_ARRIVALS jobs
    are expected to arrive while a job runs (the rate seen x the mean run time alone, at most
    the jobs still to arrive), all of it from FULL_MARGIN_ARRIVALS on, linear between.  Hand
    oracle: five jobs arriving a minute apart, the first three of 60, 90 and 120 s alone:
    with three arrived, 2 arrivals / 120 s x 90 s = 1.5 (< 2 still to arrive); with one
    arrived no rate is seen (none of the margin)."""
    from dataclasses import replace

    import agents.rule_search as rs
    from envs.sim.spec import Workload
    from envs.sim.workload import generate_ada_srsf

    w = generate_ada_srsf(4, num_jobs=5)
    ms = [j.model.compute_ms for j in w.jobs]
    runs_s = (60, 90, 120, 100, 100)
    jobs = tuple(
        replace(j, job_id=i, submit_ms=60_000.0 * i, num_gpus=1 + i % 2,
                iterations=max(1, round(r * 1000 / m)))
        for i, (j, r, m) in enumerate(zip(w.jobs, runs_s, ms, strict=True))
    )  # fmt: skip
    env = ContentionEnv(
        workloads=[Workload(jobs, name="five")], num_servers=1, placements=PLACEMENTS
    )
    env.reset(seed=0)
    assert rs.arrivals_per_run(env) is None and rs.margin_share(env) == 0.0
    while env.jobs_to_arrive() > 2:
        env.step(env.wait_action if env.can_wait() else 0)
    run_ms = np.mean([jobs[i].iterations * ms[i] for i in range(3)])
    assert run_ms == pytest.approx(90_000, rel=1e-3)
    assert rs.arrivals_per_run(env) == pytest.approx(2 / 120_000 * run_ms)
    assert rs.margin_share(env) == 0.0  # 1.5 < NO_MARGIN_ARRIVALS
    monkeypatch.setattr(rs, "NO_MARGIN_ARRIVALS", 1.0)
    monkeypatch.setattr(rs, "FULL_MARGIN_ARRIVALS", 2.0)
    assert rs.margin_share(env) == pytest.approx(0.5, rel=1e-3)  # halfway from 1 to 2
    monkeypatch.setattr(rs, "NO_MARGIN_ARRIVALS", 0.0)
    monkeypatch.setattr(rs, "FULL_MARGIN_ARRIVALS", 1.0)
    assert rs.margin_share(env) == 1.0  # at most the whole margin
    # where the whole margin applies wherever a rate is seen, it is margin_by: always
    monkeypatch.setattr(rs, "FULL_MARGIN_ARRIVALS", 1e-12)
    small = _env(4, 24)
    for seed in (0, 1):
        always = _episode(small, seed, _selector(seed, "known", margin=0.9).act)
        by = _selector(seed, "known", margin=0.9)
        by.margin_by = "arrivals"
        assert _episode(small, seed, by.act) == always


def test_margin_by_round_trips_and_bad_values_are_one_clear_error(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    sel = RuleSelector(RULES, search="known", margin=0.01, margin_by="arrivals")
    assert sel.describe()["margin_by"] == "arrivals"
    assert "margin_by" not in RuleSelector(RULES, search="known", margin=0.01).describe()
    plain = save_episode_pg(tmp_path / "plain.npz", _selector(1), _env(), {})
    out = with_search(str(plain), str(tmp_path / "k"), "known", margin=0.01, margin_by="arrivals")
    again, meta = load_episode_pg(out)
    assert isinstance(again, RuleSelector) and again.margin_by == "arrivals"
    assert meta["training"]["search_of"]["margin_by"] == "arrivals"
    for bad in ("load", "", None, 1):
        with pytest.raises(ConfigError, match=r"margin_by must be one of \['always', 'arrivals'\]"):
            RuleSelector(RULES, search="known", margin=0.01, margin_by=bad)  # type: ignore[arg-type]
    argv = [str(plain), str(tmp_path / "b"), "--search", "known", "--margin-by", "load"]
    assert main(argv) == 2
    assert "got 'load'" in capsys.readouterr().err and not (tmp_path / "b").exists()


def _tenth(fidelity: str) -> ContentionEnv:
    """24 paper-scale jobs on 4 servers: FAST merges iterations, FULL does not."""
    return ContentionEnv(
        scale="paper", num_jobs=24, num_servers=4, placements=PLACEMENTS, fidelity=fidelity
    )


def test_a_fast_model_rolls_out_on_the_fast_engine_and_leaves_the_run_full() -> None:
    """``model: fast`` in a FULL episode: at its first decision (nothing has run) every
    valid action's rollout value is the one the same search gives in the FAST episode of
    that workload, to rounding (the copies merge by the shortest job seen, the FAST episode
    by the workload's; each job is alone on its GPUs here), and not the FULL engine's bits;
    the episode stays FULL; in a FAST episode ``fast`` and ``same`` are one search."""
    fast_model = _selector(3, "known")
    fast_model.model = "fast"
    same = _selector(3, "known")
    full, fast = _tenth("full"), _tenth("fast")
    full.reset(seed=8)
    fast.reset(seed=8)
    cands = [int(a) for a in np.flatnonzero(full.action_masks())]
    assert len(cands) > 1 and cands == [int(a) for a in np.flatnonzero(fast.action_masks())]
    by_fast = [rollout_value(fast_model, full, a) for a in cands]
    assert by_fast == pytest.approx([rollout_value(same, fast, a) for a in cands], rel=1e-12)
    assert by_fast != [rollout_value(same, full, a) for a in cands]  # another engine's bits
    assert full.fidelity.value == "full" and full.sim.cfg.fidelity.level.value == "full"
    assert _episode(_env(4, 12), 9, fast_model.act) == _episode(_env(4, 12), 9, same.act)


def test_the_auto_model_is_the_fast_engine_from_k_10_and_the_exact_one_below() -> None:
    """``model: auto`` in FULL episodes: where every job would merge 10 or more iterations a
    step on the FAST engine (1,000-6,000 iterations: K >= 20) its rollout values are the
    fast model's (and not the exact ones); where none would (80-480 iterations, as in a
    Philly window: K <= 9) they are the exact model's (and not the fast one's)."""
    from envs.sim.config import FidelityOptions
    from envs.sim.workload import generate_ada_srsf

    per_step = FidelityOptions().fast_min_steps  # K = a job's iterations // this
    auto, fast, same = (_selector(3, "known") for _ in range(3))
    auto.model, fast.model = "auto", "fast"
    long_jobs = _tenth("full")
    short = ContentionEnv(
        workloads=[generate_ada_srsf(8, 24, iterations_scale=8.0)],
        num_servers=4,
        placements=PLACEMENTS,
        fidelity="full",
    )
    for env, like in ((long_jobs, fast), (short, same)):
        env.reset(seed=8)
        ks = [j.spec.iterations // per_step for j in env.sim.jobs]
        assert min(ks) >= AUTO_FAST_FROM if like is fast else max(ks) < AUTO_FAST_FROM
        cands = [int(a) for a in np.flatnonzero(env.action_masks())]
        got = [rollout_value(auto, env, a) for a in cands]
        assert got == [rollout_value(like, env, a) for a in cands]
        other = same if like is fast else fast
        assert got != [rollout_value(other, env, a) for a in cands]


def test_model_round_trips_and_bad_values_are_one_clear_error(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    assert RuleSelector(RULES, search="known", model="fast").describe()["model"] == "fast"
    assert "model" not in RuleSelector(RULES, search="known").describe()
    plain = save_episode_pg(tmp_path / "plain.npz", _selector(1), _env(), {})
    out = with_search(str(plain), str(tmp_path / "k"), "known", model="fast")
    again, meta = load_episode_pg(out)
    assert isinstance(again, RuleSelector) and again.model == "fast"
    assert meta["training"]["search_of"]["model"] == "fast"
    for bad in ("full", "", None, 1):
        with pytest.raises(ConfigError, match=r"model must be one of \['same', 'fast', 'auto'\]"):
            RuleSelector(RULES, search="known", model=bad)  # type: ignore[arg-type]
    argv = [str(plain), str(tmp_path / "b"), "--search", "known", "--model", "full"]
    assert main(argv) == 2
    assert "got 'full'" in capsys.readouterr().err and not (tmp_path / "b").exists()
    assert main([str(plain), str(tmp_path / "c"), "--search", "known", "--model", "fast"]) == 0
    assert "fast model" in capsys.readouterr().out
    # a searched file searched again keeps where it came from
    twice, twice_meta = load_episode_pg(with_search(str(out), str(tmp_path / "d"), "drained"))
    assert isinstance(twice, RuleSelector) and (twice.search, twice.model) == ("drained", "same")
    made = twice_meta["training"]["search_of"]
    assert made["file"] == str(out) and made["source_search_of"]["file"] == str(plain)
    assert made["source_search_of"]["model"] == "fast"
