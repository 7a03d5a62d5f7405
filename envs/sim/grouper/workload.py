"""Cojob workloads: Grouper's 40-cojob trace, scaled copies of it, and a seeded generator.

Trace CSV columns (Grouper's ``config.py`` workload, see ``envs/sim/data/README.md``):
``arrival_s`` (cojob arrival, s), ``groupID`` (cojob), ``JobId`` (not unique; kept as
``trace_job_id``), ``modelName``, ``modelSize`` (``"280.0-MB"``), ``workerHosts`` and
``serverHosts`` (``"0-1-2"``), ``stageSizes`` (cumulative iterations, ``"20-40-80-480"``),
``maxStage`` (stages the job runs before successive halving stops it), ``ctime`` (compute s per
iteration), ``weight`` (unused: always 1.0). Errors name the file, line and column.
"""

from __future__ import annotations

import dataclasses
import os
from importlib import resources
from pathlib import Path

import numpy as np

from envs.sim.errors import ConfigError, WorkloadError
from envs.sim.grouper.spec import GBPS, Cojob, CojobWorkload, PSJob, check_stage_plan
from envs.sim.traces._csv import _err, _float_field, _int_field, _read_csv, _text

REQUIRED = (
    "arrival_s",
    "groupID",
    "JobId",
    "modelName",
    "modelSize",
    "workerHosts",
    "serverHosts",
    "stageSizes",
    "maxStage",
)

#: model sizes (MB) of the shipped trace (the paper's Table III lists 160/230/250/580)
TRACE_MODELS: dict[str, float] = {
    "DeepSpeech2": 160.0,
    "ResNet152": 240.0,
    "AlexNet": 280.0,
    "VGG19": 600.0,
}

#: name -> (file, hosts, link Gbps), from the JSON ``meta`` next to each upstream CSV
BUILTIN = {
    "40cojobs": ("grouper_trace_40cojobs.csv", 10, 1.0),
    "small_2cojobs": ("grouper_trace_small_2cojobs.csv", 10, 10.0),
}


def _dash_ints(p: Path, line: int, row: dict[str, str], col: str) -> tuple[int, ...]:
    text = _text(p, line, row, col)
    try:
        return tuple(int(x) for x in text.split("-"))
    except ValueError:
        raise _err(p, line, col, f"expected dash-separated integers, got {text!r}") from None


def load_cojob_trace(
    path: str | os.PathLike[str],
    *,
    num_hosts: int = 10,
    link_gbps: float = 1.0,
    name: str | None = None,
) -> CojobWorkload:
    """Read a Grouper-style trace CSV into a :class:`CojobWorkload` (times in ms)."""
    p, _, rows = _read_csv(path, REQUIRED)
    groups: dict[int, tuple[int, float, list[PSJob]]] = {}
    for idx, (line, row) in enumerate(rows):
        arrival = _float_field(p, line, row, "arrival_s", zero_ok=True) * 1000.0
        gid = _int_field(p, line, row, "groupID", zero_ok=True)
        size_text = _text(p, line, row, "modelSize")
        try:
            size = float(size_text.removesuffix("-MB").removesuffix("MB"))
        except ValueError:
            raise _err(
                p, line, "modelSize", f"expected e.g. '280.0-MB', got {size_text!r}"
            ) from None
        if not size > 0:
            raise _err(p, line, "modelSize", f"must be > 0, got {size_text!r}")
        hosts = {c: _dash_ints(p, line, row, c) for c in ("workerHosts", "serverHosts")}
        for col, hs in hosts.items():
            bad = [h for h in hs if not 0 <= h < num_hosts]
            if bad:
                raise _err(
                    p, line, col, f"host(s) {bad} do not exist (hosts are 0..{num_hosts - 1})"
                )
        plan = _dash_ints(p, line, row, "stageSizes")
        try:
            check_stage_plan(plan, "stageSizes")
        except WorkloadError as exc:
            raise _err(p, line, "stageSizes", str(exc)) from None
        max_stage = _int_field(p, line, row, "maxStage")
        if max_stage > len(plan):
            raise _err(p, line, "maxStage", f"{max_stage} > the {len(plan)} stages of {plan}")
        ctime = _float_field(p, line, row, "ctime", zero_ok=True) if row.get("ctime") else 0.0
        job = PSJob(
            job_id=idx,
            model=_text(p, line, row, "modelName"),
            model_mb=size,
            workers=hosts["workerHosts"],
            servers=hosts["serverHosts"],
            stage_plan=plan,
            max_stage=max_stage,
            compute_ms=ctime * 1000.0,
            trace_job_id=_int_field(p, line, row, "JobId", zero_ok=True),
        )
        if gid in groups and groups[gid][1] != arrival:
            raise _err(
                p, line, "arrival_s", f"cojob {gid} already arrived at {groups[gid][1] / 1000} s"
            )
        groups.setdefault(gid, (line, arrival, []))[2].append(job)
    cojobs = tuple(Cojob(gid, arrival, tuple(jobs)) for gid, (_, arrival, jobs) in groups.items())
    return CojobWorkload(cojobs, num_hosts, link_gbps * GBPS, name or p.stem)


