"""Building each seed's workload, the cluster and the simulator config from the config.

A :class:`Prepared` is one seed's workload: job-level (contention engine) and/or elastic jobs,
the sim ms per reported second, and the record of how it was made (written to ``run.json``).
"""

from __future__ import annotations

import copy
import json
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass, replace
from typing import Any

from hydra.utils import to_absolute_path

from envs.memo import file_stamp, memo
from envs.sim import (
    ClusterSpec,
    ConfigError,
    DlschedError,
    NetworkSpec,
    SimConfig,
    Workload,
)
from envs.sim.elastic.spec import ElasticCluster, ElasticJob, SpeedModel
from envs.sim.elastic.speed import AnalyticalSpeed, MeasuredSpeed
from envs.sim.elastic.trace import elastic_jobs_from_workload
from envs.sim.elastic.workload import generate_dl2_workload
from envs.sim.grouper import CojobWorkload, GrouperConfig, builtin_trace, scale_trace
from envs.sim.traces import Trace, convert_trace, trace_stats
from envs.sim.traces.options import convert_options, read_and_window
from envs.sim.workload import (
    _data_file,
    builtin_ada_srsf,
    builtin_tiresias_trace,
    generate_ada_srsf,
    jitter_compute,
    load_ada_srsf_csv,
    scale_workload,
)
from evaluation.config import (
    WORKLOAD_FIELDS,
    WORKLOAD_KEYS,
    ClusterConfig,
    ElasticConfig,
    EvaluateConfig,
    GrouperSection,
    WorkloadConfig,
)

__all__ = [
    "Prepared",
    "build_cluster",
    "build_cojobs",
    "build_workload",
    "check_elastic_speed",
    "check_workload_config",
    "elastic_cluster",
    "elastic_speed",
    "load_trace",
    "memo_prepared",
    "paper_ms_per_s",
    "prepare_workloads",
    "sim_config",
]


@dataclass
class Prepared:
    """One seed's workload: job-level (contention engine) and/or elastic jobs, the sim ms per
    reported second, and the record of how it was made (written to ``run.json``); for
    workload kind ``grouper``, Grouper's cojobs and its simulator's options instead."""

    seed: int
    name: str
    workload: Workload | None
    elastic_jobs: tuple[ElasticJob, ...] | None
    ms_per_s: float
    record: dict[str, Any]
    cojobs: CojobWorkload | None = None
    cojob_config: GrouperConfig | None = None

    @property
    def num_jobs(self) -> int:
        if self.workload is not None:
            return len(self.workload)
        if self.cojobs is not None:
            return len(self.cojobs.jobs)
        return len(self.elastic_jobs or ())


def check_workload_config(w: WorkloadConfig) -> None:
    """Unknown kind, missing path, or a key the kind does not use -> :class:`ConfigError`."""
    if w.kind not in WORKLOAD_KEYS:
        raise ConfigError(f"unknown workload kind {w.kind!r}; known: {sorted(WORKLOAD_KEYS)}")
    used = WORKLOAD_KEYS[w.kind]
    defaults = WorkloadConfig()
    for key in WORKLOAD_FIELDS:
        if key not in used and getattr(w, key) != getattr(defaults, key):
            raise ConfigError(
                f"workload.{key} is not used by workload kind {w.kind!r} (it uses: "
                f"{', '.join(used)})"
            )
    if "path" in used and not w.path:
        raise ConfigError(f"workload kind {w.kind!r} needs workload.path=<file>")


def load_trace(w: WorkloadConfig, cluster_gpus: int) -> Trace:
    """Read and window the configured trace (the same for every seed; read once per process
    for the same file and options)."""
    t = w.trace
    if w.kind == "philly_builtin":
        with _data_file("traces", "philly_vc_6c71a0_public.csv") as p:
            return read_and_window(p, replace(t, format="normalised"), cluster_gpus)
    assert w.path is not None
    return read_and_window(to_absolute_path(w.path), t, cluster_gpus)


def build_cojobs(
    g: GrouperSection, check_invariants: bool = False
) -> tuple[CojobWorkload, GrouperConfig]:
    """Grouper's cojobs and its simulator's options (workload kind ``grouper``): the shipped
    trace's first ``g.cojobs`` cojobs, stage plans divided by ``g.divisor``, as
    ``experiments/grouper_repro.py`` builds them; a bad value is a :class:`ConfigError`
    naming ``workload.grouper``."""
    try:
        w = scale_trace(builtin_trace(g.trace), cojobs=g.cojobs, divisor=g.divisor)
        cfg = GrouperConfig(
            num_queues=g.num_queues, barrier=g.barrier, check_invariants=check_invariants
        )
    except DlschedError as exc:  # ConfigError, or WorkloadError of a plan's divisor
        raise ConfigError(f"workload.grouper: {exc}") from None
    return w, cfg


