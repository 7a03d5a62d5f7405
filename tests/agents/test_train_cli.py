"""``python train.py`` and ``python -m pretrain`` end to end on the tiny setting."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli import train_in_process, train_refusal

ROOT = Path(__file__).resolve().parents[2]


def run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args, f"hydra.run.dir={tmp_path}", "progress_bar=false"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def refused_in_process(args: list[str], out: Path) -> str:
    """``python train.py args`` refused before it trains, in this process: its error."""
    assert args[0] == "train.py"
    return train_refusal([*args[1:], "progress_bar=false"], out)


def trained_in_process(args: list[str], out: Path) -> dict:
    """``python train.py args`` run to its end in this process (no interpreter to start): its
    summary (also written to ``out/summary.json``, as the command writes it)."""
    assert args[0] == "train.py"
    out.mkdir(parents=True, exist_ok=True)
    return train_in_process([*args[1:], "progress_bar=false"], out)


def test_train_without_agent_lists_the_agents(tmp_path) -> None:
    out = run(["train.py", "env=tiny"], tmp_path)
    assert out.returncode == 2
    assert "+agent=<name>" in out.stderr and "a2c" in out.stderr and "maskable_ppo" in out.stderr


def test_train_rejects_an_unknown_key(tmp_path) -> None:
    out = run(["train.py", "+agent=a2c_increments", "env=tiny", "agent.learning_rat=0.1"], tmp_path)
    assert out.returncode != 0
    assert "learning_rat" in out.stderr


@pytest.mark.parametrize("agent", ["a2c_increments", "reinforce"])
def test_short_training_run_writes_its_record(tmp_path, agent: str) -> None:
    out = run(
        [
            "train.py",
            f"+agent={agent}",
            "env=tiny",
            "eval=quick",
            "total_timesteps=512",
            "agent.n_steps=128",
            "pretrain=drf",
            "pretrain.num_workloads=2",
            "pretrain.bc.steps=60",
            "pretrain.bc.eval_every=30",
            "pretrain.eval_seeds=[100]",
            "pretrain_cache=null",
            "checkpoint_every=256",
        ],
        tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "run directory" in out.stdout and "TensorBoard" in out.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["timesteps"] >= 512
    assert summary["pretrain"]["teacher"] == "drf"
    assert set(summary["baselines_avg_jct"]) == {"drf"}
    assert summary["final"]["ratio_to_drf"] > 0
    # the run tells the story: the clone's figure and each heuristic's as reference lines at
    # every validation point, the learning rate, and (after each update) the KL to the clone
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "tb" / f"{agent}_1"))
    acc.Reload()
    points = [e.step for e in acc.Scalars("eval/avg_jct")]
    clone = acc.Scalars("reference/avg_jct_clone")
    assert [e.step for e in clone] == points and len(points) >= 2
    assert all(e.value == pytest.approx(summary["clone_avg_jct"]) for e in clone)
    assert summary["clone_avg_jct"] == pytest.approx(summary["initial"]["avg_jct"])
    drf = acc.Scalars("reference/avg_jct_drf")
    assert all(e.value == pytest.approx(summary["baselines_avg_jct"]["drf"]) for e in drf)
    assert acc.Scalars("train/learning_rate")[-1].value == pytest.approx(3e-4)
    kl = [e.value for e in acc.Scalars("train/kl_to_clone")]
    assert kl and all(v >= 0 for v in kl)
    assert "| clone (before RL)" in out.stdout
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["seed"] == 0 and record["config"]["agent"]["name"] == agent
    assert "torch" in record["versions"] and "git_commit" in record and "git" not in record
    curve = (tmp_path / "learning_curve.csv").read_text().splitlines()
    assert curve[0].startswith("timesteps,") and len(curve) >= 3  # header, start, end
    assert any((tmp_path / "tb").rglob("events.out.tfevents.*"))
    # SB3's logger: every dump as a CSV row and a JSON line, each with its step; the
    # validation points are those of learning_curve.csv, the learner's losses are there too
    import csv

    rows = list(csv.DictReader((tmp_path / "progress.csv").open()))
    lines = [json.loads(x) for x in (tmp_path / "progress.json").read_text().splitlines()]
    assert len(rows) == len(lines) >= 2  # at least the first and last validation
    points = {int(r["time/total_timesteps"]): r["eval/avg_jct"] for r in rows if r["eval/avg_jct"]}
    valid = list(csv.DictReader((tmp_path / "learning_curve.csv").open()))
    assert {int(float(v["timesteps"])): float(v["avg_jct"]) for v in valid} == {
        k: float(v) for k, v in points.items()
    }
    assert any("train/value_loss" in x for x in lines)
    assert (tmp_path / "checkpoints" / "final" / "model.zip").is_file()
    assert (tmp_path / "checkpoints" / "latest" / "replay.npz").is_file()


def test_resume_from_a_checkpoint(tmp_path) -> None:
    first = tmp_path / "first"
    args = [
        "train.py",
        "+agent=a2c_increments",
        "env=tiny",
        "eval=quick",
        "agent.n_steps=128",
        "pretrain=none",
    ]
    out = run([*args, "total_timesteps=256"], first)
    assert out.returncode == 0, out.stderr[-3000:]
    # latest is the last state as well as final
    import filecmp

    ckpts = first / "checkpoints"
    assert filecmp.cmp(ckpts / "latest" / "meta.json", ckpts / "final" / "meta.json", False)
    # the resumed runs in this process (the command line is the first run's and the refusal's)
    trained_in_process(
        [*args, "total_timesteps=512", f"resume={first / 'checkpoints' / 'final'}"],
        tmp_path / "second",
    )
    summary = json.loads((tmp_path / "second" / "summary.json").read_text())
    # continued to the total (512), not another 512 on top of the checkpoint's 256
    assert summary["timesteps"] == 512 and summary["resumed_from"]
    assert summary["resumed_at"] == 256
    out = run([*args, "total_timesteps=256", f"resume={ckpts / 'final'}"], tmp_path / "done")
    assert out.returncode == 2 and "already has 256 decisions" in out.stderr
    assert "learning_rate_changed" not in summary

    # the refusals below, in this process (train.py's exit 2 and line: the refusal above)
    # another learner's name on resume: refused, naming what the checkpoint holds
    ckpt = first / "checkpoints" / "final"
    ppo = ["train.py", "+agent=ppo", "env=tiny", "eval=quick", "pretrain=none"]
    err = refused_in_process([*ppo, "total_timesteps=512", f"resume={ckpt}"], tmp_path / "third")
    assert "holds a DL2A2C (agent 'a2c_increments')" in err and "+agent=a2c_increments" in err

    # another env on resume: refused, naming the difference (it used to fail in a matmul)
    other = [a if a != "env=tiny" else "env=small" for a in args]
    err = refused_in_process([*other, "total_timesteps=512", f"resume={ckpt}"], tmp_path / "5")
    assert "env.setting='tiny' there, 'small' here" in err

    # another hyperparameter on resume: refused (it used to be recorded but not applied)
    gamma = [*args, "total_timesteps=512", "agent.gamma=0.5", f"resume={ckpt}"]
    err = refused_in_process(gamma, tmp_path / "g")
    assert "agent.gamma=0.5 (the checkpoint has 0.99)" in err

    # a new learning rate on resume applies (and the summary says so)
    trained_in_process(
        [*args, "total_timesteps=512", "agent.learning_rate=0.5", f"resume={ckpt}"],
        tmp_path / "fourth",
    )
    summary = json.loads((tmp_path / "fourth" / "summary.json").read_text())
    assert summary["learning_rate_changed"]["now"] == 0.5
    from agents.checkpoint import load_checkpoint

    model = load_checkpoint(tmp_path / "fourth" / "checkpoints" / "final")
    assert model.learning_rate == 0.5
    assert model.policy.optimizer.param_groups[0]["lr"] == 0.5


def test_pretrain_command(tmp_path) -> None:
    out = run(
        [
            "-m",
            "pretrain",
            "teacher=srsf",
            "env=tiny",
            "num_workloads=2",
            "bc.steps=40",
            "bc.eval_every=20",
            "eval_seeds=[100]",
            "jct_every=0",
        ],
        tmp_path,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["teacher"] == "srtf" and summary["bc_steps"] == 40
    assert (tmp_path / "policy.npz").is_file() and (tmp_path / "dataset.npz").is_file()
    assert any((tmp_path / "tb").rglob("events.out.tfevents.*"))
    bad = run(["-m", "pretrain", "teacher=sjf", "env=tiny"], tmp_path / "bad")
    assert bad.returncode == 2 and "unknown teacher 'sjf'" in bad.stderr


@pytest.mark.parametrize(
    "override, words",
    [
        ("seed=-1", "seed must be in [0, 2**32 - 1], got -1"),
        ("agent.learning_rate=-1", "agent.learning_rate must be > 0, got -1.0"),
        ("agent.learning_rate=nan", "agent.learning_rate must be a finite number, got nan"),
        ("eval.seeds=[]", "eval.seeds must list at least one validation workload seed"),
        ("agent.ppo.batch_size=0", "agent.ppo.batch_size and agent.ppo.n_epochs must be >= 1"),
        ("total_timesteps=0", "total_timesteps must be >= 1, got 0"),
        ("agent.gamma=1.5", "agent.gamma must be <= 1, got 1.5"),
        (
            "agent.exploration.eps_start=1.5",
            "agent.exploration.eps_start must be in [0, 1], got 1.5",
        ),
        ("agent.exploration.max_ratio=nan", "agent.exploration.max_ratio must be a finite number"),
        ("agent.replay.batch_size=0", "agent.replay.batch_size must be >= 1 with replay on"),
        ("agent.replay.batch_size=9000", "9000 is larger than agent.replay.capacity 8192"),
        ("agent.replay.alpha=2", "agent.replay.alpha must be in [0, 1], got 2.0"),
        ("agent.replay.clip=inf", "agent.replay.clip must be a finite number"),
        (
            "+agent=ppo agent.ppo.batch_size=300",
            "agent.ppo.batch_size 300 does not divide a rollout",
        ),
    ],
)
def test_bad_training_numbers_name_the_key(override: str, words: str) -> None:
    """Checked before SB3 or numpy see them (they used to raise their own tracebacks)."""
    from hydra import compose, initialize_config_dir

    from envs.sim.errors import ConfigError
    from training.config import register_configs
    from training.run import to_train_config

    register_configs()
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        agent = [] if override.startswith("+agent=") else ["+agent=a2c_increments"]
        cfg = compose("train", overrides=[*agent, *override.split()])
    with pytest.raises(ConfigError) as info:
        to_train_config(cfg)
    assert words in str(info.value)


def test_a_bad_trace_is_one_error_line_not_a_traceback(tmp_path) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time_s,duration_s,num_gpus,job_type\na,0,1e308,1,vgg16\n")
    args = ["train.py", "+agent=a2c_increments", "pretrain=none", f"env.trace={trace}"]
    out = run(args, tmp_path / "r")
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    assert "t.csv, line 2 (job 'a'): duration 1e+308 s" in out.stderr
    assert not (tmp_path / "r").exists()  # a failed run leaves no run directory behind


def test_a_failing_sweep_job_does_not_end_the_training_sweep(tmp_path) -> None:
    out = subprocess.run(
        [
            sys.executable, "train.py", "-m", "+agent=a2c_increments", "env=tiny", "pretrain=none",
            "total_timesteps=128", "agent.n_steps=64", "eval=quick", "progress_bar=false",
            "seed=-1,0", f"hydra.sweep.dir={tmp_path}",
        ],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 2
    assert "1 sweep job(s) failed" in out.stderr and "seed must be in [0, 2**32 - 1]" in out.stderr
    assert (tmp_path / "1_a2c_increments_seed0" / "summary.json").is_file()
