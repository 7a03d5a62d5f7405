"""Teachers for behaviour cloning: any elastic allocator, by name.

A teacher is an :class:`~envs.sim.elastic.allocators.Allocator` that records its ordered
increments (``last_decisions``), so that :class:`~envs.gym.heuristic.HeuristicDriver` can turn
its slot decision into the env's incremental actions.  Names:

=============  ==========================================================================
``drf``        DRF progressive filling (DL²'s default teacher)
``fifo``       FIFO, up to the caps per job in arrival order
``srtf``       SRTF (alias ``srsf``): least remaining fraction first
``tetris``     Tetris packing
``optimus``    Optimus's marginal-gain greedy on the speed model
``esrtf``      dlsched's EfficientSRTF: shortest estimated remaining time first, each job
               at the smallest allocation within 92% of its best speed
``adasrsf``    the fixed-demand Ada-SRSF stack in the elastic world: every job asks for
               ``workers`` workers (and as many PS, bundled), all or nothing, least remaining
               service first (remaining epochs x demand); the core's LWF placement and
               AdaDUAL have no counterpart in the slot world (one placement rule, no NIC model)
``tiresias``   the fixed-demand Tiresias stack: same demand, least attained service first
               (2D-LAS on GPU-slots attained, undiscretised)
=============  ==========================================================================
"""

from __future__ import annotations

from collections.abc import Callable

from envs.sim.elastic.allocators import (
    DRF,
    FIFO,
    SRTF,
    Allocator,
    EfficientSRTF,
    Optimus,
    Tetris,
    UniformDemand,
)
from envs.sim.errors import ConfigError

__all__ = ["ALIASES", "TEACHERS", "UniformDemand", "make_teacher"]

#: Default per-job demand of the fixed-demand teachers (workers; PS as many, capped).
DEFAULT_FIXED_WORKERS = 4


TEACHERS: dict[str, Callable[..., Allocator]] = {
    "drf": DRF,
    "fifo": FIFO,
    "srtf": SRTF,
    "tetris": Tetris,
    "optimus": Optimus,
    "esrtf": EfficientSRTF,
    "adasrsf": lambda workers=DEFAULT_FIXED_WORKERS: UniformDemand(workers, order="srsf"),
    "tiresias": lambda workers=DEFAULT_FIXED_WORKERS: UniformDemand(workers, order="las"),
}
#: Other accepted names.
ALIASES = {"srsf": "srtf", "ada_srsf": "adasrsf", "ada-srsf": "adasrsf"}


def canonical(name: str) -> str:
    """The registry name for ``name`` (case-insensitive, aliases resolved)."""
    key = str(name).lower()
    key = ALIASES.get(key, key)
    if key not in TEACHERS:
        known = sorted({*TEACHERS, *ALIASES})
        raise ConfigError(f"unknown teacher {name!r}; known: {', '.join(known)}")
    return key


def make_teacher(name: str, **kwargs: object) -> Allocator:
    """A fresh teacher allocator by name; ``kwargs`` go to its constructor (e.g. ``workers``
    for the fixed-demand teachers)."""
    key = canonical(name)
    try:
        return TEACHERS[key](**kwargs)
    except TypeError as exc:
        raise ConfigError(f"teacher {key!r}: bad options {kwargs}: {exc}") from None
