"""``evaluation.heldout.load_policies``: the learned schedulers a glob names, by kind (a
ClusterPlan-v0 ``policy.npz``, a pretraining output's ``policy.pt``, a run's final
checkpoint), runs without a final checkpoint skipped, and one clear error when nothing is
there (``experiments/heldout_eval.py --policy NAME=GLOB``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agents.plan_policy import PlanPolicy
from envs.sim.errors import ConfigError
from evaluation.heldout import load_policies

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
