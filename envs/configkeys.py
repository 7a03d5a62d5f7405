"""Refusing config keys a schema does not have, also those added with Hydra's ``+``.

Hydra adds a ``+key=value`` override to the composed config without checking it against the
structured schema, so a typo such as ``+max_wall=5`` (the very form Hydra's own error for
``max_wall=5`` suggests) or ``+workload.trace.max_job=5`` would be accepted and silently
ignored.  :func:`check_known_keys` merges the composed config, as plain data, into the
schema's structured config (which is in struct mode) and turns OmegaConf's unknown-key error
into one line naming the key.  OmegaConf is imported only when called.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from envs.sim.errors import ConfigError

__all__ = ["check_known_keys"]


def check_known_keys(data: Any, schema: type, prefix: str = "", where: str = "") -> None:
    """:class:`ConfigError` for the first key of ``data`` (a ``DictConfig`` or a plain dict)
    that ``schema`` (a structured-config dataclass) does not have; ``prefix`` is the key path
    of ``data`` inside the whole config; ``where`` names the file listing the keys."""
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import ConfigKeyError

    if isinstance(data, DictConfig):
        data = OmegaConf.to_container(data, resolve=False)
    try:
        OmegaConf.merge(_structured(schema), data)  # merge copies: the cached one stays as built
    except ConfigKeyError as exc:
        key = f"{prefix}{exc.full_key}" if exc.full_key else prefix.rstrip(".") or "?"
        raise ConfigError(
            f"unknown config key {key!r} (a typo? `+` adds keys the schema does not have, "
            "and none of them would be read)"
            + (f"; the keys are listed in {where}" if where else "")
        ) from None


@cache
def _structured(schema: type) -> Any:
    """The schema's structured config, built once per schema (about 15-45 ms each)."""
    from omegaconf import OmegaConf

    return OmegaConf.structured(schema)
