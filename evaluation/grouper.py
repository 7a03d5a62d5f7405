"""``grouper:<policy>``: Grouper's flow-level cojob simulator as a scheduler kind.

Grouper (:mod:`envs.sim.grouper`) asks which flows of hyperparameter-search cojobs go first on
every switch port; its metric is the **stage completion time** (SCT) of a cojob stage, from
the cojob's arrival to the end of that stage.  The kind runs the workload of kind ``grouper``
(:func:`evaluation.workloads.build_cojobs`, ``workload.grouper.*``) under one of the
network policies Grouper's simulator compares (:data:`envs.sim.grouper.POLICIES`: ``fs``,
``baraat``, ``sincronia``, ``sptf``, ``sptf-stage``, ``grouper``, ``grouper-offline``), with
:func:`envs.sim.grouper.simulate_cojobs` as ``experiments/grouper_repro.py`` calls it.

The run's rows are **cojob stages**, not jobs: ``submit_s`` = the cojob's arrival,
``finish_s`` = the stage's completion, so the pipeline's ``jct_s`` of a row is its SCT and
``avg_jct_s`` the average SCT (:meth:`envs.sim.grouper.GrouperResult.avg_sct_ms`);
``ideal_s`` = the stage's SCT with the cojob alone under FS, so ``slowdown`` is Grouper's
stage slowdown; ``num_gpus`` = the jobs of the cojob that run the stage (each a
parameter-server job; Grouper's model has hosts, not GPUs).  There is no GPU utilisation
(NaN).  ``info["grouper"]`` holds the run's own summary (avg SCT, stage-1 SCT, cojob CT, the
jobs' JCT, events).
"""

from __future__ import annotations

import time

import numpy as np

from envs.sim import ConfigError
from envs.sim.grouper import POLICIES, simulate_cojobs
from evaluation.config import EvaluateConfig
from evaluation.runs import RunOutput, RunTask

__all__ = ["GrouperKind"]


class GrouperKind:
    """``grouper:<policy>`` on workload kind ``grouper`` (module docstring)."""

    name = "grouper"
    needs = "cojobs"

    def check(self, arg: str, cfg: EvaluateConfig) -> None:
        if arg not in POLICIES:
            raise ConfigError(f"unknown Grouper network policy {arg!r}; known: {sorted(POLICIES)}")

    def run(self, task: RunTask) -> RunOutput:
        p = task.prepared
        assert p.cojobs is not None
        t0, c0 = time.perf_counter(), time.process_time()
        res = simulate_cojobs(p.cojobs, task.arg, p.cojob_config)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        k = p.ms_per_s
        stages = res.stages
        alive = {
            (c.cojob_id, s): sum(j.max_stage >= s for j in c.jobs)
            for c in p.cojobs.cojobs
            for s in range(1, max(j.max_stage for j in c.jobs) + 1)
        }
        submit = np.array([s.arrival_ms for s in stages]) / k
        finish = np.array([s.complete_ms for s in stages]) / k
        alone = [s.alone_sct_ms for s in stages]
        makespan = res.makespan_ms() / k
        return RunOutput(
            scheduler=task.scheduler,
            seed=p.seed,
            job_id=np.arange(len(stages)),
            name=[f"cojob{s.cojob_id}-stage{s.stage}" for s in stages],
            num_gpus=np.array([alive[(s.cojob_id, s.stage)] for s in stages]),
            submit_s=submit,
            start_s=submit.copy(),
            finish_s=finish,
            ideal_s=np.array([np.nan if a is None else a / k for a in alone]),
            makespan_s=makespan,
            gpu_util=float("nan"),
            util_t=np.array([0.0, max(makespan, 1.0)]),
            util=np.array([np.nan]),
            info={"grouper": res.summary(), "events": res.events, "wall_s": wall, "cpu_s": cpu},
            extra={
                "cojob": [s.cojob_id for s in stages],
                "stage": [s.stage for s in stages],
            },
        )
