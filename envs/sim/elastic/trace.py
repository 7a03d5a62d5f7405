"""Any normalised trace in the elastic world (issue 3, item 4).

Rules (documented here and tested):

* parsing and validation are :func:`envs.sim.workload.load_trace_csv`'s (file, line, column
  in every error; a seeded model for rows without ``job_type``);
* the model maps to a DL² job type through :data:`MODEL_TO_DL2_TYPE` (VGG-16 -> vgg-16,
  ResNet-50 -> resnet-50, Inception-V3 -> inception-bn, LSTM -> wlm, the LSTM word-language
  model); a model with no DL² counterpart is an error naming it;
* ``arrival_slot = floor(submit_s / slot_s)``;
* the requested GPUs become the job's caps: ``max_workers = max_ps = num_gpus`` (the initial
  and maximum allocation), and the job's work is what it trained in its traced duration at
  that allocation with one PS per worker:
  ``num_epochs = duration_s * speed(type, num_gpus, num_gpus) / iterations_per_epoch``
  (``real_num_epochs`` the same; no estimation error), where ``duration_s`` is recovered from
  the loader's iteration count (``iterations x (fw + bw)``).  So a job run alone at its
  requested allocation finishes in exactly its traced duration.
"""

from __future__ import annotations

import math
from pathlib import Path

from envs.sim.elastic.spec import ElasticJob, JobType, SpeedModel
from envs.sim.elastic.speed import MeasuredSpeed
from envs.sim.elastic.types import job_type
from envs.sim.errors import WorkloadError, check_number
from envs.sim.spec import Workload
from envs.sim.workload import load_trace_csv

#: trace model name (``envs.sim.models``) -> DL² job type model name
MODEL_TO_DL2_TYPE: dict[str, str] = {
    "vgg16": "vgg-16",
    "resnet50": "resnet-50",
    "inception-v3": "inception-bn",
    "lstm": "wlm",
}


def elastic_jobs_from_trace(
    path: str | Path,
    *,
    seed: int,
    slot_s: float = 1200.0,
    speed: SpeedModel | None = None,
) -> tuple[ElasticJob, ...]:
    """Jobs of a normalised trace CSV as elastic jobs (see the module docstring)."""
    return elastic_jobs_from_workload(
        load_trace_csv(path, seed=seed), slot_s=slot_s, speed=speed, where=str(path)
    )


def elastic_jobs_from_workload(
    workload: Workload,
    *,
    slot_s: float = 1200.0,
    speed: SpeedModel | None = None,
    time_unit: float = 1000.0,
    where: str | None = None,
) -> tuple[ElasticJob, ...]:
    """Any workload's jobs as elastic jobs, by the module docstring's rules; ``time_unit`` is
    simulator ms per second (as in :func:`envs.sim.traces.convert_trace`), so a trace converted
    with a compressed time keeps its real seconds here."""
    check_number(slot_s, "slot_s", gt=0, error=WorkloadError)
    path = where or workload.source or workload.name
    model = speed if speed is not None else MeasuredSpeed()
    jobs = []
    for spec in workload.jobs:
        dl2_name = MODEL_TO_DL2_TYPE.get(spec.model.name)
        if dl2_name is None:
            raise WorkloadError(
                f"{path}: job {spec.name or spec.job_id} has model {spec.model.name!r} with no "
                f"DL² job type; known: {sorted(MODEL_TO_DL2_TYPE)}"
            )
        jt: JobType = job_type(dl2_name)
        n = spec.num_gpus
        duration_s = spec.iterations * spec.model.compute_ms / time_unit
        its = model.speed(jt, n, n)
        if not its > 0:
            raise WorkloadError(
                f"{path}: job {spec.name or spec.job_id}: {dl2_name} makes no progress at "
                f"{n} PS / {n} workers under the {getattr(model, 'name', '?')} speed model"
            )
        epochs = duration_s * its / jt.iterations_per_epoch
        jobs.append(
            ElasticJob(
                job_id=spec.job_id,
                type=jt,
                arrival_slot=math.floor(spec.submit_ms / time_unit / slot_s),
                num_epochs=epochs,
                real_num_epochs=epochs,
                max_workers=n,
                max_ps=n,
            )
        )
    return tuple(jobs)
