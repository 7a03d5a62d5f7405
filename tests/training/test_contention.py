"""``train.py +agent=contention_pg``: the Contention-v0 recipe as a ``train.py`` run
(:mod:`training.contention`), on a small cluster and few workloads."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from agents.episode_pg import load_episode_pg, run_episode
from envs.gym.contention_env import CONTENTION_TEACHERS, ContentionEnv, rule_missing
from tests.cli import run_script, train_refusal
from training.contention import validate_contention

SMALL = [
    "+agent=contention_pg",
    "contention=small",
    "contention.num_jobs=16",
    "agent.contention.iterations=2",
    "agent.contention.val_every=1",
    "agent.contention.bc_workloads=4",
    "agent.contention.bc_epochs=5",
    "agent.contention.groups=2",
    "agent.contention.group_size=4",
    "eval.seeds=[100,101]",
]


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("contention_pg") / "run"
    proc = run_script("train.py", *SMALL, f"hydra.run.dir={out}", timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "| learned (final)" in proc.stdout and "avg JCT (s)" in proc.stdout
    return out


def _env() -> ContentionEnv:
    return ContentionEnv(scale="small", num_jobs=16, comm="srsf1", placements=("lwf1", "ls", "ff"))


def test_the_run_writes_its_directory_and_its_figures_are_the_envs(run: Path) -> None:
    """The baselines are every registered rule through the env; the curve's points are the
    saved networks' argmax on the validation workloads; the record says what ran."""
    summary = json.loads((run / "summary.json").read_text())
    env = _env()
    # every rule that acts in the env: not exclusive_overlap, whose ovl candidate it lacks
    acting = {n: r for n, r in CONTENTION_TEACHERS.items() if not rule_missing(n, env.placements)}
    assert "exclusive_overlap" not in acting and "exclusive_backfill" in acting
    assert set(summary["baselines_avg_jct"]) == set(acting)
    for name, rule in acting.items():
        jcts = [
            run_episode(env, s, act=lambda e, _o, r=rule: r(e)).info["avg_jct_s"]
            for s in (100, 101)
        ]
        assert summary["baselines_avg_jct"][name] == pytest.approx(float(np.mean(jcts)), rel=1e-12)
    with open(run / "learning_curve.csv", newline="") as f:
        curve = list(csv.DictReader(f))
    assert [int(r["iteration"]) for r in curve] == [0, 1, 2]
    assert int(curve[0]["timesteps"]) == 0 < int(curve[-1]["timesteps"])
    net, meta = load_episode_pg(run / "checkpoints" / "final" / "policy.npz")
    assert meta["env"]["num_jobs"] == 16 and meta["env"]["comm"] == "srsf1"
    assert (
        meta["act"] == "argmax" and meta["training"]["config"]["agent"]["algo"] == "contention_pg"
    )
    final = validate_contention(net, env, [100, 101])["avg_jct"]
    assert float(curve[-1]["avg_jct"]) == pytest.approx(final, rel=1e-12)
    record = json.loads((run / "run.json").read_text())
    assert record["config"]["agent"]["contention"]["teacher"] == "exclusive"
    assert record["numerics"]["portable"] is True


