"""Simulation settings: how the simulator reads the paper's model, in four groups.

:class:`SimConfig` holds one frozen group per kind of setting: :class:`QuirkOptions` (the
public reference simulator's quirks), :class:`FidelityOptions` (how many events an
iteration costs), :class:`ModelOptions` (the model's own parameters) and :class:`RunOptions`
(how a run is executed and debugged).  Each group checks its own fields; ``SimConfig`` checks
the rules that span groups.  ``SimConfig()`` is the paper's model implemented correctly.

Every setting also has one flat key (``tick_ms``, ``fidelity``, ``seed``, ``engine``, ...):
:data:`FLAT_FIELDS` maps each to its group and field, and is the only such map.  Flat keys
are what users pass (Hydra/CLI keys, the overrides of :meth:`SimConfig.named` and
:meth:`SimConfig.reference`, :meth:`SimConfig.from_flat`, :meth:`SimConfig.override`) and
what run records written before the groups hold (:meth:`SimConfig.from_dict` reads both).
"""

from __future__ import annotations

import enum
import itertools
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from envs.sim.errors import ConfigError, check_number


class Fidelity(enum.Enum):
    """``FULL``: every forward, backward and all-reduce is an event (exact).

    ``FAST``: every job runs ``K`` consecutive iterations as one step with ``K`` times the
    forward, backward and all-reduce, ``K = shortest job's iterations // fast_min_steps``.
    Work is conserved exactly; GPU time-sharing and NIC contention happen at step
    granularity; a communication scheduler that compares a job's one-iteration size with a
    running task's remainder (AdaDUAL) is told that remainder divided by the asking job's
    ``K``, i.e. it compares step sizes.  The schedule this gives differs from FULL's and
    the avg JCT is biased by several percent either way (measured in EXPERIMENTS.md, up to
    15% at paper scale): explore with it, report with FULL.  Continuous time only."""

    FULL = "full"
    FAST = "fast"
    #: job-level fluid: a placed job advances at its solo speed (one iteration per
    #: ``forward + backward`` ms, plus an uncontended all-reduce ``a + M b`` when it spans
    #: servers) with no per-iteration events; needs exclusive GPUs (no time-sharing) and
    #: ignores NIC contention.  Exact for jobs that share neither GPUs nor NICs; the mode for
    #: long traces (Philly, the Tiresias stress traces).  Continuous time only.
    JOB = "job"


@dataclass(frozen=True)
class QuirkOptions:
    """The public reference simulator's behaviours (HKBU-HPML/dl-scheduling ``d5398bd``), one
    switch each; the defaults are the paper's model (:meth:`reference`: all of them on).

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
    """

    tick_ms: float | None = None
    probe_side_effect: bool = False
    skip_after_place: bool = False
    lagged_release: bool = False
    adadual_inclusive: bool = False
    lwf_comm_ms_per_mb: float | None = None

    def __post_init__(self) -> None:
        if self.tick_ms is not None:
            check_number(self.tick_ms, "tick_ms", gt=0)
        if self.lwf_comm_ms_per_mb is not None:
            check_number(self.lwf_comm_ms_per_mb, "lwf_comm_ms_per_mb", ge=0)
        if self.probe_side_effect and self.tick_ms is None:
            raise ConfigError("probe_side_effect needs tick_ms (the bug is one tick per probe)")
        if self.lagged_release and self.tick_ms is None:
            raise ConfigError("lagged_release needs tick_ms")

    @classmethod
    def reference(cls) -> QuirkOptions:
        """Every quirk of the reference simulator on."""
        return cls(
            tick_ms=1.0,
            probe_side_effect=True,
            skip_after_place=True,
            lagged_release=True,
            adadual_inclusive=True,
            lwf_comm_ms_per_mb=7.8125,
        )


@dataclass(frozen=True)
class FidelityOptions:
    """How many events an iteration costs.

    - ``level`` (flat key ``fidelity``) / ``fast_min_steps``: see :class:`Fidelity`.
    - ``compute_windows``: simulate an undisturbed iteration's forward/backward as one event
      (exact; turned back into per-task events the moment another job needs one of its GPUs).
      Off only to cross-check it.
    """

    level: Fidelity = Fidelity.FULL
    fast_min_steps: int = 50
    compute_windows: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.level, Fidelity):
            known = sorted(f.value for f in Fidelity)
            raise ConfigError(f"fidelity must be a Fidelity {known}, got {self.level!r}")
        if self.fast_min_steps < 1:
            raise ConfigError(f"fast_min_steps must be >= 1, got {self.fast_min_steps}")


