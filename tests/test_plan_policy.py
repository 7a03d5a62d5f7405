"""A ``dlsched/ClusterPlan-v0`` policy from training to evaluation: :class:`PlanActor` in the
plain Cluster-v0 env acts exactly as :class:`PlanEnv` steps; a saved ``policy.npz`` records
its env and plans and ``evaluate.py`` runs it as ``policy:<path>`` with the same figures;
``train.py +agent=plan_pg`` (training/plan.py) writes its curve, checkpoints and record and is
reproducible; bad configs are one clear error."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch as th

from agents.episode_pg import MaskedMLP, load_episode_pg, run_episode, save_episode_pg
from agents.episode_results import evaluate_allocator
from agents.episode_results import run_episode as run_cluster_episode
from envs.gym.factory import EnvConfig, make_env
from envs.gym.plan_env import PLAN_ENV_ID, PlanActor, PlanEnv, plan_label
from envs.sim import ConfigError
from envs.sim.elastic.allocators import make_allocator
from evaluation.config import EnvSection, EvaluateConfig, WorkloadConfig
from evaluation.pipeline import evaluate
from tests.cli import ROOT, run_script, train_in_process, train_refusal
from training.plan import validate_plan

TINY = EnvConfig(setting="tiny", reward="jct")


def _net(env: PlanEnv, seed: int = 0) -> MaskedMLP:
    th.manual_seed(seed)
    return MaskedMLP(env.obs_size, env.K, 16)


def test_plan_actor_in_the_plain_env_is_the_plan_env() -> None:
    """Per slot the same observation, plan and inner decisions, so the same episode."""
    pattern = [0, 4, 5, 2, 1, 3, 4]
    for seed in (3, 7):
        env = PlanEnv(config=TINY)
        obs, _ = env.reset(seed=seed)
        seen, chosen, total_inner = [obs], [], 0
        while True:
            k = pattern[len(chosen) % len(pattern)]
            chosen.append(k)
            obs, _, term, trunc, info = env.step(k)
            total_inner += info["inner_steps"]
            if term or trunc:
                break
            seen.append(obs)
        expected = info["avg_jct_slots"]

        plain = make_env(TINY)
        observed: list[np.ndarray] = []

        def choose(o: np.ndarray, observed: list[np.ndarray] = observed) -> int:
            observed.append(o.copy())
            return pattern[(len(observed) - 1) % len(pattern)]

        actor = PlanActor(plain, choose)
        result = run_cluster_episode(plain, actor, seed)
        assert actor.chosen == chosen
        assert result.decisions == total_inner
        assert result.avg_jct == pytest.approx(expected, rel=0, abs=0)
        np.testing.assert_array_equal(np.array(observed), np.array(seen))


def test_constant_plans_are_their_allocators_through_the_actor() -> None:
    for k, name in ((0, "esrtf"), (4, "optimus"), (5, "drf")):
        plain = make_env(TINY)
        mine = run_cluster_episode(plain, PlanActor(plain, lambda _o, k=k: k), 5)
        (ref,) = evaluate_allocator(lambda name=name: make_allocator(name), TINY, [5])
        assert mine.avg_jct == ref.avg_jct and mine.decisions == ref.decisions


def test_saved_plan_policy_records_its_env_and_acts_alike(tmp_path: Path) -> None:
    env = PlanEnv(config=TINY)
    net = _net(env)
    path = save_episode_pg(tmp_path / "p" / "policy.npz", net, env, {"seed": 0}, act="sampled")
    again, meta = load_episode_pg(path)
    assert meta["act"] == "sampled"
    assert meta["env"]["id"] == PLAN_ENV_ID
    assert meta["env"]["env"] == TINY.as_dict()
    assert [p[0] for p in meta["env"]["plans"]] == [p[0] for p in env.plans]
    a = run_episode(env, 4, net).info["avg_jct_slots"]
    b = run_episode(PlanEnv(config=meta["env"]["env"]), 4, again).info["avg_jct_slots"]
    assert a == b
    with pytest.raises(ConfigError, match="act must be"):
        save_episode_pg(tmp_path / "q.npz", net, env, {}, act="greedy")
    wrapped = PlanEnv(env=make_env(TINY))
    with pytest.raises(ConfigError, match="config is unknown"):
        save_episode_pg(tmp_path / "r.npz", _net(wrapped), wrapped, {})
    with pytest.raises(ConfigError, match="does not fit"):
        save_episode_pg(tmp_path / "s.npz", MaskedMLP(env.obs_size, 3, 16), env, {})


def test_evaluate_runs_a_plan_policy_as_policy_kind(tmp_path: Path) -> None:
    """``policy:<dir with policy.npz>`` in evaluate.py: the training env comes from the
    file, and each seed's avg JCT is the plan env's argmax episode's (and validate_plan's)."""
    env = PlanEnv(config=TINY)
    net = _net(env, 1)
    save_episode_pg(tmp_path / "pol" / "policy.npz", net, env, {"seed": 1})
    cfg = EvaluateConfig(
        workload=WorkloadConfig(kind="env", env=EnvSection()),
        stacks=[f"policy:{tmp_path / 'pol'}", "elastic:esrtf"],
        seeds=[0, 2],
        workers=1,
        plot=False,
    )
    rows = evaluate(cfg, tmp_path / "run", {})
    mine = {r["seed"]: r for r in rows if r["stack"].startswith("policy:")}  # seeds are str
    slot_s = env.inner.cluster_spec.slot_s
    for seed in (0, 2):
        want = run_episode(env, seed, net).info["avg_jct_slots"]
        assert mine[str(seed)]["avg_jct_s"] == pytest.approx(want * slot_s, rel=1e-12)
    assert validate_plan(net, env, [0, 2])["avg_jct"] == pytest.approx(
        np.mean([mine[s]["avg_jct_s"] / slot_s for s in ("0", "2")]), rel=1e-12
    )


def test_each_kind_refuses_the_other_envs_policy(tmp_path: Path) -> None:
    from envs.gym.contention_env import ContentionEnv

    plan_env = PlanEnv(config=TINY)
    plan = save_episode_pg(tmp_path / "plan.npz", _net(plan_env), plan_env, {})
    cont_env = ContentionEnv(comm="srsf1", J=4)
    cont = save_episode_pg(
        tmp_path / "cont.npz",
        MaskedMLP(cont_env.obs_size, cont_env.wait_action + 1, 8),
        cont_env,
        {},
    )
    base = ["workers=1", "plot=false", f"out_dir={tmp_path / 'x'}", "seeds=[0]"]
    proc = run_script("evaluate.py", "workload=env", f"stacks=[policy:{cont}]", *base)
    assert proc.returncode == 2 and "contention:<path>" in proc.stderr
    # the others in this process: evaluate.py's config and its run (the error it prints)
    assert "policy:<path>" in _evaluate_error(
        "workload=generated_paper_scale", f"stacks=[contention:{plan}]", *base[:-2]
    )
    assert "not found" in _evaluate_error(
        "workload=env", f"stacks=[policy:{tmp_path}/none.npz]", *base[:-2]
    )


def _evaluate_error(*overrides: str) -> str:
    """The error ``python evaluate.py overrides`` prints (after ``error: ``), in this process:
    the config Hydra composes, run as the command runs it (``seeds=[0]``, into a new folder)."""
    import tempfile

    from hydra import compose, initialize_config_dir

    import evaluate as cli
    from envs.sim import DlschedError

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        dcfg = compose("evaluate", overrides=[*overrides, "seeds=[0]"])
    with tempfile.TemporaryDirectory() as run_dir, pytest.raises(DlschedError) as err:
        cli.evaluate(dcfg, Path(run_dir) / "run")
    return str(err.value)


def _train(tmp_path: Path, name: str, *extra: str, agent: str = "plan_pg") -> tuple[int, str, Path]:
    out = tmp_path / name
    proc = run_script(
        "train.py", f"+agent={agent}", "env=tiny", "env.reward=jct", "pretrain=esrtf",
        "pretrain.num_workloads=2", "agent.plan.iterations=2", "agent.plan.val_every=1",
        "agent.plan.groups=2", "agent.plan.group_size=2", "agent.plan.hidden=16",
        "eval.deterministic=true", "eval.seeds=[100,101]", "eval.baselines=[drf,esrtf]",
        f"hydra.run.dir={out}", *extra, timeout=600,
    )  # fmt: skip
    return proc.returncode, proc.stdout + proc.stderr, out


def _train_here(tmp_path: Path, name: str, *extra: str) -> Path:
    """:func:`_train`'s run in this process (what train.py runs, without a fresh
    interpreter's imports; :func:`_train` checks the command line itself)."""
    out = tmp_path / name
    out.mkdir()
    train_in_process(
        ["+agent=plan_pg", "env=tiny", "env.reward=jct", "pretrain=esrtf",
         "pretrain.num_workloads=2", "agent.plan.iterations=2", "agent.plan.val_every=1",
         "agent.plan.groups=2", "agent.plan.group_size=2", "agent.plan.hidden=16",
         "eval.deterministic=true", "eval.seeds=[100,101]", "eval.baselines=[drf,esrtf]",
         "progress_bar=false", *extra],
        out,
    )  # fmt: skip
    return out


