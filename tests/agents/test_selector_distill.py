"""The known search distilled into a rule selector's weights (agents/selector_distill.py,
``train.py +agent=contention_distill``): the labels are the search's own choices and rollout
values, the fit by hand, a whole run bit-reproducible from its seed and resumed bit for bit,
and bad settings one clear error before anything runs."""

from __future__ import annotations

import math
import warnings
from pathlib import Path

import numpy as np
import pytest

from agents.episode_pg import load_episode_pg, save_episode_pg
from agents.rule_search import rollout_value, search_action, search_values
from agents.rule_selector import FEATURES, RuleSelector
from agents.selector_distill import DistillConfig, Labels, fit, label_episode
from agents.selector_search import with_search
from envs.gym.contention_env import ContentionEnv
from envs.sim.errors import ConfigError
from tests.cli import train_in_process, train_refusal

PLACEMENTS = ("lwf1", "ls", "ff", "ovl")
RULES = ("exclusive", "exclusive_backfill", "exclusive_easy", "srsf", "exclusive_overlap")


def _selector(seed: int, search: str = "none", **kw: object) -> RuleSelector:
    """Weights drawn at random: several rules get chosen in an episode."""
    sel = RuleSelector(RULES, search=search, **kw)  # type: ignore[arg-type]
    sel.set_flat(np.random.default_rng(seed).standard_normal(len(RULES) * len(FEATURES)))
    return sel


def _env(servers: int = 8, jobs: int = 30) -> ContentionEnv:
    return ContentionEnv(num_jobs=jobs, num_servers=servers, placements=PLACEMENTS)


@pytest.mark.parametrize(("seed", "margin_by"), [(0, "always"), (1, "arrivals"), (2, "always")])
def test_the_labels_are_the_searchs_choices_and_rollout_values(seed: int, margin_by: str) -> None:
    """At every decision of a searched episode: the labelled action is the one
    ``search_action`` takes without its memo, each rule's value is its action's rollout value,
    and the rules marked are exactly those whose action is the search's."""
    searched = _selector(seed, "known", margin=0.01, margin_by=margin_by)
    plain = _selector(seed)
    env = _env()
    env.reset(seed=seed)
    labelled = 0
    while True:
        got = search_values(searched, env)
        searched.search_memo = None  # (the memo's value can differ from a fresh rollout's)
        action = search_action(searched, env)
        if got is not None:
            acts, values, chosen = got
            labelled += 1
            assert chosen == action
            assert len(set(acts)) >= 2
            for name, a, v in zip(RULES, acts, values, strict=True):
                assert a == plain.rule(name)(env)
                assert v == rollout_value(plain, env, a)
        _, _, term, trunc, _ = env.step(action)
        assert not trunc
        if term:
            break
    assert labelled >= 5


def test_label_episode_follows_the_search_or_the_student() -> None:
    """With the expert acting, the labelled episode is the searched selector's episode; with
    the student acting, the student's, and the labels still come from the search."""
    searched = _selector(3, "known")
    expert = (searched.describe(), searched.flat())
    student = _selector(4)
    env = _env()
    infos = {}
    for who, act in (("search", searched), ("student", student)):
        env.reset(seed=5)
        while True:
            _, _, term, _, info = env.step(act.act(env))
            if term:
                infos[who] = info["avg_jct_s"]
                break
    by_search = label_episode(student, env, (expert, False, 5))
    by_student = label_episode(student, env, (expert, True, 5))
    assert infos["search"] != infos["student"]
    assert len(by_search) > 0 and len(by_student) > 0
    assert by_search.x.shape[1] == len(FEATURES) and by_search.values.shape[1] == len(RULES)
    # every labelled decision marks at least one rule, never every rule (two actions differ)
    for lab in (by_search, by_student):
        marked = lab.target.sum(1)
        assert (marked >= 1).all() and (marked < len(RULES)).all()


def _labels(x: list[list[float]], values: list[list[float]], target: list[list[bool]]) -> Labels:
    pad = np.zeros((len(x), len(FEATURES)))
    pad[:, : len(x[0])] = x
    return Labels(pad, np.array(values, dtype=np.float64), np.array(target, dtype=bool))


