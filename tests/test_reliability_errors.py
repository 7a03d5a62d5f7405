"""Nothing lost, nothing left running: clear one-line errors for out-of-range seeds (the
Gymnasium envs, ``evaluate.py``), a window-mismatch hint that Hydra accepts as written, and the
elastic runs' heartbeat and wall-clock budget in ``evaluate.py`` (slot simulator and env mode),
as the contention engine has them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.config_store import ConfigStore
from omegaconf import OmegaConf

import envs.gym  # noqa: F401  (registers the ids)
from agents.episode_results import run_episode_detailed
from envs.gym.contention_env import CONTENTION_ENV_ID
from envs.gym.factory import EnvConfig, check_seed, make_env
from envs.gym.plan_env import PLAN_ENV_ID
from envs.sim.elastic.simulator import Heartbeat
from envs.sim.errors import ConfigError, SimulationError
from evaluation.config import (
    DL2Config,
    EnvSection,
    EvaluateConfig,
    PolicyEvalConfig,
    WorkloadConfig,
)
from evaluation.env_runs import with_heartbeat
from evaluation.kinds import run_task
from evaluation.pipeline import make_plan
from evaluation.runner import RunsFailed
from tests.cli import run_script

ROOT = Path(__file__).resolve().parents[1]
CLUSTER_ID = "dlsched/Cluster-v0"


# ---------------------------------------------------------------- 1. env reset seeds
@pytest.mark.parametrize("seed", [2**63, 2**64, 2**32, -1])
def test_contention_env_out_of_range_seeds_are_config_errors(seed: int) -> None:
    env = gym.make(CONTENTION_ENV_ID, num_jobs=10)
    want = f"{CONTENTION_ENV_ID} reset seed: {seed} is out of range (0 <= seed < 2**32)"
    with pytest.raises(ConfigError) as info:
        env.reset(seed=seed)
    assert str(info.value) == want


def test_contention_env_accepts_the_edges_and_checks_the_workload_seed_option() -> None:
    env = gym.make(CONTENTION_ENV_ID, num_jobs=10)
    for seed in (0, 2**32 - 1, np.int64(7)):
        _, info = env.reset(seed=seed)  # type: ignore[arg-type]
        assert info["workload_seed"] == int(seed)
    with pytest.raises(ConfigError, match=r"options\['workload_seed'\]: -3 is out of range"):
        env.reset(options={"workload_seed": -3})
    with pytest.raises(ConfigError, match="is not an integer seed"):
        env.reset(seed=1.5)  # type: ignore[arg-type]


@pytest.mark.parametrize("env_id", [CLUSTER_ID, PLAN_ENV_ID])
def test_cluster_and_plan_envs_take_any_seed_at_least_zero(env_id: str) -> None:
    kwargs: dict[str, Any] = {"setting": "tiny"}
    env = gym.make(env_id, **kwargs)
    with pytest.raises(ConfigError) as info:
        env.reset(seed=-1)
    assert str(info.value) == f"{env_id} reset seed: -1 is out of range (seed >= 0)"
    # numpy's default_rng (the env's generator and the workload's) takes any integer >= 0
    for seed in (2**32, 2**63, 2**64 + 5):
        env.reset(seed=seed)
    first = gym.make(env_id, **kwargs)
    a, _ = first.reset(seed=2**64 + 5)
    b, _ = env.reset(seed=2**64 + 5)
    assert np.array_equal(a, b)  # reproducible


def test_factory_seeds_are_checked() -> None:
    with pytest.raises(ConfigError, match=r"^env seed: -2 is out of range \(seed >= 0\)$"):
        make_env(EnvConfig(setting="tiny"), seed=-2)
    assert check_seed(np.uint64(2**32 - 1), "k") == 2**32 - 1
    with pytest.raises(ConfigError, match=r"^k: True is not an integer seed"):
        check_seed(True, "k")


# ---------------------------------------------------------------- 2. evaluate.py seeds
@pytest.mark.parametrize(
    ("arg", "want"),
    [
        ("seeds=[-1]", "seeds: -1 is out of range (0 <= seed < 2**32)"),
        ("seeds=[0,4294967296]", "seeds: 4294967296 is out of range (0 <= seed < 2**32)"),
    ],
)
def test_evaluate_checks_seeds_up_front(tmp_path: Path, arg: str, want: str) -> None:
    out = run_script("evaluate.py", "workload=generated", arg, f"out_dir={tmp_path / 'r'}")
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"error: {want}" in out.stderr.splitlines()
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "r").exists()  # nothing ran, nothing written


def test_evaluate_config_seed_checks_before_any_workload() -> None:
    for seeds in ([-1], [2**32], [0, -5]):
        bad = next(s for s in seeds if not 0 <= s < 2**32)
        with pytest.raises(ConfigError, match=rf"^seeds: {bad} is out of range"):
            make_plan(EvaluateConfig(workload=WorkloadConfig(kind="generator"), seeds=seeds))
    pe = PolicyEvalConfig(sample_seed=-1)
    with pytest.raises(ConfigError, match=r"^policy_eval.sample_seed: -1 is out of range"):
        make_plan(EvaluateConfig(policy_eval=pe))


# ---------------------------------------------------------------- 3. the window hint
def _policy(directory: Path, setting: str) -> Path:
    from agents.checkpoint import save_policy_weights
    from agents.policy import DL2Policy, policy_kwargs

    env = make_env(EnvConfig(setting=setting))
    policy = DL2Policy(
        env.observation_space, env.action_space, lambda _: 1e-4, **policy_kwargs(None, env.J)
    )
    meta = {"env": EnvConfig(setting=setting).as_dict(), "policy": {}}
    return save_policy_weights(policy, directory / "policy.pt", meta)


@pytest.fixture(scope="module")
def tiny_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untrained policy of the ``tiny`` env (window J=8)."""
    return _policy(tmp_path_factory.mktemp("tiny"), "tiny")


