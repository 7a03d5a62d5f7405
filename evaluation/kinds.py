"""Scheduler kinds: the extension point, and the contention-engine and elastic kinds.

A scheduler spec is ``<kind>:<argument>``; a name with no registered kind prefix is a
contention-engine stack (``lwf1_adasrsf``, ``fifo:lwf4_srsf2``, see ``envs/sim/stacks.py``).
:data:`SCHEDULER_KINDS` maps a kind name to its :class:`~evaluation.runs.SchedulerKind`:

- ``stack:<name>`` — the contention engine (:func:`envs.sim.simulate`) with a named stack;
- ``elastic:<allocator>`` — DL²'s slot simulator with an allocator of
  :data:`envs.sim.elastic.allocators.ALLOCATORS` (``drf``, ``fifo``, ``srtf``, ``tetris``,
  ``optimus``, ``esrtf``, ``fixed``, ``bundle``, ``adasrsf``, ``tiresias``), or the same
  allocator driven through the DL² Gymnasium env when the run is in env mode
  (:mod:`evaluation.env_runs`);
- ``policy:<path>`` — a trained DL²-style policy (:mod:`evaluation.policy`);
- ``contention:<srsf | exclusive | policy.npz>`` — a policy acting in ``dlsched/Contention-v0``
  on the stacks' workloads, and ``bound:solo`` (:mod:`evaluation.contention`);
- ``grouper:<policy>`` — Grouper's flow-level cojob simulator with one of its network
  policies, on workload kind ``grouper`` only (:mod:`evaluation.grouper`).

A new kind is a class with ``name``, ``needs``, ``check(arg, cfg)`` and ``run(task) ->
RunOutput``, added with :func:`register_scheduler_kind`; nothing else changes.
"""

from __future__ import annotations

import functools
import math
import time
from dataclasses import asdict

import numpy as np

from envs.sim import ConfigError, Fidelity, make_stack, simulate
from envs.sim.elastic.allocators import allocator_from_label
from envs.sim.elastic.simulator import SlotRecord, SlotSimulator
from envs.sim.policies.skew import ExclusiveFit
from evaluation.config import EvaluateConfig
from evaluation.contention import BoundKind, ContentionKind
from evaluation.grouper import GrouperKind
from evaluation.policy import PolicyKind
from evaluation.runs import RunOutput, RunTask, SchedulerKind, engine_output, run_heartbeat
from evaluation.runs import slot_utilisation as _slot_utilisation
from evaluation.workloads import check_elastic_speed, elastic_cluster, elastic_speed

__all__ = [
    "SCHEDULER_KINDS",
    "ElasticKind",
    "StackKind",
    "check_stacks",
    "parse_scheduler",
    "register_scheduler_kind",
    "run_task",
]


class StackKind:
    """The contention engine with a named stack (``envs/sim/stacks.py``)."""

    name = "stack"
    needs = "workload"

    def check(self, arg: str, cfg: EvaluateConfig) -> None:
        try:
            stack = make_stack(arg)
        except ConfigError as exc:
            msg = str(exc)
            raise ConfigError(msg if repr(arg) in msg else f"stack {arg!r}: {msg}") from exc
        if cfg.fidelity == Fidelity.JOB.value and not isinstance(stack.placer, ExclusiveFit):
            # the duration model runs each job alone on its GPUs; a sharing placer's run
            # would stop at its first shared GPU, so it is refused before anything runs
            raise ConfigError(
                f"stack {arg!r}: fidelity=job (the duration model) needs exclusive GPUs; its "
                f"placer {stack.placer.name!r} may share them (exclusive: count, skew)"
            )

    def run(self, task: RunTask) -> RunOutput:
        w = task.prepared.workload
        assert w is not None
        c0 = time.process_time()
        res = simulate(task.cluster, w, task.arg, task.sim_config)
        cpu = time.process_time() - c0
        info = {"sim_config": res.config, "events": res.events, "wall_s": res.wall_s,
                "cpu_s": cpu, "extra": res.extra}  # fmt: skip
        return engine_output(task, res, info)


