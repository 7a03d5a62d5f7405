"""Federated multi-cluster training (issue 11): local and Ray give the same run; SB3 VecEnv
semantics of :class:`RayVecEnv`; J/L checks; per-cluster metrics; unseen job types.

One local Ray session for the module (loopback, no dashboard, no usage statistics)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch as th
from stable_baselines3.common.monitor import Monitor

from agents.build import build_agent
from agents.checkpoint import save_checkpoint
from agents.config import AgentConfig
from agents.episode_results import evaluate_policy
from agents.federated import (
    FederatedVecEnv,
    RayVecEnv,
    check_clusters,
    federated_vec_env,
    init_ray,
)
from agents.federated_callbacks import FederatedMetricsCallback
from envs.gym.factory import EnvConfig
from envs.sim.errors import ConfigError
from training.config import ClusterEntry, FederatedConfig

ROOT = Path(__file__).resolve().parents[2]
TWO_TINY = [
    ClusterEntry(EnvConfig(setting="tiny", overrides={"num_nodes": 3}), seed=0),
    ClusterEntry(EnvConfig(setting="tiny", overrides={"num_nodes": 5}, arrival="poisson"), seed=7),
]


@pytest.fixture(scope="module")
def ray_session():
    started = init_ray(None, num_cpus=2)
    import ray

    yield ray
    if started:
        ray.shutdown()


def _train(
    mode: str, clusters: list[ClusterEntry], tb: Path, *, steps: int = 1024
) -> tuple[Any, FederatedMetricsCallback]:
    th.manual_seed(0)
    env, configs = federated_vec_env(FederatedConfig(mode=mode, clusters=clusters), seed=0)
    agent = AgentConfig(n_steps=64, learning_rate=1e-3)
    model = build_agent(agent, env, 8, seed=0, tensorboard_log=str(tb))
    cb = FederatedMetricsCallback(configs, [100], every=512, curve_csv=tb / "clusters.csv")
    model.learn(steps, callback=cb, tb_log_name=mode)
    return model, cb


def _params(model: Any) -> list[th.Tensor]:
    return [p.detach().clone() for p in model.policy.parameters()]


def _arr(x: Any) -> np.ndarray:
    return np.asarray(x)


def _scalar_tags(tb: Path) -> set[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags: set[str] = set()
    for run in tb.iterdir():
        if run.is_dir():
            acc = EventAccumulator(str(run))
            acc.Reload()
            tags |= set(acc.Tags()["scalars"])
    return tags


def test_the_local_ray_is_one_loopback_node_of_two_cpus(ray_session) -> None:
    """``init_ray(None, num_cpus=2)``: one node, advertised (and listening) on 127.0.0.1 only,
    with the 2 CPUs it declared (no more than this machine has: the two actors need them)."""
    assert [n["NodeManagerAddress"] for n in ray_session.nodes()] == ["127.0.0.1"]
    assert ray_session.cluster_resources()["CPU"] == 2 <= (os.cpu_count() or 1)


def test_local_and_ray_train_the_same_policy_with_per_cluster_metrics(
    ray_session, tmp_path: Path
) -> None:
    local, cb_local = _train("local", TWO_TINY, tmp_path / "local")
    remote, cb_ray = _train("ray", TWO_TINY, tmp_path / "ray")
    assert isinstance(local.get_env(), FederatedVecEnv)
    assert isinstance(remote.get_env(), RayVecEnv)
    for a, b in zip(_params(local), _params(remote), strict=True):
        assert th.equal(a, b)
    assert local._n_updates == remote._n_updates == 8
    # per-cluster metrics: training episodes ended on both clusters, validation on each
    assert cb_local.rollout_jct == cb_ray.rollout_jct
    assert all(len(j) >= 1 for j in cb_local.rollout_jct)
    assert cb_local.history == [
        {**r, "wall_s": cb_local.history[k]["wall_s"], "train_s": cb_local.history[k]["train_s"]}
        for k, r in enumerate(cb_ray.history)
    ]
    assert {r["cluster"] for r in cb_local.history} == {0, 1}
    assert [r["updates"] for r in cb_local.history] == [0, 0, 4, 4, 8, 8]  # start, 512, end
    tags = _scalar_tags(tmp_path / "ray")
    for i in (0, 1):
        assert f"federated/cluster{i}/rollout_avg_jct" in tags
        assert f"federated/cluster{i}/val_avg_jct" in tags
    assert "federated/val_avg_jct_mean" in tags
    rows = (tmp_path / "ray" / "clusters.csv").read_text().splitlines()
    assert rows[0].startswith("timesteps,updates,wall_s,train_s,cluster,label")
    assert len(rows) == 1 + 6
    # a checkpoint of a Ray run skips env.pkl (actors do not pickle); the rest is written
    ckpt = save_checkpoint(remote, tmp_path / "ckpt", {"agent": "a2c"})
    assert (ckpt / "model.zip").is_file() and not (ckpt / "env.pkl").exists()
    remote.get_env().close()
    local.get_env().close()


def test_ray_vec_env_has_sb3_vec_env_semantics(ray_session) -> None:
    # TWO_TINY's clusters and a third, each with 4 jobs an episode (short episodes: every
    # cluster's first one ends by step 50 with these actions)
    configs = [
        replace(c, overrides={**c.overrides, "num_jobs": 4})
        for c in [*(e.env for e in TWO_TINY), EnvConfig(setting="tiny", arrival="uniform")]
    ]
    seeds = [0, 7, 3]
    local = FederatedVecEnv(configs, seeds)
    remote = RayVecEnv(configs, seeds, envs_per_actor=2)  # actors: envs {0, 1} and {2}
    assert local.seed(1) == remote.seed(1) == [1, 8, 4]  # each cluster keeps its own seed
    assert np.array_equal(_arr(local.reset()), _arr(remote.reset()))
    assert local.get_attr("workload_seed") == remote.get_attr("workload_seed") == [1, 8, 4]
    rng = np.random.default_rng(0)
    episodes = 0
    ended: set[int] = set()
    for _ in range(80):
        masks = np.stack(local.env_method("action_masks"))
        assert np.array_equal(masks, np.stack(remote.env_method("action_masks")))
        actions = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        a, b = local.step(actions), remote.step(actions)
        for x, y in zip(a[:3], b[:3], strict=True):
            assert np.array_equal(_arr(x), _arr(y))
        for k, (ia, ib) in enumerate(zip(a[3], b[3], strict=True)):
            assert ia.keys() == ib.keys()
            assert ia["TimeLimit.truncated"] == ib["TimeLimit.truncated"]
            if "terminal_observation" in ia:
                episodes += 1
                ended.add(k)
                assert np.array_equal(ia["terminal_observation"], ib["terminal_observation"])
                assert ia["avg_jct_slots"] == ib["avg_jct_slots"]
    assert episodes >= 3 and ended == {0, 1, 2}  # every cluster auto-reset
    # attributes and methods in the order of the indices asked for
    assert remote.get_attr("J") == [8, 8, 8]
    nodes = [s.num_nodes for s in remote.get_attr("setting", [2, 0, 1])]
    assert nodes == [4, 3, 5]
    assert remote.env_is_wrapped(Monitor) == [True, True, True]
    assert remote.env_method("action_masks", indices=[1])[0].shape == (25,)
    remote.set_attr("tag", "x", indices=[2])
    assert remote.get_attr("tag", [2]) == ["x"]
    with pytest.raises(TypeError, match="cannot be pickled"):
        import pickle

        pickle.dumps(remote)
    remote.close()
    remote.close()  # idempotent


def test_clusters_must_share_the_window_and_the_type_count() -> None:
    mismatch = [TWO_TINY[0], ClusterEntry(EnvConfig(setting="tiny", overrides={"J": 6}), seed=1)]
    with pytest.raises(ConfigError, match=r"J=8, L=8.*J=6, L=8"):
        federated_vec_env(FederatedConfig(mode="local", clusters=mismatch), seed=0)
    with pytest.raises(ConfigError, match=r"env \(medium\): J=12"):
        check_clusters([c.env for c in TWO_TINY], EnvConfig(setting="medium"))
    with pytest.raises(ConfigError, match="non-empty"):
        federated_vec_env(FederatedConfig(mode="local", clusters=[]), seed=0)
    with pytest.raises(ConfigError, match=r"federated\.mode"):
        federated_vec_env(FederatedConfig(mode="bogus", clusters=TWO_TINY), seed=0)


def test_unseen_job_types_do_not_crash_the_run(tmp_path: Path) -> None:
    # each cluster's workload has only one job type (from a trace); the other's is unseen by it,
    # and the policy is then validated on a generated workload with all 8 types
    header = "job_id,submit_time_s,duration_s,num_gpus,job_type\n"
    traces = {}
    for model in ("resnet50", "lstm"):
        rows = [f"{model}-{k},{k * 900},{3000 + 500 * k},{1 + k % 3},{model}\n" for k in range(10)]
        traces[model] = tmp_path / f"{model}.csv"
        traces[model].write_text(header + "".join(rows))
    clusters = [
        ClusterEntry(EnvConfig(setting="tiny", trace=str(traces["resnet50"])), seed=0),
        ClusterEntry(
            EnvConfig(setting="tiny", trace=str(traces["lstm"]), overrides={"num_nodes": 3}), seed=1
        ),
    ]
    model, cb = _train("local", clusters, tmp_path / "tb", steps=512)
    assert {r["cluster"] for r in cb.history} == {0, 1}
    assert all(np.isfinite(r["avg_jct"]) for r in cb.history)
    res = evaluate_policy(model, EnvConfig(setting="tiny"), [100])
    assert res[0].unfinished == 0


def test_train_cli_federated_local(tmp_path: Path) -> None:
    clusters = (
        "[{env:{setting:tiny,overrides:{num_nodes:3}},seed:0},"
        "{env:{setting:tiny,arrival:poisson},seed:7}]"
    )
    out = subprocess.run(
        [
            sys.executable,
            "train.py",
            "+agent=a2c_increments",
            "federated=local",
            "env=tiny",
            f"federated.clusters={clusters}",
            "pretrain=none",
            "eval=quick",
            "total_timesteps=256",
            "agent.n_steps=64",
            "checkpoint_every=0",
            f"hydra.run.dir={tmp_path}",
            "progress_bar=false",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert set(summary["federated"]) == {"cluster0", "cluster1"}
    assert summary["federated"]["cluster1"]["label"] == "tiny poisson"
    assert (tmp_path / "cluster_curves.csv").is_file()
    assert (tmp_path / "checkpoints" / "final" / "env.pkl").is_file()  # local envs pickle
