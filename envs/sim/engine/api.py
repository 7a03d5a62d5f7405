"""Entry points: run a workload under a stack by name (or as given), on either event loop.

:func:`simulate` picks the native loop (:mod:`envs.sim.native`, bit-identical results) where it
covers the run, else :class:`~envs.sim.engine.simulator.Simulator`; :func:`resolve_stack`
builds a named stack with the configuration's policy options.
"""

from __future__ import annotations

from envs.sim.config import Fidelity, SimConfig
from envs.sim.engine.core import _make_rng
from envs.sim.engine.simulator import Simulator
from envs.sim.errors import ConfigError
from envs.sim.results import SimResult
from envs.sim.spec import ClusterSpec, Workload
from envs.sim.stacks import SchedulerStack, make_stack

#: Most iterations one job may have in FULL fidelity (each is several events): beyond this a
#: run takes hours to forever, which is a trace's unit mistake more often than a wish.
MAX_FULL_ITERATIONS = 10**8


def resolve_stack(stack: str | SchedulerStack, cfg: SimConfig) -> SchedulerStack:
    """A stack by name (built fresh, with ``cfg``'s LWF and AdaDUAL options) or as given;
    :class:`ConfigError` for anything else."""
    if isinstance(stack, str):
        return make_stack(
            stack,
            lwf_comm_ms_per_mb=cfg.quirks.lwf_comm_ms_per_mb,
            adadual_inclusive=cfg.quirks.adadual_inclusive,
        )
    if not isinstance(stack, SchedulerStack):
        raise ConfigError(f"stack must be a name or a SchedulerStack, got {type(stack).__name__}")
    return stack


def simulate(
    cluster: ClusterSpec,
    workload: Workload,
    stack: str | SchedulerStack,
    config: SimConfig | None = None,
) -> SimResult:
    """Run ``workload`` under a named (or given) stack; policies are built fresh.

    On the native event loop when ``config.engine`` allows and :mod:`envs.sim.native` covers
    the run (same results, bit for bit), else on :class:`Simulator`."""
    cfg = config or SimConfig()
    stack = resolve_stack(stack, cfg)
    if cfg.fidelity.level is Fidelity.FULL:
        big = max(workload.jobs, key=lambda j: j.iterations)
        if big.iterations > MAX_FULL_ITERATIONS:
            raise ConfigError(
                f"workload {workload.name!r}: job {big.job_id} ({big.name or big.model.name}) "
                f"runs {big.iterations:.3g} iterations, and FULL fidelity simulates every one "
                f"(> {MAX_FULL_ITERATIONS:.0e}: hours to forever); merge them with "
                "workload.trace.max_iterations, cap durations (workload.trace.duration_cap_s), "
                "or use fidelity=fast / job"
            )
    if cfg.run.engine != "python":
        from envs.sim import native

        why = native.unsupported(workload, stack, cfg)
        if why is None:
            return native.run(cluster, workload, stack, cfg, _make_rng(cfg.model.seed))
        if cfg.run.engine == "native":
            raise ConfigError(f"engine='native' cannot run this: {why}")
    return Simulator(cluster, workload, stack, cfg).run()