class ElasticKind:
    """DL²'s slot simulator with a heuristic allocator (``envs/sim/elastic/allocators.py``).

    Times: ``submit = arrival_slot x slot_s``, ``start`` = start of the first slot with an
    allocation, ``finish`` = fractional slot of completion x ``slot_s``.  Utilisation =
    allocated GPU slots / all GPU slots, per slot.  In env mode (``task.env_config`` set) the
    allocator drives the DL² Gymnasium env instead (:func:`evaluation.env_runs.run_in_env`).
    Either way ``max_wall_s`` / ``progress_s`` hold as for the contention engine
    (:func:`evaluation.runs.run_heartbeat`)."""

    name = "elastic"
    needs = "elastic"

    def check(self, arg: str, cfg: EvaluateConfig) -> None:
        allocator_from_label(
            arg, role="elastic allocator"
        )  # name and options, e.g. esrtf(backfill=True)
        check_elastic_speed(cfg.elastic)

    def run(self, task: RunTask) -> RunOutput:
        if task.env_config is not None:
            from evaluation.env_runs import allocator_actor, run_in_env

            allocator = functools.partial(allocator_from_label, task.arg)
            return run_in_env(task, allocator_actor(allocator), {})
        return self._run_slot_simulator(task)

    def _run_slot_simulator(self, task: RunTask) -> RunOutput:
        jobs = task.prepared.elastic_jobs
        assert jobs is not None
        e = task.elastic
        cluster = elastic_cluster(task.cluster, e)
        speed = elastic_speed(e)
        first: dict[int, int] = {}

        def on_slot(rec: SlotRecord) -> None:
            for jid, (workers, _) in rec.allocation.items():
                if workers > 0 and jid not in first:
                    first[jid] = rec.t

        t0, c0 = time.perf_counter(), time.process_time()
        sim = SlotSimulator(
            cluster,
            jobs,
            allocator_from_label(task.arg),
            speed,
            scaling_overhead_s=e.scaling_overhead_s,
            max_slots=e.max_slots,
            on_slot=on_slot,
            heartbeat=run_heartbeat(task),
        )
        res = sim.run()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        by_id = {j.job_id: j for j in jobs}
        recs = res.jobs
        s = e.slot_s
        ideal = []
        for r in recs:
            j = by_id[r.job_id]
            its = speed.speed(j.type, j.max_ps, j.max_workers) * j.speed_factor
            work = j.real_num_epochs * j.type.iterations_per_epoch
            ideal.append(work / its if its > 0 else math.nan)
        makespan = res.makespan_slots * s
        util_t, util = _slot_utilisation(np.array(res.gpu_util), s, makespan)
        return RunOutput(
            scheduler=task.scheduler,
            seed=task.prepared.seed,
            job_id=np.array([r.job_id for r in recs]),
            name=[f"j{r.job_id}" for r in recs],
            num_gpus=np.array([by_id[r.job_id].max_workers for r in recs]),
            submit_s=np.array([r.arrival * s for r in recs], dtype=float),
            start_s=np.array([first.get(r.job_id, r.arrival) * s for r in recs], dtype=float),
            finish_s=np.array([r.finish * s for r in recs]),
            ideal_s=np.array(ideal),
            makespan_s=makespan,
            gpu_util=res.mean_gpu_util,
            util_t=util_t,
            util=util,
            info={"elastic": {**asdict(cluster), **res.summary()}, "wall_s": wall, "cpu_s": cpu},
            extra={
                "type": [by_id[r.job_id].type.model for r in recs],
                "slots_run": [r.slots_run for r in recs],
                "num_changes": [r.num_changes for r in recs],
            },
        )


#: kind name -> kind; a scheduler spec ``<kind>:<arg>`` picks one, anything else is a stack.
SCHEDULER_KINDS: dict[str, SchedulerKind] = {
    "stack": StackKind(),
    "elastic": ElasticKind(),
    "policy": PolicyKind(),
}


def register_scheduler_kind(kind: SchedulerKind) -> None:
    """Add a scheduler kind (its ``name`` becomes the spec prefix)."""
    if kind.name in SCHEDULER_KINDS:
        raise ConfigError(f"scheduler kind {kind.name!r} is already registered")
    SCHEDULER_KINDS[kind.name] = kind


register_scheduler_kind(ContentionKind())
register_scheduler_kind(BoundKind())
register_scheduler_kind(GrouperKind())


def parse_scheduler(spec: str) -> tuple[str, str]:
    """``"elastic:drf"`` -> ``("elastic", "drf")``; ``"fifo:lwf4_srsf2"`` -> ``("stack", ...)``."""
    prefix, sep, rest = spec.partition(":")
    if sep and prefix in SCHEDULER_KINDS:
        if not rest:
            raise ConfigError(f"scheduler {spec!r}: nothing after {prefix + ':'!r}")
        return prefix, rest
    return "stack", spec


def check_stacks(cfg: EvaluateConfig) -> dict[str, tuple[str, str]]:
    """Validate every scheduler spec; ``{spec: (kind, arg)}``."""
    if not cfg.stacks:
        raise ConfigError("stacks is empty; give at least one, e.g. stacks=[lwf1_adasrsf]")
    out: dict[str, tuple[str, str]] = {}
    for spec in cfg.stacks:
        if spec in out:
            raise ConfigError(f"stack {spec!r} is listed twice in stacks")
        kind, arg = parse_scheduler(spec)
        SCHEDULER_KINDS[kind].check(arg, cfg)
        out[spec] = (kind, arg)
    if cfg.baseline is not None and cfg.baseline not in out:
        raise ConfigError(f"baseline {cfg.baseline!r} is not one of stacks {list(cfg.stacks)}")
    return out


def run_task(task: RunTask) -> RunOutput:
    """Run one task with its kind (called in a worker process)."""
    return SCHEDULER_KINDS[task.kind].run(task)