def test_train_py_plan_pg_writes_a_reproducible_run(tmp_path: Path) -> None:
    rc, text, out = _train(tmp_path, "a")
    assert rc == 0, text[-3000:]
    with open(out / "learning_curve.csv", newline="") as f:
        curve = list(csv.DictReader(f))
    assert [int(r["iteration"]) for r in curve] == [0, 1, 2]
    assert int(curve[0]["timesteps"]) == 0 < int(curve[1]["timesteps"]) < int(curve[2]["timesteps"])
    summary = json.loads((out / "summary.json").read_text())
    esrtf = summary["baselines_avg_jct"]["esrtf"]
    # the clone of plan 0 acts as EfficientSRTF on the validation workloads
    assert float(curve[0]["avg_jct"]) == pytest.approx(esrtf)
    assert float(curve[0]["ratio_to_esrtf"]) == pytest.approx(1.0)
    assert summary["pretrain"]["teacher"] == "esrtf"
    assert re.search(r"^\| esrtf\s+\|", text, re.M) and "learned (final)" in text
    run = json.loads((out / "run.json").read_text())
    assert run["seed"] == 0 and run["git_commit"]
    assert any((out / "tb").rglob("events.out.tfevents.*"))
    # the best checkpoint acts as recorded, through evaluate.py's policy kind
    best = summary["best"]
    net, meta = load_episode_pg(out / "checkpoints" / "best" / "policy.npz")
    assert meta["training"]["iteration"] == best["iteration"]
    assert meta["act"] == "argmax"
    env = PlanEnv(config=meta["env"]["env"])
    assert validate_plan(net, env, [100, 101])["avg_jct"] == pytest.approx(best["avg_jct"])
    out2 = _train_here(tmp_path, "b")  # the same run again, in this process
    _assert_same_curve(out / "learning_curve.csv", out2 / "learning_curve.csv")