def test_decision_weights_by_hand() -> None:
    """A decision's weight is its values' spread over the lowest, at most the cap; a stuck
    rule (inf) gives the cap; equal values give 0."""
    lab = _labels(
        [[1.0], [1.0], [1.0], [1.0]],
        [[100.0, 105.0], [100.0, 100.0], [100.0, math.inf], [10.0, 30.0]],
        [[True, False], [True, True], [True, False], [True, False]],
    )
    assert lab.weights(0.1).tolist() == pytest.approx([0.05, 0.0, 0.1, 0.1])
    every_stuck = _labels([[1.0]], [[math.inf, math.inf]], [[True, False]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no all-NaN warning either
        assert every_stuck.weights(0.1).tolist() == [0.1]


def test_the_fit_learns_a_rule_the_features_tell_apart_and_keeps_what_no_label_moves() -> None:
    """Two rules, features (bias, s): the search picks rule 0 where s = 0 and rule 1 where
    s = 1.  From zero weights (rule 0 everywhere: agreement 1/2) the fit scores rule 1 above
    rule 0 exactly where s = 1 (agreement 1).  Decisions of weight 0 leave the start as it
    is, and a large L2 pull keeps the weights near it."""
    lab = _labels(
        [[1.0, 0.0], [1.0, 1.0]] * 3,
        [[100.0, 110.0], [110.0, 100.0]] * 3,
        [[True, False], [False, True]] * 3,
    )
    start = np.zeros(2 * len(FEATURES))
    w, figures = fit(lab, start, l2=0.0, cap=0.1, steps=200)
    assert figures["agree_before"] == pytest.approx(0.5)
    assert figures["agree_after"] == pytest.approx(1.0)
    scores = lab.x @ w.reshape(2, len(FEATURES)).T
    assert (scores.argmax(1) == np.array([0, 1] * 3)).all()
    flat = _labels([[1.0, 0.0]], [[100.0, 100.0]], [[True, True]])
    same, f0 = fit(flat, start + 0.5, l2=0.01, cap=0.1, steps=50)
    assert np.array_equal(same, start + 0.5) and f0["loss"] == 0.0
    held, _ = fit(lab, start, l2=1e6, cap=0.1, steps=200)
    assert np.abs(held).max() < 1e-4


def test_the_fit_is_deterministic() -> None:
    env = _env(jobs=20)
    searched = _selector(6, "known")
    lab = label_episode(_selector(6), env, ((searched.describe(), searched.flat()), False, 7))
    a, fa = fit(lab, searched.flat(), 0.01, 0.1, 100)
    b, fb = fit(lab, searched.flat(), 0.01, 0.1, 100)
    assert np.array_equal(a, b) and fa == fb


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"episodes": 0}, "agent.distill.episodes must be an integer >= 1"),
        ({"expert_iterations": -1}, "agent.distill.expert_iterations must be an integer >= 0"),
        ({"steps": 1.5}, "agent.distill.steps must be an integer >= 1"),
        ({"l2": math.nan}, "agent.distill.l2 must be finite and >= 0"),
        ({"l2": -1.0}, "agent.distill.l2 must be finite and >= 0"),
        ({"weight_cap": math.inf}, "agent.distill.weight_cap must be finite"),
        ({"weight_cap": 0.0}, "agent.distill.weight_cap must be > 0"),
        ({"source": ""}, "agent.distill.source: name"),
    ],
)
def test_bad_distill_settings_are_one_clear_error(change: dict, says: str) -> None:
    with pytest.raises(ConfigError, match=says.replace("(", r"\(")):
        DistillConfig(**change).check()


def test_only_the_known_and_drained_searches_are_distilled() -> None:
    env = _env()
    env.reset(seed=0)
    with pytest.raises(ConfigError, match="only the known and drained searches"):
        search_values(_selector(0, "sampled"), env)
    with pytest.raises(ConfigError, match="only the known and drained searches"):
        search_values(_selector(0), env)
    assert search_values(_selector(0, "drained"), env) is None  # jobs still to arrive


BASE = [
    "+agent=contention_distill",
    "contention.num_jobs=30",
    "contention.num_servers=8",
    "agent.contention.val_every=1",
    "agent.contention.workers=1",
    "agent.distill.episodes=1",
    "eval.seeds=[100]",
    "progress_bar=false",
]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A searched selector's policy file (random weights, known search)."""
    root = tmp_path_factory.mktemp("distill_src")
    env = _env()
    plain = save_episode_pg(root / "plain.npz", _selector(11), env, {"seed": 11})
    return with_search(str(plain), str(root / "known"), "known", ["test"])


def test_train_py_refuses_a_bad_distill_run_in_one_line(source: Path, tmp_path: Path) -> None:
    plain = source.parent.parent / "plain.npz"
    cases = [
        (["agent.distill.episodes=0"], "agent.distill.episodes must be an integer >= 1"),
        ([f"agent.distill.source={plain}"], "its search is 'none'; distilling needs"),
        ([f"agent.distill.source={tmp_path / 'nothing'}"], "not found"),
        (
            [f"agent.distill.source={source}", "agent.cem.rules=[exclusive,srsf]"],
            "agent.cem.rules is ['exclusive', 'srsf']: make them agree",
        ),
    ]
    for extra, says in cases:
        overrides = [*BASE, f"agent.distill.source={source}", *extra]
        assert says in train_refusal(overrides, tmp_path / "r")


def _final(run: Path) -> RuleSelector:
    net, _ = load_episode_pg(run / "checkpoints" / "final" / "policy.npz")
    assert isinstance(net, RuleSelector) and net.search == "none"
    return net


def test_a_distilled_selector_is_bit_reproducible_from_its_seed_and_resumes_bit_for_bit(
    source: Path, tmp_path: Path
) -> None:
    """A run of two iterations, and the same seed's run stopped after one and resumed in
    another process, write the same weights, bit for bit (the labels are recomputed, the fit
    redone from the saved decisions), and the fit moved them off the source's."""
    src = [*BASE, f"agent.distill.source={source}", "seed=3"]
    whole, one, two = (tmp_path / n for n in ("whole", "one", "two"))
    for out, extra in (
        (whole, ["agent.contention.iterations=2"]),
        (one, ["agent.contention.iterations=1"]),
        (two, ["agent.contention.iterations=2", f"resume={one}"]),
    ):
        out.mkdir()
        summary = train_in_process([*src, *extra], out)
        assert summary["iterations"] == 2 if out != one else summary["iterations"] == 1
    a = _final(whole).flat()
    assert np.array_equal(a, _final(two).flat())
    src_net, _ = load_episode_pg(source)
    assert isinstance(src_net, RuleSelector)
    assert not np.array_equal(a, src_net.flat())
    assert not np.array_equal(_final(one).flat(), a)  # the second iteration's labels moved it
