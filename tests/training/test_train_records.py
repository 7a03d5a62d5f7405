"""What a training run records about itself (issue 38, "Training runs"): the one provenance
of every record (:mod:`envs.provenance`, its untracked-files rule), ``run.json`` holding only
the agent in use, ``train.py -m``'s sweep table, the plan recipe's TensorBoard scalars
(reference lines, losses apart, KL to the clone, timing, hparams), and that exposing the
losses and the KL leaves the training numbers as they were."""

from __future__ import annotations

import copy
import csv
import dataclasses
import json
import math
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch as th

import envs.provenance as prov
from agents.config import ALGOS, AgentConfig
from agents.episode_pg import EpisodePG, EpisodePGConfig, MaskedMLP, masked_kl
from agents.learners import LEARNERS
from tests.agents.test_episode_pg import Toy
from tests.cli import run_script
from training.callbacks import ValidationCallback
from training.runinfo import AGENT_KEYS, agent_in_use, run_record
from training.sweep import job_row, write_sweep_table

# ------------------------------------------------------------------------------ provenance


def test_one_provenance_module_with_one_set_of_keys() -> None:
    from evaluation.provenance import provenance as evaluation_provenance

    assert evaluation_provenance is prov.provenance  # evaluate.py's records: the same function
    p = prov.provenance()
    assert tuple(p) == prov.KEYS == ("git_commit", "git_dirty", "versions", "command", "numerics")
    assert p["git_commit"] and len(p["git_commit"]) == 40  # this is a git checkout
    assert isinstance(p["git_dirty"], bool)
    assert {"python", "numpy", "torch", "dlsched", "tabulate"} <= set(p["versions"])
    record = run_record({"seed": 3}, 3, kind="train")  # training's run.json: the same keys
    assert set(prov.KEYS) <= set(record) and "git" not in record and "argv" not in record
    assert {k: record[k] for k in prov.KEYS if k != "versions"} == {
        k: p[k] for k in prov.KEYS if k != "versions"
    }


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def test_untracked_files_make_a_tree_dirty_but_ignored_ones_do_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / ".gitignore").write_text("runs/\n")
    (repo / "a.py").write_text("x = 1\n")
    _git(repo, "add", ".")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "c")
    monkeypatch.setattr(prov, "_ROOT", repo)
    commit, dirty = prov.git_state()
    assert commit is not None and len(commit) == 40 and dirty is False
    (repo / "runs").mkdir()
    (repo / "runs" / "out.csv").write_text("1\n")  # an ignored output: still clean
    assert prov.git_state() == (commit, False)
    (repo / "new.py").write_text("y = 2\n")  # an untracked module: dirty
    assert prov.git_state() == (commit, True)
    (repo / "new.py").unlink()
    (repo / "a.py").write_text("x = 2\n")  # a modified tracked file: dirty
    assert prov.git_state() == (commit, True)
    monkeypatch.setattr(prov, "_ROOT", tmp_path)  # not a checkout: unknown
    assert prov.git_state() == (None, None)


def test_older_records_read_into_the_same_keys() -> None:
    old_train = {"git": {"commit": "abc", "dirty": False}, "argv": ["train.py", "seed=1"]}
    old_policy = {"git": {"commit": "abc", "dirty": True}, "command": "train.py +agent=plan_pg"}
    assert prov.read_provenance(old_train) == {
        "git_commit": "abc", "git_dirty": False, "versions": None,
        "command": ["train.py", "seed=1"], "numerics": None,
    }  # fmt: skip
    assert prov.read_provenance(old_policy)["command"] == ["train.py", "+agent=plan_pg"]
    new = prov.provenance()
    assert prov.read_provenance(new) == new


# ---------------------------------------------------------------------------- run.json agent