def test_plan_pg_validates_on_trace_windows_too(tmp_path: Path) -> None:
    """``eval.windows=2``: two Philly windows of the training VCs' validation days join the
    validation workloads; the baselines and the policy are each the mean over the two seeds
    and the two windows, as evaluation.heldout computes them through the same envs."""
    from envs.gym.workloads import TRAIN_VCS, VALIDATION_DAYS, TraceWindows
    from evaluation.heldout import heldout_workloads, run_schedulers

    out = _train_here(tmp_path, "w", "eval.windows=2", "eval.window_seed=5")
    summary = json.loads((out / "summary.json").read_text())
    labels = summary["validation_windows"]
    assert len(labels) == 2 and all(lab.startswith("philly:") for lab in labels)
    assert not {lab.split(":")[1].split("@")[0] for lab in labels} - set(TRAIN_VCS)
    config = EnvConfig(setting="tiny", reward="jct")
    workloads = heldout_workloads(
        config, [100, 101], windows=2, window_seed=5,
        trace=TraceWindows(vcs=list(TRAIN_VCS), days=list(VALIDATION_DAYS)),
    )  # fmt: skip
    assert [w.label for w in workloads[2:]] == labels
    table = run_schedulers(config, workloads, heuristics=["drf", "esrtf"])
    for name in ("drf", "esrtf"):
        assert summary["baselines_avg_jct"][name] == pytest.approx(table.avg_jct[name].mean())
    with open(out / "learning_curve.csv", newline="") as f:
        curve = list(csv.DictReader(f))
    # the clone of plan 0 is EfficientSRTF on the windows too
    assert float(curve[0]["avg_jct"]) == pytest.approx(table.avg_jct["esrtf"].mean())
    # the other learners refuse it (one clear error)
    said = train_refusal(["+agent=ppo", "env=tiny", "eval.windows=2", "total_timesteps=8"],
                         tmp_path / "ppo")  # fmt: skip
    learners = "agent.algo expert_iteration, plan_a2c, plan_pg"
    assert f"in dlsched/ClusterPlan-v0 only ({learners})" in said


