"""The evaluation: validate the config, build the workloads and tasks, run every scheduler on
every seed, and write the run directory (tables, per-job CSVs, plots, ``run.json``)."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from envs.files import write_text
from envs.sim import ClusterSpec, ConfigError, Fidelity
from evaluation.config import EvaluateConfig
from evaluation.kinds import SCHEDULER_KINDS, check_stacks
from evaluation.provenance import provenance
from evaluation.report import (
    ci_table,
    json_default,
    markdown_table,
    paired_table,
    plot_cdf,
    plot_utilisation,
    safe_name,
    seed_span,
    workload_lines,
    write_csv,
    write_jobs_csv,
)
from evaluation.rundir import RunDir
from evaluation.runner import RunsFailed, check_runner, run_all
from evaluation.runs import RunOutput, RunTask
from evaluation.stats import mean_row, paired_rows, result_row, run_metrics
from evaluation.workloads import (
    Prepared,
    build_cluster,
    check_workload_config,
    paper_ms_per_s,
    prepare_workloads,
    sim_config,
)

if TYPE_CHECKING:
    from envs.gym.factory import EnvConfig

__all__ = ["Interrupted", "Plan", "evaluate", "make_plan"]


@dataclass
class Plan:
    """A validated evaluation: what runs on which workloads."""

    cfg: EvaluateConfig
    kinds: dict[str, tuple[str, str]]  # spec -> (kind, arg)
    cluster: ClusterSpec
    prepared: list[Prepared]
    env_config: EnvConfig | None
    paper_div: float | None
    baseline: str
    workers: int
    tasks: list[RunTask] = field(default_factory=list)
    build_cpu_s: float = 0.0  # CPU seconds this process spent building the workloads
    #: ``run.json``'s provenance when the caller has it (the benchmark: once per process);
    #: ``None``: :func:`~evaluation.provenance.provenance` when the run directory is written
    provenance: dict[str, Any] | None = None


def _check_basics(cfg: EvaluateConfig) -> dict[str, tuple[str, str]]:
    kinds = check_stacks(cfg)
    if not cfg.seeds:
        raise ConfigError("seeds is empty; give at least one, e.g. seeds=[0]")
    if len(set(cfg.seeds)) != len(cfg.seeds):
        raise ConfigError(f"seeds has duplicates: {list(cfg.seeds)}")
    if cfg.workers < 0:
        raise ConfigError(f"workers must be >= 0 (0 = one per core), got {cfg.workers}")
    check_runner(cfg.runner)
    for seed in cfg.seeds:
        # a seed seeds its workload (numpy's default_rng: any integer >= 0) and its runs'
        # contention engine (SimConfig.seed: MT19937's init_by_array of 32-bit words)
        ok = isinstance(seed, (int, np.integer)) and not isinstance(seed, bool)
        if not (ok and 0 <= seed < 2**32):
            raise ConfigError(f"seeds: {seed!r} is out of range (0 <= seed < 2**32)")
        sim_config(cfg, seed)
    sample_seed = cfg.policy_eval.sample_seed  # numpy's default_rng([sample_seed, seed])
    if not (isinstance(sample_seed, (int, np.integer)) and sample_seed >= 0):
        raise ConfigError(
            f"policy_eval.sample_seed: {sample_seed!r} is out of range (sample_seed >= 0)"
        )
    if cfg.fidelity == Fidelity.FAST.value:
        print(
            "warning: fidelity=fast merges iterations; its avg JCT differs from full fidelity "
            "by 3.2% on average and up to 14.8% on the Ada-SRSF workloads "
            "(docs/experiments/fidelity.md). Report full-fidelity runs.",
            file=sys.stderr,
        )
    check_workload_config(cfg.workload)
    return kinds


def _needs(kinds: dict[str, tuple[str, str]], need: str) -> list[str]:
    return [s for s, (k, _) in kinds.items() if SCHEDULER_KINDS[k].needs == need]


def _env_config(cfg: EvaluateConfig, kinds: dict[str, tuple[str, str]]) -> EnvConfig:
    """The env of env mode (:mod:`evaluation.env_runs`); job-level schedulers cannot run."""
    from evaluation.env_runs import resolve_env_config

    bad = _needs(kinds, "workload")
    if bad:
        raise ConfigError(
            f"policy: schedulers, elastic.through_env and workload kind 'env' run every "
            f"scheduler through the DL² env, which has elastic jobs only; {bad} need "
            "job-level workloads (use elastic:<allocator> schedulers)"
        )
    policy_envs: dict[str, dict[str, Any] | None] = {}
    any_window: set[str] = set()
    for spec, (kind, arg) in kinds.items():
        training_env = getattr(SCHEDULER_KINDS[kind], "training_env", None)
        if training_env is not None:
            policy_envs[spec] = training_env(arg)
        free = getattr(SCHEDULER_KINDS[kind], "any_window", None)
        if free is not None and free(arg):
            any_window.add(spec)
    return resolve_env_config(cfg, policy_envs, any_window)


def _check_cojobs(cfg: EvaluateConfig, kinds: dict[str, tuple[str, str]], needs: set[str]) -> None:
    """Grouper's cojobs (workload kind ``grouper``) and ``grouper:`` schedulers go together:
    neither runs with the other worlds' workloads or schedulers."""
    grouper = cfg.workload.kind == "grouper"
    if grouper and needs != {"cojobs"}:
        others = [s for s, (k, _) in kinds.items() if SCHEDULER_KINDS[k].needs != "cojobs"]
        raise ConfigError(
            f"workload kind 'grouper' (Grouper's cojobs, its own flow-level simulator) runs "
            f"grouper:<policy> schedulers only; {others} act in another world"
        )
    if not grouper and "cojobs" in needs:
        raise ConfigError(
            f"{_needs(kinds, 'cojobs')} run Grouper's cojobs only (workload=grouper), not "
            f"workload kind {cfg.workload.kind!r}"
        )


