"""The native event loop (``envs/sim/_native.c``): the Python engine's results, faster.

:func:`envs.sim.simulate` runs a configuration here when :func:`unsupported` finds nothing
against it and the extension is built (``SimConfig.run.engine``: ``"auto"`` = here when possible,
``"python"`` = never, ``"native"`` = here or a :class:`ConfigError` saying why not).

What it covers: continuous time, all-reduce jobs, job order SRSF or FIFO, placement RAND, FF,
LS or LWF-κ, communication SRSF(n), AdaDUAL or fair share, FULL or FAST fidelity -- the
Ada-SRSF stacks in the paper's (correct) model.  Everything else (reference mode's ticks and
quirks, parameter servers, preemptive orders, Tiresias placers, JOB fidelity, debug
invariants, custom policies) runs in the Python engine, which is the specification: the C
code is a line-by-line port computing the same floating-point operations in the same order,
and ``tests/sim/test_native.py`` requires bit-identical per-job times on every stack.
"""

from __future__ import annotations

import hashlib
import math
import time
from pathlib import Path
from typing import Any

from envs.sim.config import Fidelity, SimConfig
from envs.sim.errors import SimulationError
from envs.sim.policies.comm import AdaDual, FairShare, SRSFn
from envs.sim.policies.job_order import FIFO, SRSF
from envs.sim.policies.placement import LWF, FirstFit, RandomPlacer
from envs.sim.results import JobRecord, SimResult
from envs.sim.spec import ClusterSpec, CommArch, Workload
from envs.sim.stacks import SchedulerStack

try:
    from envs.sim import _native  # type: ignore[attr-defined]
except ImportError:  # not built (no C compiler at install time): the Python engine runs
    _native = None


def stale_build(module: Any, source: Path) -> bool:
    """Whether the built extension ``module`` (``None``: not built) comes from another
    version of its C ``source`` than the one on disk (edited since the last build: the build
    records the source's SHA-256 as ``SOURCE_SHA256``); an installed package without the
    source is taken as it is."""
    if module is None or not source.exists():
        return False
    return bool(hashlib.sha256(source.read_bytes()).hexdigest() != module.SOURCE_SHA256)


_STALE = stale_build(_native, Path(__file__).with_name("_native.c"))

_ORDERS: dict[type, int] = {SRSF: 0, FIFO: 1}
_PLACERS: dict[type, int] = {RandomPlacer: 0, FirstFit: 1}
#: ``SimConfig`` settings (group, field) the native loop implements only at their default
_DEFAULT_ONLY = (
    ("quirks", "tick_ms"),
    ("quirks", "probe_side_effect"),
    ("quirks", "skip_after_place"),
    ("quirks", "lagged_release"),
    ("run", "check_invariants"),
    ("model", "ps_iteration"),
)


def available() -> bool:
    """Whether the extension is built from the current source."""
    return _native is not None and not _STALE


def unsupported(workload: Workload, stack: SchedulerStack, cfg: SimConfig) -> str | None:
    """Why this run needs the Python engine, or ``None`` if the native loop can run it."""
    if _native is None:
        return "the native extension envs.sim._native is not built (no C compiler at install?)"
    if _STALE:
        return "stale build: envs/sim/_native.c changed since it was compiled (run make setup)"
    default = SimConfig()
    for group, name in _DEFAULT_ONLY:
        value = getattr(getattr(cfg, group), name)
        if value != getattr(getattr(default, group), name):
            return f"SimConfig.{group}.{name}={value!r} (Python engine only)"
    if cfg.fidelity.level not in (Fidelity.FULL, Fidelity.FAST):
        return f"fidelity {cfg.fidelity.level.value!r} (Python engine only)"
    if type(stack.order) not in _ORDERS:
        return f"job order {getattr(stack.order, 'name', stack.order)!r} (Python engine only)"
    placer = stack.placer
    if type(placer) not in _PLACERS and not isinstance(placer, LWF):
        return f"placer {getattr(placer, 'name', placer)!r} (Python engine only)"
    if isinstance(placer, LWF) and (
        type(placer).place is not LWF.place or placer._server_order is not None
    ):
        return "an LWF placer that has been used or overridden (Python engine only)"
    if type(stack.comm) not in (SRSFn, AdaDual, FairShare):
        return f"communication {getattr(stack.comm, 'name', stack.comm)!r} (Python engine only)"
    bad = next((j for j in workload.jobs if j.comm is not CommArch.ALLREDUCE), None)
    if bad is not None:
        return f"job {bad.job_id} is a parameter-server job (Python engine only)"
    return None