@dataclass(frozen=True)
class ModelOptions:
    """The model's own parameters (not quirks: the paper leaves them open)."""

    #: seeds every generator of a run (random placement, ties, TicTac's random order)
    seed: int = 0
    #: ms a *resumed* job holds its GPUs before it computes again (checkpoint restore; the
    #: checkpoint save is folded into it).  Paid only by preemptive stacks' resumptions.
    preemption_cost_ms: float = 0.0
    #: how a parameter-server job's iteration time follows from compute and transfers:
    #: ``"sequential"`` (compute, then the exchange) or TicTac's overlap under a ``"random"``,
    #: ``"tic"`` or ``"tac"`` transfer order (:mod:`envs.sim.tictac.overlap`; every PS job's
    #: model needs a shipped op graph).  All-reduce jobs are unaffected.
    ps_iteration: str = "sequential"
    #: TIC as the paper's Algorithm 1 is written and the upstream code runs it (an op whose
    #: only outstanding recv is ``r`` does not set ``M+(r)``; ties the Fig. 1 orders)
    tictac_upstream_ties: bool = False

    def __post_init__(self) -> None:
        if not (self.preemption_cost_ms >= 0 and math.isfinite(self.preemption_cost_ms)):
            raise ConfigError(
                f"preemption_cost_ms must be a finite number >= 0, got {self.preemption_cost_ms}"
            )
        if self.ps_iteration not in ("sequential", "random", "tic", "tac"):
            raise ConfigError(
                f"ps_iteration must be 'sequential', 'random', 'tic' or 'tac', "
                f"got {self.ps_iteration!r}"
            )


@dataclass(frozen=True)
class RunOptions:
    """How a run is executed and debugged: none of these changes its results."""

    #: which event loop ``simulate`` uses: ``"auto"`` the native one (C, bit-identical
    #: results, ~20x faster) where it covers the run and is built, else Python;
    #: ``"python"`` always Python; ``"native"`` native or an error saying why not
    #: (see :mod:`envs.sim.native`).  ``Simulator`` objects are always Python.
    engine: str = "auto"
    #: stop a run that has taken more than this many wall-clock seconds with a
    #: :class:`~envs.sim.errors.SimulationError` saying how far it got (``None``: no budget)
    max_wall_s: float | None = None
    #: a heartbeat for long runs: every this many wall-clock seconds a stderr line says how far
    #: the simulation is (simulated time, jobs finished); ``None``: none
    progress_s: float | None = None
    #: check the invariants after every event time (debug mode; slow)
    check_invariants: bool = False

    def __post_init__(self) -> None:
        if self.engine not in ("auto", "python", "native"):
            raise ConfigError(f"engine must be 'auto', 'python' or 'native', got {self.engine!r}")
        if self.max_wall_s is not None:
            check_number(self.max_wall_s, "max_wall_s", gt=0)
        if self.progress_s is not None:
            check_number(self.progress_s, "progress_s", gt=0)


#: every setting's flat key -> (its group in :class:`SimConfig`, its field in that group)
FLAT_FIELDS: dict[str, tuple[str, str]] = {
    "tick_ms": ("quirks", "tick_ms"),
    "probe_side_effect": ("quirks", "probe_side_effect"),
    "skip_after_place": ("quirks", "skip_after_place"),
    "lagged_release": ("quirks", "lagged_release"),
    "adadual_inclusive": ("quirks", "adadual_inclusive"),
    "lwf_comm_ms_per_mb": ("quirks", "lwf_comm_ms_per_mb"),
    "fidelity": ("fidelity", "level"),
    "fast_min_steps": ("fidelity", "fast_min_steps"),
    "compute_windows": ("fidelity", "compute_windows"),
    "seed": ("model", "seed"),
    "preemption_cost_ms": ("model", "preemption_cost_ms"),
    "ps_iteration": ("model", "ps_iteration"),
    "tictac_upstream_ties": ("model", "tictac_upstream_ties"),
    "engine": ("run", "engine"),
    "max_wall_s": ("run", "max_wall_s"),
    "progress_s": ("run", "progress_s"),
    "check_invariants": ("run", "check_invariants"),
}
#: :class:`SimConfig`'s groups by field name
_GROUPS: dict[str, type] = {
    "quirks": QuirkOptions,
    "fidelity": FidelityOptions,
    "model": ModelOptions,
    "run": RunOptions,
}
_FLAT_OF: dict[tuple[str, str], str] = {where: key for key, where in FLAT_FIELDS.items()}


