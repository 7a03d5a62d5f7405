"""The contract between the evaluation and a scheduler kind: one run's task and its output.

A :class:`SchedulerKind` turns a :class:`RunTask` (one scheduler on one seed's workload) into
a :class:`RunOutput` (per-job times in seconds and the cluster's GPU utilisation).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from envs.sim import ClusterSpec, SimConfig
from evaluation.config import ElasticConfig, EvaluateConfig, PolicyEvalConfig
from evaluation.workloads import Prepared

if TYPE_CHECKING:  # gymnasium only where the env is used
    from envs.gym.factory import EnvConfig

__all__ = ["RunOutput", "RunTask", "SchedulerKind", "binned_utilisation", "slot_utilisation"]


@dataclass(frozen=True)
class RunTask:
    """Everything one run needs (pickled to a worker process).

    ``env_config`` is set when elastic schedulers run through the DL² Gymnasium env (a
    ``policy:`` scheduler is present, ``elastic.through_env``, or workload kind ``env``)."""

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
