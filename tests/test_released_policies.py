"""The policies shipped in ``policies/`` (README, "Released policies"): each loads without
training, acts in the env it was trained for, finishes every job and beats DRF on a validation
workload of its setting (the fixed weights make this deterministic), and ``evaluate.py`` takes
one as ``policy:<dir>`` on a trace through ``workload.env.trace``."""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path

import pytest

from agents.checkpoint import load_policy
from agents.episode_pg import load_episode_pg
from agents.episode_results import evaluate_allocator, evaluate_policy
from agents.plan_policy import PlanPolicy
from agents.policy_file import CLUSTER_ID, read_meta
from envs.gym.factory import coerce_env_config, make_env
from envs.gym.plan_env import PLAN_ENV_ID
from envs.provenance import read_provenance
from envs.sim.elastic.allocators import DRF, make_allocator
from tests.cli import run_script

ROOT = Path(__file__).resolve().parents[1]
#: every released policy is one file of the one format (agents/policy_file.py): its layout
#: names the env it acts in
FILES = {p.parent: read_meta(p) for p in sorted((ROOT / "policies").glob("*/policy.npz"))}
#: ``dlsched/Cluster-v0`` networks (``train.py``'s SB3-style learners)
POLICIES = sorted(d for d, m in FILES.items() if m["layout"]["env_id"] == CLUSTER_ID)
#: ``dlsched/ClusterPlan-v0`` policies (``train.py +agent=plan_pg``); the other ``policy.npz``
#: files are Contention-v0 policies (tests/evaluation/test_evaluation_contention.py)
PLAN_POLICIES = sorted(d for d, m in FILES.items() if m["layout"]["env_id"] == PLAN_ENV_ID)
TRACE = ROOT / "envs" / "sim" / "data" / "traces" / "philly_vc_6c71a0_public.csv"


def test_policies_are_shipped_small_and_documented() -> None:
    assert len(POLICIES) >= 2
    listed = (ROOT / "policies" / "README.md").read_text()
    for path in POLICIES:
        assert (path / "policy.npz").stat().st_size < 1_000_000
        meta = FILES[path]
        assert meta["training"]["command"].startswith("python train.py")
        assert meta["act"] in ("argmax", "sampled")
        assert f"`{path.name}`" in listed


@pytest.mark.parametrize("path", POLICIES, ids=[p.name for p in POLICIES])
def test_released_policy_acts_and_beats_drf(path: Path) -> None:
    policy, meta = load_policy(path)
    env_config = coerce_env_config(meta["env"])
    seeds = [100]  # a validation seed: never a test workload
    learned = evaluate_policy(policy, env_config, seeds, deterministic=meta["act"] == "argmax")
    drf = evaluate_allocator(DRF, env_config, seeds)
    assert learned[0].unfinished == 0
    assert learned[0].decisions > 0
    assert learned[0].avg_jct < drf[0].avg_jct


def test_plan_policies_are_shipped_small_and_documented() -> None:
    assert len(PLAN_POLICIES) >= 2
    listed = (ROOT / "policies" / "README.md").read_text()
    for path in PLAN_POLICIES:
        assert (path / "policy.npz").stat().st_size < 1_000_000
        _, meta = load_episode_pg(path / "policy.npz")
        record = meta["training"]
        made = read_provenance(record)  # released before or after envs/provenance.py
        command = " ".join(made["command"])
        assert command.startswith("train.py")
        assert "+agent=plan_pg" in command or "+agent=plan_general" in command
        assert record["config"]["seed"] == record["seed"] and made["git_commit"]
        assert f"`{path.name}`" in listed


