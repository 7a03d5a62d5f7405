"""End-to-end tests of the ``evaluate.py`` command (run in a subprocess, as a user would)."""

from __future__ import annotations

import csv
import json
import re
import subprocess
from pathlib import Path

import pytest

from tests.cli import run_script

ROOT = Path(__file__).resolve().parents[2]


def _evaluate(*overrides: str) -> subprocess.CompletedProcess[str]:
    return run_script("evaluate.py", *overrides)


def test_one_stack_writes_the_run_dir(tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    proc = _evaluate("stacks=[lwf1_srsf1]", "seeds=[0]", "workers=1", f"out_dir={run_dir}")
    assert proc.returncode == 0, proc.stderr

    row = next(line for line in proc.stdout.splitlines() if line.startswith("| lwf1_srsf1 "))
    assert [c.strip() for c in row.strip("|").split("|")][:3] == [
        "lwf1_srsf1",
        "LWF-1 + SRSF(1)",
        "0",
    ]
    assert "paper s" in proc.stdout
    assert "**Units**: `s` (tables, plot axes) = seconds of simulated time" in proc.stdout
    assert str(run_dir) in proc.stdout.strip().splitlines()[-1]

    with open(run_dir / "summary.csv", newline="") as f:
        summary = list(csv.DictReader(f))
    assert [row["stack"] for row in summary] == ["lwf1_srsf1"]
    assert float(summary[0]["avg_jct_s"]) > 0
    assert "lwf1_srsf1" in (run_dir / "summary.md").read_text()

    with open(run_dir / "jobs_lwf1_srsf1_seed0.csv", newline="") as f:
        jobs = list(csv.DictReader(f))
    assert len(jobs) == 160
    assert {"job_id", "submit_s", "start_s", "finish_s", "jct_s", "queue_s", "slowdown"} <= set(
        jobs[0]
    )
    assert list(jobs[0])[:2] == ["stack", "seed"]
    assert {(j["stack"], j["seed"]) for j in jobs} == {("lwf1_srsf1", "0")}
    for job in jobs:
        jct = float(job["finish_s"]) - float(job["submit_s"])
        assert float(job["jct_s"]) == pytest.approx(jct)
        assert float(job["slowdown"]) >= 1 - 1e-9  # nothing runs faster than alone
    mean_jct = sum(float(j["jct_s"]) for j in jobs) / len(jobs)
    assert float(summary[0]["avg_jct_s"]) == pytest.approx(mean_jct)

    for png in (run_dir / "jct_cdf.png", run_dir / "utilisation.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the utilisation series averages to the run's utilisation
    with open(run_dir / "utilisation.csv", newline="") as f:
        util = list(csv.DictReader(f))
    area = sum((float(u["t1_s"]) - float(u["t0_s"])) * float(u["gpu_util"]) for u in util)
    span = float(util[-1]["t1_s"])
    assert 100 * area / span == pytest.approx(float(summary[0]["gpu_util_pct"]), rel=1e-6)

    record = json.loads((run_dir / "run.json").read_text())
    assert record["git_commit"]
    assert "git_dirty" in record
    assert record["config"]["stacks"] == ["lwf1_srsf1"]
    assert record["config"]["mode"] == "correct"
    assert record["config"]["cluster"]["num_servers"] == 16
    assert record["seeds"] == [0]
    assert {"python", "numpy", "dlsched"} <= set(record["versions"])
    [run] = record["runs"]
    assert run["stack"] == "lwf1_srsf1" and run["seed"] == 0
    sim = run["sim_config"]
    assert sim["model"]["seed"] == 0 and sim["fidelity"]["level"] == "full"
    assert (run_dir / ".hydra" / "config.yaml").exists()


def test_unknown_stack_is_a_clear_error(tmp_path: Path) -> None:
    proc = _evaluate("stacks=[nope_x]", f"out_dir={tmp_path / 'r'}")
    assert proc.returncode == 2
    assert "nope_x" in proc.stderr
    assert proc.stderr.startswith("error: ")
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "r").exists()  # a failed config leaves no run directory behind


def test_unknown_mode_is_a_clear_error(tmp_path: Path) -> None:
    proc = _evaluate("mode=bogus", f"out_dir={tmp_path / 'r'}")
    assert proc.returncode == 2
    assert "bogus" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "r" / "summary.csv").exists()