def builtin_trace(name: str = "40cojobs") -> CojobWorkload:
    """A shipped trace: ``"40cojobs"`` (1 Gbps, 10 hosts) or ``"small_2cojobs"`` (10 Gbps)."""
    if name not in BUILTIN:
        raise ConfigError(f"unknown cojob trace {name!r}; known: {sorted(BUILTIN)}")
    fname, hosts, gbps = BUILTIN[name]
    ref = resources.files("envs.sim") / "data" / "grouper" / fname
    with resources.as_file(ref) as path:
        return load_cojob_trace(path, num_hosts=hosts, link_gbps=gbps, name=f"grouper-{name}")


def scale_trace(w: CojobWorkload, *, cojobs: int | None = None, divisor: int = 1) -> CojobWorkload:
    """The first ``cojobs`` cojobs with every stage plan divided by ``divisor``.

    Grouper's runs at 1/20 scale are ``cojobs=20, divisor=20`` (``1-2-4-24``) and at 1/10
    ``divisor=10`` on all 40. A plan that does not divide exactly is an error.
    """
    if divisor < 1:
        raise ConfigError(f"divisor must be >= 1, got {divisor}")
    n = len(w.cojobs) if cojobs is None else cojobs
    if not 1 <= n <= len(w.cojobs):
        raise ConfigError(f"cojobs must be in 1..{len(w.cojobs)}, got {cojobs}")
    out = []
    for c in w.cojobs[:n]:
        jobs = []
        for j in c.jobs:
            if any(x % divisor for x in j.stage_plan):
                raise WorkloadError(
                    f"job {j.job_id}: plan {j.stage_plan} not divisible by {divisor}"
                )
            plan = tuple(x // divisor for x in j.stage_plan)
            jobs.append(dataclasses.replace(j, stage_plan=plan))
        out.append(Cojob(c.cojob_id, c.arrival_ms, tuple(jobs)))
    suffix = f"-{n}cojobs-div{divisor}" if (n, divisor) != (len(w.cojobs), 1) else ""
    return CojobWorkload(tuple(out), w.num_hosts, w.link_mb_per_ms, w.name + suffix)


def successive_halving(n_jobs: int, n_stages: int, rng: np.random.Generator) -> tuple[int, ...]:
    """Stages each job runs when every stage stops the worse half of the survivors.

    Jobs get a random quality rank ``r`` (0 = best); stage ``k`` (1-based) is run by the
    ``ceil(n_jobs / 2**(k-1))`` best (the last stage by all that are left). Eight jobs over
    four stages give ``{4, 3, 2, 2, 1, 1, 1, 1}`` (the trace's pattern).
    """
    if n_jobs < 1 or n_stages < 1:
        raise ConfigError(f"need n_jobs >= 1 and n_stages >= 1, got {n_jobs}, {n_stages}")
    rank = rng.permutation(n_jobs)
    out = []
    for r in rank:
        k = 1
        while k < n_stages and r < -(-n_jobs // 2**k):
            k += 1
        out.append(k)
    return tuple(out)


def generate_cojobs(
    num_cojobs: int,
    seed: int,
    *,
    num_hosts: int = 10,
    jobs_per_cojob: int = 8,
    stage_plan: tuple[int, ...] = (20, 40, 80, 480),
    models: dict[str, float] | None = None,
    max_workers: int = 6,
    mean_interarrival_ms: float = 14_800.0,
    link_gbps: float = 1.0,
) -> CojobWorkload:
    """A seeded cojob workload shaped like Grouper's trace.

    Each cojob searches one model (uniform over ``models``, default :data:`TRACE_MODELS`);
    arrivals are Poisson (the first at 0) with the trace's mean gap of 14.8 s; every job has
    ``W`` workers and ``W`` servers (``W`` uniform in 1..``max_workers``, one per cojob) on
    consecutive hosts from a random start, servers right after the workers (mod ``num_hosts``);
    ``max_stage`` by :func:`successive_halving`.
    """
    if num_cojobs < 1 or jobs_per_cojob < 1:
        raise ConfigError("num_cojobs and jobs_per_cojob must be >= 1")
    if not 1 <= max_workers <= num_hosts:
        raise ConfigError(f"max_workers must be in 1..num_hosts={num_hosts}, got {max_workers}")
    check_stage_plan(stage_plan, "stage_plan")
    table = dict(TRACE_MODELS if models is None else models)
    if not table:
        raise ConfigError("models must not be empty")
    rng = np.random.default_rng(seed)
    names = sorted(table)
    gaps = rng.exponential(mean_interarrival_ms, size=num_cojobs)
    gaps[0] = 0.0
    arrivals = np.cumsum(gaps)
    cojobs, next_id = [], 0
    for g in range(num_cojobs):
        model = names[int(rng.integers(len(names)))]
        n_w = int(rng.integers(1, max_workers + 1))
        stops = successive_halving(jobs_per_cojob, len(stage_plan), rng)
        jobs = []
        for stop in stops:
            start = int(rng.integers(num_hosts))
            hosts = [(start + i) % num_hosts for i in range(2 * n_w)]
            jobs.append(
                PSJob(
                    job_id=next_id,
                    model=model,
                    model_mb=table[model],
                    workers=tuple(hosts[:n_w]),
                    servers=tuple(hosts[n_w:]),
                    stage_plan=tuple(stage_plan),
                    max_stage=stop,
                )
            )
            next_id += 1
        cojobs.append(Cojob(g, float(arrivals[g]), tuple(jobs)))
    return CojobWorkload(tuple(cojobs), num_hosts, link_gbps * GBPS, f"generated-{seed}")
