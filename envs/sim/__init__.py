"""dlsched's contention-aware GPU-cluster simulator core (standard library + numpy only).

Build a :class:`ClusterSpec`, a :class:`Workload` and a :class:`SchedulerStack`, then
``Simulator(cluster, workload, stack, config).run()`` gives a :class:`SimResult`.
Units: milliseconds and megabytes (see :mod:`envs.sim.spec`).
"""

from envs.sim.config import (
    Fidelity,
    FidelityOptions,
    ModelOptions,
    QuirkOptions,
    RunOptions,
    SimConfig,
)
from envs.sim.engine import Simulator, simulate
from envs.sim.errors import ConfigError, DlschedError, WorkloadError
from envs.sim.results import JobRecord, SimResult
from envs.sim.spec import ClusterSpec, CommArch, JobSpec, ModelProfile, NetworkSpec, Workload
from envs.sim.stacks import STACKS, SchedulerStack, make_stack

__all__ = [
    "STACKS",
    "ClusterSpec",
    "CommArch",
    "ConfigError",
    "DlschedError",
    "Fidelity",
    "FidelityOptions",
    "JobRecord",
    "JobSpec",
    "ModelOptions",
    "ModelProfile",
    "NetworkSpec",
    "QuirkOptions",
    "RunOptions",
    "SchedulerStack",
    "SimConfig",
    "SimResult",
    "Simulator",
    "Workload",
    "WorkloadError",
    "make_stack",
    "simulate",
]
