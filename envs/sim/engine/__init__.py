"""The event-driven, contention-aware simulator (Ada-SRSF model, paper §III).

All events at one time are handled together, in the reference simulator's per-tick order:
1. completions (forward/backward tasks, all-reduces and their latency ``a``); 2. release of
finished jobs' GPU memory; 3. arrivals; 4. placement of queued jobs in job-order priority;
5. communication: ready all-reduces offered to the communication scheduler; 6. NIC
contention: each all-reduce whose servers' task count changed gets its rate
``1 / (k b + (k-1) η)`` (``k`` = most tasks on any of its servers) and a new end event;
7. each idle GPU whose state changed starts the ready task of its highest-priority job.

Parts: :mod:`.kernel` (event heap, phases, ``run``/``run_until``), :mod:`.compute` (GPUs,
time-sharing, compute windows), :mod:`.network` (NIC rates), :mod:`.admission` (phase 5),
:mod:`.placement` (phases 2 and 4), :mod:`.preemption` (strategy: who holds GPUs),
:mod:`.reference` (strategy: the reference's ticks and quirks, ``SimConfig.reference()``),
over the shared state of :mod:`.core`, composed in :mod:`.simulator`; :mod:`.api` has
:func:`simulate`.  Time is continuous by default; ``SimConfig.quirks.tick_ms`` is the reference's
discrete clock.
"""

from envs.sim.engine.api import MAX_FULL_ITERATIONS, resolve_stack, simulate
from envs.sim.engine.core import _SCAN_UP_TO as _SCAN_UP_TO
from envs.sim.engine.core import EngineCore
from envs.sim.engine.core import _check_ps_servers as _check_ps_servers
from envs.sim.engine.core import _make_rng as _make_rng
from envs.sim.engine.fitqueue import _BEFORE_ALL as _BEFORE_ALL
from envs.sim.engine.fitqueue import FitQueue, QKey
from envs.sim.engine.preemption import NonPreemptive, Preemption, Preemptive
from envs.sim.engine.reference import ReferenceQuirks
from envs.sim.engine.simulator import Simulator
from envs.sim.engine.state import (
    BW_READY,
    DONE,
    EV_ARRIVAL,
    EV_COMM,
    EV_JOBEND,
    EV_RESCHED,
    EV_RESTORE,
    EV_SYNC,
    EV_TASK,
    EV_WAKE,
    EV_WINDOW,
    FW_READY,
    RUNNING,
    WINDOW,
    CommTask,
    Job,
)
from envs.sim.errors import ConfigError, SimulationError

__all__ = [
    "BW_READY",
    "DONE",
    "EV_ARRIVAL",
    "EV_COMM",
    "EV_JOBEND",
    "EV_RESCHED",
    "EV_RESTORE",
    "EV_SYNC",
    "EV_TASK",
    "EV_WAKE",
    "EV_WINDOW",
    "FW_READY",
    "MAX_FULL_ITERATIONS",
    "RUNNING",
    "WINDOW",
    "CommTask",
    "ConfigError",
    "EngineCore",
    "FitQueue",
    "Job",
    "NonPreemptive",
    "Preemption",
    "Preemptive",
    "QKey",
    "ReferenceQuirks",
    "SimulationError",
    "Simulator",
    "resolve_stack",
    "simulate",
]
