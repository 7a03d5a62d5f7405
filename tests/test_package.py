"""The installed ``dlsched`` package: its envs in a fresh interpreter outside the repository,
and its public API (``make``, ``simulate``, ``evaluate``, ``load_policy``) against the lower-level
calls each one wraps."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dlsched
from envs.sim import ClusterSpec, ConfigError, SimConfig
from envs.sim import simulate as engine_simulate
from envs.sim.workload import generate_ada_srsf

ROOT = Path(__file__).resolve().parents[1]


def run_fresh(code: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in a fresh interpreter started in ``cwd`` (outside the repository,
    so that only the installed packages can be imported), with ``env`` added."""
    environ = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=300,
        env={**environ, **env},
    )


FRESH = """
import json, sys
import gymnasium as gym
import dlsched
gym.register_envs(dlsched)
heavy = sorted(m for m in ("torch", "ray", "hydra", "omegaconf", "stable_baselines3", "envs",
                           "agents", "evaluation", "training", "pretrain") if m in sys.modules)
kwargs = {"dlsched/Cluster-v0": {"setting": "tiny"}, "dlsched/ClusterPlan-v0": {"setting": "tiny"},
          "dlsched/Contention-v0": {"num_jobs": 8}}
envs = {}
for env_id in dlsched.ENV_IDS:
    env = gym.make(env_id, **kwargs[env_id])
    obs, _ = env.reset(seed=3)
    mask = env.unwrapped.action_masks()
    action = int(mask.nonzero()[0][0])
    obs2, reward, term, trunc, _ = env.step(action)
    space = env.observation_space
    envs[env_id] = {"cls": type(env.unwrapped).__name__, "reset_in": space.contains(obs),
                    "step_in": space.contains(obs2), "reward": float(reward)}
import os
print(json.dumps({"file": dlsched.__file__, "path": sys.path, "cwd": os.getcwd(), "heavy": heavy,
                  "version": dlsched.__version__, "ids": list(dlsched.ENV_IDS), "envs": envs}))
"""


def test_fresh_interpreter_outside_the_repo_makes_every_env(tmp_path: Path) -> None:
    proc = run_fresh(FRESH, tmp_path)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    # found because it is installed, not because the repository root is on sys.path ("" is
    # the current directory, the temporary one)
    assert str(ROOT) not in got["path"] and Path(got["cwd"]) == tmp_path
    assert Path(got["file"]).resolve() == ROOT / "dlsched" / "__init__.py"
    assert got["heavy"] == [], "import dlsched must not import the simulator, torch, Hydra, Ray"
    assert got["version"] == dlsched.__version__ != "0+unknown"
    assert got["ids"] == ["dlsched/Cluster-v0", "dlsched/ClusterPlan-v0", "dlsched/Contention-v0"]
    classes = {"dlsched/Cluster-v0": "ClusterEnv", "dlsched/ClusterPlan-v0": "PlanEnv",
               "dlsched/Contention-v0": "ContentionEnv"}  # fmt: skip
    for env_id, rec in got["envs"].items():
        assert rec["cls"] == classes[env_id]
        assert rec["reset_in"] and rec["step_in"], env_id


