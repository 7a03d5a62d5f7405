"""Every episode's last ``info`` carries its JCT figures and ``unfinished_jobs``, terminated or
truncated, in all three envs: SB3's ``Monitor(env, info_keywords=...)`` logs every episode.
A truncated episode's figures count each unfinished job as finishing at the episode's end
(finite lower bounds), checked against figures computed here from the simulator's finish
times and against the return, which they still equal."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from stable_baselines3.common.monitor import Monitor

import envs.gym  # noqa: F401 - registers the ids

CLUSTER_KEYS = ("avg_jct_slots", "avg_jct_s", "makespan_slots", "unfinished_jobs")
CONTENTION_KEYS = ("avg_jct_s", "p95_jct_s", "makespan_s", "unfinished_jobs")


def _run(env: gym.Env, seed: int, choose: Any) -> tuple[float, dict[str, Any], bool]:
    env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    total = 0.0
    while True:
        mask = env.unwrapped.action_masks()  # type: ignore[attr-defined]
        _, r, term, trunc, info = env.step(choose(mask, rng))
        total += float(r)
        if term or trunc:
            return total, info, bool(term)


def _random(mask: np.ndarray, rng: np.random.Generator) -> int:
    return int(rng.choice(np.flatnonzero(mask)))


def _cluster_oracle(env: Any) -> tuple[float, float, int]:
    """avg JCT and makespan (slots), unfinished jobs, from the simulator's finish times."""
    sim = env.sim
    end = float(sim.t)
    jcts, ends, left = [], [], 0
    for job in env.jobs:
        f = sim.finish_time(job.job_id)
        left += f is None
        jcts.append((max(end, job.arrival_slot) if f is None else f) - job.arrival_slot)
        ends.append(end if f is None else f)
    return float(np.mean(jcts)), max(ends), left


@pytest.mark.parametrize(
    ("max_slots", "terminated"), [(3, False), (8, False), (2000, True)], ids=str
)
def test_cluster_env_final_info_terminated_or_truncated(
    max_slots: int, terminated: bool, tmp_path: Path
) -> None:
    env = Monitor(
        gym.make("dlsched/Cluster-v0", setting="tiny", max_slots=max_slots),
        filename=str(tmp_path / "m"),
        info_keywords=CLUSTER_KEYS,
    )
    ret, info, term = _run(env, 1, _random)
    assert term is terminated
    avg, makespan, left = _cluster_oracle(env.unwrapped)
    assert info["unfinished_jobs"] == left and (left == 0) is terminated
    assert info["avg_jct_slots"] == pytest.approx(avg, rel=1e-12)
    assert info["avg_jct_s"] == pytest.approx(avg * 1200.0, rel=1e-12)
    assert info["makespan_slots"] == pytest.approx(makespan, rel=1e-12)
    if not terminated:
        assert info["makespan_slots"] == max_slots  # unfinished jobs end at the horizon
    # reward "jct": the return is minus the total (lower-bound) JCT, truncated or not
    assert ret == pytest.approx(-info["avg_jct_slots"] * info["num_jobs"], rel=1e-9)
    env.close()
    with open(tmp_path / "m.monitor.csv", newline="") as f:
        rows = list(csv.DictReader(line for line in f if not line.startswith("#")))
    assert len(rows) == 1 and all(math.isfinite(float(rows[0][k])) for k in CLUSTER_KEYS)


def test_cluster_env_stuck_episode_has_its_figures() -> None:
    env = gym.make("dlsched/Cluster-v0", setting="tiny")
    env.reset(seed=0)
    for _ in range(3):
        env.step(env.unwrapped.void_action)  # type: ignore[attr-defined]
    while True:
        _, _, term, trunc, info = env.step(-1)
        if term or trunc:
            break
    assert trunc and info["stuck"]
    avg, makespan, left = _cluster_oracle(env.unwrapped)
    assert (info["avg_jct_slots"], info["makespan_slots"], info["unfinished_jobs"]) == (
        pytest.approx(avg),
        makespan,
        left,
    )
    assert left > 0 and math.isfinite(info["avg_jct_slots"])


@pytest.mark.parametrize("max_slots", [4, 2000])
def test_plan_env_passes_the_figures_on(max_slots: int) -> None:
    """``ClusterPlan-v0``: the inner env's last info, also when truncated."""
    env = Monitor(
        gym.make("dlsched/ClusterPlan-v0", setting="tiny", max_slots=max_slots),
        info_keywords=CLUSTER_KEYS,
    )
    _, info, term = _run(env, 2, lambda mask, rng: 0)
    assert term is (max_slots == 2000)
    inner = env.unwrapped.inner  # type: ignore[attr-defined]
    avg, _, left = _cluster_oracle(inner)
    assert info["avg_jct_slots"] == pytest.approx(avg) and info["unfinished_jobs"] == left
    assert env.get_episode_rewards()  # Monitor logged the episode (no KeyError)


def test_contention_env_final_info_terminated_or_stuck() -> None:
    env = Monitor(
        gym.make("dlsched/Contention-v0", num_jobs=20, max_invalid=5),
        info_keywords=CONTENTION_KEYS,
    )
    ret, info, term = _run(env, 0, _random)
    assert term and info["unfinished_jobs"] == 0
    assert ret == pytest.approx(-info["avg_jct_s"], rel=1e-9)
    # ten valid decisions, then invalid ones until stuck
    steps = iter(range(10_000))
    ret, info, term = _run(env, 0, lambda m, rng: _random(m, rng) if next(steps) < 10 else -1)
    assert not term and info["stuck"]
    sim = env.unwrapped.sim  # type: ignore[attr-defined]
    jct = [
        (j.finish_ms if not math.isnan(j.finish_ms) else max(sim.now, j.spec.submit_ms))
        - j.spec.submit_ms
        for j in sim.jobs
    ]
    left = sum(math.isnan(j.finish_ms) for j in sim.jobs)
    assert info["unfinished_jobs"] == left > 0
    assert info["avg_jct_s"] == pytest.approx(np.mean(jct) / 1000.0, rel=1e-12)
    assert info["p95_jct_s"] == pytest.approx(np.percentile(jct, 95) / 1000.0, rel=1e-12)
    assert ret == pytest.approx(-info["avg_jct_s"], rel=1e-9)
    assert all(math.isfinite(info[k]) for k in CONTENTION_KEYS)
    assert len(env.get_episode_rewards()) == 2