def build_workload(w: WorkloadConfig, seed: int) -> Workload:
    """The job-level workload of one seed for the Ada-SRSF kinds and ``tiresias_builtin``."""
    if w.kind == "tiresias_builtin":
        try:
            base = builtin_tiresias_trace(copies=w.copies, shift_s=w.shift_s)
        except ConfigError as exc:
            raise ConfigError(f"workload.copies / workload.shift_s: {exc}") from None
        return base
    if w.kind == "generator":
        return generate_ada_srsf(
            seed,
            num_jobs=w.num_jobs,
            iterations_scale=w.iterations_scale,
            arrival_window_ms=w.arrival_window_ms,
        )
    if w.kind == "ada_srsf_csv":
        assert w.path is not None
        base = load_ada_srsf_csv(to_absolute_path(w.path))
    else:
        base = builtin_ada_srsf(seed)
    if w.iterations_scale != 1.0 or w.time_scale != 1.0:
        return scale_workload(base, w.iterations_scale, w.time_scale)
    return base


def _dl2_jobs(w: WorkloadConfig, seed: int) -> tuple[ElasticJob, ...]:
    d = w.dl2
    return generate_dl2_workload(
        seed,
        num_jobs=d.num_jobs,
        max_arrivals_per_slot=d.max_arrivals_per_slot,
        arrival=d.arrival,  # type: ignore[arg-type]  # validated by the generator
        max_epochs=d.max_epochs,
        max_workers=d.max_workers,
        max_ps=d.max_ps,
    )


def _prepare_seed(
    cfg: EvaluateConfig, cluster: ClusterSpec, trace: Trace | None, seed: int, need_elastic: bool
) -> Prepared:
    w = cfg.workload
    record: dict[str, Any] = {"kind": w.kind}
    elastic: tuple[ElasticJob, ...] | None = None
    workload: Workload | None
    ms_per_s = 1000.0
    if w.kind == "dl2":
        elastic = _dl2_jobs(w, seed)
        workload = None
        name = f"dl2-seed{seed}"
        record["generator"] = {"seed": seed, **asdict(w.dl2)}
    elif w.kind == "grouper":
        cojobs, cojob_config = build_cojobs(w.grouper, cfg.check_invariants)
        record.update(
            name=cojobs.name,
            grouper={**asdict(w.grouper), "hosts": cojobs.num_hosts,
                     "link_mb_per_ms": cojobs.link_mb_per_ms},
            cojobs=len(cojobs.cojobs),
            jobs=len(cojobs.jobs),
        )  # fmt: skip
        return Prepared(seed, cojobs.name, None, None, 1000.0, record, cojobs, cojob_config)
    elif trace is not None:
        options = convert_options(w.trace, w.time_unit)
        workload, rules = convert_trace(trace, seed=seed, options=options)
        ms_per_s = w.time_unit
        name = workload.name
        record.update(trace.record())
        record["shape"] = trace_stats(trace)
        record["conversion"] = rules
    else:
        workload = build_workload(w, seed)
        name = workload.name
        record["source"] = workload.source
    if workload is not None and w.jitter:
        workload = jitter_compute(workload, w.jitter, seed)
        name = workload.name
        record["jitter"] = {"rel": w.jitter, "seed": seed}
    if workload is not None:
        workload.check_fits(cluster)
        record["jobs"] = len(workload)
        if need_elastic:
            elastic = elastic_jobs_from_workload(
                workload,
                slot_s=cfg.elastic.slot_s,
                speed=elastic_speed(cfg.elastic),
                time_unit=ms_per_s,
            )
    else:
        record["jobs"] = len(elastic or ())
    record["name"] = name
    return Prepared(seed, name, workload, elastic, ms_per_s, record)


#: The workloads this process built (:func:`memo_prepared`), by what they depend on.
_PREPARED: OrderedDict[Hashable, list[Prepared]] = OrderedDict()


