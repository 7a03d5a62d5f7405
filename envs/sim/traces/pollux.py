"""Pollux's and Sia's job-submission workloads, and the rules that fill in what they lack.

Both schedulers' artifacts (Pollux, OSDI '21: ``petuum/adaptdl`` branch ``osdi21-artifact``,
``simulator/workloads/``; Sia, SOSP '23: ``siasosp23/artifacts``, ``sia-simulator/workloads/``)
ship their workloads in one layout, ``name, time, application, num_replicas, batch_size``:

* ``name``: the job's name (``<application>-<index>``), unique;
* ``time``: submission time, seconds from the workload's start (integers in Pollux's files,
  decimals in Sia's); rows sorted by it;
* ``application``: one of the artifacts' six training jobs (``cifar10``: ResNet-18 on
  CIFAR-10, ``imagenet``: ResNet-50 on ImageNet, ``yolov3``: YOLOv3 on PASCAL VOC,
  ``deepspeech2``: DeepSpeech2 on CMU-ARCTIC, ``bert``: BERT fine-tuning on SQuAD, ``ncf``:
  NeuMF on MovieLens);
* ``num_replicas``: the GPUs the job asks for (one replica per GPU);
* ``batch_size``: its total batch size (validated, otherwise unused here).

**What is real** (their files, unchanged): arrival times, GPU counts, applications, batch sizes.
**What is synthesised** (these files have no run time: upstream, a job trains until its
application's target, at a speed given by the artifacts' throughput profiles):

* **Duration** (:func:`derived_duration_s`): both generators (Pollux's
  ``simulator/workload.py``, Sia's ``utils/generate_workload.py``) sample a job of a real trace
  (Philly, or Helios-Saturn for Sia's) and choose its application by the sampled job's GPU-time
  (GPU-seconds): under 1 GPU-hour ``cifar10`` or ``ncf``, 1-10 ``deepspeech2`` (half of them
  then turned into ``bert``), 10-100 ``yolov3``, 100-1000 ``imagenet`` (jobs under 60 s or over
  1000 GPU-hours are dropped first, so the lowest band starts at 60 GPU-seconds).  The rule
  inverts this: a job's GPU-time is the geometric middle ``sqrt(low x high)`` of its
  application's band (:data:`GPU_TIME_BANDS_S`), and its duration is that GPU-time over its
  ``num_replicas``, i.e. the run time on the GPUs it asks for.  Deterministic (no draw).
* **Model** (:data:`APPLICATION_MODELS`): an explicit table from application to the nearest of
  dlsched's model profiles (:data:`~envs.sim.models.REFERENCE_MODELS`); an application not in it
  is an error naming the file, line and the known ones.

The reader gives each job ``job_type`` = its model (so :func:`~.convert.convert_trace` draws
nothing for it) and the derived ``duration_s``; iterations then follow from the duration as for
every trace (:class:`~.convert.ConvertOptions`).  ``read_trace`` detects the layout; the DL²
env (``workload.env.trace=``) reads it when given ``workload.trace.format=pollux`` (with every
trace option at its default the env reads the normalised layout only).  Data and sources:
``envs/sim/data/pollux/``, ``envs/sim/data/sia/`` (their README files); docs: ``docs/bench.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from envs.sim.traces._csv import PathLike, _err, _float_field, _int_field, _read_csv, _text
from envs.sim.traces.model import Repairs, Tally, Trace, TraceJob
from envs.sim.traces.rows import _finish, _gpus, _parse_rows

__all__ = ["APPLICATION_MODELS", "GPU_TIME_BANDS_S", "derived_duration_s", "read_pollux"]

_HOUR = 3600.0

#: application -> (low, high) GPU-seconds of the band its generator drew it from (see the
#: module docstring): Pollux's ``simulator/workload.py`` and Sia's ``utils/generate_workload.py``
#: (``gpu_time < 1 h``, ``< 10 h``, ``< 100 h``, else, after dropping jobs under 60 s and over
#: 1000 GPU-hours).
GPU_TIME_BANDS_S: dict[str, tuple[float, float]] = {
    "cifar10": (60.0, 1 * _HOUR),
    "ncf": (60.0, 1 * _HOUR),
    "deepspeech2": (1 * _HOUR, 10 * _HOUR),
    "bert": (1 * _HOUR, 10 * _HOUR),
    "yolov3": (10 * _HOUR, 100 * _HOUR),
    "imagenet": (100 * _HOUR, 1000 * _HOUR),
}

#: application -> dlsched model profile (``envs.sim.models.REFERENCE_MODELS``): the CNNs with
#: residual backbones (ResNet-18, ResNet-50, YOLOv3's Darknet-53) -> ``resnet50``; the sequence
#: models (DeepSpeech2's recurrent layers, BERT) -> ``lstm``; NCF (a small embedding + MLP
#: network, no family in the table) -> ``resnet50``, the smallest profile.
APPLICATION_MODELS: dict[str, str] = {
    "cifar10": "resnet50",
    "imagenet": "resnet50",
    "yolov3": "resnet50",
    "deepspeech2": "lstm",
    "bert": "lstm",
    "ncf": "resnet50",
}

_REQUIRED = ("name", "time", "application", "num_replicas", "batch_size")


def derived_duration_s(application: str, num_replicas: int) -> float:
    """The synthesised run time (s) of a job of ``application`` on ``num_replicas`` GPUs:
    ``sqrt(low x high) / num_replicas`` with ``(low, high)`` its GPU-time band
    (:data:`GPU_TIME_BANDS_S`)."""
    low, high = GPU_TIME_BANDS_S[application]
    return math.sqrt(low * high) / num_replicas


def _row(p: Path, line: int, row: Mapping[str, str]) -> TraceJob:
    name = _text(p, line, row, "name")
    submit = _float_field(p, line, row, "time", zero_ok=True)
    application = _text(p, line, row, "application")
    if application not in APPLICATION_MODELS:
        known = sorted(APPLICATION_MODELS)
        cause = f"unknown application {application!r}; known: {known}"
        raise _err(p, line, "application", cause, "unknown application")
    gpus = _gpus(p, line, row, "num_replicas")
    _int_field(p, line, row, "batch_size")
    return TraceJob(
        name,
        submit,
        derived_duration_s(application, gpus),
        gpus,
        job_type=APPLICATION_MODELS[application],
        line=line,
    )


def read_pollux(path: PathLike, *, repairs: Repairs | None = None) -> Trace:
    """A Pollux / Sia workload ``name, time, application, num_replicas, batch_size`` (module
    docstring): ids = ``name``, GPUs = ``num_replicas``, ``job_type`` = the application's model
    (:data:`APPLICATION_MODELS`), ``duration_s`` = :func:`derived_duration_s`.  Rows must be
    sorted by ``time``; times are rebased so the first job submits at 0."""
    rep = repairs or Repairs()
    p, _, rows = _read_csv(path, _REQUIRED)
    tally = Tally()
    jobs = _parse_rows(p, rows, _row, rep, tally)
    tally.notes.append(
        "Pollux/Sia layout: durations derived from each application's GPU-time band, models "
        "mapped from applications (envs.sim.traces.pollux); batch_size unused"
    )
    return _finish(
        p, "pollux", len(rows), jobs, tally, rep, id_col="name", ordered=True, rebase=True
    )
