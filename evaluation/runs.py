"""The contract between the evaluation and a scheduler kind: one run's task and its output.

A :class:`SchedulerKind` turns a :class:`RunTask` (one scheduler on one seed's workload) into
a :class:`RunOutput` (per-job times in seconds and the cluster's GPU utilisation).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from envs.sim import ClusterSpec, SimConfig
from envs.sim.elastic.simulator import Heartbeat
from envs.sim.results import SimResult
from evaluation.config import ElasticConfig, EvaluateConfig, PolicyEvalConfig
from evaluation.workloads import Prepared

if TYPE_CHECKING:  # gymnasium only where the env is used
    from envs.gym.factory import EnvConfig

__all__ = [
    "RunOutput",
    "RunTask",
    "SchedulerKind",
    "binned_utilisation",
    "engine_output",
    "run_heartbeat",
    "slot_utilisation",
]


@dataclass(frozen=True)
class RunTask:
    """Everything one run needs (pickled to a worker process).

    ``env_config`` is set when elastic schedulers run through the DL² Gymnasium env (a
    ``policy:`` scheduler is present, ``elastic.through_env``, or workload kind ``env``).
    ``sim_config.run``'s ``max_wall_s`` / ``progress_s`` hold for every kind: the contention
    engine's runs and the elastic world's slot loops alike (:func:`run_heartbeat`)."""

    scheduler: str  # the full spec, e.g. "elastic:drf"
    kind: str
    arg: str
    prepared: Prepared
    cluster: ClusterSpec
    sim_config: SimConfig
    elastic: ElasticConfig
    env_config: EnvConfig | None = None
    policy_eval: PolicyEvalConfig = field(default_factory=PolicyEvalConfig)


@dataclass
class RunOutput:
    """One run's per-job outcomes (seconds, in the workload's job order) and cluster totals.

    ``ideal_s`` is a job's run time alone at its requested resources (the contention engine:
    iterations x compute, communication excluded; the elastic world: its work at its caps),
    so ``slowdown = jct / ideal``.  ``util_t``/``util`` are bin edges and mean GPU utilisation
    per bin over ``[0, makespan]``; their time-weighted mean is ``gpu_util``.
    """

    scheduler: str
    seed: int
    job_id: np.ndarray
    name: list[str]
    num_gpus: np.ndarray
    submit_s: np.ndarray
    start_s: np.ndarray
    finish_s: np.ndarray
    ideal_s: np.ndarray
    makespan_s: float
    gpu_util: float
    util_t: np.ndarray
    util: np.ndarray
    info: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, list[Any]] = field(default_factory=dict)  # more per-job columns

    @property
    def jct_s(self) -> np.ndarray:
        return self.finish_s - self.submit_s

    @property
    def queue_s(self) -> np.ndarray:
        return self.start_s - self.submit_s


class SchedulerKind(Protocol):
    """A way to run one workload under one scheduler.

    ``needs`` is ``"workload"`` (job-level :class:`~envs.sim.spec.Workload`), ``"elastic"``
    (``ElasticJob`` tuples, or the DL² env when ``RunTask.env_config`` is set) or ``"env"``
    (the DL² Gymnasium env only).  ``check`` raises :class:`ConfigError` for a bad argument
    before anything runs; ``run`` is called in a worker process and must be a pure function
    of the task.
    """

    name: str
    needs: str

    def check(self, arg: str, cfg: EvaluateConfig) -> None: ...

    def run(self, task: RunTask) -> RunOutput: ...


def run_heartbeat(task: RunTask) -> Heartbeat | None:
    """The wall-clock budget and progress heartbeat of an elastic run (a slot loop, on the
    slot simulator or through the DL² env): ``task.sim_config.run``'s ``max_wall_s`` and
    ``progress_s``, as the contention engine keeps them; lines labelled ``<workload> under
    <scheduler>``.  ``None`` when neither is set."""
    run = task.sim_config.run
    label = f"{task.prepared.name} under {task.scheduler}"
    return Heartbeat.of(label, run.max_wall_s, run.progress_s)


def binned_utilisation(
    times: np.ndarray, deltas: np.ndarray, horizon: float, num_gpus: float, bins: int = 200
) -> tuple[np.ndarray, np.ndarray]:
    """Bin means of the step function ``sum(deltas[times <= t]) / num_gpus`` on
    ``[0, horizon]``: exact (the integral of a step function is piecewise linear)."""
    edges = np.linspace(0.0, horizon, bins + 1) if horizon > 0 else np.array([0.0, 1.0])
    if times.size == 0:
        return edges, np.zeros(edges.size - 1)
    knots, inv = np.unique(times, return_inverse=True)
    level = np.cumsum(np.bincount(inv, weights=deltas)) / num_gpus
    end = max(horizon, float(knots[-1]))
    xs = np.append(knots, end)
    integral = np.concatenate([[0.0], np.cumsum(level * np.diff(xs))])
    at = np.interp(edges, xs, integral, left=0.0)
    return edges, np.diff(at) / np.diff(edges)


def slot_utilisation(
    gpu_util: np.ndarray, slot_s: float, makespan_s: float
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`binned_utilisation` of a per-slot utilisation series (slots of ``slot_s``)."""
    slot_starts = np.arange(gpu_util.size) * slot_s
    deltas = np.diff(np.concatenate([[0.0], gpu_util]))
    return binned_utilisation(slot_starts, deltas, makespan_s, 1.0)


def engine_output(task: RunTask, res: SimResult, info: dict[str, Any]) -> RunOutput:
    """A contention-engine run's :class:`RunOutput` from its result (per-job times in the
    workload's seconds, the utilisation of the GPUs' workers, the ideal run times)."""
    w = task.prepared.workload
    assert w is not None
    k = task.prepared.ms_per_s
    recs = res.records
    submit = np.array([r.submit_ms for r in recs]) / k
    start = np.array([r.start_ms for r in recs]) / k
    finish = np.array([r.finish_ms for r in recs]) / k
    gpu_s = np.array([r.gpu_ms for r in recs]) / k
    span = np.maximum(finish - start, 1e-12)
    times = np.concatenate([start, finish])
    deltas = np.concatenate([gpu_s / span, -gpu_s / span])
    util_t, util = binned_utilisation(times, deltas, res.makespan_ms / k, res.num_gpus)
    ideal = np.array([r.iterations * w.jobs[i].model.compute_ms for i, r in enumerate(recs)])
    return RunOutput(
        scheduler=task.scheduler,
        seed=task.prepared.seed,
        job_id=np.array([r.job_id for r in recs]),
        name=[r.name for r in recs],
        num_gpus=np.array([r.num_gpus for r in recs]),
        submit_s=submit,
        start_s=start,
        finish_s=finish,
        ideal_s=ideal / k,
        makespan_s=res.makespan_ms / k,
        gpu_util=res.gpu_utilisation,
        util_t=util_t,
        util=util,
        info=info,
        extra={
            "model": [r.model for r in recs],
            "iterations": [r.iterations for r in recs],
            "servers": [r.servers for r in recs],
        },
    )
