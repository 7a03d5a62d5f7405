"""``resume=`` for the ``episodes`` pipeline (:mod:`training.episodes`): a run stopped after
some iterations and resumed to more gives the run that went there in one go, bit for bit
(weights, curve, decisions), in both worlds and with the actor-critic's critic and replay;
and what cannot be resumed is one clear error."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest

from tests.cli import train_in_process, train_refusal

CONTENTION = [
    "+agent=contention_a2c",
    "contention=small",
    "contention.num_jobs=16",
    "agent.contention.val_every=1",
    "agent.contention.bc_workloads=4",
    "agent.contention.bc_epochs=5",
    "agent.contention.groups=2",
    "agent.contention.group_size=4",
    "agent.a2c.replay=1",
    "eval.seeds=[100,101]",
    "progress_bar=false",
]
PLAN = [
    "+agent=a2c",
    "env=tiny",
    "agent.plan.val_every=2",
    "agent.plan.groups=1",
    "agent.plan.group_size=4",
    "agent.plan.hidden=16",
    "agent.plan.workers=1",  # (whatever the workers, the same run: test_rollout_pool.py)
    "agent.a2c.replay=1",
    "pretrain.num_workloads=2",
    "eval.seeds=[100]",
    "eval.baselines=[drf]",
    "progress_bar=false",
]


def _train(args: list[str], out: Path) -> None:
    # in this process (what train.py runs, without a fresh interpreter's ~4 s of imports a
    # run; train.py's own command line is tests/agents/test_train_cli.py's)
    out.mkdir(parents=True)
    train_in_process(args, out)


def _weights(run: Path) -> dict[str, np.ndarray]:
    with np.load(run / "checkpoints" / "final" / "policy.npz", allow_pickle=False) as f:
        return {k: f[k] for k in f.files if k != "__meta__"}


def _curve(run: Path) -> list[tuple[str, str, str]]:
    with open(run / "learning_curve.csv", newline="") as f:
        return [(r["timesteps"], r["iteration"], r["avg_jct"]) for r in csv.DictReader(f)]


# the contention world's resume is the same pipeline code (training/episodes.py) as the plan
# world's, run in the default suite; it is slow (~14 s): pytest -m slow
@pytest.mark.parametrize(
    ("base", "key"),
    [pytest.param(CONTENTION, "contention", marks=pytest.mark.slow), (PLAN, "plan")],
)
def test_a_resumed_run_is_the_run_in_one_go(base: list[str], key: str, tmp_path: Path) -> None:
    whole, half, rest = tmp_path / "whole", tmp_path / "half", tmp_path / "rest"
    _train([*base, f"agent.{key}.iterations=4"], whole)
    _train([*base, f"agent.{key}.iterations=2"], half)
    _train([*base, f"agent.{key}.iterations=4", f"resume={half}"], rest)
    a, b = _weights(whole), _weights(rest)
    assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)
    assert _curve(rest) == _curve(whole)  # the first run's rows, then the same new ones
    done, summary = (json.loads((p / "summary.json").read_text()) for p in (whole, rest))
    assert summary["timesteps"] == done["timesteps"] and summary["iterations"] == 4
    assert summary["resumed_from"].endswith("checkpoints/final")
    assert summary["best_avg_jct"] == done["best_avg_jct"]
    assert (rest / "checkpoints" / "best" / "policy.npz").is_file()  # the best so far, kept


def test_what_cannot_be_resumed_is_one_clear_error(tmp_path: Path) -> None:
    half = tmp_path / "half"
    _train([*CONTENTION, "agent.contention.iterations=2"], half)
    more = [*CONTENTION, "agent.contention.iterations=4", f"resume={half}"]
    said = train_refusal([*more, "agent.learning_rate=0.1"], tmp_path / "r1")
    assert "was trained with other settings (agent differ)" in said
    said = train_refusal([*CONTENTION, "agent.contention.iterations=2", f"resume={half}"],
                         tmp_path / "r2")  # fmt: skip
    assert "is at iteration 2: set the world's iterations (now 2) above it" in said
    said = train_refusal([*more[:-1], f"resume={tmp_path}"], tmp_path / "r3")
    assert "no training state there" in said
    state = half / "checkpoints" / "final" / "state.pt"
    state.write_bytes(state.read_bytes()[:-10])  # truncated
    assert "is corrupt (SHA-256 mismatch)" in train_refusal(more, tmp_path / "r4")
