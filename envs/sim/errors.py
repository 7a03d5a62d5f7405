"""Errors raised by the simulator for bad input; each message names what is wrong and where."""

from __future__ import annotations


class DlschedError(ValueError):
    """Base class for every user-facing configuration or input error."""


class WorkloadError(DlschedError):
    """A workload file or job specification is malformed or impossible."""


class ConfigError(DlschedError):
    """An unknown policy/stack name, an unknown config key or an invalid value."""


class SimulationError(DlschedError):
    """The simulation reached an impossible state (an invariant failed or jobs are stuck)."""
