"""``evaluation.heldout``'s helpers of the experiment drivers.

``load_policies``: the learned schedulers a glob names, by kind (a ClusterPlan-v0
``policy.npz``, a pretraining output's ``policy.pt``, a run's final checkpoint), runs without
a final checkpoint skipped, and one clear error when nothing is there
(``experiments/heldout_eval.py --policy NAME=GLOB``).  ``lower_bound``: the bound that
applies to the env (``experiments/headroom.py``, ``dl2_rl.py``, ``dl2_search.py``), below
every heuristic's avg JCT on the same workload."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from agents.plan_policy import PlanPolicy
from envs.gym.factory import EnvConfig, make_env
from envs.gym.heuristic import HeuristicDriver
from envs.sim.elastic.allocators import make_allocator
from envs.sim.elastic.bounds import mean_jct, solo_bounds, window_bounds
from envs.sim.errors import ConfigError
from evaluation.heldout import heldout_workloads, load_policies, lower_bound

ROOT = Path(__file__).resolve().parents[2]
PLAN = ROOT / "policies" / "medium_plan_pg"
CLONE = ROOT / "policies" / "medium_esrtf_mixture"


def test_each_kind_loads() -> None:
    (plan,) = load_policies(str(PLAN))  # a directory holding policy.npz
    assert isinstance(plan, PlanPolicy)
    (again,) = load_policies(str(PLAN / "policy.npz"))  # the file itself
    assert isinstance(again, PlanPolicy)
    (clone,) = load_policies(str(CLONE))  # policy.pt + policy.json
    assert not isinstance(clone, PlanPolicy) and hasattr(clone, "predict")


def test_a_glob_loads_each_match_in_order_and_skips_unfinished_runs(tmp_path: Path) -> None:
    unfinished = tmp_path / "run_a"
    (unfinished / "checkpoints" / "final").mkdir(parents=True)  # no model.zip / policy.pt yet
    final = tmp_path / "run_b" / "checkpoints" / "final"
    final.mkdir(parents=True)
    (final / "policy.npz").write_bytes((PLAN / "policy.npz").read_bytes())
    skipped: list[Path] = []
    got = load_policies(str(tmp_path / "run_*"), skipped.append)
    assert skipped == [unfinished] and len(got) == 1 and isinstance(got[0], PlanPolicy)


def test_nothing_there_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="nothing matches"):
        load_policies(str(tmp_path / "none_*"))
    (tmp_path / "run_c").mkdir()
    with pytest.raises(ConfigError, match="no finished run matches"):
        load_policies(str(tmp_path / "run_*"))


@pytest.mark.parametrize("backlog", ["none", "bundle"])
def test_lower_bound_is_the_envs_bound_and_below_every_heuristic(backlog: str) -> None:
    config = EnvConfig(setting="tiny", backlog=backlog)
    for seed in (300, 301):
        env = make_env(config, seed=seed)
        env.reset(seed=seed)
        got = lower_bound(env, config)
        bounds = (
            solo_bounds(env.jobs, env.cluster_spec, env.speed)
            if backlog != "none"
            else window_bounds(env.jobs, env.cluster_spec, env.speed, env.J)
        )
        assert got == mean_jct(bounds) > 0
        for name in ("drf", "optimus", "esrtf"):
            heuristic = HeuristicDriver(make_allocator(name), make_env(config, seed=seed))
            assert got <= heuristic.run_episode(seed)["avg_jct_slots"]
    (w,) = heldout_workloads(config, [300])
    env = make_env(config, seed=300)
    env.reset(seed=300)
    assert w.lower_bound(config) == lower_bound(env, config)


def test_no_lower_bound_in_the_contention_speed_mode() -> None:
    config = EnvConfig(setting="tiny", speed="contention")
    env = make_env(config, seed=300)
    env.reset(seed=300)
    assert math.isnan(lower_bound(env, config))