def test_the_registrations_agree_with_envs_gym(tmp_path: Path) -> None:
    """``dlsched`` registers the ids without importing the envs; ``envs.gym`` registers the
    same ids with the same entry points (whichever is imported first registers them)."""
    code = (
        "import json, envs.gym\n"
        "from gymnasium.envs.registration import registry\n"
        "print(json.dumps({k: [s.entry_point, s.kwargs, s.max_episode_steps]\n"
        "                  for k, s in registry.items() if k.startswith('dlsched/')}))"
    )
    proc = run_fresh(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    theirs = json.loads(proc.stdout)
    assert theirs == {k: [ep, {}, None] for k, ep in dlsched.api.ENTRY_POINTS.items()}


def test_a_shadowing_package_is_an_import_error(tmp_path: Path) -> None:
    """Another top-level ``envs`` ahead of dlsched's on ``sys.path`` (as a distribution of that
    name would be): ``import dlsched`` fails, naming the package and where it comes from."""
    (tmp_path / "shadow" / "envs").mkdir(parents=True)
    (tmp_path / "shadow" / "envs" / "__init__.py").write_text("WHAT = 'environment variables'\n")
    proc = run_fresh("import dlsched", tmp_path, PYTHONPATH=str(tmp_path / "shadow"))
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: dlsched: the top-level package 'envs' comes from ")
    assert str(tmp_path / "shadow" / "envs" / "__init__.py") in last


# ------------------------------------------------------------------ make


def test_make_by_setting_is_gym_make_of_cluster_v0() -> None:
    import gymnasium as gym

    ours = dlsched.make("tiny", overrides={"num_jobs": 6}, reward="dl2")
    theirs = gym.make("dlsched/Cluster-v0", setting="tiny", overrides={"num_jobs": 6}, reward="dl2")
    assert ours.spec is not None and ours.spec.id == "dlsched/Cluster-v0"
    a, _ = ours.reset(seed=5)
    b, _ = theirs.reset(seed=5)
    np.testing.assert_array_equal(a, b)
    assert len(ours.unwrapped.jobs) == 6 and ours.unwrapped.reward_mode == "dl2"
    short = dlsched.make("ClusterPlan-v0", setting="tiny")
    assert type(short.unwrapped).__name__ == "PlanEnv"


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: dlsched.make("dlsched/Nope-v0"), "'dlsched/Nope-v0'"),
        (lambda: dlsched.make("huge"), "'huge'"),
        (lambda: dlsched.make("tiny", setting="small"), "given twice"),
        (lambda: dlsched.make("Contention-v0", jobs=3), "['jobs']"),
        (lambda: dlsched.make("tiny", rewrd="jct"), "rewrd"),
    ],
)
def test_make_names_what_is_wrong(call: Any, named: str) -> None:
    with pytest.raises(ConfigError) as err:
        call()
    assert named in str(err.value)
    assert "\n" not in str(err.value)


# ------------------------------------------------------------------ simulate


def test_simulate_is_the_engine_run_of_the_pair() -> None:
    """``simulate`` of a stack on a generated workload = ``envs.sim.simulate`` of the same
    workload, cluster and config (times: the engine's ms / 1000)."""
    out = dlsched.simulate("lwf1_adasrsf", workload={"kind": "generator", "num_jobs": 16}, seed=4)
    res = engine_simulate(
        ClusterSpec(16, 4, 32768.0),  # conf/cluster/ada_srsf.yaml = ClusterConfig's defaults
        generate_ada_srsf(4, num_jobs=16),
        "lwf1_adasrsf",
        SimConfig.named("correct", seed=4),
    )
    assert out.scheduler == "lwf1_adasrsf" and out.seed == 4
    np.testing.assert_allclose(out.finish_s, [r.finish_ms / 1000 for r in res.records], rtol=1e-12)
    assert out.jct_s.mean() == pytest.approx(res.summary()["avg_jct_ms"] / 1000, rel=1e-12)
    # the key=value form of evaluate.py's command line is the same run
    again = dlsched.simulate(
        "lwf1_adasrsf", "workload.kind=generator", "workload.num_jobs=16", seed=4
    )
    np.testing.assert_array_equal(again.finish_s, out.finish_s)


@pytest.mark.parametrize(
    ("args", "kwargs", "named"),
    [
        (("lwf9_nope",), {}, "'lwf9_nope'"),
        (("elastic:nope",), {}, "'nope'"),
        (("lwf1_adasrsf",), {"seeds": [0, 1]}, "['seeds']"),
        (("lwf1_adasrsf", "out_dir=x"), {}, "['out_dir']"),
        (("lwf1_adasrsf",), {"workload": {"knd": "generator"}}, "'workload.knd'"),
        (("lwf1_adasrsf", "fidelity"), {}, "'fidelity'"),
        (("lwf1_adasrsf", "workload=nope"), {}, "workload=nope"),
        (("lwf1_adasrsf",), {"mode": "wrong"}, "'wrong'"),
        (("lwf1_adasrsf",), {"seed": -1}, "-1"),
    ],
)
def test_simulate_names_what_is_wrong(
    args: tuple[str, ...], kwargs: dict[str, Any], named: str
) -> None:
    with pytest.raises(ConfigError) as err:
        dlsched.simulate(*args, **kwargs)
    assert named in str(err.value)


# ------------------------------------------------------------------ evaluate


