"""``evaluate.py``'s config composed without Hydra: the schema, the ``conf/<group>/<name>.yaml``
files that ``group=name`` picks, ``key=value`` overrides and keyword values, merged in Hydra's
order.  Used by the facade (:mod:`dlsched.api`) and the benchmark (:mod:`evaluation.bench`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from envs.sim.errors import ConfigError
from evaluation.config import EvaluateConfig

__all__ = ["CONF", "GROUPS", "compose", "group_file", "layers"]

#: The config groups of ``conf/evaluate.yaml`` that ``group=name`` selects.
GROUPS = ("cluster", "workload", "runner")
#: Where the groups' files are: the source checkout's ``conf/`` (not installed with a wheel).
CONF = Path(__file__).resolve().parents[1] / "conf"


def group_file(group: str, name: str) -> Path:
    """``conf/<group>/<name>.yaml`` of the source checkout (``group=name``)."""
    folder = CONF / group
    if not folder.is_dir():
        raise ConfigError(
            f"{group}={name} picks conf/{group}/{name}.yaml, which ships with the source "
            f"checkout only (not found at {folder}); set its keys instead, e.g. "
            f"{group}={{...}} or '{group}.<key>=<value>'"
        )
    path = folder / f"{name}.yaml"
    if not path.is_file():
        known = sorted(p.stem for p in folder.glob("*.yaml"))
        raise ConfigError(f"{group}={name}: no {path.name} in {folder}; known: {known}")
    return path


def layers(overrides: Sequence[str], values: Mapping[str, Any]) -> list[Any]:
    """The configs merged onto the schema, in Hydra's order: the groups picked (``conf/``
    files), then the ``key=value`` overrides, then the keyword arguments."""
    from omegaconf import OmegaConf

    groups: list[Any] = []
    dotlist: list[str] = []
    for item in overrides:
        if not isinstance(item, str) or "=" not in item:
            raise ConfigError(
                f"override {item!r}: expected key=value, as on evaluate.py's command line "
                "(e.g. 'seeds=[0,1]')"
            )
        key, _, value = item.partition("=")
        if key in GROUPS and not value.lstrip().startswith("{"):
            groups.append(OmegaConf.create({key: OmegaConf.load(group_file(key, value)) or {}}))
        else:
            dotlist.append(item)
    plain: dict[str, Any] = {}
    for key, value in values.items():
        if key in GROUPS and isinstance(value, str):
            groups.append(OmegaConf.create({key: OmegaConf.load(group_file(key, value)) or {}}))
        else:
            plain[key] = value
    return [*groups, OmegaConf.from_dotlist(dotlist), OmegaConf.create(plain)]


def compose(
    overrides: Sequence[str], values: Mapping[str, Any]
) -> tuple[EvaluateConfig, dict[str, Any]]:
    """The :class:`EvaluateConfig` of ``evaluate.py`` with these overrides, and the resolved
    config as a dict (what ``run.json`` records).  An unknown key or a value of the wrong type
    is a :class:`ConfigError` naming the key."""
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

    schema = OmegaConf.structured(EvaluateConfig)
    # evaluate.py's default run directory (Hydra's ${now:...} resolver, without Hydra)
    schema.out_dir = f"runs/{datetime.now():%Y-%m-%d_%H-%M-%S}_evaluate"
    try:
        merged = OmegaConf.merge(schema, *layers(overrides, values))
        cfg = OmegaConf.to_object(merged)
        resolved = OmegaConf.to_container(merged, resolve=True)
    except ConfigKeyError as exc:
        raise ConfigError(
            f"unknown config key {exc.full_key or str(exc).splitlines()[0]!r}; the keys are "
            "EvaluateConfig's (evaluation/config.py, listed in conf/evaluate.yaml)"
        ) from None
    except OmegaConfBaseException as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"{exc.full_key}: {msg}" if exc.full_key else msg) from None
    if not isinstance(cfg, EvaluateConfig) or not isinstance(resolved, dict):
        raise ConfigError(f"config is not an EvaluateConfig: {type(cfg).__name__}")
    return cfg, {str(k): v for k, v in resolved.items()}
