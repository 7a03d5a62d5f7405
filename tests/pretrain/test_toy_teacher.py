"""Newcomer path (b) end to end (docs/index.md): an allocator written as one class plus
``@register_allocator`` is, with no other file touched, an ``evaluate.py`` scheduler
(``elastic:<name>``), a behaviour-cloning teacher (the pretraining stage behind
``python -m pretrain teacher=<name>``) and a ``train.py`` validation baseline
(``eval.baselines``).  The toy orders jobs by arrival, so it is FIFO written anew: every
figure it gives must be exactly ``fifo``'s."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch as th

from agents.policy import PolicyConfig
from envs.gym.factory import EnvConfig
from envs.sim.elastic.allocator_base import (
    ALIASES,
    ALLOCATORS,
    InTurn,
    JobState,
    register_allocator,
)
from envs.sim.elastic.allocators import make_allocator
from envs.sim.errors import ConfigError
from pretrain.bc import BCConfig
from pretrain.dataset import collect
from tests.cli import ROOT, train_in_process
from training.pretraining import PretrainConfig, pretrain

TINY = EnvConfig(setting="tiny")


@pytest.fixture
def toy() -> Iterator[type[InTurn]]:
    """The newcomer's allocator: one class and its registration (removed again afterwards,
    so that no other test sees it)."""

    @register_allocator("toy_fifo", aliases=("toy-fifo",))
    class ToyFIFO(InTurn):
        """Arrival order (then job id), each job up to its caps: FIFO again."""

        def order_key(self, job: JobState) -> tuple[float, ...]:
            return (job.arrival, job.job_id)

    try:
        yield ToyFIFO
    finally:
        ALLOCATORS.pop("toy_fifo", None)
        ALIASES.pop("toy-fifo", None)


def test_registration_names_the_class_and_refuses_a_name_twice(toy: type[InTurn]) -> None:
    assert toy.name == "toy_fifo" and ALLOCATORS["toy_fifo"] is toy
    assert isinstance(make_allocator("TOY-FIFO", role="teacher"), toy)
    with pytest.raises(ConfigError, match=r"names \['toy_fifo'\] are registered twice .*ToyFIFO"):
        register_allocator("toy_fifo")(type("Again", (InTurn,), {}))
    with pytest.raises(ConfigError, match=r"names \['srsf'\] are registered twice .*SRTF"):
        register_allocator("mine", aliases=("srsf",))(type("Mine", (InTurn,), {}))
    with pytest.raises(ConfigError, match="lower-case letters"):
        register_allocator("Mine")
    assert "mine" not in ALLOCATORS and "Mine" not in {c.__name__ for c in ALLOCATORS.values()}


def test_a_registered_allocator_runs_in_evaluate(toy: type[InTurn], tmp_path: Path) -> None:
    """``evaluate.py "stacks=[elastic:fifo,elastic:toy_fifo]"`` through Hydra's config, in
    the slot simulator: the same jobs, to the bit, as FIFO's."""
    import csv

    from hydra import compose, initialize_config_dir

    import evaluate

    overrides = ["stacks=[elastic:fifo,elastic:toy_fifo]", "workload=dl2", "cluster=dl2_small",
                 "workload.dl2.num_jobs=12", "seeds=[0]", "workers=1", "plot=false"]  # fmt: skip
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        dcfg = compose("evaluate", overrides=overrides)
    rows = evaluate.evaluate(dcfg, tmp_path / "run")
    by_stack = {r["stack"]: r for r in rows if r["seed"] == "0"}
    assert by_stack["elastic:toy_fifo"]["avg_jct_s"] == by_stack["elastic:fifo"]["avg_jct_s"]

    def jobs(stack: str) -> list[dict[str, str]]:
        name = stack.replace(":", "-")
        with open(tmp_path / "run" / f"jobs_{name}_seed0.csv", newline="") as f:
            return list(csv.DictReader(f))

    fifo, mine = jobs("elastic:fifo"), jobs("elastic:toy_fifo")
    assert len(mine) == 12 and {j.pop("stack") for j in mine} == {"elastic:toy_fifo"}
    assert mine == [{k: v for k, v in j.items() if k != "stack"} for j in fifo]


def test_a_registered_allocator_is_a_teacher(toy: type[InTurn], tmp_path: Path) -> None:
    """Its traces through the env are FIFO's, decision for decision; the pretraining stage
    (``python -m pretrain teacher=toy_fifo``) clones it and records it as the teacher."""
    mine, fifo = collect("toy_fifo", TINY, [1000, 1001]), collect("fifo", TINY, [1000, 1001])
    assert len(mine) > 0 and mine.meta["teacher"] == "toy_fifo"
    for key in ("obs", "masks", "actions", "episodes"):
        assert np.array_equal(getattr(mine, key), getattr(fifo, key)), key
    assert mine.meta["teacher_results"] == fifo.meta["teacher_results"]
    cfg = PretrainConfig(
        teacher="toy_fifo", num_workloads=3, bc=BCConfig(steps=60, eval_every=30),
        eval_seeds=[100],
    )  # fmt: skip
    with th.random.fork_rng():
        out = pretrain(cfg, TINY, PolicyConfig(), tmp_path / "p", cache_dir=tmp_path / "cache")
    assert (tmp_path / "p" / "policy.npz").is_file()
    assert out["clone_avg_jct"] > 0 and out["teacher_avg_jct"] > 0


def test_a_registered_allocator_is_a_train_baseline(toy: type[InTurn], tmp_path: Path) -> None:
    """``train.py eval.baselines=[fifo,toy_fifo]``: the run validates against both, with
    equal figures."""
    overrides = ["+agent=a2c_increments", "env=tiny", "pretrain=none", "eval=quick",
                 "eval.baselines=[fifo,toy_fifo]", "total_timesteps=32", "agent.n_steps=16",
                 "progress_bar=false", "checkpoint_every=0"]  # fmt: skip
    out = tmp_path / "run"
    out.mkdir()
    summary = train_in_process(overrides, out)
    baselines = summary["baselines_avg_jct"]
    assert set(baselines) == {"fifo", "toy_fifo"}
    assert baselines["toy_fifo"] == baselines["fifo"] > 0
