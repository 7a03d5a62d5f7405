"""Errors raised by the simulator for bad input; each message names what is wrong and where."""

from __future__ import annotations

import math


class DlschedError(ValueError):
    """Base class for every user-facing configuration or input error."""


class WorkloadError(DlschedError):
    """A workload file or job specification is malformed or impossible."""


class ConfigError(DlschedError):
    """An unknown policy/stack name, an unknown config key or an invalid value."""


class SimulationError(DlschedError):
    """The simulation reached an impossible state (an invariant failed or jobs are stuck)."""


def check_number(
    value: object,
    key: str,
    *,
    gt: float | None = None,
    ge: float | None = None,
    error: type[DlschedError] = ConfigError,
) -> float:
    """``value`` as a float if it is a finite number (``> gt`` / ``>= ge`` where given), else
    ``error`` naming ``key``: NaN and ±inf fail every check (a bare ``x <= 0`` lets NaN
    through)."""
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise error(f"{key} must be a number, got {value!r}") from None
    if not math.isfinite(x):
        raise error(f"{key} must be a finite number, got {value!r}")
    if gt is not None and not x > gt:
        raise error(f"{key} must be > {gt:g}, got {value!r}")
    if ge is not None and not x >= ge:
        raise error(f"{key} must be >= {ge:g}, got {value!r}")
    return x
