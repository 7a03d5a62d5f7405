"""The rule selector (agents/rule_selector.py) and the cross-entropy method that trains it
(agents/cem.py, ``train.py +agent=contention_cem``): features, acting as a rule, choosing by
state, the search's update, bad settings, and a whole run: bit-reproducible, resumed bit for
bit, its policy file acting in ``evaluate.py`` on clusters it never saw."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from agents.cem import CEMConfig, CrossEntropyMethod
from agents.episode_pg import load_episode_pg, run_episode
from agents.rule_selector import FEATURES, SELECTOR_RULES, RuleSelector, selector_features
from envs.gym.contention_env import ContentionEnv, srsf_exclusive_teacher, srsf_teacher, teacher
from envs.sim.errors import ConfigError
from envs.sim.spec import Workload
from envs.sim.workload import generate_ada_srsf
from tests.cli import run_script, train_refusal

BASE = [
    "+agent=contention_cem",
    "contention=small",
    "contention.num_jobs=16",
    "agent.contention.val_every=1",
    "agent.cem.population=5",
    "agent.cem.elite=0.4",
    "agent.cem.episodes=2",
    "eval.seeds=[100,101]",
    "progress_bar=false",
]
TINY = [*BASE, "agent.contention.iterations=2"]


#: the candidates of the recipe's env (exclusive_overlap places with ovl)
PLACEMENTS = ("lwf1", "ls", "ff", "ovl")
#: the recipe's rules (conf/agent/contention_cem.yaml)
RECIPE_RULES = (*SELECTOR_RULES, "exclusive_overlap")


def _env(servers: int = 8, jobs: int = 30) -> ContentionEnv:
    if servers >= 8:
        return ContentionEnv(num_jobs=jobs, num_servers=servers, placements=PLACEMENTS)
    # the generator's jobs of at most the cluster's GPUs (it draws up to 32)
    w = [generate_ada_srsf(s, num_jobs=jobs) for s in range(4)]
    fit = [Workload(tuple(j for j in x.jobs if j.num_gpus <= 4 * servers), name=x.name) for x in w]
    return ContentionEnv(workloads=fit, num_servers=servers, placements=PLACEMENTS)


@pytest.mark.parametrize("servers", [4, 8, 16, 64, 256])
def test_features_are_finite_in_range_and_the_same_length_on_any_cluster(servers: int) -> None:
    env = _env(servers)
    for seed in (0, 1):
        env.reset(seed=seed)
        n = 0
        while not env.done:
            f = selector_features(env)
            assert f.shape == (len(FEATURES),) and np.isfinite(f).all()
            assert (f >= 0).all() and (f <= 2).all() and f[0] == 1.0
            env.step(srsf_teacher(env))  # time-shares: more workers than GPUs at times
            n += 1
        assert n > 0


@pytest.mark.parametrize("rule", RECIPE_RULES)
def test_a_selector_started_as_a_rule_takes_that_rules_action_at_every_decision(rule: str) -> None:
    sel = RuleSelector(RECIPE_RULES)
    sel.start_as(rule)
    fn = teacher(rule)
    env = _env(8, 40)
    env.reset(seed=3)
    while not env.done:
        a = sel.act(env)
        assert a == fn(env)
        env.step(a)


def test_the_selector_chooses_its_rule_by_the_state() -> None:
    """Weights that pick ``srsf`` exactly where the first job needs more GPUs than are idle,
    the exclusive rule elsewhere: at every decision its action is that rule's, and both rules
    act in the episode."""
    sel = RuleSelector(("exclusive", "srsf"))
    theta = np.zeros((2, len(FEATURES)))
    theta[0, 0] = 0.5  # exclusive: 0.5
    theta[1, -1] = 1.0  # srsf: 1 when the first job is blocked
    sel.set_flat(theta.reshape(-1))
    env = _env(8, 40)
    env.reset(seed=1)
    used = set()
    while not env.done:
        blocked = selector_features(env)[-1] == 1.0
        want = srsf_teacher(env) if blocked else srsf_exclusive_teacher(env)
        assert sel.choose(env) == int(blocked)
        a = sel.act(env)
        assert a == want
        used.add(bool(blocked))
        env.step(a)
    assert used == {True, False}


def test_a_selector_refuses_what_it_cannot_be() -> None:
    with pytest.raises(ConfigError, match="unknown Contention-v0 teacher 'oracle'"):
        RuleSelector(("exclusive", "oracle"))
    with pytest.raises(ConfigError, match="distinct"):
        RuleSelector(("srsf", "srsf"))
    with pytest.raises(ConfigError, match="reads 9 features"):
        RuleSelector(SELECTOR_RULES, 3)
    with pytest.raises(ConfigError, match="finite"):
        RuleSelector().set_flat([np.nan] * (len(SELECTOR_RULES) * len(FEATURES)))
    with pytest.raises(ConfigError, match="no logits"):
        RuleSelector()(np.zeros(3))


def test_the_cross_entropy_method_finds_a_minimum_and_repeats_itself() -> None:
    target = np.array([1.5, -2.0, 0.25])

    def search(seed: int) -> np.ndarray:
        cem = CrossEntropyMethod(np.zeros(3), 2.0, 60, 12, 1e-3, np.random.default_rng(seed))
        for _ in range(60):
            cands = cem.ask()
            assert np.array_equal(cands[0], cem.mean)  # the mean is candidate 0
            cem.tell(cands, [float(((c - target) ** 2).sum()) for c in cands])
        return cem.mean

    found = search(7)
    assert np.abs(found - target).max() < 0.02
    assert np.array_equal(found, search(7))
    with pytest.raises(ConfigError, match="one finite score per candidate"):
        cem = CrossEntropyMethod(np.zeros(2), 1.0, 4, 1, 0.1, np.random.default_rng(0))
        cem.tell(cem.ask(), [1.0, np.nan, 2.0, 3.0])


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"population": 1}, "agent.cem.population must be an integer >= 2"),
        ({"episodes": 0}, "agent.cem.episodes must be an integer >= 1"),
        ({"elite": 0.0}, "agent.cem.elite must be a share in (0, 1)"),
        ({"elite": 1.0}, "agent.cem.elite must be a share in (0, 1)"),
        ({"elite": 0.01}, "keeps at least one of the 20 candidates"),
        ({"sigma": float("nan")}, "agent.cem.sigma must be finite and > 0"),
        ({"sigma_min": 0.0}, "agent.cem.sigma_min must be finite and > 0"),
        ({"start": "fifo"}, "agent.cem.start='fifo' is not one of the selector's rules"),
    ],
)
def test_bad_search_settings_are_one_clear_error(change: dict, says: str) -> None:
    with pytest.raises(ConfigError) as exc:
        CEMConfig(**change).check(SELECTOR_RULES)
    assert says in str(exc.value)


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["agent.cem.population=1"], "agent.cem.population must be an integer >= 2"),
        (["agent.contention.arch=set"], "the rule selector has no gradient"),
        (["agent.contention.teacher=exclusive"], "a rule selector is not cloned"),
        # a rule whose placement candidate the env lacks: named before anything runs
        (
            ["contention.placements=[lwf1,ls]"],
            "agent.cem.rules: exclusive_overlap places with ['ovl'], which the env's placement",
        ),
        (["agent.cem.rules=[exclusive,fastest]"], "unknown"),
        (["agent.cem.rules=[srsf]"], "agent.cem.start='exclusive' is not one of"),
    ],
)
def test_train_py_refuses_a_bad_cem_run_in_one_line(
    overrides: list[str], says: str, tmp_path: Path
) -> None:
    assert says in train_refusal([*TINY, *overrides], tmp_path / "r")


def test_a_policy_gradient_learner_refuses_the_selector(tmp_path: Path) -> None:
    args = ["+agent=contention_pg", "contention=small", "agent.contention.arch=selector"]
    assert "the rule selector has no gradient" in train_refusal(args, tmp_path / "r")


def _weights(run: Path, which: str = "final") -> tuple[RuleSelector, dict]:
    net, meta = load_episode_pg(run / "checkpoints" / which / "policy.npz")
    assert isinstance(net, RuleSelector)
    return net, meta


class _Runs(dict):  # type: ignore[type-arg]
    """The module's ``train.py`` runs, each made on first use (the default suite needs only
    ``whole``; the slow tests the other two)."""

    def __init__(self, root: Path) -> None:
        super().__init__()
        self.root = root

    def __missing__(self, name: str) -> Path:
        out = self.root / name
        if name == "whole":
            extra = [*TINY, "agent.contention.workers=2"]
        elif name == "one":
            extra = [*BASE, "agent.contention.iterations=1"]
        else:  # "two": "one" resumed
            extra = [*TINY, f"resume={self['one']}"]
        proc = run_script("train.py", *extra, f"hydra.run.dir={out}", timeout=600)
        assert proc.returncode == 0, proc.stderr
        assert "score (ratio to the best rule)" in proc.stderr
        self[name] = out
        return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """``whole``: 2 iterations over 2 workers; ``one``: 1 iteration in this process; ``two``:
    ``one`` resumed to 2 iterations (each trained when first asked for)."""
    return _Runs(tmp_path_factory.mktemp("cem"))


@pytest.mark.slow  # three train.py runs (the default suite keeps to 10 minutes)
def test_a_run_resumed_over_one_worker_is_the_run_over_two_bit_for_bit(runs: dict) -> None:
    """The search's draws do not depend on the workers or on a stop: the resumed run and the
    whole run end on the same weights (and the search moved them)."""
    whole, meta = _weights(runs["whole"])
    assert np.array_equal(_weights(runs["two"])[0].flat(), whole.flat())
    assert not np.array_equal(whole.flat(), RuleSelector().flat())
    assert meta["net"]["kind"] == "rule_selector" and meta["net"]["rules"] == list(RECIPE_RULES)
    assert (
        meta["layout"]["obs_size"] == "any" and meta["training"]["config"]["agent"]["algo"] == "cem"
    )
    summary = json.loads((runs["whole"] / "summary.json").read_text())
    assert summary["iterations"] == 2


@pytest.mark.slow  # three train.py runs (the default suite keeps to 10 minutes)
def test_the_validation_curve_is_the_saved_selectors_own_episodes(runs: dict) -> None:
    import csv

    with open(runs["whole"] / "learning_curve.csv", newline="") as f:
        curve = list(csv.DictReader(f))
    net, _ = _weights(runs["whole"])
    env = ContentionEnv(scale="small", num_jobs=16, comm="srsf1", placements=PLACEMENTS)
    jcts = [
        run_episode(env, s, act=lambda e, o: net.act(e, o)).info["avg_jct_s"] for s in (100, 101)
    ]
    assert float(curve[-1]["avg_jct"]) == pytest.approx(float(np.mean(jcts)), rel=1e-12)


def test_its_policy_runs_in_evaluate_py_on_a_cluster_it_never_saw(
    runs: dict, tmp_path: Path
) -> None:
    """Trained on 16 servers, it acts on 8 (the set network's test covers more sizes)."""
    best = runs["whole"] / "checkpoints" / "best"
    proc = run_script(
        "evaluate.py", "workload=ada160", "cluster.num_servers=8",
        f"stacks=[contention:exclusive,contention:{best}]", "workers=1", "plot=false",
        f"out_dir={tmp_path / 'ev'}", timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"contention:{best}" in proc.stdout


def test_one_set_of_weights_acts_on_clusters_of_4_to_256_servers() -> None:
    """Weights drawn at random (every rule gets chosen somewhere) act on 4, 16 and 256
    servers: every action valid, every episode to its end."""
    sel = RuleSelector()
    sel.set_flat(np.random.default_rng(0).standard_normal(len(SELECTOR_RULES) * len(FEATURES)))
    for servers in (4, 16, 256):
        env = _env(servers, 30)
        env.reset(seed=2)
        chosen = set()
        while not env.done:
            chosen.add(sel.choose(env))
            a = sel.act(env)
            assert env.action_masks()[a]
            env.step(a)
        assert chosen  # it acted


def test_the_released_selector_loads_acts_anywhere_and_mixes_the_rules() -> None:
    """``policies/contention_selector``: one small file, a selector of the recipe's five rules
    trained by ``train.py +agent=contention_cem`` (seed 2, its best validation point),
    documented; on a validation workload of 4 and of 64 servers it acts validly and chooses
    more than one rule (it is no single rule's clone)."""
    root = Path(__file__).resolve().parents[2]
    path = root / "policies" / "contention_selector" / "policy.npz"
    assert path.stat().st_size < 100_000
    net, meta = load_episode_pg(path)
    assert isinstance(net, RuleSelector) and net.rules == RECIPE_RULES
    record = meta["training"]
    assert record["seed"] == 2 and record["config"]["agent"]["algo"] == "cem"
    assert "+agent=contention_cem" in record["command"] and record["iteration"] == 21
    assert meta["env"]["comm"] == "adasrsf" and meta["env"]["placements"] == list(PLACEMENTS)
    assert "`contention_selector`" in (root / "policies" / "README.md").read_text()
    chosen = set()
    for servers in (4, 64):
        env = _env(servers, 40)
        env.reset(seed=100)
        while not env.done:
            chosen.add(net.choose(env))
            a = net.act(env)
            assert env.action_masks()[a]
            env.step(a)
    assert len(chosen) > 1