def _compose(*overrides: str) -> EvaluateConfig:
    """``evaluate.py``'s config for ``overrides``, composed by Hydra as the command does."""
    ConfigStore.instance().store(name="evaluate_schema", node=EvaluateConfig)
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = OmegaConf.to_object(compose("evaluate", overrides=list(overrides)))
    assert isinstance(cfg, EvaluateConfig)
    return cfg


def _hint(message: str) -> str:
    found = re.search(r"add (\+\+?workload\.env\.overrides\.J=\d+) to the command", message)
    assert found, message
    return found.group(1)


def test_the_window_hint_runs_through_evaluate_py(tiny_policy: Path, tmp_path: Path) -> None:
    args = [
        "workload=env",
        "workload.env.setting=medium",  # J=12
        "workload.env.max_slots=20",
        f"stacks=[policy:{tiny_policy}]",
        "seeds=[0]",
        "workers=1",
        "plot=false",
    ]
    out = run_script("evaluate.py", *args, f"out_dir={tmp_path / 'a'}")
    assert out.returncode == 2, out.stderr[-2000:]
    [line] = [ln for ln in out.stderr.splitlines() if ln.startswith("error: ")]
    assert "was trained with a window of J=8 jobs but the evaluation env has J=12" in line
    hint = _hint(line)
    assert hint == "+workload.env.overrides.J=8"
    # the suggested override, added as written, is accepted and the evaluation runs
    out = run_script("evaluate.py", *args, hint, f"out_dir={tmp_path / 'b'}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert "run dir:" in out.stdout


def test_the_window_hint_when_the_command_already_sets_j(tiny_policy: Path) -> None:
    args = [
        "workload=env",
        "workload.env.setting=tiny",
        "+workload.env.overrides.J=12",
        f"stacks=[policy:{tiny_policy}]",
    ]
    with pytest.raises(ConfigError) as info:
        make_plan(_compose(*args))
    hint = _hint(str(info.value))
    assert hint == "++workload.env.overrides.J=8"  # a second '+' replaces the key
    cfg = _compose(*args, hint)
    assert cfg.workload.env.overrides == {"J": 8}
    make_plan(cfg)  # no window error now


def test_the_window_hint_for_workload_dl2(tiny_policy: Path, tmp_path_factory) -> None:
    medium = _policy(tmp_path_factory.mktemp("medium"), "medium")
    cfg = _compose(
        "workload=dl2", "cluster=dl2_small", f"stacks=[policy:{tiny_policy},policy:{medium}]"
    )
    with pytest.raises(ConfigError, match="J=12 jobs but the evaluation env has J=8; every"):
        make_plan(cfg)


# ---------------------------------------------------------------- 4. elastic heartbeat/budget
def _dl2_config(**run: Any) -> EvaluateConfig:
    """``elastic:drf`` on a small DL² workload in the elastic world, in this process."""
    return EvaluateConfig(
        workload=WorkloadConfig(kind="dl2", dl2=DL2Config(num_jobs=20)),
        stacks=["elastic:drf"],
        seeds=[0],
        workers=1,
        plot=False,
        **run,
    )


def _env_config(**run: Any) -> EvaluateConfig:
    """``elastic:drf`` through the DL² env (env mode, the ``tiny`` setting)."""
    return EvaluateConfig(
        workload=WorkloadConfig(kind="env", env=EnvSection(setting="tiny")),
        stacks=["elastic:drf"],
        seeds=[0],
        workers=1,
        plot=False,
        **run,
    )


@pytest.mark.parametrize("config", [_dl2_config, _env_config], ids=["slot-simulator", "env"])
def test_a_tiny_wall_clock_budget_stops_an_elastic_run(config) -> None:
    [task] = make_plan(config(max_wall_s=1e-6, progress_s=None)).tasks
    assert task.sim_config.run.max_wall_s == 1e-6  # evaluate.py passes it through
    with pytest.raises(SimulationError, match=r"^wall-clock budget of 1e-06 s spent at slot \d+, "
                       r"\d+ of \d+ jobs finished$"):  # fmt: skip
        run_task(task)


@pytest.mark.parametrize("config", [_dl2_config, _env_config], ids=["slot-simulator", "env"])
def test_a_tiny_progress_period_prints_progress_lines(
    config, capfd: pytest.CaptureFixture[str]
) -> None:
    [quiet] = make_plan(config(progress_s=None)).tasks
    [loud] = make_plan(config(progress_s=1e-9)).tasks
    a, b = run_task(quiet), run_task(loud)
    lines = [ln for ln in capfd.readouterr().err.splitlines() if "jobs finished" in ln]
    name = loud.prepared.name
    assert lines, "no progress line"
    pattern = rf"^{re.escape(name)} under elastic:drf: \d+ s, slot \d+, \d+ of \d+ jobs finished$"
    assert all(re.match(pattern, ln) for ln in lines), lines[:3]
    # the heartbeat changes nothing simulated
    for field in ("job_id", "submit_s", "start_s", "finish_s"):
        assert np.array_equal(getattr(a, field), getattr(b, field))
    assert a.makespan_s == b.makespan_s and a.gpu_util == b.gpu_util


def test_the_budget_error_comes_back_through_evaluate(tmp_path: Path) -> None:
    from evaluation.pipeline import evaluate

    with pytest.raises(RunsFailed, match=r"elastic:drf seed 0\): wall-clock budget of 1e-06 s"):
        evaluate(_dl2_config(max_wall_s=1e-6), tmp_path / "r", {})


def test_with_heartbeat_keeps_a_step_actor_a_step_actor() -> None:
    """A policy acts step by step (no ``allocator_for``); wrapped, it still does, and the
    env's slot simulator of the episode keeps the heartbeat."""
    env = make_env(EnvConfig(setting="tiny", max_slots=50))

    def last_valid(e, _obs) -> int:
        return int(np.flatnonzero(e.action_masks())[-1])

    beat = Heartbeat("x", max_wall_s=1e-6)
    actor = with_heartbeat(last_valid, beat)
    assert not hasattr(actor, "allocator_for")
    assert with_heartbeat(last_valid, None) is last_valid
    with pytest.raises(SimulationError, match="wall-clock budget of 1e-06 s spent at slot"):
        run_episode_detailed(env, actor, 0)
    assert env.sim is not None and env.sim.heartbeat is beat


# ------------------------------------------------------- train.py: unknown keys, even with +


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (["+agent=plan_pg", "+seeds=3"], "seeds"),
        (["+agent=a2c_increments", "+agent.lr=3"], "agent.lr"),
    ],
)
def test_train_refuses_unknown_keys_even_with_plus(
    args: list[str], key: str, tmp_path: Path
) -> None:
    from tests.cli import run_script

    out = run_script("train.py", *args, f"hydra.run.dir={tmp_path / 'run'}")
    assert out.returncode == 2, out.stderr[-2000:]
    assert f"unknown config key '{key}'" in out.stderr
    assert "Traceback" not in out.stderr
    assert not (tmp_path / "run").exists()