def memo_prepared(
    path: str | None, parts: list[Any], make: Callable[[], list[Prepared]]
) -> list[Prepared]:
    """``make()``'s workloads, built once per process for the same ``parts`` (what they depend
    on, as JSON) and the file at ``path`` (its size and mtime: an edited file is read again);
    each caller gets the jobs (frozen) shared and its own records (a plan may add to them).
    An unreadable ``path``: built as usual (and refused there), not memoised."""
    stamp = file_stamp(path) if path else ()
    if stamp is None:
        return make()
    key = json.dumps([*parts, stamp], sort_keys=True, default=repr)
    return [replace(p, record=copy.deepcopy(p.record)) for p in memo(_PREPARED, key, make)]


def prepare_workloads(
    cfg: EvaluateConfig, cluster: ClusterSpec, need_elastic: bool
) -> list[Prepared]:
    """Every seed's workload, validated against the cluster, with its record (not for
    workload kind ``env``: see :func:`evaluation.env_runs.prepare_env_workloads`).  Built
    once per process for the same workload, seeds, cluster and elastic world (and the trace
    or workload file, by its size and mtime): a benchmark's cells of one scenario share them."""
    w = cfg.workload
    return memo_prepared(
        to_absolute_path(w.path) if w.path else None,
        [
            "workloads",
            asdict(w),
            list(cfg.seeds),
            asdict(cluster),
            asdict(cfg.elastic),
            need_elastic,
        ],
        lambda: _prepare(cfg, cluster, need_elastic),
    )


def _prepare(cfg: EvaluateConfig, cluster: ClusterSpec, need_elastic: bool) -> list[Prepared]:
    w = cfg.workload
    trace = load_trace(w, cluster.num_gpus) if w.kind in ("trace", "philly_builtin") else None
    return [_prepare_seed(cfg, cluster, trace, seed, need_elastic) for seed in cfg.seeds]


def paper_ms_per_s(w: WorkloadConfig) -> float | None:
    """Sim ms per paper second for an Ada-SRSF workload at its 1/100 scale (10), else None."""
    if w.kind not in ("ada_srsf_builtin", "ada_srsf_csv", "generator"):
        return None
    if w.iterations_scale != 1.0 or w.time_scale != 1.0:
        return None
    if w.kind == "generator" and w.arrival_window_ms != WorkloadConfig.arrival_window_ms:
        return None
    return 10.0


def build_cluster(c: ClusterConfig) -> ClusterSpec:
    return ClusterSpec(
        num_servers=c.num_servers,
        gpus_per_server=c.gpus_per_server,
        gpu_memory_mb=c.gpu_memory_mb,
        network=NetworkSpec(
            a_ms=c.network.a_ms,
            b_ms_per_mb=c.network.b_ms_per_mb,
            eta_ms_per_mb=c.network.eta_ms_per_mb,
        ),
    )


def sim_config(cfg: EvaluateConfig, seed: int) -> SimConfig:
    """``SimConfig.named(mode)`` with the run's fidelity, invariant checks, seed and engine
    (the config's flat keys, see :data:`envs.sim.config.FLAT_FIELDS`)."""
    return SimConfig.named(
        cfg.mode,
        fidelity=cfg.fidelity,
        check_invariants=cfg.check_invariants,
        seed=seed,
        engine=cfg.engine,
        max_wall_s=cfg.max_wall_s,
        progress_s=cfg.progress_s,
    )


#: ``elastic.speed`` -> the speed model's class.
ELASTIC_SPEEDS: dict[str, Callable[[], SpeedModel]] = {
    "analytical": AnalyticalSpeed,
    "measured": MeasuredSpeed,
}


def check_elastic_speed(e: ElasticConfig) -> None:
    """:class:`ConfigError` for an unknown ``elastic.speed`` (without building the model,
    which reads the measured speeds)."""
    if e.speed not in ELASTIC_SPEEDS:
        raise ConfigError(f"unknown elastic.speed {e.speed!r}; known: {sorted(ELASTIC_SPEEDS)}")


def elastic_speed(e: ElasticConfig) -> SpeedModel:
    """The elastic world's speed model (``elastic.speed``)."""
    check_elastic_speed(e)
    return ELASTIC_SPEEDS[e.speed]()


def elastic_cluster(c: ClusterSpec, e: ElasticConfig) -> ElasticCluster:
    """The elastic world's cluster: ``c.num_servers`` nodes (see :class:`ElasticConfig`)."""
    return ElasticCluster(
        num_nodes=c.num_servers,
        cpu_slots=c.gpus_per_server * e.cpu_slots_per_gpu,
        gpu_slots=c.gpus_per_server * e.gpu_slots_per_gpu,
        slot_s=e.slot_s,
    )
