"""What a run records about itself (``run.json``): config, seed, time, working directory and
the provenance of :mod:`envs.provenance` (``git_commit``, ``git_dirty``, ``versions``,
``command``: the same keys as ``evaluate.py``'s records).  The config's ``agent`` block holds
only what the run's learner reads (:func:`agent_in_use`), not the settings of the others."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agents.learners import LEARNERS, env_for
from envs.files import write_json
from envs.provenance import package_versions, provenance
from envs.sim.errors import ConfigError

__all__ = [
    "AGENT_KEYS",
    "agent_in_use",
    "package_versions",
    "provenance",
    "run_record",
    "write_run_record",
]

#: ``agent.algo`` -> the keys of ``agent`` (:class:`agents.config.AgentConfig`) its learner
#: reads besides ``name`` and ``algo`` (:data:`agents.learners.LEARNERS`); the other blocks
#: (``ppo``, ``group``, ``plan``, ``exploration``, ``replay``) belong to other learners.
AGENT_KEYS: dict[str, tuple[str, ...]] = {algo: e.keys for algo, e in LEARNERS.items()}


def agent_in_use(config: Any) -> Any:
    """``config`` (a resolved train config, as a dict) with its ``agent`` block cut to the
    keys the learner ``agent.algo`` reads in the env it trains in (:data:`AGENT_KEYS`,
    :meth:`~agents.learners.Learner.keys_in`); anything else unchanged."""
    if not isinstance(config, dict) or not isinstance(config.get("agent"), dict):
        return config
    agent = config["agent"]
    entry = LEARNERS.get(str(agent.get("algo")))
    if entry is None:  # an algo the registry does not know: keep everything
        return config
    try:  # the blocks of the env it trains in (an episodes learner's plan or contention)
        keys = entry.keys_in(env_for(entry.algo, config.get("env_id")))
    except ConfigError:
        keys = entry.keys
    kept = {k: v for k, v in agent.items() if k in ("name", "algo", *keys)}
    return {**config, "agent": kept}


def run_record(config: Any, seed: int | None, **extra: Any) -> dict[str, Any]:
    """A JSON-able record of a run: time, working directory, seed, the resolved config (its
    agent block cut to the learner in use) and the provenance
    (:func:`envs.provenance.provenance`)."""
    return {
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "cwd": os.getcwd(),
        "seed": seed,
        "config": agent_in_use(config),
        **provenance(),
        **extra,
    }


def write_run_record(path: str | os.PathLike[str], record: dict[str, Any]) -> Path:
    """Write ``record`` to ``path`` as JSON, atomically (:func:`envs.files.write_json`)."""
    return write_json(path, record)