def run(
    cluster: ClusterSpec,
    workload: Workload,
    stack: SchedulerStack,
    cfg: SimConfig,
    rng: Any,
) -> SimResult:
    """Run on the native loop (the caller checked :func:`unsupported`); the same
    :class:`SimResult` as ``Simulator.run()`` but for ``events`` (the native loop has no
    compute windows, so it counts every forward/backward) and ``extra["engine"]``."""
    assert _native is not None
    wall = time.perf_counter()
    workload.check_fits(cluster)
    net = cluster.network
    placer = stack.placer
    kappa = 0
    if isinstance(placer, LWF):
        code, kappa = 2, placer.kappa
    else:
        code = _PLACERS[type(placer)]
    comm = stack.comm
    if isinstance(comm, SRSFn):
        comm_code, srsf_n, inclusive = 0, comm.n, False
    elif isinstance(comm, AdaDual):
        comm_code, srsf_n, inclusive = 1, 0, comm.inclusive
    else:
        comm_code, srsf_n, inclusive = 2, 0, False
    est = placer.comm_estimate_ms_per_mb
    chunk_max = cfg.iterations_per_step(min(j.iterations for j in workload.jobs))
    jobs = [
        (
            float(j.submit_ms),
            float(j.model.forward_ms),
            float(j.model.backward_ms),
            float(j.model.compute_ms),
            float(j.total_compute_ms),
            float(j.model.model_size_mb),
            float(j.model.gpu_memory_mb),
            int(j.iterations),
            int(j.num_gpus),
        )
        for j in workload.jobs
    ]
    try:
        out = _native.run(
            (
                cluster.num_servers,
                cluster.gpus_per_server,
                float(cluster.gpu_memory_mb),
                float(net.a_ms),
                float(net.b_ms_per_mb),
                float(net.eta_ms_per_mb),
            ),
            (
                _ORDERS[type(stack.order)],
                code,
                min(kappa, 1 << 30),
                comm_code,
                srsf_n,
                int(inclusive),
                float(net.b_ms_per_mb if est is None else est),
            ),
            chunk_max,
            rng.random,
            jobs,
            float(cfg.run.max_wall_s or 0.0),
            float(cfg.run.progress_s or 0.0),
            f"{workload.name} under {stack.name}",
        )
    except TimeoutError as exc:  # the loop's wall-clock budget
        raise SimulationError(f"{workload.name!r} under {stack.name}: {exc}") from None
    start, finish, servers, events = out
    stuck = [j.job_id for j, f in zip(workload.jobs, finish, strict=True) if math.isnan(f)]
    if stuck:
        raise SimulationError(
            f"no events left but {len(stuck)} jobs never finished (first ids {stuck[:10]})"
        )
    records = [
        JobRecord.from_spec(j, s, f, n)
        for j, s, f, n in zip(workload.jobs, start, finish, servers, strict=True)
    ]
    return SimResult.from_records(
        records,
        num_gpus=cluster.num_gpus,
        stack=stack.name,
        config=cfg.to_dict(),
        workload=workload.name,
        events=events,
        wall_s=time.perf_counter() - wall,
        extra={"iterations_per_step": chunk_max, "engine": "native"},
    )
