"""``train.py +agent=contention_pg agent.contention.arch=set contention=mix``: EpisodePG over a
distribution of Contention-v0 settings (:class:`~envs.gym.contention_env.
ContentionDistribution`), end to end at a tiny scale, and the settings it refuses."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from agents.episode_pg import load_episode_pg, run_episode, teacher_data
from agents.set_contention import SetContentionNet
from envs.gym.contention_env import (
    CONTENTION_TEACHERS,
    ContentionConfig,
    ContentionDistribution,
    rule_missing,
)
from tests.cli import run_script, train_refusal
from training.contention import BestRule, validate_contention

TINY = [
    "+agent=contention_pg",
    "agent.contention.arch=set",
    "contention=mix",
    "contention.scale=small",
    "contention.num_jobs=16",
    "contention.distribution.trace_jobs=[20]",
    "agent.contention.hidden=16",
    "agent.contention.iterations=2",
    "agent.contention.val_every=1",
    "agent.contention.bc_workloads=4",
    "agent.contention.bc_epochs=2",
    "agent.contention.groups=2",
    "agent.contention.group_size=2",
    "eval.seeds=[100,101,102,103]",
]


def _val_env() -> object:
    dist = ContentionDistribution(enabled=True, trace_jobs=[20])
    return ContentionConfig(scale="small", num_jobs=16, distribution=dist).make_distribution(
        "validation"
    )


def test_a_mixture_trains_through_train_py(tmp_path: Path) -> None:
    """Two iterations over the distribution: the validation episodes are the validation
    role's draws (recorded by label), the best checkpoint is chosen on the mean ratio to the
    best rule per episode, which the saved network reproduces; the policy is the set network,
    saved with the base cluster's layout."""
    out = tmp_path / "run"
    proc = run_script("train.py", *TINY, f"hydra.run.dir={out}", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    env = _val_env()
    seeds = [100, 101, 102, 103]
    assert summary["distribution"]["enabled"] is True
    assert summary["validation_settings"] == [env.drawn(s).record["label"] for s in seeds]
    runs = summary["validation_rules_avg_jct"]
    acting = {n: r for n, r in CONTENTION_TEACHERS.items() if not rule_missing(n, env.placements)}
    assert set(runs) == set(acting) and "exclusive_overlap" not in acting  # no ovl candidate
    for name, rule in acting.items():  # each rule's avg JCT on each drawn episode
        got = [run_episode(env, s, act=lambda e, _o, r=rule: r(e)).info["avg_jct_s"] for s in seeds]
        assert runs[name] == pytest.approx(got, rel=1e-12)
    best = [min(v) for v in zip(*runs.values(), strict=True)]
    with open(out / "learning_curve.csv", newline="") as f:
        curve = list(csv.DictReader(f))
    assert [int(r["iteration"]) for r in curve] == [0, 1, 2]
    net, meta = load_episode_pg(out / "checkpoints" / "final" / "policy.npz")
    assert isinstance(net, SetContentionNet) and meta["env"]["num_servers"] == 16
    m = validate_contention(net, env, seeds, best)  # type: ignore[arg-type]
    assert float(curve[-1]["score"]) == pytest.approx(m["score"], rel=1e-12)
    assert m["score"] == pytest.approx(
        float(np.mean([a / b for a, b in zip(_jcts(net, env, seeds), best, strict=True)]))
    )
    assert summary["best_score"] == min(float(r["score"]) for r in curve)


def _jcts(net: SetContentionNet, env: object, seeds: list[int]) -> list[float]:
    return [run_episode(env, s, net).info["avg_jct_s"] for s in seeds]


def test_the_best_of_two_rules_is_each_workloads_winner() -> None:
    """``teacher=exclusive+srsf``: on each workload the rule of the lower avg JCT (ties to the
    first), run by hand; its cloning data are that rule's decisions on that workload."""
    env = _val_env()
    names = ["exclusive", "srsf"]
    seeds = list(range(10_000, 10_010))
    best = BestRule(env, names, seeds)  # type: ignore[arg-type]
    for s in seeds:
        jcts = [
            run_episode(env, s, act=lambda e, _o, n=n: CONTENTION_TEACHERS[n](e)).info["avg_jct_s"]
            for n in names
        ]
        want = names[1] if jcts[1] < jcts[0] else names[0]
        assert best.choice[s] == want
        got = teacher_data(env, best, [s])[2]
        assert np.array_equal(got, teacher_data(env, CONTENTION_TEACHERS[want], [s])[2])
    assert set(best.choice.values()) == set(names)  # each rule wins somewhere


@pytest.mark.parametrize(
    ("override", "says"),
    [
        (
            "agent.contention.arch=mlp",
            "contention.distribution draws clusters of several sizes: it needs "
            "agent.contention.arch=set",
        ),
        ("eval.seeds=[5,10000]", "eval.seeds [10000]: with contention.distribution"),
        ("contention.distribution.trace_vcs=[11cb48,e13805]", "['e13805'] are not training VCs"),
        ("contention.distribution.loads=[]", "contention.distribution.loads must be a non-empty"),
        ("agent.contention.teacher=exclusive+exclusive", "a rule named twice"),
        ("agent.contention.teacher=exclusive+oracle", "unknown Contention-v0 teacher 'oracle'"),
    ],
)
def test_bad_settings_are_one_clear_error(override: str, says: str, tmp_path: Path) -> None:
    assert says in train_refusal([*TINY, override], tmp_path / "r")


def test_an_unknown_key_is_refused(tmp_path: Path) -> None:
    proc = run_script(
        "train.py", *TINY, "contention.distribution.nodes=[4]", f"hydra.run.dir={tmp_path}",
        timeout=300,
    )  # fmt: skip
    assert proc.returncode != 0 and "nodes" in proc.stderr