def _assert_same_curve(a: Path, b: Path) -> None:
    """The same learning curve bit for bit, but for the wall time."""
    with open(a, newline="") as fa, open(b, newline="") as fb:
        ra, rb = list(csv.DictReader(fa)), list(csv.DictReader(fb))
    for x, y in zip(ra, rb, strict=True):
        x.pop("wall_s")
        y.pop("wall_s")
        assert x == y


#: each bad value and the words of its error (checked in-process: the configuration train.py
#: composes, run as train.py runs it; the error comes before anything is trained)
BAD_PLAN_CONFIGS = [
    ("env.reward=dl2", "env.reward=jct"),
    ("pretrain=srtf", "not one of the plans"),
    ("agent.plan.iterations=0", "agent.plan.iterations must be >= 1"),
    ("agent.plan.bc_smoothing=1.0", "bc_smoothing"),
    ("pretrain.seed_offset=100", "include validation seeds"),
    ("resume=somewhere", "resume"),
    ("agent.plan.plans=[esrtf,nonsense]", "unknown allocator 'nonsense'"),
    ("agent.plan.plans=[esrtf,'esrtf(efficiency=2)']", "efficiency must be in (0, 1]"),
    ("agent.plan.plans=[esrtf,'esrtf(backfill=1)']", "backfill must be true or false"),
    ("eval.windows=-1", "eval.windows must be an integer in [0, 10000]"),
    ("agent.plan.arch=graph", "agent.plan.arch must be one of ['mlp', 'set']"),
    ("eval.settings=[huge]", "eval.settings: unknown DL² setting 'huge'"),
    ("eval.settings=[medium]", "the flat network takes one window: use agent.plan.arch=set"),
    ("mixture=general", "the flat network takes one window: use agent.plan.arch=set"),
    (
        "mixture=general mixture.settings=[tiny] mixture.scale=[0,1]",
        "mixture.scale must be [lo, hi]",
    ),
]


@pytest.mark.parametrize(("override", "words"), BAD_PLAN_CONFIGS)
def test_plan_pg_bad_configs_are_one_error(tmp_path: Path, override: str, words: str) -> None:
    """What ``train.py`` does with the config ``_train`` passes plus ``override`` (its key
    check, then ``training.run.train``), in this process: a :class:`ConfigError` naming it
    (train.py prints that error as its one line and exits 2: the test below, through the
    command, for an error of the config schema and one raised once the run has started)."""
    overrides = ["+agent=plan_pg", "env=tiny", "env.reward=jct", "pretrain=esrtf",
                 "pretrain.num_workloads=2", "agent.plan.iterations=2", "agent.plan.val_every=1",
                 "agent.plan.groups=2", "agent.plan.group_size=2", "agent.plan.hidden=16",
                 "eval.deterministic=true", "eval.seeds=[100,101]",
                 "eval.baselines=[drf,esrtf]", *override.split()]  # fmt: skip
    assert words in train_refusal(overrides, tmp_path)


@pytest.mark.parametrize("override", ["eval.windows=-1", "pretrain=srtf"])
def test_plan_pg_bad_config_is_one_line_and_exit_2(tmp_path: Path, override: str) -> None:
    words = dict(BAD_PLAN_CONFIGS)[override]
    rc, text, _ = _train(tmp_path, "bad", override)
    assert rc == 2, text[-2000:]
    assert words in text and "Traceback" not in text
    lines = [ln for ln in text.splitlines() if ln.startswith("train.py: ")]
    assert len(lines) == 1 and words in lines[0], text[-2000:]
    assert not (tmp_path / "bad").exists()  # a run that failed before training leaves none


def test_ctrl_c_stops_plan_pg_between_iterations_and_saves(tmp_path: Path) -> None:
    """SIGINT during RL: exit status 130, one line saying where the run is, the last state
    saved as ``checkpoints/final`` and the summary marked interrupted."""
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    args = [sys.executable, "train.py", "+agent=plan_pg", "env=tiny", "env.reward=jct",
            "pretrain=none", "agent.plan.iterations=100000", "agent.plan.val_every=1",
            "agent.plan.groups=2", "agent.plan.group_size=2", "agent.plan.hidden=16",
            "eval.deterministic=true", "eval.seeds=[100]", "eval.baselines=[drf]",
            f"hydra.run.dir={out}"]  # fmt: skip
    proc = subprocess.Popen(
        args,
        cwd=Path(__file__).resolve().parents[1],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a shell that backgrounds the tests makes children ignore SIGINT: restore it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    curve = out / "learning_curve.csv"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None:
        if curve.is_file() and len(curve.read_text().splitlines()) >= 3:  # 2 validations
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    assert "interrupted" in err and "Traceback" not in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] is True and summary["iterations"] >= 1
    _, meta = load_episode_pg(out / "checkpoints" / "final" / "policy.npz")
    assert meta["training"]["iteration"] == summary["iterations"]


