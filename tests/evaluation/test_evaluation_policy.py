"""The ``policy:<checkpoint>`` scheduler kind and env mode of ``evaluate.py``: a trained policy
head to head with ``elastic:<allocator>`` heuristics through the same DL² env."""

from __future__ import annotations

import csv
import json
import math
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from agents.checkpoint import load_policy, save_policy_weights
from agents.episode_results import (
    evaluate_allocator,
    evaluate_policy,
    run_episode,
    run_episode_detailed,
)
from agents.policy import DL2Policy, policy_kwargs
from envs.gym.factory import EnvConfig, make_env
from envs.gym.heuristic import HeuristicDriver
from envs.sim import ConfigError
from envs.sim.elastic.allocators import DRF
from evaluation.config import (
    ClusterConfig,
    DL2Config,
    ElasticConfig,
    EnvSection,
    EvaluateConfig,
    PolicyEvalConfig,
    WorkloadConfig,
)
from evaluation.pipeline import evaluate, make_plan

ROOT = Path(__file__).resolve().parents[2]
SLOT_S = 1200.0
HORIZON = 300  # slots: an untrained policy may never finish some jobs


@pytest.fixture(scope="module")
def policy_pt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained DL²-style policy for the ``tiny`` env, saved as pretraining weights."""
    env = make_env(EnvConfig(setting="tiny"))
    policy = DL2Policy(
        env.observation_space, env.action_space, lambda _: 1e-4, **policy_kwargs(None, env.J)
    )
    meta = {"env": EnvConfig(setting="tiny").as_dict(), "policy": {}}
    return save_policy_weights(policy, tmp_path_factory.mktemp("ckpt") / "policy.pt", meta)


def _env_cfg(stacks: list[str], policy_eval: PolicyEvalConfig | None = None) -> EvaluateConfig:
    """Workload kind ``env`` on the tiny setting, one seed, in this process, no plots."""
    workload = WorkloadConfig(kind="env", env=EnvSection(setting="tiny", max_slots=HORIZON))
    return EvaluateConfig(
        workload=workload,
        stacks=stacks,
        policy_eval=policy_eval or PolicyEvalConfig(),
        seeds=[0],
        workers=1,
        plot=False,
    )


def test_policy_and_elastic_head_to_head_through_evaluate_py(
    policy_pt: Path, tmp_path: Path
) -> None:
    run_dir = tmp_path / "r"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "evaluate.py"),
            "workload=env",
            "workload.env.setting=tiny",
            f"workload.env.max_slots={HORIZON}",
            f"stacks=[policy:{policy_pt},elastic:drf]",
            "policy_eval.deterministic=true",
            "seeds=[0,1]",
            "workers=2",
            f"out_dir={run_dir}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    policy = f"policy:{policy_pt}"
    assert "window of J=8 jobs" in proc.stdout and "4/4" in proc.stderr

    with open(run_dir / "summary.csv", newline="") as f:
        summary = {(r["stack"], r["seed"]): r for r in csv.DictReader(f)}
    assert set(summary) == {(s, k) for s in (policy, "elastic:drf") for k in ("0", "1")}
    # an untrained policy may leave jobs at the horizon: such seeds get no mean; a scheduler
    # censored on every seed gets none, and the others keep theirs (summary_means.csv)
    censored = {(s, k) for (s, k), r in summary.items() if float(r["censored_jobs"]) > 0}
    stacks = [policy, "elastic:drf"]
    always = [s for s in stacks if {(s, "0"), (s, "1")} <= censored]
    kept = [s for s in stacks if s not in always]
    seeds = [k for k in ("0", "1") if not any((s, k) in censored for s in kept)]
    means_csv = run_dir / "summary_means.csv"
    if len(seeds) == 2 and kept:
        with open(means_csv, newline="") as f:
            means = {r["stack"]: r for r in csv.DictReader(f)}
        assert list(means) == kept and {r["seed"] for r in means.values()} == {"mean(0,1)"}
    else:
        assert not means_csv.exists()
    for row in summary.values():
        assert 0 < float(row["avg_jct_s"]) <= HORIZON * SLOT_S
        assert float(row["median_jct_s"]) <= float(row["p95_jct_s"]) <= float(row["makespan_s"])
        assert 0 <= float(row["gpu_util_pct"]) <= 100
        assert float(row["jobs"]) == 12
    # the same numbers as the agents' own evaluation through the same env
    env_config = EnvConfig(setting="tiny", max_slots=HORIZON)
    drf = evaluate_allocator(DRF, env_config, [0, 1])
    net, _ = load_policy(policy_pt)
    learned = evaluate_policy(net, env_config, [0, 1])
    for k, (h, p) in enumerate(zip(drf, learned, strict=True)):
        assert float(summary[("elastic:drf", str(k))]["avg_jct_s"]) == pytest.approx(
            h.avg_jct * SLOT_S
        )
        # the unit of train.py's validation, in the same table
        assert float(summary[("elastic:drf", str(k))]["avg_jct_slots"]) == pytest.approx(h.avg_jct)
        assert float(summary[(policy, str(k))]["avg_jct_s"]) == pytest.approx(p.avg_jct * SLOT_S)
        assert float(summary[(policy, str(k))]["gpu_util_pct"]) == pytest.approx(100 * p.gpu_util)

    safe = policy.replace(":", "-").replace("/", "-")
    with open(run_dir / f"jobs_{safe}_seed1.csv", newline="") as f:
        jobs = list(csv.DictReader(f))
    assert len(jobs) == 12
    for job in jobs:
        assert float(job["submit_s"]) <= float(job["start_s"]) <= float(job["finish_s"])
    record = json.loads((run_dir / "run.json").read_text())
    assert record["env"]["setting"] == "tiny" and record["env"]["max_slots"] == HORIZON
    run = next(r for r in record["runs"] if r["stack"] == policy)
    assert run["policy"]["deterministic"] is True and run["window_J"] == 8
    assert run["episode"]["decisions"] > 0


def test_sampled_policy_is_reproducible(policy_pt: Path, tmp_path: Path) -> None:
    sampled = PolicyEvalConfig(deterministic=False, sample_seed=3)
    cfg = _env_cfg([f"policy:{policy_pt}"], sampled)
    first = evaluate(cfg, tmp_path / "a", {})
    again = evaluate(cfg, tmp_path / "b", {})
    key = "avg_jct_s"
    assert [r[key] for r in first] == [r[key] for r in again]
    assert math.isfinite(first[0][key]) and first[0][key] > 0


def test_detailed_episode_matches_run_episode() -> None:
    env = make_env(EnvConfig(setting="tiny"))
    driver = HeuristicDriver(DRF(), env)
    plain = run_episode(env, lambda _e, _o: driver.act(), 1)
    driver = HeuristicDriver(DRF(), env)
    detail = run_episode_detailed(env, lambda _e, _o: driver.act(), 1)
    assert detail.result == plain
    assert plain.unfinished == 0
    jcts = [o.finish - o.arrival_slot for o in detail.jobs if o.finish is not None]
    assert len(jcts) == len(env.jobs)
    assert sum(jcts) / len(jcts) == pytest.approx(plain.avg_jct)
    for o in detail.jobs:
        assert o.first_slot is not None and o.finish is not None
        assert o.arrival_slot <= o.first_slot <= o.finish and o.slots_run >= 1
    assert len(detail.gpu_util) == math.ceil(plain.makespan)


def test_through_env_runs_the_dl2_workload_in_the_env(tmp_path: Path) -> None:
    # workload dl2 sized like the tiny setting; through the env (window J = 20: no policy)
    dl2 = DL2Config(num_jobs=12, max_arrivals_per_slot=2, max_epochs=3000, max_workers=8, max_ps=8)
    cfg = EvaluateConfig(
        cluster=ClusterConfig(num_servers=4, gpus_per_server=2),
        workload=WorkloadConfig(kind="dl2", dl2=dl2),
        elastic=ElasticConfig(through_env=True),
        stacks=["elastic:drf"],
        seeds=[0],
        workers=1,
        plot=False,
    )
    [row] = evaluate(cfg, tmp_path / "r", {})
    env_config = EnvConfig(setting="tiny", overrides={"J": 20}, max_slots=100_000)
    [expected] = evaluate_allocator(DRF, env_config, [0])
    assert row["avg_jct_s"] == pytest.approx(expected.avg_jct * SLOT_S)


def test_env_mode_config_errors(policy_pt: Path, tmp_path: Path) -> None:
    policy = f"policy:{policy_pt}"
    with pytest.raises(ConfigError, match="workload=env"):
        make_plan(EvaluateConfig(stacks=[policy, "elastic:drf"]))
    small = WorkloadConfig(kind="env", env=EnvSection(setting="small"))
    with pytest.raises(ConfigError, match="J=8"):
        make_plan(EvaluateConfig(workload=small, stacks=[policy]))
    with pytest.raises(ConfigError, match="need job-level workloads"):
        make_plan(_env_cfg([policy, "lwf1_srsf1"]))
    with pytest.raises(ConfigError, match="not found"):
        make_plan(_env_cfg([f"policy:{tmp_path / 'missing.pt'}"]))
    (tmp_path / "lonely.pt").write_bytes(b"")
    with pytest.raises(ConfigError, match=r"lonely\.json"):
        make_plan(_env_cfg([f"policy:{tmp_path / 'lonely.pt'}"]))
    dl2 = EvaluateConfig(
        workload=WorkloadConfig(kind="dl2"),
        elastic=ElasticConfig(through_env=True),
        stacks=["elastic:drf"],
    )
    with pytest.raises(ConfigError, match="GPU slots per node"):
        make_plan(dl2)


def test_the_parent_process_does_not_import_torch() -> None:
    code = (
        "import sys, evaluate, evaluation.env_runs, evaluation.policy; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_censored_seeds_are_shown_and_left_out_of_the_statistics(tmp_path: Path) -> None:
    """A horizon that cuts seed 1 short (tiny, 12 slots): its runs are in the per-run table
    with their censored-job counts, the means and paired differences use seeds 0 and 2 only
    (the same numbers as an evaluation of just those seeds), and summary.md says so."""
    workload = WorkloadConfig(kind="env", env=EnvSection(setting="tiny", max_slots=12))

    def run(seeds: list[int], out: Path) -> list[dict[str, object]]:
        cfg = EvaluateConfig(
            workload=workload,
            stacks=["elastic:drf", "elastic:optimus"],
            seeds=seeds,
            workers=1,
            plot=False,
        )
        return evaluate(cfg, out, {})

    rows = run([0, 1, 2], tmp_path / "all")
    by = {(r["stack"], r["seed"]): r for r in rows}
    assert by[("elastic:drf", "1")]["censored_jobs"] == 1
    assert by[("elastic:drf", "0")]["censored_jobs"] == 0
    assert ("elastic:drf", "mean(0,2)") in by
    clean = {(r["stack"], r["seed"]): r for r in run([0, 2], tmp_path / "clean")}
    for stack in ("elastic:drf", "elastic:optimus"):
        assert by[(stack, "mean(0,2)")]["avg_jct_s"] == clean[(stack, "mean(0,2)")]["avg_jct_s"]
    text = (tmp_path / "all" / "summary.md").read_text()
    assert "**Censored runs**" in text and "- seed 1: `elastic:drf` 1 job(s)" in text
    assert "mean ± 95% CI over 2 seeds" in text
    with open(tmp_path / "all" / "paired.csv", newline="") as f:
        assert [int(r["seeds"]) for r in csv.DictReader(f)] == [2]


def test_the_default_horizon_fits_a_real_trace(tmp_path: Path) -> None:
    """A 200-job Philly VC trace arrives over ~700 slots: the default horizon runs from its
    last arrival (2000 slots more), so no job is cut off."""
    trace = ROOT / "envs" / "sim" / "data" / "traces" / "philly_vc_6c71a0_public.csv"
    workload = WorkloadConfig(kind="env", env=EnvSection(trace=str(trace)))
    cfg = EvaluateConfig(
        workload=workload, stacks=["elastic:drf"], seeds=[0], workers=1, plot=False
    )
    rows = evaluate(cfg, tmp_path, {})
    assert rows[0]["censored_jobs"] == 0 and rows[0]["jobs"] == 200
    env = json.loads((tmp_path / "run.json").read_text())["env"]
    plan = make_plan(cfg)
    last = max(j.arrival_slot for j in plan.prepared[0].elastic_jobs or ())
    assert env["max_slots"] == last + 2000 > 2000


def test_a_policy_on_a_trace_workload_points_to_the_env_trace(policy_pt: Path) -> None:
    trace = ROOT / "envs" / "sim" / "data" / "traces" / "philly_vc_6c71a0_public.csv"
    cfg = EvaluateConfig(
        workload=WorkloadConfig(kind="trace", path=str(trace)),
        stacks=[f"policy:{policy_pt}"],
        workers=1,
        plot=False,
    )
    with pytest.raises(ConfigError, match=r"for a trace: workload=env workload.env.trace=<csv>"):
        make_plan(cfg)


def test_policies_act_as_they_were_validated_unless_told() -> None:
    """``policy_eval.deterministic: null`` (default): the policy's recorded ``act`` (argmax
    for a checkpoint validated with argmax, ``policy.json``'s ``act``), else sampled, as
    ``train.py`` validates by default; an explicit setting wins."""
    from evaluation.policy import act_deterministic

    assert act_deterministic(None, {"act": "argmax"}) is True
    assert act_deterministic(None, {"act": "sampled"}) is False
    assert act_deterministic(None, {}) is False
    assert act_deterministic(False, {"act": "argmax"}) is False
    assert act_deterministic(True, {}) is True
    with pytest.raises(ConfigError, match="recorded act must be"):
        act_deterministic(None, {"act": "greedy"})


def test_training_validation_and_evaluate_py_draw_the_same_samples(
    policy_pt: Path, tmp_path: Path
) -> None:
    """Sampled: train.py's validation (batched, :func:`evaluate_policy`) and evaluate.py's
    ``policy:`` scheduler (one decision at a time) draw each seed's actions from
    ``default_rng([sample_seed, seed])``, so the same checkpoint gets the same figures."""
    import numpy as np

    from agents.policy import NumpyPolicy

    net, _ = load_policy(policy_pt)
    env_config = EnvConfig(setting="tiny", max_slots=HORIZON)
    batched = evaluate_policy(net, env_config, [0, 1], deterministic=False, sample_seed=3)
    fast = NumpyPolicy(net)
    for seed, got in zip([0, 1], batched, strict=True):
        rng = np.random.default_rng([3, seed])
        one = run_episode(
            make_env(env_config),
            lambda e, o, rng=rng: fast.act(o, e.action_masks(), deterministic=False, rng=rng),
            seed,
        )
        assert got == one
    rows = evaluate(_env_cfg([f"policy:{policy_pt}"], PolicyEvalConfig(False, 3)), tmp_path, {})
    by_seed = {r["seed"]: r for r in rows}
    assert by_seed["0"]["avg_jct_s"] == pytest.approx(batched[0].avg_jct * SLOT_S)


def test_env_trace_takes_the_workload_trace_options(tmp_path: Path) -> None:
    """One set of trace options for both paths: ``workload.trace.*`` windows the env's trace
    too; without a trace they are refused."""
    from evaluation.config import TraceConfig

    trace = ROOT / "envs" / "sim" / "data" / "traces" / "philly_vc_6c71a0_public.csv"
    opts = TraceConfig(max_jobs=30, duration_cap_s=86400.0)
    workload = WorkloadConfig(kind="env", env=EnvSection(trace=str(trace)), trace=opts)
    cfg = EvaluateConfig(
        workload=workload, stacks=["elastic:drf"], seeds=[0], workers=1, plot=False
    )
    rows = evaluate(cfg, tmp_path, {})
    assert rows[0]["jobs"] == 30 and rows[0]["censored_jobs"] == 0
    env = json.loads((tmp_path / "run.json").read_text())["env"]
    assert env["trace_options"]["max_jobs"] == 30
    no_trace = WorkloadConfig(kind="env", env=EnvSection(setting="tiny"), trace=opts)
    with pytest.raises(ConfigError, match=r"workload\.trace\.\* options apply to a trace"):
        make_plan(replace(cfg, workload=no_trace))