def test_its_policy_runs_in_evaluate_py(run: Path, tmp_path: Path) -> None:
    """``contention:<checkpoint dir>`` acts by the saved network on the engine's workloads."""
    best = run / "checkpoints" / "best"
    proc = run_script(
        "evaluate.py", "workload=ada160", f"stacks=[lwf1_srsf1,contention:{best}]",
        "workers=1", "plot=false", f"out_dir={tmp_path / 'ev'}", timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"contention:{best}" in (tmp_path / "ev" / "summary.md").read_text()


@pytest.mark.parametrize(
    ("override", "says"),
    [
        (
            "agent.contention.teacher=oracle",
            "unknown Contention-v0 teacher 'oracle'; known: exclusive, exclusive_backfill, "
            "exclusive_easy, exclusive_overlap, srsf",
        ),
        ("agent.contention.epsilon=1.0", "agent.contention.epsilon must be in [0, 1)"),
        ("agent.contention.iterations=0", "agent.contention.iterations must be an integer >= 1"),
        ("mixture=dl2_philly", "mixture is not supported by agent.algo contention_pg"),
        ("contention.placements=[lwf1,best]", "unknown placements ['best']"),
        (
            "agent.contention.teacher=exclusive_overlap",
            "agent.contention.teacher: exclusive_overlap places with ['ovl'], which the env's",
        ),
    ],
)
def test_bad_settings_are_one_clear_error(override: str, says: str, tmp_path: Path) -> None:
    assert says in train_refusal([*SMALL, override], tmp_path / "r")


# ------------------------------------------------- one pipeline, any learner of the env


def test_plan_pg_in_contention_is_contention_pg_bit_for_bit(run: Path, tmp_path: Path) -> None:
    """The ``episodes`` pipeline is one pipeline configured by the env: ``plan_pg`` pointed at
    Contention-v0 (``env=contention``) with ``contention_pg``'s settings is the same learner
    in the same world, so its curve and its weights equal the ``contention_pg`` run's."""
    out = tmp_path / "plan_pg"
    same = [a.replace("+agent=contention_pg", "+agent=plan_pg") for a in SMALL]
    proc = run_script("train.py", *same, "env=contention", "agent.ent_coef=0.0",
                      f"hydra.run.dir={out}", timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["env_id"] == "dlsched/Contention-v0" and summary["unit"] == "s"
    with (
        open(run / "learning_curve.csv", newline="") as f,
        open(out / "learning_curve.csv", newline="") as g,
    ):
        mine, theirs = list(csv.DictReader(g)), list(csv.DictReader(f))
    assert [r["avg_jct"] for r in mine] == [r["avg_jct"] for r in theirs]
    a, _ = load_episode_pg(run / "checkpoints" / "final" / "policy.npz")
    b, meta = load_episode_pg(out / "checkpoints" / "final" / "policy.npz")
    pairs = zip(a.state_dict().values(), b.state_dict().values(), strict=True)
    assert all((x == y).all() for x, y in pairs)
    # the run record holds the block of the env it trained in, not ClusterPlan-v0's
    agent = meta["training"]["config"]["agent"]
    assert "contention" in agent and "plan" not in agent


def test_the_actor_critic_trains_in_contention(tmp_path: Path) -> None:
    """The second learner of Contention-v0: ``+agent=contention_a2c`` (PlanA2C, its critic
    and replay) through the same pipeline; its checkpoints run as ``contention:<dir>``."""
    out = tmp_path / "a2c"
    args = [a.replace("+agent=contention_pg", "+agent=contention_a2c") for a in SMALL]
    proc = run_script("train.py", *args, "agent.a2c.replay=1", f"hydra.run.dir={out}",
                      timeout=600)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["agent"] == "contention_a2c" and summary["env_id"] == "dlsched/Contention-v0"
    assert summary["agent_config"]["a2c"]["critic"] is True
    net, meta = load_episode_pg(out / "checkpoints" / "best" / "policy.npz")
    assert meta["training"]["config"]["agent"]["algo"] == "plan_a2c"
    iteration = summary["best"]["iteration"]
    curve = {int(r["iteration"]): r for r in csv.DictReader((out / "learning_curve.csv").open())}
    best = validate_contention(net, _env(), [100, 101])["avg_jct"]
    assert float(curve[iteration]["avg_jct"]) == pytest.approx(best, rel=1e-12)
    with (out / "tb").glob("*/events*").__next__().open("rb") as f:
        assert b"train/value_loss" in f.read()  # the critic's fit is logged


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (
            ["+agent=ppo", "env=contention"],
            "agent.algo=ppo does not train in dlsched/Contention-v0 (it trains in "
            "dlsched/Cluster-v0); learners for dlsched/Contention-v0: cem, contention_pg, "
            "distill, expert_iteration, plan_a2c, plan_pg",
        ),
        (
            ["+agent=a2c", "env=contention"],
            "agent.a2c.explore=0.1 is the job-aware exploration over the slot's plans",
        ),
        (["+agent=contention_pg", "env_id=dlsched/Nope-v0"], "unknown env_id 'dlsched/Nope-v0'"),
        (
            ["+agent=contention_pg", "eval.windows=2"],
            "eval.windows (trace-window validation) is supported in dlsched/ClusterPlan-v0 only",
        ),
    ],
)
def test_a_pairing_the_learner_does_not_support_is_one_line(
    args: list[str], says: str, tmp_path: Path
) -> None:
    assert says in train_refusal(args, tmp_path / "r")
