"""What a run records about itself (``run.json``): config, seed, time, working directory and
the provenance of :mod:`envs.provenance` (``git_commit``, ``git_dirty``, ``versions``,
``command``: the same keys as ``evaluate.py``'s records).  The config's ``agent`` block holds
only what the run's learner reads (:func:`agent_in_use`), not the settings of the others."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from envs.files import write_json
from envs.provenance import package_versions, provenance

__all__ = [
    "AGENT_KEYS",
    "agent_in_use",
    "package_versions",
    "provenance",
    "run_record",
    "write_run_record",
]

_SB3_COMMON = ("learning_rate", "gamma", "ent_coef", "vf_coef", "max_grad_norm", "policy")

#: ``agent.algo`` -> the keys of ``agent`` (:class:`agents.config.AgentConfig`) its learner
#: reads (:func:`agents.build.build_agent`, :mod:`training.plan`), besides ``name`` and
#: ``algo``; the other blocks (``ppo``, ``group``, ``plan``, ``exploration``, ``replay``)
#: belong to other learners.
AGENT_KEYS: dict[str, tuple[str, ...]] = {
    "dl2_a2c": (
        *_SB3_COMMON,
        "n_steps",
        "returns",
        "critic",
        "baseline_momentum",
        "gradient_steps",
        "normalize_advantage",
        "exploration",
        "replay",
    ),
    "group_ppo": (*_SB3_COMMON, "normalize_advantage", "group"),
    "ppo": (*_SB3_COMMON, "n_steps", "ppo"),
    "maskable_ppo": (*_SB3_COMMON, "n_steps", "ppo"),
    "plan_pg": ("learning_rate", "ent_coef", "plan"),
}


def agent_in_use(config: Any) -> Any:
    """``config`` (a resolved train config, as a dict) with its ``agent`` block cut to the
    keys the learner ``agent.algo`` reads (:data:`AGENT_KEYS`); anything else unchanged."""
    if not isinstance(config, dict) or not isinstance(config.get("agent"), dict):
        return config
    agent = config["agent"]
    keys = AGENT_KEYS.get(str(agent.get("algo")))
    if keys is None:  # an algo this table does not know: keep everything
        return config
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