def _resolved_arg(kind: str, arg: str) -> str:
    """The argument a run gets: e.g. a policy path made absolute here, where the command
    started, so that a worker (or a Ray node) elsewhere finds the same file."""
    resolve = getattr(SCHEDULER_KINDS[kind], "resolve", None)
    return str(resolve(arg)) if resolve is not None else arg


def make_plan(cfg: EvaluateConfig) -> Plan:
    """Validate everything and build every seed's workload before the first simulation."""
    from evaluation.env_runs import env_mode, prepare_env_workloads

    kinds = _check_basics(cfg)
    needs = {SCHEDULER_KINDS[k].needs for k, _ in kinds.values()}
    _check_cojobs(cfg, kinds, needs)
    cluster = build_cluster(cfg.cluster)
    env_config = None
    if env_mode(cfg, needs):
        env_config = _env_config(cfg, kinds)
        c0 = time.process_time()
        prepared = prepare_env_workloads(cfg, env_config)
        build = time.process_time() - c0
        last = max((j.arrival_slot for p in prepared for j in p.elastic_jobs or ()), default=0)
        if env_config.trace and cfg.workload.env.max_slots is None:
            # a real trace can span months: the horizon runs from its last arrival, so that
            # the default leaves every job the same time to finish as on a generator workload
            fit = int(last) + int(env_config.max_slots)
            if fit > env_config.max_slots:  # the jobs stay; only the recorded horizon changes
                env_config = replace(env_config, max_slots=fit)
                for p in prepared:
                    p.record["env"] = env_config.as_dict()
    else:
        if cfg.workload.kind == "dl2" and "workload" in needs:
            raise ConfigError(
                f"workload kind 'dl2' gives elastic jobs only; {_needs(kinds, 'workload')} need "
                "job-level workloads (use elastic:<allocator> schedulers)"
            )
        c0 = time.process_time()
        prepared = prepare_workloads(cfg, cluster, need_elastic="elastic" in needs)
        build = time.process_time() - c0
        for kind, arg in kinds.values():  # a kind that reads the workloads checks them now
            check_workloads = getattr(SCHEDULER_KINDS[kind], "check_workloads", None)
            if check_workloads is not None:
                check_workloads(arg, prepared, cluster)
    plan = Plan(
        cfg=cfg,
        kinds=kinds,
        cluster=cluster,
        prepared=prepared,
        env_config=env_config,
        paper_div=paper_ms_per_s(cfg.workload),
        baseline=cfg.baseline or cfg.stacks[0],
        workers=cfg.workers or (os.cpu_count() or 1),
        build_cpu_s=build,
    )
    plan.tasks = [
        RunTask(
            spec,
            kinds[spec][0],
            _resolved_arg(*kinds[spec]),
            p,
            cluster,
            sim_config(cfg, p.seed),
            cfg.elastic,
            env_config,
            cfg.policy_eval,
        )
        for p in prepared
        for spec in cfg.stacks
    ]
    return plan


