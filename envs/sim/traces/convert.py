"""From a :class:`~.model.Trace` to the simulator's :class:`~envs.sim.spec.Workload`.

Why: a trace lacks what the simulator needs (a model per job, iteration counts, whole GPUs),
so every gap is filled by a documented, seeded rule, and every rule is counted in the record
that :func:`convert_trace` returns.  The rules (model draws, iterations, fractional GPUs,
macro-iterations) are described at :class:`ConvertOptions`.  Job ids become ``0..n-1`` in
trace order; ``JobSpec.name`` is the trace's job id.
Details: docs/design/traces.md#conversion-to-simulator-jobs-convertpy
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from envs.sim.errors import ConfigError, WorkloadError
from envs.sim.models import REFERENCE_MODELS
from envs.sim.spec import JobSpec, ModelProfile, Workload
from envs.sim.traces._csv import _err, _round_half_up
from envs.sim.traces.model import Trace, TraceJob

UnknownModels = Literal["error", "family", "draw"]
Fractional = Literal["whole", "scale"]

#: (name prefix, model) for ``unknown_models="family"``, tried in order on the lower-cased
#: name with non-alphanumerics removed.
MODEL_FAMILIES: tuple[tuple[str, str], ...] = (
    ("vgg", "vgg16"),
    ("resnet", "resnet50"),
    ("inception", "inception-v3"),
    ("googlenet", "inception-v3"),
    ("lstm", "lstm"),
    ("rnn", "lstm"),
)


@dataclass(frozen=True)
class ConvertOptions:
    """How a trace becomes jobs.

    Rules for what a trace lacks (all documented here, all seeded, all counted in the record that
    :func:`convert_trace` returns):

    * **Model.** ``rng = numpy.random.default_rng(seed)`` draws one index uniform over ``models``
      (dict order; default :data:`~envs.sim.models.REFERENCE_MODELS`) for **every** job in trace
      order, before and independent of anything else; a job uses its draw only when it has no
      ``job_type`` (or, with ``unknown_models="draw"``, an unknown one).  A ``job_type`` is
      matched case-insensitively to a key or profile name of ``models``.  An unknown name is an
      error naming the file and line (``unknown_models="error"``, the default), or with
      ``"family"`` is mapped by :data:`MODEL_FAMILIES` (e.g. Tiresias's vgg19 -> vgg16,
      resnet152 -> resnet50, inception4 -> inception-v3) and drawn when no family matches.
    * **Iterations.** Where the trace gives none: ``iterations = max(1,
      round_half_up(duration_s * time_unit / (forward_ms + backward_ms)))``: the duration is
      treated as pure compute at the requested GPUs (communication is simulated on top, so under
      contention a job can take longer than traced).  ``time_unit`` = simulator ms per trace
      second (1000: real time; smaller compresses every duration and arrival alike).
    * **Fractional GPUs** (``gpu_milli < 1000``, Alibaba): the simulator gives whole GPUs.
      ``"whole"`` (default): the job gets one whole GPU per requested GPU and keeps its duration
      (a conservative upper bound on its work); ``"scale"``: its duration is multiplied by
      ``gpu_milli / 1000`` (the work it did on its share, done on a whole GPU).
    * **Macro-iterations** (``max_iterations``, off by default): a job with more iterations is
      run as ``K = ceil(iterations / max_iterations)``-iteration steps: ``round_half_up(
      iterations / K)`` iterations of a profile whose forward, backward and model size are ``K``
      times the model's (same GPU memory and name).  Compute and traffic per job are conserved
      (to rounding); contention happens at step granularity, like ``Fidelity.FAST``.  This is
      what makes month-long real-time traces cheap to simulate; the record says how many jobs
      were merged and the largest ``K``.
    """

    time_unit: float = 1000.0
    unknown_models: UnknownModels = "error"
    fractional_gpus: Fractional = "whole"
    max_iterations: int | None = None

    def __post_init__(self) -> None:
        if not (self.time_unit > 0 and math.isfinite(self.time_unit)):
            raise ConfigError(f"time_unit must be a finite number > 0, got {self.time_unit}")
        if self.unknown_models not in ("error", "family", "draw"):
            raise ConfigError(
                f"unknown_models must be error, family or draw, got {self.unknown_models!r}"
            )
        if self.fractional_gpus not in ("whole", "scale"):
            raise ConfigError(
                f"fractional_gpus must be whole or scale, got {self.fractional_gpus!r}"
            )
        if self.max_iterations is not None and self.max_iterations < 1:
            raise ConfigError(f"max_iterations must be >= 1 or None, got {self.max_iterations}")


class _Models:
    def __init__(self, models: Mapping[str, ModelProfile] | None) -> None:
        table = dict(REFERENCE_MODELS if models is None else models)
        if not table:
            raise ConfigError("models must contain at least one ModelProfile")
        self.by_name: dict[str, ModelProfile] = {}
        for key, profile in table.items():
            self.by_name.setdefault(key.lower(), profile)
            self.by_name.setdefault(profile.name.lower(), profile)
        self.choices = list(table.values())
        self.merged: dict[tuple[str, int], ModelProfile] = {}

    def family(self, name: str) -> ModelProfile | None:
        key = "".join(c for c in name.lower() if c.isalnum())
        for prefix, target in MODEL_FAMILIES:
            if key.startswith(prefix) and target in self.by_name:
                return self.by_name[target]
        return None

    def times(self, model: ModelProfile, k: int) -> ModelProfile:
        if k == 1:
            return model
        key = (model.name, k)
        if key not in self.merged:
            self.merged[key] = ModelProfile(
                model.name,
                model.model_size_mb * k,
                model.gpu_memory_mb,
                model.batch_size,
                model.forward_ms * k,
                model.backward_ms * k,
            )
        return self.merged[key]


def convert_trace(
    trace: Trace,
    *,
    seed: int,
    models: Mapping[str, ModelProfile] | None = None,
    options: ConvertOptions | None = None,
    name: str | None = None,
) -> tuple[Workload, dict[str, Any]]:
    """The workload of ``trace`` and a JSON-ready record of every rule applied and how often."""
    opt = options or ConvertOptions()
    table = _Models(models)
    draws = np.random.default_rng(seed).integers(len(table.choices), size=len(trace.jobs))
    counts = {
        "model_from_trace": 0,
        "model_by_family": 0,
        "model_drawn": 0,
        "fractional_whole_gpu": 0,
        "fractional_scaled": 0,
        "merged_jobs": 0,
    }
    max_k = 1
    jobs: list[JobSpec] = []
    for idx, tj in enumerate(trace.jobs):
        model = _model(trace, tj, table, opt, table.choices[int(draws[idx])], counts)
        duration = tj.duration_s
        if tj.gpu_milli < 1000:
            if opt.fractional_gpus == "scale" and duration is not None:
                duration *= tj.gpu_milli / 1000.0
                counts["fractional_scaled"] += 1
            else:
                counts["fractional_whole_gpu"] += 1
        where = f"{trace.source}, line {tj.line} (job {tj.job_id!r})"
        submit_ms = tj.submit_s * opt.time_unit
        if not math.isfinite(submit_ms):
            raise WorkloadError(
                f"{where}: submit time {tj.submit_s!r} s x time_unit {opt.time_unit:g} is not a "
                f"finite number of ms"
            )
        if tj.iterations is not None:
            iterations = tj.iterations
        else:
            assert duration is not None  # a reader guarantees one of the two
            exact = duration * opt.time_unit / model.compute_ms
            if not math.isfinite(exact):
                raise WorkloadError(
                    f"{where}: duration {tj.duration_s!r} s x time_unit {opt.time_unit:g} is not "
                    f"a finite number of ms"
                )
            iterations = max(1, _round_half_up(exact))
        if opt.max_iterations is not None and iterations > opt.max_iterations:
            k = math.ceil(iterations / opt.max_iterations)
            model = table.times(model, k)
            iterations = max(1, _round_half_up(iterations / k))
            counts["merged_jobs"] += 1
            max_k = max(max_k, k)
        jobs.append(
            JobSpec(
                job_id=idx,
                submit_ms=submit_ms,
                model=model,
                iterations=iterations,
                num_gpus=tj.num_gpus,
                name=tj.job_id,
            )
        )
    stem = Path(trace.source).stem
    workload = Workload(tuple(jobs), name=name or f"trace:{stem}", source=trace.source)
    record = {
        "seed": seed,
        **asdict(opt),
        "models": [m.name for m in table.choices],
        **counts,
        "max_merge_factor": max_k,
    }
    return workload, record


def _model(
    trace: Trace,
    tj: TraceJob,
    table: _Models,
    opt: ConvertOptions,
    drawn: ModelProfile,
    counts: dict[str, int],
) -> ModelProfile:
    if not tj.job_type:
        counts["model_drawn"] += 1
        return drawn
    found = table.by_name.get(tj.job_type.lower())
    if found is not None:
        counts["model_from_trace"] += 1
        return found
    if opt.unknown_models == "family":
        fam = table.family(tj.job_type)
        if fam is not None:
            counts["model_by_family"] += 1
            return fam
    if opt.unknown_models in ("family", "draw"):
        counts["model_drawn"] += 1
        return drawn
    raise _err(
        Path(trace.source),
        tj.line,
        "job_type",
        f"unknown model {tj.job_type!r}; known: {sorted(table.by_name)} "
        "(unknown_models=family or draw maps it)",
        "unknown model",
    )


def to_workload(
    trace: Trace,
    *,
    seed: int,
    models: Mapping[str, ModelProfile] | None = None,
    options: ConvertOptions | None = None,
    name: str | None = None,
) -> Workload:
    """:func:`convert_trace` without the record."""
    return convert_trace(trace, seed=seed, models=models, options=options, name=name)[0]
