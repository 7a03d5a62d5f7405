"""Multi-cluster (federated) training envs; see issue 11.  Placeholder raising a clear error
until implemented."""

from __future__ import annotations

from typing import Any

from envs.sim.errors import ConfigError


def federated_vec_env(config: Any, seed: int) -> tuple[Any, list[Any]]:
    raise ConfigError(f"federated mode {config.mode!r} is not available yet")