class Collector:
    """Receives each run's output (in completion order): writes its per-job CSV and keeps its
    summary row, JCTs, utilisation series and ``run.json`` entry."""

    def __init__(self, plan: Plan, run_dir: Path, records: RunDir | None = None) -> None:
        self.plan = plan
        self.run_dir = run_dir
        self.records = records
        self.by_seed = {p.seed: p for p in plan.prepared}
        self.results: dict[tuple[str, int], dict[str, Any]] = {}
        self.jcts: dict[str, list[np.ndarray]] = {s: [] for s in plan.cfg.stacks}
        # per seed, per scheduler: (bin edges, utilisation), for utilisation.png's panels
        self.util_series: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = {}
        self.util_rows: list[dict[str, Any]] = []
        self.runs: dict[tuple[str, int], dict[str, Any]] = {}

    def __call__(self, out: RunOutput) -> None:
        key = (out.scheduler, out.seed)
        prepared = self.by_seed[out.seed]
        jobs_csv = f"jobs_{safe_name(out.scheduler)}_seed{out.seed}.csv"
        write_jobs_csv(self.run_dir / jobs_csv, out)
        if self.records is not None:
            self.records.record(out)
        metrics = run_metrics(out)
        self.results[key] = result_row(out, metrics, prepared.ms_per_s, self.plan.paper_div)
        self.jcts[out.scheduler].append(out.jct_s)
        self.util_series.setdefault(out.seed, {})[out.scheduler] = (out.util_t, out.util)
        self.util_rows.extend(
            {"stack": out.scheduler, "seed": out.seed, "t0_s": float(a), "t1_s": float(b),
             "gpu_util": float(u)}
            for a, b, u in zip(out.util_t[:-1], out.util_t[1:], out.util, strict=True)
        )  # fmt: skip
        self.runs[key] = {
            "stack": out.scheduler,
            "seed": out.seed,
            "workload": prepared.name,
            **out.info,
            "summary": metrics,
            "jobs_csv": jobs_csv,
        }
        unfinished = out.info.get("episode", {}).get("unfinished", 0)
        if unfinished:
            print(
                f"warning: {out.scheduler} seed {out.seed}: {unfinished} job(s) unfinished at "
                "the env's horizon count as finishing there (JCTs are lower bounds)",
                file=sys.stderr,
            )


@dataclass
class Summary:
    """``rows``: the per-run rows, then each scheduler's mean row (what :func:`evaluate`
    returns); ``per_run`` and ``means`` the same rows apart (``summary.csv`` and
    ``summary_means.csv``)."""

    rows: list[dict[str, Any]]
    paired: list[dict[str, Any]]
    text: str
    per_run: list[dict[str, Any]] = field(default_factory=list)
    means: list[dict[str, Any]] = field(default_factory=list)


def _caption(plan: Plan) -> str:
    cfg, first, cluster = plan.cfg, plan.prepared[0], plan.cluster
    if plan.env_config is not None:
        c = first.record["cluster"]
        world = f"DL² env, {c['num_nodes']} nodes x {c['gpu_slots']} GPU slots"
    elif first.cojobs is not None:
        w = first.cojobs
        return (
            f"workload `grouper` ({len(w.cojobs)} cojobs, {len(w.jobs)} jobs; {w.name}), "
            f"Grouper's flow-level simulator, {w.num_hosts} hosts. Rows are cojob stages: "
            "JCT = stage completion time (SCT, from the cojob's arrival), slowdown = SCT / the "
            "stage's SCT with the cojob alone under FS."
        )
    else:
        world = f"cluster {cluster.num_servers}x{cluster.gpus_per_server} GPUs"
    return (
        f"workload `{cfg.workload.kind}` ({first.num_jobs} jobs; "
        f"{', '.join(p.name for p in plan.prepared)}), mode `{cfg.mode}`, "
        f"fidelity `{cfg.fidelity}`, {world}. "
        "Slowdown = JCT / run time alone at the requested GPUs."
    )


