"""Simulation settings: the model (correct vs reference-compatible) and the fidelity level."""

from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, replace
from typing import Any

from envs.sim.errors import ConfigError


class Fidelity(enum.Enum):
    """``FULL``: every forward, backward and all-reduce is an event (exact).

    ``FAST``: every job runs ``K`` consecutive iterations as one step with ``K`` times the
    forward, backward and all-reduce, ``K = shortest job's iterations // fast_min_steps``.
    Work is conserved exactly; GPU time-sharing and NIC contention happen at step
    granularity, which biases JCTs (measured in EXPERIMENTS.md): explore with it, report
    with FULL.  Continuous time only."""

    FULL = "full"
    FAST = "fast"


@dataclass(frozen=True)
class SimConfig:
    """How the simulator reads the paper's model.

    The default is the paper's model, implemented correctly: continuous time, a side-effect
    free AdaDUAL probe, memory released when a job finishes, LWF's communication estimate at
    the simulated network's own cost.

    ``SimConfig.reference()`` reproduces the public reference simulator
    (HKBU-HPML/dl-scheduling ``d5398bd``) including its quirks, each a switch here:

    - ``tick_ms``: time advances in ticks of this many ms; an all-reduce ends at the first
      tick at or after its exact end (``None`` = continuous time).
    - ``probe_side_effect``: AdaDUAL's remaining-size probe advances the probed transfer by one
      tick of its rate each time it is called (the bug that decides the paper's headline).
    - ``skip_after_place``: after placing a job, the next job in the queue is skipped until the
      next tick (the reference removes items from a list while iterating it).
    - ``lagged_release``: a finished job's memory is released at the next tick, and a finished
      job right after another finished job in the running list waits one tick more.
    - ``adadual_inclusive``: AdaDUAL accepts at equality of the ratio test.
    - ``lwf_comm_ms_per_mb``: LWF's load estimate charges communication at this cost
      (the reference uses a 1 GbE constant, 7.8125 ms/MB); ``None`` = the network's ``b``.
    - ``check_invariants``: check the invariants after every event time (debug mode; slow).
    - ``fidelity`` / ``fast_min_steps``: see :class:`Fidelity`.
    - ``compute_windows``: simulate an undisturbed iteration's forward/backward as one event
      (exact; turned back into per-task events the moment another job needs one of its GPUs).
      Off only to cross-check it.
    """

    tick_ms: float | None = None
    probe_side_effect: bool = False
    skip_after_place: bool = False
    lagged_release: bool = False
    adadual_inclusive: bool = False
    lwf_comm_ms_per_mb: float | None = None
    fidelity: Fidelity = Fidelity.FULL
    fast_min_steps: int = 50
    check_invariants: bool = False
    compute_windows: bool = True
    seed: int = 0

    def __post_init__(self) -> None:
        if self.tick_ms is not None and self.tick_ms <= 0:
            raise ConfigError(f"tick_ms must be > 0 or None, got {self.tick_ms}")
        if self.probe_side_effect and self.tick_ms is None:
            raise ConfigError("probe_side_effect needs tick_ms (the bug is one tick per probe)")
        if self.fast_min_steps < 1:
            raise ConfigError(f"fast_min_steps must be >= 1, got {self.fast_min_steps}")
        if self.fidelity is Fidelity.FAST and self.tick_ms is not None:
            raise ConfigError(
                "FAST fidelity merges iterations: it needs continuous time (tick_ms=None)"
            )
        if self.lagged_release and self.tick_ms is None:
            raise ConfigError("lagged_release needs tick_ms")

    @classmethod
    def reference(cls, **overrides: Any) -> SimConfig:
        """The reference simulator's behaviour, quirks included."""
        base = cls(
            tick_ms=1.0,
            probe_side_effect=True,
            skip_after_place=True,
            lagged_release=True,
            adadual_inclusive=True,
            lwf_comm_ms_per_mb=7.8125,
        )
        return replace(base, **overrides)

    @classmethod
    def reference_fixed_probe(cls, **overrides: Any) -> SimConfig:
        """The reference with only its AdaDUAL probe made side-effect free."""
        return cls.reference(probe_side_effect=False, **overrides)

    @classmethod
    def named(cls, mode: str, **overrides: Any) -> SimConfig:
        """``correct`` | ``reference`` | ``reference_fixed_probe``."""
        makers = {
            "correct": lambda: replace(cls(), **overrides),
            "reference": lambda: cls.reference(**overrides),
            "reference_fixed_probe": lambda: cls.reference_fixed_probe(**overrides),
        }
        if mode not in makers:
            raise ConfigError(f"unknown simulation mode {mode!r}; known: {sorted(makers)}")
        return makers[mode]()

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["fidelity"] = self.fidelity.value
        return d