TRACE = [
    "job_id,submit_time_s,duration_s,num_gpus,job_type,status,vc,gpu_milli",
    "a,0,900,1,resnet50,,v1,1000",
    "cpu,30,50,0,,,v1,1000",
    "b,60,1800,8,vgg16,,v1,1000",
    "c,100,300,2,,,v2,1000",
    "d,400,2500,4,lstm,,v1,1000",
    "e,900,100,1,,,v1,500",
]


def test_trace_engine_and_elastic_over_seeds(tmp_path: Path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("\n".join(TRACE) + "\n")
    run_dir = tmp_path / "r"
    proc = _evaluate(
        "workload=trace",
        f"workload.path={trace}",
        "workload.time_unit=10",
        "workload.trace.repairs.zero_gpus=skip",
        "workload.trace.duration_cap_s=2000",
        "stacks=[lwf1_srsf1,elastic:drf,elastic:fifo]",
        "baseline=elastic:fifo",
        "seeds=[0,1]",
        "workers=2",
        f"out_dir={run_dir}",
    )
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    # nothing silently dropped: the summary counts what was read and skipped, and why
    assert "6 rows read, 5 jobs kept" in out and "1 num_gpus: zero (CPU-only job)" in out
    assert "Step `cap_durations`" in out and "capped=1" in out
    assert "Mean ± 95% CI over 2 seeds" in out and "Paired difference vs `elastic:fifo`" in out
    assert "5/6" in proc.stderr or "6/6" in proc.stderr  # progress

    record = json.loads((run_dir / "run.json").read_text())
    w0 = record["workloads"]["0"]
    assert w0["read"]["skipped"] == {"num_gpus: zero (CPU-only job)": 1}
    assert [s["op"] for s in w0["steps"]] == ["cap_durations", "fit_to_cluster"]
    assert w0["conversion"]["time_unit"] == 10 and w0["conversion"]["fractional_whole_gpu"] == 1
    assert len(record["runs"]) == 6

    with open(run_dir / "summary.csv", newline="") as f:
        summary = {(r["stack"], r["seed"]): r for r in csv.DictReader(f)}
    with open(run_dir / "summary_means.csv", newline="") as f:
        means = {r["stack"]: r for r in csv.DictReader(f)}
    # summary.csv: one row per run, nothing else; summary_means.csv: one per scheduler
    assert set(summary) == {(s, k) for s in ("lwf1_srsf1", "elastic:drf", "elastic:fifo")
                            for k in ("0", "1")}  # fmt: skip
    assert list(means) == ["lwf1_srsf1", "elastic:drf", "elastic:fifo"]
    for stack in ("lwf1_srsf1", "elastic:drf", "elastic:fifo"):
        per_seed = [float(summary[(stack, s)]["avg_jct_s"]) for s in ("0", "1")]
        mean = means[stack]
        assert mean["seed"] == "mean(0,1)"
        assert float(mean["avg_jct_s"]) == pytest.approx(sum(per_seed) / 2)
        # the 95% CI of 2 values: t(0.975, 1) x |a - b| / 2 = 12.706... x |a - b| / 2
        half = 12.706204736174694 * abs(per_seed[0] - per_seed[1]) / 2
        assert float(mean["avg_jct_s_ci95"]) == pytest.approx(half, rel=1e-9, abs=1e-9)
    assert "avg_jct_s_ci95" not in next(iter(summary.values()))
    with open(run_dir / "paired.csv", newline="") as f:
        paired = {r["stack"]: r for r in csv.DictReader(f)}
    diffs = [
        float(summary[("elastic:drf", s)]["avg_jct_s"])
        - float(summary[("elastic:fifo", s)]["avg_jct_s"])
        for s in ("0", "1")
    ]
    assert float(paired["elastic:drf"]["d_avg_jct_s"]) == pytest.approx(sum(diffs) / 2)

    # the engine sees real trace seconds: job d (capped to 2000 s, 4 GPUs) runs >= 2000 s
    with open(run_dir / "jobs_lwf1_srsf1_seed0.csv", newline="") as f:
        jobs = {r["name"]: r for r in csv.DictReader(f)}
    assert set(jobs) == {"a", "b", "c", "d", "e"}
    assert float(jobs["d"]["jct_s"]) >= 2000 - 10
    with open(run_dir / "jobs_elastic-drf_seed1.csv", newline="") as f:
        assert len(list(csv.DictReader(f))) == 5


def test_bad_trace_row_is_a_clear_error(tmp_path: Path) -> None:
    trace = tmp_path / "bad.csv"
    trace.write_text("\n".join(TRACE[:3]) + "\n")
    proc = _evaluate("workload=trace", f"workload.path={trace}", f"out_dir={tmp_path / 'r'}")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: bad.csv, line 3, column 'num_gpus'")
    assert "Traceback" not in proc.stderr


def test_dl2_workload_needs_elastic_schedulers(tmp_path: Path) -> None:
    proc = _evaluate("workload=dl2", "stacks=[lwf1_srsf1]", f"out_dir={tmp_path / 'r'}")
    assert proc.returncode == 2
    assert "elastic:<allocator>" in proc.stderr and "Traceback" not in proc.stderr


def test_jitter_makes_each_seed_a_jittered_copy(tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    proc = _evaluate(
        "stacks=[lwf1_srsf1]",
        "seeds=[1,2]",
        "workers=1",
        "plot=false",
        "workload=csv",
        f"workload.path={ROOT / 'envs/sim/data/ada_srsf/microsoft160_seed0.csv'}",
        "workload.jitter=0.001",
        f"out_dir={run_dir}",
    )
    assert proc.returncode == 0, proc.stderr
    record = json.loads((run_dir / "run.json").read_text())
    assert record["config"]["workload"]["jitter"] == 0.001
    with open(run_dir / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))  # one per run (the means: summary_means.csv)
    assert [r["seed"] for r in rows] == ["1", "2"]
    jct = {int(r["seed"]): float(r["avg_jct_s"]) for r in rows}
    # the same 160 jobs, two timing draws, two results (measured 1,449.7 / 1,324.5 paper s)
    assert len(jct) == 2 and jct[1] != jct[2]
    # a kind without job-level models refuses the key, naming it
    bad = _evaluate("workload=dl2", "workload.jitter=0.01", f"out_dir={tmp_path / 'b'}")
    assert bad.returncode == 2 and "workload.jitter" in bad.stderr


from evaluation.kinds import run_task as _RUN_TASK  # noqa: E402 - the original, for the next


def _dies_on_seed_1(task):  # type: ignore[no-untyped-def]
    """A run that kills its worker process on seed 1 (module level: pickled by reference)."""
    import os

    if task.prepared.seed == 1:
        os._exit(3)
    return _RUN_TASK(task)


def test_a_dead_worker_keeps_the_finished_runs(tmp_path, monkeypatch) -> None:
    """A worker process killed mid-run (here: seed 1's runs exit the process) used to lose
    every finished run to a BrokenProcessPool traceback.  Now the other runs finish, the run
    directory holds a partial summary over the seeds every scheduler finished and failed.csv,
    and the error names the failure and where the results are."""
    import csv

    from envs.sim import DlschedError
    from evaluation import kinds
    from evaluation.config import EvaluateConfig, WorkloadConfig
    from evaluation.pipeline import evaluate

    monkeypatch.setattr(kinds, "run_task", _dies_on_seed_1)
    cfg = EvaluateConfig(
        workload=WorkloadConfig(kind="ada_srsf_builtin"),
        stacks=["lwf1_adasrsf", "ff_adasrsf"],
        seeds=[0, 1, 2],
        workers=2,
        plot=False,
    )
    with pytest.raises(
        DlschedError, match=r"2 of 6 runs failed \(.*seed 1.*\): its worker process died"
    ):
        evaluate(cfg, tmp_path, {})
    text = (tmp_path / "summary.md").read_text()
    assert text.startswith("**PARTIAL**")
    with open(tmp_path / "summary.csv", newline="") as f:
        done = {(r["stack"], r["seed"]) for r in csv.DictReader(f)}
    with open(tmp_path / "failed.csv", newline="") as f:
        failed = {(r["stack"], r["seed"]) for r in csv.DictReader(f)}
    assert ("lwf1_adasrsf", "1") in failed and not done & failed
    assert len(done) + len(failed) == 6 and len(done) >= 1


def test_out_dir_on_a_file_is_a_clear_error(tmp_path: Path) -> None:
    f = tmp_path / "results"
    f.write_text("not a directory")
    proc = _evaluate(f"out_dir={f}")
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"error: out_dir={f}: exists and is not a directory"


def test_a_failing_sweep_job_does_not_end_the_sweep(tmp_path: Path) -> None:
    """``-m`` over a bad and a good value: the good job still runs, and the command exits 2
    naming the bad one (the first failure used to end the sweep)."""
    proc = _evaluate(
        "-m", "seeds=[-1],[0]", "stacks=[lwf1_adasrsf]", "workers=1", "plot=false",
        f"out_dir={tmp_path}",
    )  # fmt: skip
    assert proc.returncode == 2
    assert "1 sweep job(s) failed" in proc.stderr and "seeds=[-1]" in proc.stderr
    assert (tmp_path / "1" / "summary.csv").is_file()
    assert "Traceback" not in proc.stderr
    # one combined table for the sweep: the finished job's rows, with its overrides
    with open(tmp_path / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {(r["job"], r["stack"], r["seed"]) for r in rows} == {("1", "lwf1_adasrsf", "0")}
    assert rows[0]["overrides"].startswith("seeds=[0]")
    assert "**job 1**" in (tmp_path / "summary.md").read_text()


def test_plot_styles_follow_the_name_and_time_axes_scale() -> None:
    """A scheduler keeps its colour, line style and marker in every plot and run, whatever
    its place in ``stacks`` (details: tests/evaluation/test_evaluation_report.py); long time
    axes are in hours or days."""
    from evaluation.report import _time_axis, stack_colors

    a = stack_colors(["lwf1_adasrsf", "ff_adasrsf", "ls_adasrsf"])
    b = stack_colors(["ls_adasrsf", "lwf1_adasrsf", "ff_adasrsf"])
    assert a == b
    assert a == {"lwf1_adasrsf": "#1f77b4", "ff_adasrsf": "#2ca02c", "ls_adasrsf": "#d62728"}
    assert _time_axis(100.0) == (1.0, "s")
    assert _time_axis(5 * 3600.0) == (3600.0, "hours")
    assert _time_axis(30 * 86400.0) == (86400.0, "days")


def test_elastic_allocators_take_options_as_in_plan_labels(tmp_path: Path) -> None:
    """``elastic:esrtf(efficiency=0.8)`` runs EfficientSRTF with that option, in the slot
    simulator and through the env (the label form ``heldout_eval.py`` and the plans take):
    the default written out gives the bare name's runs, another value other runs; a bad
    option or label is one clear error naming it before anything runs."""
    import numpy as np

    from envs.sim import ConfigError
    from evaluation.config import EvaluateConfig, WorkloadConfig
    from evaluation.kinds import run_task
    from evaluation.pipeline import make_plan

    for kind in ("dl2", "env"):
        cfg = EvaluateConfig(
            workload=WorkloadConfig(kind=kind),
            stacks=[
                "elastic:esrtf",
                "elastic:esrtf(efficiency=0.92)",
                "elastic:esrtf(efficiency=0.5)",
            ],
            seeds=[0],
            workers=1,
            plot=False,
        )
        if kind == "env":
            cfg.workload.env.setting = "tiny"
        else:
            cfg.workload.dl2.num_jobs = 12
        bare, same, other = (run_task(t) for t in make_plan(cfg).tasks)
        assert np.array_equal(bare.finish_s, same.finish_s)
        assert not np.array_equal(bare.finish_s, other.finish_s)
    for stack, cause in [
        ("elastic:esrtf(efficiency=1e999)", "must be finite"),
        ("elastic:esrtf(bogus=1)", "bad options"),
        ("elastic:esrtf(efficiency)", "is not key=value"),
        ("elastic:nosuch(x=1)", "unknown elastic allocator 'nosuch'"),
    ]:
        cfg = EvaluateConfig(workload=WorkloadConfig(kind="dl2"), stacks=[stack], plot=False)
        with pytest.raises(ConfigError, match=re.escape(cause)):
            make_plan(cfg)