def test_evaluate_rows_are_the_simulated_runs(tmp_path: Path) -> None:
    stacks, seeds = ["lwf1_adasrsf", "ls_adasrsf"], [1, 2]
    workload = {"kind": "generator", "num_jobs": 40}
    ev = dlsched.evaluate(
        f"stacks=[{','.join(stacks)}]",
        workload=workload,
        seeds=seeds,
        workers=1,
        plot=False,
        out_dir=str(tmp_path / "ev"),
    )
    assert ev.run_dir == tmp_path / "ev"
    assert ev.summary == (ev.run_dir / "summary.md").read_text()
    assert sorted((r["stack"], r["seed"]) for r in ev.rows) == [
        (s, k) for s in sorted(stacks) for k in ("1", "2", "mean(1,2)")
    ]
    for row in ev.rows:
        if row["seed"].startswith("mean"):
            per_run = [
                r["avg_jct_s"] for r in ev.rows if r["stack"] == row["stack"] and r is not row
            ]
            assert row["avg_jct_s"] == pytest.approx(np.mean(per_run), rel=1e-12)
            continue
        out = dlsched.simulate(row["stack"], workload=workload, seed=int(row["seed"]))
        assert row["avg_jct_s"] == pytest.approx(out.jct_s.mean(), rel=1e-12)
    recorded = json.loads((ev.run_dir / "run.json").read_text())["config"]
    assert recorded["out_dir"] == str(tmp_path / "ev") and recorded["workload"]["num_jobs"] == 40
    with pytest.raises(ConfigError, match="already holds files"):  # refused: an earlier run
        dlsched.evaluate(stacks=stacks, workload=workload, seeds=seeds, out_dir=str(ev.run_dir))


def test_evaluate_refused_before_running_leaves_no_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'lwf9_nope'"):
        dlsched.evaluate(stacks=["lwf9_nope"], out_dir=str(tmp_path / "ev"))
    assert not (tmp_path / "ev").exists()