def _time_unit(plan: Plan) -> str:
    """What one ``s`` of the tables and plots is."""
    first = plan.prepared[0]
    if first.ms_per_s != 1000.0:
        return f"seconds of trace time (sim ms / {first.ms_per_s:g})"
    engine, slot = _util_kinds(plan)
    how = []
    if engine or not slot:
        how.append("the contention engine's sim ms / 1000" if slot else "sim ms / 1000")
    if slot:
        slot_s = (
            first.record["cluster"]["slot_s"]
            if plan.env_config is not None
            else plan.cfg.elastic.slot_s
        )
        how.append(f"{'DL² slot world: ' if engine else ''}slots x {slot_s:g} s")
    return f"seconds of simulated time ({'; '.join(how)})"


def _units_line(plan: Plan) -> str:
    """The one place that says what every time column and axis is in."""
    cfg, first = plan.cfg, plan.prepared[0]
    line = f"**Units**: `s` (tables, plot axes) = {_time_unit(plan)}"
    if plan.paper_div:
        line += (
            '; `paper s` = s x 100 = sim ms / 10, the Ada-SRSF paper\'s "seconds" (this '
            "workload runs 1/100 of the paper's iterations and arrival times, as the paper's "
            "reference code does)"
        )
    elif (
        cfg.workload.kind not in ("trace", "philly_builtin", "dl2", "env")
        and cfg.workload.iterations_scale == 100.0
    ):
        line += "; at the paper's scale, simulated s are the paper's seconds"
    if plan.env_config is not None:
        c = first.record["cluster"]
        line += f"; `slots` = s / {c['slot_s']:g}, the unit of train.py's validation"
    return line + "."


#: what ``gpu_util_pct`` measures, by the scheduler kind's world
_ENGINE_KINDS = ("stack", "contention")
_SLOT_KINDS = ("elastic", "policy")


def _util_kinds(plan: Plan) -> tuple[list[str], list[str]]:
    """The schedulers whose utilisation is compute work (the contention engine) and those
    whose utilisation is GPUs allocated (DL²'s slot world); ``bound:`` has none."""
    kind = {s: plan.kinds[s][0] for s in plan.cfg.stacks}
    return (
        [s for s in plan.cfg.stacks if kind[s] in _ENGINE_KINDS],
        [s for s in plan.cfg.stacks if kind[s] in _SLOT_KINDS],
    )


def _util_ylabel(plan: Plan) -> str:
    engine, slot = _util_kinds(plan)
    if slot and not engine:
        return "GPUs allocated (% of the cluster's GPU slots)"
    if engine and not slot:
        return "GPU compute work (% of the cluster's GPUs)"
    return "GPU utilisation (% of the cluster's GPUs; see note)"


def _util_note(plan: Plan, markdown: bool = True) -> str:
    """What `GPU util %` and utilisation.png measure, and why an allocation-hungry elastic
    scheduler (DRF) shows far more of it than a better one (Optimus)."""
    engine, slot = _util_kinds(plan)
    tick = "`" if markdown else ""
    parts = []
    if engine:
        parts.append(
            f"for {', '.join(tick + s + tick for s in engine)} (the contention engine), the "
            "jobs' GPU compute work (workers x iterations x forward+backward time, spread "
            "evenly over each job's run) / (cluster GPUs x time); the work is fixed per job, "
            "so a shorter makespan gives a higher mean, and above 100% means GPUs "
            "time-shared by several workers"
        )
    if slot:
        parts.append(
            f"for {', '.join(tick + s + tick for s in slot)} (DL²'s slot world), the GPU "
            "slots allocated at each slot's start / the cluster's GPU slots, averaged over "
            "the run's slots. An allocated GPU counts whether or not it speeds its job up: "
            "DRF, FIFO, SRTF and Tetris give a job worker+PS bundles up to its caps "
            "(max_workers / max_ps) while the cluster has room, but the measured speed of "
            "every model (envs/sim/data/dl2/measured_speed.csv) peaks at 1-5 workers and "
            "falls by a third to two thirds at 11-23, so much of that allocation does no "
            "useful work; Optimus adds a worker only while it shortens the job, so it can hold "
            "far fewer GPUs and still finish jobs sooner. Compare schedulers by JCT, not by "
            "this figure"
        )
    if not parts:
        return ""
    head = "**GPU util %** (table) and utilisation.png measure " if markdown else "Measured: "
    return head + "; ".join(parts) + "."