@pytest.mark.parametrize("path", PLAN_POLICIES, ids=[p.name for p in PLAN_POLICIES])
def test_released_plan_policy_acts_and_beats_drf_and_optimus(path: Path) -> None:
    """On a validation workload (never a test one), argmax as released: every job finishes,
    and the policy is below DRF and Optimus through the same env."""
    from agents.episode_results import run_episode

    policy = PlanPolicy.load(path / "policy.npz")
    assert policy.env is not None
    env_config = coerce_env_config(policy.env)
    env = make_env(env_config)
    actor = policy.actor(env)
    mine = run_episode(env, actor, 100)
    assert mine.unfinished == 0 and len(actor.chosen) > 0
    for name in ("drf", "optimus"):
        (ref,) = evaluate_allocator(lambda name=name: make_allocator(name), env_config, [100])
        assert mine.avg_jct < ref.avg_jct, name


def _trace_rows(
    paths: Path | list[Path], heuristic: str, out: Path, *more: str
) -> dict[str, dict[str, str]]:
    """``evaluate.py`` with ``policy:<path>`` of each of ``paths`` and ``elastic:<heuristic>``
    on the shipped Philly trace through the env, seed 0: each scheduler's summary row."""
    paths = [paths] if isinstance(paths, Path) else paths
    stacks = ",".join([*(f"policy:{p}" for p in paths), f"elastic:{heuristic}"])
    proc = run_script(
        "evaluate.py",
        "workload=env",
        f"workload.env.trace={TRACE}",
        *more,
        f"stacks=[{stacks}]",
        "seeds=[0]",
        "workers=1",
        "plot=false",
        f"out_dir={out}",
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    with open(out / "summary.csv", newline="") as f:
        rows = {r["stack"]: r for r in csv.DictReader(f) if r["seed"] == "0"}
    assert set(rows) == {*(f"policy:{p}" for p in paths), f"elastic:{heuristic}"}
    return rows


#: the plan policies by the env they were trained in (one evaluate.py run acts in one env)
PLAN_ENVS: dict[str, list[Path]] = {}
for _path in PLAN_POLICIES:
    PLAN_ENVS.setdefault(json.dumps(FILES[_path]["env"], sort_keys=True), []).append(_path)


@pytest.mark.parametrize(
    "env", sorted(PLAN_ENVS), ids=lambda e: "+".join(p.name for p in PLAN_ENVS[e])
)
def test_evaluate_py_runs_the_released_plan_policies_on_a_trace(env: str, tmp_path: Path) -> None:
    # the trace's first 8 jobs: each plan policy's path through a trace (the searched one's
    # rollouts included) at a small part of the cost, those trained in the same env in one
    # evaluate.py run
    paths = PLAN_ENVS[env]
    rows = _trace_rows(paths, "optimus", tmp_path / "r", "workload.trace.max_jobs=8")
    assert len(rows) == len(paths) + 1
    for row in rows.values():
        assert float(row["jobs"]) == 8
        assert 0 < float(row["avg_jct_s"]) < float("inf")


def test_evaluate_py_runs_a_released_policy_on_a_trace(tmp_path: Path) -> None:
    path = next(p for p in POLICIES if "mixture" in p.name)
    for row in _trace_rows(path, "drf", tmp_path / "r").values():
        assert float(row["jobs"]) == 200
        assert 0 < float(row["avg_jct_s"]) < float("inf")


def test_the_general_policy_acts_on_every_setting_and_another_cluster_size() -> None:
    """``policies/general`` (one set of weights, issue 39) acts on DL²'s tiny, small, medium
    and large settings (windows J = 8, 20, 12, 40) and on medium at 3x its nodes, through each
    env as the heuristics run, on a validation workload: every job finishes and it is below
    DRF there."""
    from agents.episode_results import run_episode

    policy = PlanPolicy.load(ROOT / "policies" / "general" / "policy.npz")
    assert policy.any_window and policy.env is not None
    base = coerce_env_config(policy.env)
    for setting, overrides in (("tiny", {}), ("small", {}), ("medium", {"num_nodes": 36}),
                               ("large", {})):  # fmt: skip
        config = replace(base, setting=setting, overrides=overrides or None)
        env = make_env(config)
        mine = run_episode(env, policy.actor(env), 100)
        (drf,) = evaluate_allocator(DRF, config, [100])
        assert mine.unfinished == 0 and mine.avg_jct < drf.avg_jct, setting