def test_every_shipped_train_config_passes_the_key_check() -> None:
    from hydra import compose, initialize_config_dir

    import train

    conf = Path(train.__file__).resolve().parent / "conf"
    agents = sorted(p.stem for p in (conf / "agent").glob("*.yaml"))
    extra = [[], ["federated=local"], ["mixture=dl2_philly"], ["env=ada"], ["+env.overrides.J=12"]]
    with initialize_config_dir(config_dir=str(conf), version_base="1.3"):
        for agent in agents:
            for more in extra:
                cfg = compose("train", overrides=[f"+agent={agent}", *more])
                train._check_keys(cfg)  # raises on a key the schemas lack


def test_train_refuses_a_run_directory_another_run_holds_or_wrote(tmp_path: Path) -> None:
    """Two runs started in the same second with the same agent get the same default
    directory: the second must not write into the first's."""
    import subprocess
    import sys
    import time

    from tests.cli import ROOT, run_script

    out = tmp_path / "run"
    args = ["+agent=plan_pg", "env=tiny", "env.reward=jct", "pretrain=none",
            "agent.plan.iterations=100000", "agent.plan.val_every=1", "agent.plan.groups=2",
            "agent.plan.group_size=2", "agent.plan.hidden=16", "agent.plan.workers=1",
            "eval.seeds=[100]", "eval.baselines=[drf]", f"hydra.run.dir={out}"]  # fmt: skip
    first = subprocess.Popen(
        [sys.executable, "train.py", *args], cwd=ROOT, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (out / ".lock").is_file() or not (out / "run.json").is_file():
            assert first.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        busy = run_script("train.py", *args)
        assert busy.returncode == 2 and "in use by another run" in busy.stderr, busy.stderr
    finally:
        first.terminate()
        first.wait(timeout=60)
    after = run_script("train.py", *args)  # the first run's files are there
    assert after.returncode == 2 and "already holds another run's files" in after.stderr
    assert "Traceback" not in after.stderr
    assert (out / "run.json").is_file()  # nothing of the first run was removed