def summarise(plan: Plan, results: dict[tuple[str, int], dict[str, Any]]) -> Summary:
    """The summary rows (per run, then means over seeds), paired differences and the text."""
    cfg = plan.cfg
    # a seed where a scheduler left jobs unfinished at the env's horizon is censored: its
    # JCTs are lower bounds, so it is shown per run but left out of means and paired figures;
    # a scheduler censored on every seed (a policy that never finishes its jobs) is left out
    # of them instead, so that it does not take every other scheduler's statistics with it
    censored = {
        seed: [s for s in cfg.stacks if results[(s, seed)].get("censored_jobs", 0) > 0]
        for seed in cfg.seeds
    }
    always = [s for s in cfg.stacks if all(s in censored[k] for k in cfg.seeds)]
    kept = [s for s in cfg.stacks if s not in always] if len(always) < len(cfg.stacks) else []
    seeds = [seed for seed in cfg.seeds if kept and not set(censored[seed]) & set(kept)]
    by_stack = {s: [results[(s, seed)] for seed in seeds] for s in kept}
    baseline = plan.baseline if plan.baseline in kept else (kept[0] if kept else plan.baseline)
    rows: list[dict[str, Any]] = []
    per_run: list[dict[str, Any]] = []
    means: list[dict[str, Any]] = []
    for stack in cfg.stacks:
        own = [results[(stack, seed)] for seed in cfg.seeds]
        rows.extend(own)
        per_run.extend(own)
        if len(seeds) > 1 and stack in by_stack:
            means.append(mean_row(by_stack[stack], seeds))
            rows.append(means[-1])
    paired = paired_rows(by_stack, baseline) if len(kept) > 1 and seeds else []
    sections = [
        _caption(plan) + "\n" + _units_line(plan),
        "\n".join(workload_lines(plan.prepared)),
        markdown_table(rows, bool(plan.paper_div)),
    ]
    note = _util_note(plan)
    if note:
        sections.append(note)
    bad = {seed: stacks for seed, stacks in censored.items() if stacks}
    if bad:
        lines = [
            f"- seed {seed}: "
            + ", ".join(f"`{s}` {results[(s, seed)]['censored_jobs']:.0f} job(s)" for s in stacks)
            for seed, stacks in bad.items()
        ]
        left_out = [k for k in cfg.seeds if k not in seeds]
        clauses = []
        if always and seeds:
            names = ", ".join(f"`{s}`" for s in always)
            clauses.append(f"{names} (censored on every seed): left out of the means and paired "
                           "differences below")  # fmt: skip
        if left_out and seeds:
            clauses.append(f"seeds {left_out}: left out of them")
        fate = "; ".join(clauses) if seeds else "no means or paired differences are given"
        sections.append(
            "**Censored runs**: jobs unfinished at the env's horizon "
            f"({plan.env_config.max_slots if plan.env_config else '-'} slots) count as finishing "
            f"there, so these runs' JCTs are lower bounds (column `censored_jobs`): {fate}"
            + (f"; differences are against `{baseline}`, the baseline being censored"
               if seeds and baseline != plan.baseline else "")
            + "; raise `workload.env.max_slots` to finish them.\n\n"
            + "\n".join(lines)
        )  # fmt: skip
    n = len(seeds)
    if means:
        sections.append(f"Mean ± 95% CI over {n} seeds (Student t):\n\n" + ci_table(means))
    if paired:
        sections.append(
            f"Paired difference vs `{baseline}` on the same workload"
            + (f", mean ± 95% CI over {n} seeds" if n > 1 else " (1 seed: no CI)")
            + " (mean relative difference):\n\n"
            + paired_table(paired)
        )
    return Summary(rows, paired, "\n\n".join(sections), per_run, means)


def _plot_title(plan: Plan) -> str:
    """What every plot shows: the workload and the world (the seeds: per plot)."""
    cfg = plan.cfg
    if plan.env_config is not None:
        c = plan.prepared[0].record["cluster"]
        world = f"DL² env, {c['num_nodes']} nodes x {c['gpu_slots']} GPU slots"
    else:
        world = f"{plan.cluster.num_servers}x{plan.cluster.gpus_per_server} GPUs"
    text = f"workload {cfg.workload.kind}, {world}"
    if cfg.mode != "correct":  # the default model goes unsaid; another is named
        text += f", simulator mode {cfg.mode}"
    if cfg.fidelity != "full":
        text += f", fidelity {cfg.fidelity}"
    return text


