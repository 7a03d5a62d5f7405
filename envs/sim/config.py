"""Simulation settings: the model (correct vs reference-compatible) and the fidelity level."""

from __future__ import annotations

import enum
import itertools
import math
from dataclasses import asdict, dataclass, replace
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

    def __post_init__(self) -> None:
        if self.tick_ms is not None:
            check_number(self.tick_ms, "tick_ms", gt=0)
        if self.max_wall_s is not None:
            check_number(self.max_wall_s, "max_wall_s", gt=0)
        if self.progress_s is not None:
            check_number(self.progress_s, "progress_s", gt=0)
        if self.lwf_comm_ms_per_mb is not None:
            check_number(self.lwf_comm_ms_per_mb, "lwf_comm_ms_per_mb", ge=0)
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
        if self.fidelity is Fidelity.JOB and self.tick_ms is not None:
            raise ConfigError("JOB fidelity is a fluid model: it needs continuous time")
        if not (self.preemption_cost_ms >= 0 and math.isfinite(self.preemption_cost_ms)):
            raise ConfigError(
                f"preemption_cost_ms must be a finite number >= 0, got {self.preemption_cost_ms}"
            )
        if self.ps_iteration not in ("sequential", "random", "tic", "tac"):
            raise ConfigError(
                f"ps_iteration must be 'sequential', 'random', 'tic' or 'tac', "
                f"got {self.ps_iteration!r}"
            )
        if self.engine not in ("auto", "python", "native"):
            raise ConfigError(f"engine must be 'auto', 'python' or 'native', got {self.engine!r}")
        if self.ps_iteration != "sequential" and self.fidelity is Fidelity.JOB:
            raise ConfigError(
                "ps_iteration (TicTac) needs per-iteration exchanges: not JOB fidelity"
            )

    def iterations_per_step(self, shortest_iterations: int) -> int:
        """Iterations merged into one step: ``K`` in FAST fidelity (from the workload's
        shortest job), 1 otherwise."""
        if self.fidelity is not Fidelity.FAST:
            return 1
        return max(1, shortest_iterations // self.fast_min_steps)

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
