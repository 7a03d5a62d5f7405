"""The learner registry (:mod:`agents.learners`): one entry per ``agent.algo``, from which the
builders, the checkpoint classes, the recorded keys and the pipeline choice are derived."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from agents.checkpoint import _agent_classes
from agents.config import ALGOS, AgentConfig
from agents.learners import LEARNERS, PIPELINES, learner, resolve
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
    else:
        assert entry.build is None and entry.checkpoint_class is None


def test_everything_else_is_derived_from_the_registry() -> None:
    assert tuple(LEARNERS) == ALGOS
    assert {a: e.keys for a, e in LEARNERS.items()} == AGENT_KEYS
    default = AgentConfig().algo  # a conf/agent file that sets no algo keeps the schema's
    shipped = {
        (yaml.safe_load(p.read_text()) or {}).get("algo", default)
        for p in (ROOT / "conf/agent").glob("*.yaml")
    }
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