def test_every_agent_field_belongs_to_a_learner_and_every_learner_is_listed() -> None:
    fields = {f.name for f in dataclasses.fields(AgentConfig)} - {"name", "algo"}
    assert set(AGENT_KEYS) == set(ALGOS)
    used = set().union(*map(set, AGENT_KEYS.values()))
    assert used == fields  # no key names a field that does not exist, none is left out


@pytest.mark.parametrize("algo", ALGOS)
def test_run_record_keeps_only_the_agent_in_use(algo: str) -> None:
    agent = {"name": "x", **dataclasses.asdict(AgentConfig(algo=algo))}
    config = {"agent": agent, "seed": 0, "env": {"setting": "tiny"}}
    kept = run_record(config, 0)["config"]
    assert kept["seed"] == 0 and kept["env"] == {"setting": "tiny"}
    in_use = LEARNERS[algo].keys_in(LEARNERS[algo].envs[0])  # its default env's blocks
    assert set(kept["agent"]) == {"name", "algo", *in_use}
    assert all(kept["agent"][k] == agent[k] for k in kept["agent"])
    others = {"ppo", "group", "plan", "contention", "exploration", "replay"} - set(in_use)
    assert not others & set(kept["agent"])
    assert agent_in_use({"no_agent": 1}) == {"no_agent": 1}


# ----------------------------------------------------------------------------- sweep table


def test_sweep_table_columns_and_the_shared_overrides(tmp_path: Path) -> None:
    s0 = {"final": {"avg_jct": 3.0}, "best_avg_jct": 2.5, "baselines_avg_jct": {"drf": 4.0},
          "train_s": 1.5}  # fmt: skip
    rows = [
        job_row(1, ["env=tiny", "seed=1"], 1, tmp_path / "1", error="seed is bad"),
        job_row(0, ["env=tiny", "seed=0"], 0, tmp_path / "0", s0),
    ]
    csv_path, md = write_sweep_table(tmp_path, rows)
    got = list(csv.DictReader(csv_path.open()))
    assert list(got[0]) == [
        "job", "overrides", "seed", "status", "final_avg_jct", "best_avg_jct", "drf",
        "train_s", "run_dir",
    ]  # fmt: skip
    assert [r["job"] for r in got] == ["0", "1"]
    assert got[0]["overrides"] == "env=tiny seed=0" and got[0]["drf"] == "4.0"
    assert got[1]["status"] == "failed: seed is bad" and got[1]["final_avg_jct"] == ""
    text = md.read_text()
    assert "Every job: `env=tiny`" in text
    header, rule, *body = [line for line in text.splitlines() if line.startswith("|")]
    assert [c.strip() for c in header.strip("|").split("|")] == list(got[0])
    assert set(rule) <= set("|-: ") and len(body) == 2
    assert "| seed=0 " in text and "3.00" in text and "2.50" in text and "4.00" in text