def _util_plot_note(plan: Plan) -> str:
    engine, slot = _util_kinds(plan)
    parts = []
    if engine:
        parts.append(
            "contention-engine schedulers: jobs' GPU compute work spread over each job's run "
            "/ cluster GPUs (above 100%: GPUs time-shared)"
        )
    if slot:
        parts.append(
            "elastic/policy schedulers: GPU slots allocated / cluster GPU slots, useful or not "
            "(measured speeds fall beyond 1-5 workers; see summary.md)"
        )
    return "; ".join(parts)


def _plots(plan: Plan, got: Collector, run_dir: Path) -> None:
    """``jct_cdf.png`` (jobs of every finished seed pooled) and ``utilisation.png`` (one
    panel per seed), schedulers in the config's order, styled by name."""
    cfg = plan.cfg
    title = _plot_title(plan)
    jcts = {s: got.jcts[s] for s in cfg.stacks if got.jcts.get(s)}
    seeds = sorted({k for (s, k) in got.results if s in jcts})
    plot_cdf(run_dir / "jct_cdf.png", jcts, f"JCT CDF: {title}", seeds=seeds, unit="s")
    series = {
        seed: {s: got.util_series[seed][s] for s in cfg.stacks if s in got.util_series[seed]}
        for seed in cfg.seeds
        if seed in got.util_series
    }
    n = len(series)
    plot_utilisation(
        run_dir / "utilisation.png",
        series,
        f"GPU utilisation over time: {title}\n"
        + (f"one panel per seed ({seed_span(list(series))})" if n > 1 else
           f"seed {seed_span(list(series))}"),
        ylabel=_util_ylabel(plan),
        note=_util_plot_note(plan),
    )  # fmt: skip


def _write(
    plan: Plan, got: Collector, summary: Summary, run_dir: Path, record: dict[str, Any]
) -> None:
    """The tables, plots and ``run.json``, each written atomically, and ``summary.md`` last: it
    exists only when everything else was written."""
    cfg = plan.cfg
    write_csv(run_dir / "summary.csv", summary.per_run)
    if summary.means:
        write_csv(run_dir / "summary_means.csv", summary.means)
    if summary.paired:
        write_csv(run_dir / "paired.csv", summary.paired)
    write_csv(run_dir / "utilisation.csv", got.util_rows)
    if cfg.plot:
        _plots(plan, got, run_dir)
    write_text(run_dir / "run.json", json.dumps(record, indent=2, default=json_default) + "\n")
    write_text(run_dir / "summary.md", summary.text + "\n")


def _write_partial(plan: Plan, got: Collector, run_dir: Path, exc: RunsFailed) -> None:
    """What finished when some runs failed: ``summary.md`` (marked partial), ``summary.csv``
    with every finished run, ``summary_means.csv``, ``failed.csv``, and the plots of what
    finished; the per-job CSVs are already written.

    A scheduler that failed on every seed is listed with its causes and left out; the
    statistics (means, CIs, paired differences) are over the other schedulers and the seeds
    all of them finished, so that one broken scheduler never hides the others' results.  When
    the baseline is the one left out, differences are taken against the first scheduler left."""
    cfg = plan.cfg
    causes: dict[str, list[str]] = {}
    for s, k, c in exc.failures:
        causes.setdefault(s, []).append(f"seed {k}: {c}")
    dead = [s for s in cfg.stacks if not any((s, k) in got.results for k in cfg.seeds)]
    alive = [s for s in cfg.stacks if s not in dead]
    complete = [k for k in cfg.seeds if alive and all((s, k) in got.results for s in alive)]
    head = [
        f"**PARTIAL**: {exc}. Finished runs: {len(got.results)} of {len(plan.tasks)}; "
        f"statistics over {', '.join(f'`{s}`' for s in alive) or 'no scheduler'} on the seeds "
        f"all of them finished: {complete or 'none'}."
    ]
    if dead:
        head.append(
            "Failed on every seed (left out of the statistics):\n\n"
            + "\n".join(f"- `{s}`: {'; '.join(causes.get(s, ['no result']))}" for s in dead)
        )
    partly = [s for s in alive if s in causes]
    if partly:
        head.append(
            "Failed on some seeds (those seeds are left out of the statistics):\n\n"
            + "\n".join(f"- `{s}`: {'; '.join(causes[s])}" for s in partly)
        )
    summary = None
    if complete:
        baseline = plan.baseline if plan.baseline in alive else alive[0]
        if baseline != plan.baseline:
            head.append(
                f"The baseline `{plan.baseline}` failed: paired differences are against "
                f"`{baseline}`."
            )
        sub = replace(plan, cfg=replace(cfg, stacks=alive, seeds=complete), baseline=baseline)
        summary = summarise(sub, got.results)
    text = "\n\n".join(head) + ("\n\n" + summary.text if summary is not None else "")
    order = [(s, k) for s in cfg.stacks for k in cfg.seeds]  # as a full run's summary.csv
    write_csv(run_dir / "summary.csv", [got.results[key] for key in order if key in got.results])
    if summary is not None and summary.means:
        write_csv(run_dir / "summary_means.csv", summary.means)
    if summary is not None and summary.paired:
        write_csv(run_dir / "paired.csv", summary.paired)
    write_csv(
        run_dir / "failed.csv",
        [{"stack": s, "seed": k, "cause": c} for s, k, c in exc.failures],
    )
    write_csv(run_dir / "utilisation.csv", got.util_rows)
    if cfg.plot and got.results:
        _plots(plan, got, run_dir)
    write_text(run_dir / "summary.md", text + "\n")
    exc.args = (f"{exc}; the finished runs are in {run_dir / 'summary.md'}",)


