"""Workload loading and generation: Ada-SRSF job files, a seeded generator, real-trace CSVs.

Every loader validates each row and never drops one silently: a missing file, an empty file, a
missing required column, an empty / non-numeric / negative / zero field, or a duplicate id raises
:class:`~envs.sim.errors.WorkloadError` whose message names the file, the 1-based line number,
the column and the cause, e.g. ``"jobs.csv, line 7, column 'iters': must be > 0, got '0'"``.
Lines that are completely blank (such as a trailing empty line) are not rows and are skipped.

Units are those of :mod:`envs.sim.spec` (ms, MB).  The Ada-SRSF files and the generator's
defaults are at the reference simulator's scale, which divides the paper's iteration counts and
arrival times by 100 (see :func:`load_ada_srsf_csv` and :func:`scale_workload`).

Shipped data lives under ``envs/sim/data/`` (see ``envs/sim/data/README.md``) and is located
with :func:`importlib.resources.files`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import replace
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path

import numpy as np

from envs.sim.errors import ConfigError, WorkloadError
from envs.sim.models import REFERENCE_MODELS
from envs.sim.spec import JobSpec, ModelProfile, Workload
from envs.sim.traces import ConvertOptions, read_normalised_csv, to_workload

# CSV helpers live in envs.sim.traces._csv; re-exported here for the modules that import them
# from envs.sim.workload (envs.sim.elastic.*).
from envs.sim.traces._csv import (  # noqa: F401
    _err,
    _float_field,
    _int_field,
    _number,
    _read_csv,
    _round_half_up,
    _text,
)

__all__ = [
    "ADA_SRSF_GPU_COUNTS",
    "ADA_SRSF_SCALES",
    "ADA_SRSF_SEEDS",
    "REFERENCE_RESULT_SEEDS",
    "builtin_ada_srsf",
    "builtin_philly_trace",
    "generate_ada_srsf",
    "gpu_count_layout",
    "load_ada_srsf_csv",
    "load_reference_results",
    "load_reference_summary",
    "load_trace_csv",
    "paper_scale_workload",
    "scale_workload",
]

PathLike = str | os.PathLike[str]

#: (GPUs per job, number of jobs) of the 160-job Ada-SRSF workload, in job-id order.
ADA_SRSF_GPU_COUNTS: tuple[tuple[int, int], ...] = (
    (1, 80),
    (2, 14),
    (4, 26),
    (8, 30),
    (16, 8),
    (32, 2),
)
#: Seeds of the shipped regenerated Ada-SRSF workloads.
ADA_SRSF_SEEDS: tuple[int, ...] = tuple(range(10))
#: Seeds with shipped reference-simulator results.
REFERENCE_RESULT_SEEDS: tuple[int, ...] = (0, 1, 2)

_ADA_REQUIRED = (
    "job_id",
    "job_name",
    "dnn",
    "nworkers",
    "iters",
    "start_time",
    "model_size",
    "train_mem",
    "fw_time",
    "bw_time",
    "batch_size",
)
_PHILLY_SLICE = "philly_vc_6c71a0_public.csv"


# --------------------------------------------------------------------------------------------
# Ada-SRSF workload files
# --------------------------------------------------------------------------------------------


def load_ada_srsf_csv(path: PathLike, *, name: str | None = None) -> Workload:
    """Load an Ada-SRSF workload CSV (the regenerated ``microsoft160_seed*.csv`` layout).

    Required columns: ``job_id, job_name, dnn, nworkers, iters, start_time, model_size,
    train_mem, fw_time, bw_time, batch_size``; ``dataset, lr, nsteps_update, cuda_enabled`` and
    any other columns are accepted and ignored (the reference simulator does not use them).

    Each row becomes ``JobSpec(job_id, submit_ms=start_time, iterations=iters,
    num_gpus=nworkers, name=job_name)`` with a :class:`ModelProfile` built from the row's own
    ``model_size`` (MB), ``train_mem`` (MB), ``fw_time``/``bw_time`` (ms) and ``batch_size``,
    named ``dnn``.  Rows keep file order, because the reference simulator breaks ties between
    jobs arriving in the same ms by file order.

    Units are the reference simulator's: ``iters`` and ``start_time`` are the paper's values
    divided by 100 (paper: 1000-6000 iterations, arrivals over 20 min; files: 10-60 and
    0-12000 ms).  Use ``scale_workload(w, 100, 100)`` for the paper's full scale.

    ``nworkers``, ``iters``, ``model_size``, ``train_mem``, ``fw_time``, ``bw_time`` and
    ``batch_size`` must be > 0; ``job_id`` and ``start_time`` must be >= 0; counts must be
    integers; ``job_id`` must be unique.  Any violation raises :class:`WorkloadError` naming the
    file, line, column and cause.
    """
    p, _, rows = _read_csv(path, _ADA_REQUIRED)
    profiles: dict[tuple[str, float, float, int, float, float], ModelProfile] = {}
    jobs: list[JobSpec] = []
    first_line: dict[int, int] = {}
    for line, row in rows:
        job_id = _int_field(p, line, row, "job_id", zero_ok=True)
        if job_id in first_line:
            raise _err(
                p, line, "job_id", f"duplicate job_id {job_id} (first on line {first_line[job_id]})"
            )
        first_line[job_id] = line
        job_name = _text(p, line, row, "job_name")
        dnn = _text(p, line, row, "dnn")
        nworkers = _int_field(p, line, row, "nworkers")
        iters = _int_field(p, line, row, "iters")
        start = _float_field(p, line, row, "start_time", zero_ok=True)
        size = _float_field(p, line, row, "model_size")
        mem = _float_field(p, line, row, "train_mem")
        fw = _float_field(p, line, row, "fw_time")
        bw = _float_field(p, line, row, "bw_time")
        batch = _int_field(p, line, row, "batch_size")
        key = (dnn, size, mem, batch, fw, bw)
        try:
            model = profiles.get(key) or ModelProfile(dnn, size, mem, batch, fw, bw)
            profiles[key] = model
            jobs.append(
                JobSpec(
                    job_id=job_id,
                    submit_ms=start,
                    model=model,
                    iterations=iters,
                    num_gpus=nworkers,
                    name=job_name,
                )
            )
        except WorkloadError as exc:  # defensive: the checks above should catch everything
            raise _err(p, line, None, str(exc)) from exc
    return Workload(tuple(jobs), name=name or f"ada-srsf:{p.stem}", source=str(p))


@contextmanager
def _data_file(*parts: str) -> Iterator[Path]:
    res: Traversable = resources.files("envs.sim") / "data"
    for part in parts:
        res = res / part
    with resources.as_file(res) as real:
        yield Path(real)


def builtin_ada_srsf(seed: int) -> Workload:
    """The shipped regenerated Ada-SRSF workload ``microsoft160_seed{seed}.csv`` (seeds 0-9).

    160 jobs at the reference simulator's scale (see :func:`load_ada_srsf_csv`).
    """
    if seed not in ADA_SRSF_SEEDS:
        raise ConfigError(f"no shipped Ada-SRSF workload for seed {seed!r}; have {ADA_SRSF_SEEDS}")
    with _data_file("ada_srsf", f"microsoft160_seed{seed}.csv") as p:
        return load_ada_srsf_csv(p, name=f"ada-srsf-seed{seed}")


def load_reference_results(seed: int) -> dict[str, dict[int, float]]:
    """Per-job JCTs of the original reference simulator on workload ``seed`` (0, 1 or 2).

    Returns ``{column: {job_id: JCT in simulator ms}}`` where ``column`` is
    ``"<variant>:<algo_string>"``, e.g. ``"original:ssf-lwf1-srsf-1-true"`` (LWF-1 + Ada-SRSF).
    JCT = finish tick - ``start_time``; divide by 10 for the paper's "seconds".
    """
    if seed not in REFERENCE_RESULT_SEEDS:
        raise ConfigError(f"no reference results for seed {seed!r}; have {REFERENCE_RESULT_SEEDS}")
    with _data_file("ada_srsf", "reference_results", f"perjob_jct_seed{seed}.csv") as path:
        p, header, rows = _read_csv(path, ("job_id",))
        out: dict[str, dict[int, float]] = {col: {} for col in header if col != "job_id"}
        for line, row in rows:
            job_id = _int_field(p, line, row, "job_id", zero_ok=True)
            for col, per_job in out.items():
                per_job[job_id] = _float_field(p, line, row, col)
    return out


def load_reference_summary() -> list[dict[str, str | int | float]]:
    """Rows of the reference simulator's ``summary.csv`` (one per run), in file order.

    A column whose every value parses as an integer (``seed``, ``makespan_sim_ms``,
    ``max_rss_kb``) becomes ``int``; one whose every value parses as a number becomes ``float``
    (``gpu_util_pct``, ``avg_jct_s``, ...); the rest (``variant``, ``algo_string``,
    ``paper_name``) stay ``str``.  JCT columns are in the paper's seconds (= simulator ms / 10).
    """
    with _data_file("ada_srsf", "reference_results", "summary.csv") as path:
        _, header, rows = _read_csv(path, ("variant", "seed", "algo_string"))

    def all_parse(col: str, conv: type) -> bool:
        try:
            for _, row in rows:
                conv(row[col])
        except ValueError:
            return False
        return True

    kinds: dict[str, type] = {}
    for col in header:
        kinds[col] = int if all_parse(col, int) else float if all_parse(col, float) else str
    return [{col: kinds[col](row[col]) for col in header} for _, row in rows]


# --------------------------------------------------------------------------------------------
# Seeded generator and scaling
# --------------------------------------------------------------------------------------------


def gpu_count_layout(num_jobs: int) -> list[tuple[int, int]]:
    """(GPUs per job, job count) for ``num_jobs`` jobs in the Ada-SRSF 80/14/26/30/8/2 mix.

    Rounding rule (largest remainder / Hamilton): each class gets ``floor(num_jobs * c / 160)``
    jobs; the jobs still missing go one each to the classes with the largest remainders
    ``num_jobs * c mod 160``, ties to the smaller GPU count.  Counts sum to ``num_jobs`` and are
    exact for multiples of 80 (160 gives 80/14/26/30/8/2).  Classes may get 0 jobs.
    """
    if num_jobs < 1:
        raise ConfigError(f"num_jobs must be >= 1, got {num_jobs}")
    total = sum(c for _, c in ADA_SRSF_GPU_COUNTS)
    counts = [num_jobs * c // total for _, c in ADA_SRSF_GPU_COUNTS]
    remainders = [num_jobs * c % total for _, c in ADA_SRSF_GPU_COUNTS]
    order = sorted(range(len(counts)), key=lambda i: (-remainders[i], i))
    for i in order[: num_jobs - sum(counts)]:
        counts[i] += 1
    return [(g, n) for (g, _), n in zip(ADA_SRSF_GPU_COUNTS, counts, strict=True)]


#: The Ada-SRSF generator's two scales, ``(iterations_scale, arrival_window_ms)``: ``small``,
#: the reference code's 1/100 scale (its defaults), and ``paper``, 1000-6000 iterations with
#: arrivals over 20 minutes (:func:`paper_scale_workload`).
ADA_SRSF_SCALES: dict[str, tuple[float, float]] = {
    "small": (1.0, 12_000.0),
    "paper": (100.0, 1_200_000.0),
}


def generate_ada_srsf(
    seed: int,
    num_jobs: int = 160,
    iterations_scale: float = ADA_SRSF_SCALES["small"][0],
    arrival_window_ms: float = ADA_SRSF_SCALES["small"][1],
    models: Mapping[str, ModelProfile] | None = None,
) -> Workload:
    """Draw a workload from the Ada-SRSF distribution with ``numpy.random.default_rng(seed)``.

    Job ids ``0..num_jobs-1`` are laid out by GPU count as in the reference (ids 0-79: 1 GPU,
    80-93: 2, 94-119: 4, 120-149: 8, 150-157: 16, 158-159: 32 for 160 jobs; other sizes use
    :func:`gpu_count_layout`).  For each job in id order the generator draws, in this order:
    the model, uniform over ``models`` (dict order; default
    :data:`envs.sim.models.REFERENCE_MODELS`, the integer-ms profiles); the iterations, a uniform
    integer in [10, 60] times ``iterations_scale`` rounded half up (min 1); the arrival,
    ``floor(uniform(0, arrival_window_ms))`` ms.  Names are ``j<id>``.

    The defaults give the reference simulator's scale (10-60 iterations, arrivals in
    [0, 12000) ms); ``iterations_scale=100, arrival_window_ms=1_200_000`` gives the paper's
    1000-6000 iterations over 20 minutes.  It is the same distribution as the shipped files but
    not the same draws (those came from Python 2's global RNG).  No global RNG state is used.
    """
    if iterations_scale <= 0 or not math.isfinite(iterations_scale):
        raise ConfigError(f"iterations_scale must be a finite number > 0, got {iterations_scale}")
    if arrival_window_ms <= 0 or not math.isfinite(arrival_window_ms):
        raise ConfigError(f"arrival_window_ms must be a finite number > 0, got {arrival_window_ms}")
    table = list((REFERENCE_MODELS if models is None else models).values())
    if not table:
        raise ConfigError("models must contain at least one ModelProfile")
    rng = np.random.default_rng(seed)
    jobs: list[JobSpec] = []
    job_id = 0
    for gpus, count in gpu_count_layout(num_jobs):
        for _ in range(count):
            model = table[int(rng.integers(len(table)))]
            iters = int(rng.integers(10, 61))
            arrival = math.floor(float(rng.uniform(0.0, arrival_window_ms)))
            jobs.append(
                JobSpec(
                    job_id=job_id,
                    submit_ms=float(arrival),
                    model=model,
                    iterations=max(1, _round_half_up(iters * iterations_scale)),
                    num_gpus=gpus,
                    name=f"j{job_id}",
                )
            )
            job_id += 1
    return Workload(
        tuple(jobs),
        name=f"ada-srsf-gen-seed{seed}",
        source=(
            f"generate_ada_srsf(seed={seed}, num_jobs={num_jobs}, "
            f"iterations_scale={iterations_scale}, arrival_window_ms={arrival_window_ms})"
        ),
    )


def paper_scale_workload(seed: int, num_jobs: int = 160) -> Workload:
    """:func:`generate_ada_srsf` at the paper's scale: 1000-6000 iterations, 20-minute arrivals.

    Uses the same :data:`REFERENCE_MODELS` as the default generator, so only the scale differs.
    """
    iterations_scale, arrival_window_ms = ADA_SRSF_SCALES["paper"]
    return generate_ada_srsf(
        seed,
        num_jobs=num_jobs,
        iterations_scale=iterations_scale,
        arrival_window_ms=arrival_window_ms,
        models=REFERENCE_MODELS,
    )


def scale_workload(workload: Workload, iterations_scale: float, time_scale: float) -> Workload:
    """Multiply every job's iterations (rounded half up, min 1) and submit time.

    ``scale_workload(builtin_ada_srsf(s), 100, 100)`` is the shipped seed at the paper's scale.
    Job ids, order, models and GPU counts are unchanged.
    """
    for label, value in (("iterations_scale", iterations_scale), ("time_scale", time_scale)):
        if not (value > 0 and math.isfinite(value)):
            raise ConfigError(f"{label} must be a finite number > 0, got {value}")
    jobs = tuple(
        JobSpec(
            job_id=j.job_id,
            submit_ms=j.submit_ms * time_scale,
            model=j.model,
            iterations=max(1, _round_half_up(j.iterations * iterations_scale)),
            num_gpus=j.num_gpus,
            comm=j.comm,
            name=j.name,
        )
        for j in workload.jobs
    )
    return Workload(
        jobs,
        name=f"{workload.name}*iters{iterations_scale:g}*time{time_scale:g}",
        source=f"scale_workload({workload.source or workload.name}, {iterations_scale}, "
        f"{time_scale})",
    )


def jitter_compute(workload: Workload, rel: float, seed: int) -> Workload:
    """The same workload with every model's forward and backward time multiplied by its own
    factor ``1 + u``, ``u`` uniform in ``[-rel, rel]`` from ``numpy.random.default_rng(seed)``.

    For sensitivity analysis: how much of a result is a property of the scheduler and how much
    of this one draw of timings. Table III's times are measurements, and the reference code
    rounds them to whole ms (35.8 -> 36 ms is +0.6%), so a jitter of ``rel = 1e-3`` is well
    inside what the inputs are known to. Factors are drawn per distinct model, in order of
    first appearance, so every job of a model keeps the same profile.
    """
    if not (0 <= rel < 1 and math.isfinite(rel)):
        raise ConfigError(f"jitter rel must be in [0, 1), got {rel}")
    rng = np.random.default_rng(seed)
    new: dict[ModelProfile, ModelProfile] = {}
    for j in workload.jobs:
        if j.model not in new:
            f, b = map(float, rng.uniform(1 - rel, 1 + rel, size=2))  # plain floats: hot path
            new[j.model] = replace(
                j.model, forward_ms=j.model.forward_ms * f, backward_ms=j.model.backward_ms * b
            )
    return Workload(
        tuple(replace(j, model=new[j.model]) for j in workload.jobs),
        name=f"{workload.name}*jitter{rel:g}s{seed}",
        source=f"jitter_compute({workload.source or workload.name}, {rel}, {seed})",
    )


# --------------------------------------------------------------------------------------------
# Normalised real-trace CSVs
# --------------------------------------------------------------------------------------------


def load_trace_csv(
    path: PathLike,
    *,
    seed: int,
    models: Mapping[str, ModelProfile] | None = None,
    time_unit: float = 1000.0,
    name: str | None = None,
) -> Workload:
    """Load a trace in the normalised schema (``job_id, submit_time_s, duration_s, num_gpus,
    job_type, status, vc, gpu_milli``; see ``envs/sim/data/README.md``).

    Columns:

    * required: ``job_id`` (non-empty, unique string), ``submit_time_s`` (number >= 0),
      ``num_gpus`` (integer >= 1), and ``duration_s`` (number > 0, seconds on the requested
      GPUs).  An optional ``iterations`` column (integer >= 1) is an extension: where a row has
      it, it is used as is and ``duration_s`` may be empty or the column absent; every row
      needs one of the two.
    * optional (column may be absent, value may be empty): ``job_type`` — the model, matched
      case-insensitively to a key or profile name in ``models``; an unknown name is an error.
      ``status`` and ``vc`` are accepted and not used (no row is dropped whatever its status).
      ``gpu_milli`` must be an integer in 1..1000 when given; it is validated and not used —
      the simulator gives every worker a whole GPU.  Other columns are ignored.

    Conversion: rows keep file order and get job ids ``0..n-1``; ``JobSpec.name`` is the
    trace's ``job_id``.  ``time_unit`` is simulator ms per trace second (default 1000: real
    time; smaller values compress time).  ``submit_ms = submit_time_s * time_unit``.

    Model rule: ``rng = numpy.random.default_rng(seed)`` draws one index uniform over
    ``models`` (dict order; default :data:`REFERENCE_MODELS`) for **every** row in file order,
    before and independent of any other column; a row uses its draw only when ``job_type`` is
    absent or empty.  Iterations rule (when no ``iterations`` value):
    ``iterations = max(1, round_half_up(duration_s * time_unit / (forward_ms + backward_ms)))``,
    i.e. the duration is treated as pure compute; communication time is ignored, so under
    contention a job's simulated run time can exceed its traced duration.

    Rows must be sorted by ``submit_time_s`` (the schema's promise).  This is
    :func:`envs.sim.traces.read_normalised_csv` then :func:`envs.sim.traces.to_workload`; use
    those (and :mod:`envs.sim.traces.transform`) for the other layouts, repairs, windowing
    and the record of what was read.
    """
    options = ConvertOptions(time_unit=time_unit)  # validates time_unit before reading
    trace = read_normalised_csv(path)
    return to_workload(trace, seed=seed, models=models, options=options, name=name)


def builtin_philly_trace(
    seed: int, *, models: Mapping[str, ModelProfile] | None = None, time_unit: float = 1000.0
) -> Workload:
    """The shipped 200-job Microsoft Philly slice (VC 6c71a0) via :func:`load_trace_csv`."""
    with _data_file("traces", _PHILLY_SLICE) as p:
        return load_trace_csv(
            p, seed=seed, models=models, time_unit=time_unit, name="philly-6c71a0"
        )


def builtin_tiresias_trace(
    *, copies: int = 1, shift_s: float = 7.0, models: Mapping[str, ModelProfile] | None = None
) -> Workload:
    """Tiresias's 60-job example trace (``data/tiresias/tiresias_60job.csv``, normalised)
    with :data:`envs.sim.models.TIRESIAS_MODELS`; ``copies > 1`` stacks that many copies,
    copy ``k`` shifted by ``k * shift_s`` seconds (the stress traces: 8 copies = 480 jobs,
    40 = 2,400), ordered by submit time, then copy, then row."""
    from envs.sim.models import TIRESIAS_MODELS

    if copies < 1 or not shift_s >= 0:
        raise ConfigError(f"copies must be >= 1 and shift_s >= 0, got {copies}, {shift_s}")
    with _data_file("tiresias", "tiresias_60job.csv") as p:
        base = load_trace_csv(p, seed=0, models=models or TIRESIAS_MODELS, name="tiresias-60")
    if copies == 1:
        return base
    rows = sorted(
        (j.submit_ms + k * shift_s * 1000.0, k, i, j)
        for k in range(copies)
        for i, j in enumerate(base.jobs)
    )
    jobs = tuple(
        JobSpec(n, t, j.model, j.iterations, j.num_gpus, name=f"{j.name}#{k}")
        for n, (t, k, _, j) in enumerate(rows)
    )
    return Workload(jobs, name=f"tiresias-60x{copies}", source=f"{base.source} x{copies}")
