"""The learner registry (:mod:`agents.learners`): one entry per ``agent.algo``, from which the
builders, the checkpoint classes, the recorded keys and the pipeline choice are derived."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from agents.checkpoint import _agent_classes
from agents.config import ALGOS, AgentConfig
from agents.learners import (
    CLUSTER,
    CONTENTION,
    ENV_BLOCKS,
    ENV_IDS,
    LEARNERS,
    PIPELINES,
    PLAN,
    env_for,
    learner,
    resolve,
)
from envs.sim.errors import ConfigError
from training.runinfo import AGENT_KEYS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("algo", sorted(LEARNERS))
def test_each_entry_resolves_to_what_it_names(algo: str) -> None:
    entry = LEARNERS[algo]
    assert entry.algo == algo and entry.pipeline in PIPELINES
    assert entry.env_copies in ("n_envs", "groups")
    fields = set(AgentConfig.__dataclass_fields__)
    assert set(entry.keys) <= fields and set(entry.resume_keys) <= fields
    if entry.pipeline == "sb3":  # built here and saved as model.zip
        assert entry.build is not None and callable(resolve(entry.build))
        assert entry.checkpoint_class is not None
        cls = resolve(entry.checkpoint_class)
        assert cls.__name__ == entry.class_name and _agent_classes()[cls.__name__] is cls
    else:  # its pipeline builds it, or the entry's builder (plan_a2c's) does
        assert entry.checkpoint_class is None
        assert entry.build is None or callable(resolve(entry.build))


def test_every_env_has_two_learners_and_each_pairing_is_decided_by_the_entry() -> None:
    """``train.py`` trains in each of the three envs with at least two learners; the env a run
    trains in is the entry's default or the one ``env_id`` names, and any other pairing is one
    error naming the learners of that env; an episodes learner records only its env's block."""
    for env_id in ENV_IDS:
        assert len([a for a, e in LEARNERS.items() if env_id in e.envs]) >= 2, env_id
    for algo, entry in LEARNERS.items():
        assert entry.envs and set(entry.envs) <= set(ENV_IDS)
        assert (entry.pipeline == "sb3") == (entry.envs == (CLUSTER,))
        assert env_for(algo, None) == entry.envs[0]
        for env_id in entry.envs:
            assert env_for(algo, env_id) == env_id
            blocks = {ENV_BLOCKS[e] for e in entry.envs if e in ENV_BLOCKS}
            own = {ENV_BLOCKS[env_id]} if env_id in ENV_BLOCKS else set()
            assert set(entry.keys_in(env_id)) & blocks == own
    assert env_for("plan_pg", CLUSTER) == PLAN  # DL²'s cluster, through its plan wrapper
    with pytest.raises(ConfigError, match="learners for dlsched/Contention-v0: cem, contention_pg"):
        env_for("dl2_a2c", CONTENTION)
    with pytest.raises(ConfigError, match="unknown env_id 'x'; known: dlsched/Cluster-v0"):
        env_for("plan_pg", "x")


def test_everything_else_is_derived_from_the_registry() -> None:
    assert tuple(LEARNERS) == ALGOS
    assert {a: e.keys for a, e in LEARNERS.items()} == AGENT_KEYS
    default = AgentConfig().algo  # a conf/agent file that sets no algo keeps the schema's
    files = [yaml.safe_load(p.read_text()) or {} for p in (ROOT / "conf/agent").glob("*.yaml")]
    # (a file of package _global_, as a2c.yaml, holds its agent under ``agent:``)
    shipped = {f.get("agent", f).get("algo", default) for f in files}
    assert "plan_a2c" in shipped
    assert shipped <= set(LEARNERS), "a conf/agent file names an unregistered learner"
    known = ", ".join(sorted(LEARNERS))
    with pytest.raises(ConfigError, match=rf"unknown agent.algo 'sac'; known: {known}$"):
        learner("sac")


def test_the_training_pipeline_does_not_branch_on_learner_names() -> None:
    """No ``algo == "<name>"`` (or ``!=``, ``in (...)``) in ``training/`` or the builder: what
    differs between learners is a field of their entry."""
    names = "|".join(map(re.escape, LEARNERS))
    branch = re.compile(rf"(==|!=|\bin\b)\s*[\(\[{{]?\s*[\"']({names})[\"']")
    files = [*sorted((ROOT / "training").glob("*.py")), ROOT / "agents/build.py"]
    found = [
        f"{p.relative_to(ROOT)}:{i}"
        for p in files
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if "algo" in line and branch.search(line)
    ]
    assert not found, f"branches on a learner name: {found}"


def test_a_new_learner_is_one_entry_and_a_builder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Newcomer path (d) end to end: a registry entry naming a builder
    (``tests/agents/toy_learner.py``: SB3's stock A2C) makes ``train.py`` train it, validate
    it against the heuristics, checkpoint it and record it, with nothing else edited; its
    final checkpoint loads as the registered class and acts through the same evaluation."""
    import json

    import torch as th
    from hydra import compose, initialize_config_dir
    from stable_baselines3 import A2C

    import train
    from agents.checkpoint import load_checkpoint
    from agents.learners import Learner
    from training.run import to_train_config
    from training.run import train as run_train

    toy = Learner(
        "toy_a2c",
        "sb3",
        ("learning_rate", "n_steps", "gamma", "ent_coef", "vf_coef", "max_grad_norm"),
        build="tests.agents.toy_learner:build",
        checkpoint_class="stable_baselines3:A2C",
        resume_keys=("gamma", "n_steps"),
    )
    monkeypatch.setitem(LEARNERS, "toy_a2c", toy)
    overrides = ["+agent=a2c_increments", "agent.name=toy", "agent.algo=toy_a2c", "env=tiny",
                 "pretrain=none", "eval=quick", "total_timesteps=256", "agent.n_steps=32",
                 "progress_bar=false", "checkpoint_every=0"]  # fmt: skip
    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    threads = th.get_num_threads()
    out = tmp_path / "run"
    out.mkdir()
    try:
        with th.random.fork_rng():
            train._check_keys(cfg)
            summary = run_train(to_train_config(cfg), out, {"agent": {"algo": "toy_a2c"}})
    finally:
        th.set_num_threads(threads)
    assert summary["agent"] == "toy" and summary["timesteps"] >= 256
    assert summary["final"]["avg_jct"] > 0 and set(summary["baselines_avg_jct"]) == {"drf"}
    model = load_checkpoint(out / "checkpoints" / "final", env=None)
    assert type(model) is A2C
    meta = json.loads((out / "checkpoints" / "final" / "meta.json").read_text())
    assert meta["class"] == "A2C"