def test_plan_pg_trains_on_a_workload_mixture(tmp_path: Path) -> None:
    rc, text, out = _train(tmp_path, "mix", "mixture=dl2_philly", "mixture.nodes=[4,6]")
    assert rc == 0, text[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["mixture"]["enabled"] is True and summary["iterations"] == 2


def test_plan_pg_trains_over_the_plan_set_it_is_given(tmp_path: Path) -> None:
    """``agent.plan.plans`` is the action set: the saved policy records it and acts over it;
    a label is also a heuristic of the held-out tables, equal to its constant plan."""
    from agents.plan_policy import PlanPolicy
    from evaluation.heldout import heldout_workloads, run_schedulers

    labels = ["esrtf", "esrtf(efficiency=0.7)", "drf"]
    rc, text, out = _train(tmp_path, "set", f"agent.plan.plans=[esrtf,'{labels[1]}',drf]")
    assert rc == 0, text[-3000:]
    assert json.loads((out / "summary.json").read_text())["plans"] == labels
    policy = PlanPolicy.load(out / "checkpoints" / "final" / "policy.npz")
    assert [plan_label(n, o) for n, o in policy.plans] == labels
    workloads = heldout_workloads(TINY, [300])
    table = run_schedulers(TINY, workloads, heuristics=[labels[1]])
    env = make_env(TINY)
    const = run_cluster_episode(env, PlanActor(env, lambda _obs: 1, policy.plans), 300)
    assert table.avg_jct[labels[1]][0] == const.avg_jct


def test_heldout_tables_run_a_plan_policy_as_validation_does() -> None:
    """``evaluation.heldout.run_schedulers`` with a :class:`PlanPolicy`: the same avg JCT per
    generator workload as training's validation, and one row per training seed."""
    from agents.plan_policy import PlanPolicy
    from evaluation.heldout import heldout_workloads, run_schedulers

    env = PlanEnv(config=TINY)
    nets = [_net(env, s) for s in (0, 1)]
    workloads = heldout_workloads(TINY, [300, 301])
    table = run_schedulers(
        TINY,
        workloads,
        heuristics=["esrtf"],
        policies={"p": [PlanPolicy(n, env.plans) for n in nets]},
    )
    assert table.avg_jct["p"].shape == (2, 2)
    for row, net in zip(table.avg_jct["p"], nets, strict=True):
        for value, seed in zip(row, (300, 301), strict=True):
            assert value == validate_plan(net, env, [seed])["avg_jct"]


def test_plan_general_trains_one_set_network_over_several_settings(tmp_path: Path) -> None:
    """``+agent=plan_general`` with a mixture of two settings (windows J = 8 and 12) and
    validation on both: the saved policy is the set network, the curve has ``score`` (what the
    best checkpoint is chosen on): at iteration 0 (the clone of EfficientSRTF) the mean over
    the validation workloads of EfficientSRTF's avg JCT over the best baseline's, through the
    same envs."""
    from agents.plan_policy import PlanPolicy

    rc, text, out = _train(
        tmp_path, "gen", "mixture=general", "mixture.settings=[tiny,medium]",
        "mixture.trace_share=0.5", "agent.plan.groups=2", "eval.settings=[medium]",
        agent="plan_general",
    )  # fmt: skip
    assert rc == 0, text[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["validation_settings"] == ["medium"] and "best_score" in summary
    with open(out / "learning_curve.csv", newline="") as f:
        curve = list(csv.DictReader(f))
    assert "score" in curve[0]
    ratios = []
    for config in (TINY, EnvConfig(setting="medium", reward="jct")):
        jct = {}
        for n in ("drf", "esrtf"):
            runs = evaluate_allocator(lambda n=n: make_allocator(n), config, [100, 101])
            jct[n] = [r.avg_jct for r in runs]
        ratios += [e / min(e, d) for e, d in zip(jct["esrtf"], jct["drf"], strict=True)]
    assert float(curve[0]["score"]) == pytest.approx(np.mean(ratios), rel=1e-9)
    policy = PlanPolicy.load(out / "checkpoints" / "best" / "policy.npz")
    assert policy.any_window and len(policy.plans) == 10