@pytest.mark.parametrize(
    "overrides",
    [
        [],
        ["workload=philly", "seeds=[0,1]", "stacks=[lwf1_adasrsf,elastic:drf]"],
        ["cluster=dl2_small", "workload=dl2", "workload.dl2.num_jobs=8", "elastic.slot_s=600"],
        ["workload=generated_paper_scale", "runner=ray", "policy_eval.deterministic=true"],
    ],
)
def test_the_config_is_evaluate_py_s(overrides: list[str]) -> None:
    """The config ``simulate`` / ``evaluate`` build without Hydra = the one Hydra composes for
    ``evaluate.py`` from ``conf/`` with the same overrides (but for the dated out_dir)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from dlsched.api import _config
    from evaluation.config import EvaluateConfig

    ConfigStore.instance().store(name="evaluate_schema", node=EvaluateConfig)
    with initialize_config_dir(str(ROOT / "conf"), version_base=None):
        composed = compose("evaluate", overrides=[*overrides, "out_dir=x"])
    hydra_cfg = OmegaConf.to_object(composed)
    ours, _ = _config([*overrides, "out_dir=x"], {})
    assert asdict(ours) == asdict(hydra_cfg)


# ------------------------------------------------------------------ load_policy


def _episode_actions(env: Any, act: Any, seed: int, steps: int) -> list[int]:
    obs, _ = env.reset(seed=seed)
    actions = []
    for _ in range(steps):
        a = act(env, obs)
        actions.append(a)
        obs, _, term, trunc, _ = env.step(a)
        if term or trunc:
            break
    return actions


def test_a_released_network_acts_as_the_evaluation_loads_it() -> None:
    from evaluation.policy import load_network, network_actor

    policy = dlsched.load_policy("small_esrtf_gppo")
    path = ROOT / "policies" / "small_esrtf_gppo"
    assert (policy.kind, policy.env_id, policy.path) == ("network", "dlsched/Cluster-v0", path)
    assert policy.deterministic is True  # policy.json records act: argmax
    assert policy.env is not None and policy.env["setting"] == "small"
    fast, meta = load_network(str(path))
    assert meta == policy.meta
    evaluation_actor = network_actor(fast, True, 0, "policy")
    env = policy.make_env()
    ours = _episode_actions(env, policy.act, 11, 200)
    theirs = _episode_actions(env, evaluation_actor(env, 11), 11, 200)
    assert ours == theirs and len(set(ours)) > 1
    # sampled: the same draws from the same generator
    a = policy.predict(env.reset(seed=2)[0], action_masks=env.action_masks(), deterministic=False,
                       rng=np.random.default_rng(9))[0]  # fmt: skip
    b = fast.act(env.reset(seed=2)[0], env.action_masks(), deterministic=False,
                 rng=np.random.default_rng(9))  # fmt: skip
    assert int(a) == b


def test_a_released_plan_policy_runs_as_evaluate_py_runs_it() -> None:
    """A whole episode through ``policy.actor`` = ``simulate("policy:<path>")`` (the
    evaluation's path); its own ClusterPlan-v0 env acts with the network's argmax."""
    from agents.episode_results import run_episode
    from agents.plan_policy import PlanPolicy
    from envs.gym.factory import make_env

    policy = dlsched.load_policy(ROOT / "policies" / "small_bundle_plan_pg")
    npz = ROOT / "policies" / "small_bundle_plan_pg" / "policy.npz"
    assert (policy.kind, policy.env_id, policy.path) == ("plan", "dlsched/ClusterPlan-v0", npz)
    env_config = {**(policy.env or {}), "overrides": {"num_jobs": 10}}
    env = make_env(env_config)
    episode = run_episode(env, policy.actor(env, 7), 7)
    out = dlsched.simulate(
        f"policy:{npz}", workload={"kind": "env", "env": {"overrides": {"num_jobs": 10}}}, seed=7
    )
    assert out.info["episode"]["avg_jct"] == episode.avg_jct
    assert out.jct_s.mean() / out.info["slot_s"] == pytest.approx(episode.avg_jct, rel=1e-12)
    plan_env = policy.make_env()
    choose = PlanPolicy.load(npz).chooser(True)
    assert _episode_actions(plan_env, policy.act, 3, 5) == _episode_actions(
        plan_env, lambda e, o: choose(o), 3, 5
    )
    with pytest.raises(ConfigError, match=r"policy\.actor\(env, seed\)"):
        policy.act(env, env.reset(seed=0)[0])  # per increment in Cluster-v0: the actor's job


def test_a_released_contention_policy_acts_by_its_argmax() -> None:
    from agents.episode_pg import load_episode_pg

    npz = ROOT / "policies" / "contention_exclusive_pg" / "policy.npz"
    policy = dlsched.load_policy("contention_exclusive_pg")
    assert (policy.kind, policy.env_id, policy.path) == ("contention", "dlsched/Contention-v0", npz)
    net, _ = load_episode_pg(npz)
    layout = {k: (policy.env or {})[k] for k in ("J", "placements", "comm", "scale")}
    env = dlsched.make("Contention-v0", num_jobs=40, **layout)
    theirs = _episode_actions(env, lambda e, o: net.act(e.unwrapped, o), 5, 60)
    assert _episode_actions(env, policy.act, 5, 60) == theirs and len(set(theirs)) > 1
    with pytest.raises(ConfigError, match="argmax only"):
        policy.predict(env.reset(seed=5)[0], deterministic=False)


def test_a_training_run_directory_loads_its_best_checkpoint(tmp_path: Path) -> None:
    best = tmp_path / "run" / "checkpoints" / "best"
    best.mkdir(parents=True)
    shutil.copy(ROOT / "policies" / "small_bundle_plan_pg" / "policy.npz", best / "policy.npz")
    assert dlsched.load_policy(tmp_path / "run").path == best / "policy.npz"


def test_load_policy_names_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'no_such_policy': no such file or directory, nor a"):
        dlsched.load_policy("no_such_policy")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ConfigError, match="empty: neither a checkpoint"):
        dlsched.load_policy(tmp_path / "empty")
    (tmp_path / "weights.txt").write_text("x")
    with pytest.raises(ConfigError, match=r"weights\.txt: expected a checkpoint directory"):
        dlsched.load_policy(tmp_path / "weights.txt")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match=r"bad\.npz: cannot read the saved policy"):
        dlsched.load_policy(tmp_path / "bad.npz")
    (tmp_path / "run" / "checkpoints").mkdir(parents=True)
    with pytest.raises(ConfigError, match="run directory without checkpoints/best"):
        dlsched.load_policy(tmp_path / "run")


def test_released_policies_lists_the_folders() -> None:
    released = dlsched.released_policies()
    assert set(released) == {d.name for d in (ROOT / "policies").iterdir() if d.is_dir()}
    assert all(p.parent == ROOT / "policies" for p in released.values())


def test_the_documented_example_prints_what_the_page_says(tmp_path: Path) -> None:
    """docs/api.md's example, run from a directory outside the repository: its output is the
    page's ``text`` block."""
    page = (ROOT / "docs" / "api.md").read_text()
    example = page.split("## Example", 1)[1]
    code = example.split("```python\n", 1)[1].split("```", 1)[0]
    printed = example.split("```text\n", 1)[1].split("```", 1)[0]
    proc = run_fresh(code, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout == printed
    assert (tmp_path / "runs" / "api_example" / "summary.md").is_file()