_TINY_PLAN = [
    "+agent=plan_pg", "env=tiny", "env.reward=jct", "pretrain=esrtf", "pretrain.num_workloads=2",
    "agent.plan.iterations=1", "agent.plan.val_every=1", "agent.plan.groups=2",
    "agent.plan.group_size=2", "agent.plan.hidden=16", "agent.plan.bc_epochs=2",
    "agent.plan.workers=1", "eval.deterministic=true", "eval.seeds=[100]",
    "eval.baselines=[drf,esrtf]",
]  # fmt: skip


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-job ``train.py -m`` sweep of tiny plan_pg runs (seeds 0 and 1; ~10 s)."""
    out = tmp_path_factory.mktemp("sweep")
    proc = run_script("train.py", "-m", *_TINY_PLAN, "seed=0,1", f"hydra.sweep.dir={out}")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "sweep table:" in proc.stdout
    return out


def test_a_training_sweep_writes_one_table_of_its_jobs(sweep: Path) -> None:
    rows = list(csv.DictReader((sweep / "sweep.csv").open()))
    assert [(r["job"], r["seed"], r["status"]) for r in rows] == [
        ("0", "0", "ok"),
        ("1", "1", "ok"),
    ]
    md = (sweep / "sweep.md").read_text()
    for row in rows:
        run_dir = Path(row["run_dir"])
        assert run_dir.parent == sweep and run_dir.name == f"{row['job']}_plan_pg_seed{row['seed']}"
        summary = json.loads((run_dir / "summary.json").read_text())
        # each figure is the job's own, to full precision in the CSV, to 2 decimals in the md
        assert float(row["final_avg_jct"]) == summary["final"]["avg_jct"]
        assert float(row["best_avg_jct"]) == summary["best_avg_jct"]
        for name in ("drf", "esrtf"):
            assert float(row[name]) == summary["baselines_avg_jct"][name]
        assert float(row["train_s"]) == summary["train_s"]
        assert row["overrides"].endswith(f"seed={row['seed']}")
        assert f"{summary['final']['avg_jct']:.2f}" in md and f"| seed={row['seed']} " in md
    assert "Every job: `+agent=plan_pg env=tiny" in md


def test_run_json_of_a_plan_run_holds_only_the_plan_agent(sweep: Path) -> None:
    record = json.loads((sweep / "0_plan_pg_seed0" / "run.json").read_text())
    assert set(record["config"]["agent"]) == {"name", "algo", "learning_rate", "ent_coef", "plan"}
    assert record["config"]["agent"]["plan"]["hidden"] == 16
    assert set(prov.KEYS) <= set(record)
    # train.py asked torch and MKL for their portable paths before any kernel ran
    assert record["numerics"] == {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_CBWR": "COMPATIBLE",
        "torch_cpu_capability": "DEFAULT",
        "portable": True,
    }
    from agents.episode_pg import load_episode_pg

    _, meta = load_episode_pg(sweep / "0_plan_pg_seed0" / "checkpoints" / "final" / "policy.npz")
    assert (
        set(prov.KEYS) <= set(meta["training"]) and "ppo" not in meta["training"]["config"]["agent"]
    )


def test_plan_tensorboard_has_reference_lines_losses_kl_timing_and_hparams(sweep: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = sweep / "0_plan_pg_seed0"
    acc = EventAccumulator(str(run_dir / "tb" / "plan_pg_1"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    summary = json.loads((run_dir / "summary.json").read_text())
    curve = list(csv.DictReader((run_dir / "learning_curve.csv").open()))
    steps = [int(r["timesteps"]) for r in curve]
    for name, jct in summary["baselines_avg_jct"].items():  # a flat line at every validation
        line = acc.Scalars(f"reference/avg_jct_{name}")
        assert [e.step for e in line] == steps == [e.step for e in acc.Scalars("eval/avg_jct")]
        assert all(e.value == pytest.approx(jct) for e in line)
    want = {"train/loss", "train/pg_loss", "train/entropy_loss", "train/entropy",
            "train/kl_to_clone", "time/iteration_s", "time/slots_per_s", "pretrain/bc_loss",
            "hparam/final_avg_jct", "hparam/best_avg_jct"}  # fmt: skip
    assert want <= tags
    (loss,), (pg,), (ent,) = (
        acc.Scalars(f"train/{k}") for k in ("loss", "pg_loss", "entropy_loss")
    )
    assert loss.value == pytest.approx(pg.value + ent.value, abs=1e-6)
    assert acc.Scalars("train/kl_to_clone")[0].value >= 0
    assert len(acc.Scalars("pretrain/bc_loss")) == 2  # agent.plan.bc_epochs
    assert acc.Scalars("hparam/final_avg_jct")[0].value == pytest.approx(
        summary["final"]["avg_jct"]
    )
    (slots_per_s,), (it_s,) = acc.Scalars("time/slots_per_s"), acc.Scalars("time/iteration_s")
    assert slots_per_s.value * it_s.value == pytest.approx(steps[1], rel=1e-4)
    plugins = acc.PluginTagToContent("hparams")  # the HPARAMS tab's session
    assert plugins and "_hparams_/experiment" in plugins


# ------------------------------------------------------------------ losses and KL, exactly


def test_masked_kl_against_a_hand_computed_value() -> None:
    net, ref = MaskedMLP(2, 3, 4), MaskedMLP(2, 3, 4)
    for m, bias in ((net, [0.0, math.log(2.0), 5.0]), (ref, [0.0, 0.0, -5.0])):
        last = m.net[-1]
        assert isinstance(last, th.nn.Linear)
        with th.no_grad():
            last.weight.zero_()
            last.bias.copy_(th.tensor(bias))
    obs = th.zeros(2, 2)
    masks = th.tensor([[True, True, False], [True, True, False]])  # action 2 masked
    # p = (1/3, 2/3), q = (1/2, 1/2) on the valid actions
    want = (1 / 3) * math.log((1 / 3) / 0.5) + (2 / 3) * math.log((2 / 3) / 0.5)
    assert masked_kl(net, ref, obs, masks) == pytest.approx(want, rel=1e-6)  # float32 logits
    assert masked_kl(net, net, obs, masks) == 0.0


def _learn(reference: bool) -> tuple[MaskedMLP, list[dict[str, float]]]:
    th.manual_seed(0)
    net = MaskedMLP(3, 3, hidden=16)
    cfg = EpisodePGConfig(groups=2, group_size=4, lr=1e-2, epochs=2, batch_size=8, seed=0,
                          ent_coef=0.05)  # fmt: skip
    pg = EpisodePG(Toy(), net, cfg)
    if reference:
        pg.reference = copy.deepcopy(net).requires_grad_(False)
    stats: list[dict[str, float]] = []
    pg.learn(3, lambda _i, st: stats.append(st))
    pg.close()
    return net, stats


def test_the_kl_and_the_split_losses_change_no_training_number() -> None:
    plain, plain_stats = _learn(reference=False)
    watched, stats = _learn(reference=True)
    for a, b in zip(plain.state_dict().values(), watched.state_dict().values(), strict=True):
        assert th.equal(a, b)  # the same weights, bit for bit
    for a, b in zip(plain_stats, stats, strict=True):
        assert {k: v for k, v in b.items() if k != "kl_to_reference"} == a
        assert b["loss"] == pytest.approx(b["pg_loss"] + b["entropy_loss"], abs=1e-6)  # float32
        assert b["entropy_loss"] == pytest.approx(-0.05 * b["entropy"], rel=1e-6)
    kls = [s["kl_to_reference"] for s in stats]
    assert all(k > 0 for k in kls) and "kl_to_reference" not in plain_stats[0]


# ------------------------------------------------------------- validation every N decisions


@pytest.mark.parametrize(
    ("every", "step", "start", "want"),
    [
        (10, 1, 0, [0, 10, 20, 30]),
        (10, 3, 0, [0, 12, 21, 30]),  # on the grid 10, 20, 30: late points do not shift it
        (10, 4, 8, [8, 20, 28, 40]),  # a resumed run: the grid from its start
        (0, 3, 0, [0, 30]),  # start and end only
    ],
)
def test_validation_points_are_every_n_decisions_on_a_grid(
    every: int, step: int, start: int, want: list[int]
) -> None:
    cb = ValidationCallback(SimpleNamespace(), [100], every, {}, deterministic=True,
                            sample_seed=0, curve_csv=Path("unused.csv"))  # fmt: skip
    model = SimpleNamespace(num_timesteps=start)
    points: list[int] = []

    def evaluate() -> dict[str, Any]:
        points.append(model.num_timesteps)
        cb.history.append({"timesteps": float(model.num_timesteps)})
        return {}

    cb.evaluate = evaluate  # type: ignore[method-assign]
    cb.model = model  # type: ignore[assignment]
    cb.on_training_start({}, {})
    while model.num_timesteps < start + 30:
        model.num_timesteps += step
        cb.on_step()
    cb.on_training_end()
    assert points[: len(want)] == want
