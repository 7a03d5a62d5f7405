"""Typed env configuration shared by pretraining, training and evaluation.

:class:`EnvConfig` is a plain dataclass (registered with Hydra's ConfigStore by the entry
points, never imported from Hydra here) that names a DL² setting and overrides of its sizes;
:func:`make_env` builds a :class:`~envs.gym.cluster_env.ClusterEnv` from it.  Every run records
``asdict(config)`` so that the exact environment can be rebuilt.

Named settings: ``small`` and ``large`` (DL²'s), ``tiny`` (4 nodes, 12 jobs, ``J`` = 8,
3,000 max epochs, 8 workers/PS per job: episodes of a few hundred decisions, for tests and
smoke runs) and ``medium`` (12 nodes, 24 jobs, ``J`` = 12, 20,000 max epochs, 16 workers/PS:
a few thousand decisions, for quick experiments).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Optional

from envs.gym.cluster_env import ClusterEnv
from envs.sim.elastic.workload import DL2_LARGE, DL2_SMALL, DL2Setting
from envs.sim.errors import ConfigError

__all__ = ["SETTINGS", "EnvConfig", "make_env", "setting_of"]

SETTINGS: dict[str, DL2Setting] = {
    "small": DL2_SMALL,
    "large": DL2_LARGE,
    "tiny": DL2Setting(
        num_nodes=4,
        num_jobs=12,
        max_arrivals_per_slot=2,
        J=8,
        max_epochs=3000,
        max_workers=8,
        max_ps=8,
    ),
    "medium": DL2Setting(
        num_nodes=12,
        num_jobs=24,
        max_arrivals_per_slot=2,
        J=12,
        max_epochs=20000,
        max_workers=16,
        max_ps=16,
    ),
}
_SETTING_FIELDS = {f.name for f in fields(DL2Setting)}


@dataclass
class EnvConfig:
    """Which environment to build.

    ``setting``: a name in :data:`SETTINGS`; ``overrides``: fields of :class:`DL2Setting` to
    change (``num_nodes``, ``num_jobs``, ``J``, ...); ``reward``: ``"dl2"`` (per-slot sum of
    normalised epochs) or ``"jct"`` (minus job-slots in the system / ``jct_scale``);
    ``max_slots``: truncation horizon; ``arrival``: ``"google"``, ``"poisson"`` or
    ``"uniform"``; ``trace``: a normalised trace CSV instead of the generator (``None``).
    """

    setting: str = "small"
    overrides: dict[str, int] = field(default_factory=dict)
    reward: str = "dl2"
    jct_scale: float = 1.0
    max_slots: int = 2000
    arrival: str = "google"
    trace: Optional[str] = None  # noqa: UP045 (OmegaConf structured config)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def setting_of(config: EnvConfig) -> DL2Setting:
    """The :class:`DL2Setting` that ``config`` names, with its overrides applied."""
    if config.setting not in SETTINGS:
        raise ConfigError(f"unknown env setting {config.setting!r}; known: {sorted(SETTINGS)}")
    overrides = dict(config.overrides or {})
    unknown = sorted(set(overrides) - _SETTING_FIELDS)
    if unknown:
        raise ConfigError(
            f"unknown env override(s) {unknown}; DL2Setting fields: {sorted(_SETTING_FIELDS)}"
        )
    try:
        return replace(SETTINGS[config.setting], **{k: int(v) for k, v in overrides.items()})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"bad env overrides {overrides}: {exc}") from None


def env_kwargs(config: EnvConfig, seed: int = 0) -> dict[str, Any]:
    """Keyword arguments of :class:`ClusterEnv` for ``config``."""
    kwargs: dict[str, Any] = {
        "setting": setting_of(config),
        "seed": int(seed),
        "reward": config.reward,
        "jct_scale": float(config.jct_scale),
        "max_slots": int(config.max_slots),
    }
    if config.trace:
        kwargs["trace"] = config.trace
    else:
        kwargs["workload_options"] = {"arrival": config.arrival}
    return kwargs


def make_env(config: EnvConfig | dict[str, Any], seed: int = 0) -> ClusterEnv:
    """A :class:`ClusterEnv` for ``config`` (an :class:`EnvConfig` or a mapping of its fields)
    whose first unseeded reset uses workload ``seed``."""
    if not isinstance(config, EnvConfig):
        config = coerce_env_config(config)
    return ClusterEnv(**env_kwargs(config, seed))


def coerce_env_config(data: Any) -> EnvConfig:
    """An :class:`EnvConfig` from a mapping (e.g. a Hydra ``DictConfig`` section)."""
    if isinstance(data, EnvConfig):
        return data
    items = dict(data)
    names = {f.name for f in fields(EnvConfig)}
    unknown = sorted(set(items) - names)
    if unknown:
        raise ConfigError(f"unknown env config key(s) {unknown}; known: {sorted(names)}")
    if "overrides" in items and items["overrides"] is not None:
        items["overrides"] = dict(items["overrides"])
    return EnvConfig(**items)