def _flat_value(key: str, value: Any) -> Any:
    """``value`` for flat key ``key``, with ``fidelity`` also accepted as its string value
    (Hydra, the CLI and ``to_dict`` write strings)."""
    if key not in FLAT_FIELDS:
        raise ConfigError(f"unknown SimConfig key {key!r}; known: {sorted(FLAT_FIELDS)}")
    if key == "fidelity" and isinstance(value, str):
        try:
            return Fidelity(value)
        except ValueError:
            known = sorted(f.value for f in Fidelity)
            raise ConfigError(f"unknown fidelity {value!r}; known: {known}") from None
    return value


@dataclass(frozen=True)
class SimConfig:
    """How the simulator reads the paper's model: one group per kind of setting.

    The default is the paper's model, implemented correctly: continuous time, a side-effect
    free AdaDUAL probe, memory released when a job finishes, LWF's communication estimate at
    the simulated network's own cost.  :meth:`reference` reproduces the public reference
    simulator, quirks included (:class:`QuirkOptions`).  Build one with nested groups
    (``SimConfig(run=RunOptions(engine="python"))``) or from flat keys
    (``SimConfig.from_flat(engine="python")``, see :data:`FLAT_FIELDS`).
    """

    quirks: QuirkOptions = field(default_factory=QuirkOptions)
    fidelity: FidelityOptions = field(default_factory=FidelityOptions)
    model: ModelOptions = field(default_factory=ModelOptions)
    run: RunOptions = field(default_factory=RunOptions)

    def __post_init__(self) -> None:
        for name, kind in _GROUPS.items():
            if not isinstance(getattr(self, name), kind):
                raise ConfigError(
                    f"SimConfig.{name} must be a {kind.__name__}, got {getattr(self, name)!r}"
                )
        continuous = self.quirks.tick_ms is None
        level = self.fidelity.level
        if level is Fidelity.FAST and not continuous:
            raise ConfigError(
                "FAST fidelity merges iterations: it needs continuous time (tick_ms=None)"
            )
        if level is Fidelity.JOB and not continuous:
            raise ConfigError("JOB fidelity is a fluid model: it needs continuous time")
        if self.model.ps_iteration != "sequential" and level is Fidelity.JOB:
            raise ConfigError(
                "ps_iteration (TicTac) needs per-iteration exchanges: not JOB fidelity"
            )

    def iterations_per_step(self, shortest_iterations: int) -> int:
        """Iterations merged into one step: ``K`` in FAST fidelity (from the workload's
        shortest job), 1 otherwise."""
        if self.fidelity.level is not Fidelity.FAST:
            return 1
        return max(1, shortest_iterations // self.fidelity.fast_min_steps)

    def override(self, **flat: Any) -> SimConfig:
        """A copy with the settings named by flat key replaced (``override(seed=3,
        engine="python")``); an unknown key is a :class:`ConfigError` naming it."""
        changes: dict[str, dict[str, Any]] = {}
        for key, value in flat.items():
            checked = _flat_value(key, value)
            group, name = FLAT_FIELDS[key]
            changes.setdefault(group, {})[name] = checked
        groups = {g: replace(getattr(self, g), **kw) for g, kw in changes.items()}
        return replace(self, **groups)

    @classmethod
    def from_flat(cls, **flat: Any) -> SimConfig:
        """The defaults with the settings named by flat key (:data:`FLAT_FIELDS`)."""
        return cls().override(**flat)

    @classmethod
    def reference(cls, **overrides: Any) -> SimConfig:
        """The reference simulator's behaviour, quirks included; ``overrides`` by flat key."""
        return cls(quirks=QuirkOptions.reference()).override(**overrides)

    @classmethod
    def reference_fixed_probe(cls, **overrides: Any) -> SimConfig:
        """The reference with only its AdaDUAL probe made side-effect free."""
        return cls.reference(**{"probe_side_effect": False, **overrides})

    @classmethod
    def named(cls, mode: str, **overrides: Any) -> SimConfig:
        """``correct`` | ``reference`` | ``reference_fixed_probe``; ``overrides`` by flat key
        (how Hydra and the CLI pass them)."""
        makers = {
            "correct": cls.from_flat,
            "reference": cls.reference,
            "reference_fixed_probe": cls.reference_fixed_probe,
        }
        if mode not in makers:
            raise ConfigError(f"unknown simulation mode {mode!r}; known: {sorted(makers)}")
        return makers[mode](**overrides)

    def to_dict(self) -> dict[str, Any]:
        """The nested form, one dict per group (``fidelity.level`` as its string value)."""
        d = asdict(self)
        d["fidelity"]["level"] = self.fidelity.level.value
        return d

    def to_flat(self) -> dict[str, Any]:
        """Every setting by flat key (``fidelity`` as its string value)."""
        d = self.to_dict()
        return {key: d[group][name] for key, (group, name) in FLAT_FIELDS.items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SimConfig:
        """From :meth:`to_dict`'s nested form or the flat form of records written before the
        groups (:meth:`to_flat`'s); missing keys keep their defaults.  Run records and cache
        keys made from the flat form differ from the nested one's: such a cache misses once."""
        flat: dict[str, Any] = {}
        for key, value in d.items():
            if key in _GROUPS and isinstance(value, Mapping):
                for name, v in value.items():
                    if (key, name) not in _FLAT_OF:
                        known = sorted(f.name for f in fields(_GROUPS[key]))
                        raise ConfigError(f"unknown SimConfig.{key} key {name!r}; known: {known}")
                    flat[_FLAT_OF[key, name]] = v
            else:
                flat[key] = value
        return cls.from_flat(**flat)


@dataclass(frozen=True)
class TiresiasConfig:
    """Tiresias's discretised 2DAS: ``num_queues`` (K) priority queues, demotion thresholds
    on attained service, and the PROMOTEKNOB starvation rule.

    - ``thresholds_gpu_s``: K - 1 strictly increasing attained-service limits (GPU-seconds;
      seconds when the age is 1D): a job moves from queue ``q`` to ``q + 1`` when its attained
      service reaches ``thresholds_gpu_s[q]``.
    - ``promote_knob``: a pending job in a queue below the top one moves back to Q0 (its
      attained service counted from zero again) once the time it has waited since it last ran
      first, summed over pending spells since its last promotion, reaches ``promote_knob`` x
      its executed time since that promotion (Tiresias's rule; 0 = off).
    - ``gittins_delta_gpu_s`` / ``gittins_formula``: 2D-Gittins's fixed look-ahead Δ and which
      index formula (``"upstream"``: the Tiresias code's, E over raw sample sizes with floor;
      ``"textbook"``: P(S - a <= Δ | S > a) / E[min(S - a, Δ) | S > a]).

    :meth:`paper` and :meth:`upstream` are the two named defaults.
    """

    num_queues: int = 2
    thresholds_gpu_s: tuple[float, ...] = (3600.0,)
    promote_knob: float = 8.0
    gittins_delta_gpu_s: float = 3600.0
    gittins_formula: str = "textbook"

    def __post_init__(self) -> None:
        if self.num_queues < 1:
            raise ConfigError(f"Tiresias needs K >= 1 queues, got K={self.num_queues}")
        th = tuple(self.thresholds_gpu_s)
        if len(th) != self.num_queues - 1:
            raise ConfigError(
                f"K={self.num_queues} queues need {self.num_queues - 1} thresholds, "
                f"got {len(th)}: {list(th)}"
            )
        if any(not (x > 0 and math.isfinite(x)) for x in th):
            raise ConfigError(f"queue thresholds must be finite and > 0, got {list(th)}")
        if any(b <= a for a, b in itertools.pairwise(th)):
            raise ConfigError(f"queue thresholds must be strictly increasing, got {list(th)}")
        if not (self.promote_knob >= 0 and math.isfinite(self.promote_knob)):
            raise ConfigError(f"promote_knob must be >= 0 (0 = off), got {self.promote_knob}")
        check_number(self.gittins_delta_gpu_s, "gittins_delta_gpu_s", gt=0)
        if self.gittins_formula not in ("textbook", "upstream"):
            raise ConfigError(
                f"gittins_formula must be 'textbook' or 'upstream', got {self.gittins_formula!r}"
            )

    @classmethod
    def paper(cls) -> TiresiasConfig:
        """The NSDI'19 paper's defaults as a third party reads them: K = 2, 3,600 GPU-s,
        PROMOTEKNOB 8 (Gittins: textbook index at a fixed Δ equal to the Q0 threshold)."""
        return cls(2, (3600.0,), 8.0, 3600.0, "textbook")

    @classmethod
    def upstream(cls) -> TiresiasConfig:
        """The public code's defaults (SymbioticLab/Tiresias ``959f9b0``): K = 3 at
        3,250 / 7,200 GPU-s, knob off, Gittins as coded with Δ = 3,250."""
        return cls(3, (3250.0, 7200.0), 0.0, 3250.0, "upstream")