class Interrupted(Exception):
    """Ctrl-C or SIGTERM during the runs: ``finished`` of ``total`` runs are kept in
    ``run_dir`` (a resume runs only the others)."""

    def __init__(self, finished: int, total: int, run_dir: Path, signal: str) -> None:
        self.finished, self.total, self.run_dir, self.signal = finished, total, run_dir, signal
        super().__init__(f"interrupted ({signal}): {finished} of {total} runs finished")


def evaluate(
    cfg: EvaluateConfig, run_dir: Path, config: dict[str, Any], plan: Plan | None = None
) -> list[dict[str, Any]]:
    """Run every scheduler on every seed's workload; write the run directory; return the
    summary rows.  ``config`` is the resolved config recorded in ``run.json``; ``plan``:
    :func:`make_plan` of ``cfg`` when the caller already made it (the benchmark checks each
    cell with it first), else made here.

    The directory is locked while the run lasts and refused when it holds an earlier run's
    files, unless ``cfg.resume`` (only the missing runs run) or ``cfg.overwrite``
    (:mod:`evaluation.rundir`); Ctrl-C / SIGTERM during the runs raise :class:`Interrupted`
    after the finished runs are recorded."""
    if plan is None:
        plan = make_plan(cfg)
    elif plan.cfg is not cfg:
        raise ValueError("evaluate: the plan is not of this config")
    records = RunDir(run_dir, config, cfg.resume, cfg.overwrite).open()
    try:
        return _evaluate(plan, run_dir, config, records)
    finally:
        records.close()


def _evaluate(
    plan: Plan, run_dir: Path, config: dict[str, Any], records: RunDir
) -> list[dict[str, Any]]:
    cfg = plan.cfg
    t_start = time.perf_counter()
    got = Collector(plan, run_dir, records)
    kept = records.finished(plan.tasks)
    for i in sorted(kept):  # in plan order, as a fresh run's results would be collected
        got(kept[i])
    todo = [t for i, t in enumerate(plan.tasks) if i not in kept]
    try:
        run_all(todo, plan.workers, got, cfg.runner)
    except RunsFailed as exc:
        _write_partial(plan, got, run_dir, exc)
        raise
    except KeyboardInterrupt as exc:  # what is on disk, whichever instant the signal came
        saved = records.saved(plan.tasks)
        raise Interrupted(saved, len(plan.tasks), run_dir, str(exc) or "SIGINT") from None
    summary = summarise(plan, got.results)
    record = {
        "config": config,
        "run_dir": str(run_dir),
        "seeds": list(cfg.seeds),
        "stacks": list(cfg.stacks),
        "baseline": plan.baseline,
        "workers": plan.workers,
        **(plan.provenance if plan.provenance is not None else provenance()),
        "cluster": asdict(plan.cluster),
        **({"env": plan.env_config.as_dict()} if plan.env_config is not None else {}),
        "workloads": {str(p.seed): p.record for p in plan.prepared},
        "runs": [got.runs[(s, seed)] for seed in cfg.seeds for s in cfg.stacks],
        "wall_s_total": time.perf_counter() - t_start,
        **({"resumed": {"kept_runs": len(kept)}} if cfg.resume else {}),
    }
    _write(plan, got, summary, run_dir, record)
    print(summary.text)
    print()
    print(f"run dir: {run_dir}")
    return summary.rows
