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
    stack_colors,
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
    for spec, (kind, arg) in kinds.items():
        training_env = getattr(SCHEDULER_KINDS[kind], "training_env", None)
        if training_env is not None:
            policy_envs[spec] = training_env(arg)
    return resolve_env_config(cfg, policy_envs)


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
    cluster = build_cluster(cfg.cluster)
    env_config = None
    if env_mode(cfg, needs):
        env_config = _env_config(cfg, kinds)
        prepared = prepare_env_workloads(cfg, env_config)
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
        prepared = prepare_workloads(cfg, cluster, need_elastic="elastic" in needs)
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
        self.util_series: dict[str, tuple[np.ndarray, np.ndarray]] = {}
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
        if out.seed == self.plan.cfg.seeds[0]:
            self.util_series[out.scheduler] = (out.util_t, out.util)
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
    rows: list[dict[str, Any]]
    paired: list[dict[str, Any]]
    text: str


def _caption(plan: Plan) -> str:
    cfg, first, cluster = plan.cfg, plan.prepared[0], plan.cluster
    unit = (
        f"s of trace time (sim ms / {first.ms_per_s:g})"
        if first.ms_per_s != 1000.0
        else "s of simulated time"
    )
    if plan.env_config is not None:
        c = first.record["cluster"]
        world = (
            f"DL² env, {c['num_nodes']} nodes x {c['gpu_slots']} GPU slots (times / "
            f"{c['slot_s']:g} = slots, the unit of train.py's validation)"
        )
    else:
        world = f"cluster {cluster.num_servers}x{cluster.gpus_per_server} GPUs"
    caption = (
        f"workload `{cfg.workload.kind}` ({first.num_jobs} jobs; "
        f"{', '.join(p.name for p in plan.prepared)}), mode `{cfg.mode}`, "
        f"fidelity `{cfg.fidelity}`, {world}. "
        f"Times in {unit}"
        + ("; paper s = sim ms / 10 (1/100 of the paper's scale)." if plan.paper_div else ".")
        + " Slowdown = JCT / run time alone at the requested GPUs."
    )
    if (
        cfg.workload.kind not in ("trace", "philly_builtin", "dl2", "env")
        and cfg.workload.iterations_scale == 100.0
    ):
        caption += " At the paper's scale, simulated s are the paper's seconds."
    return caption


def summarise(plan: Plan, results: dict[tuple[str, int], dict[str, Any]]) -> Summary:
    """The summary rows (per run, then means over seeds), paired differences and the text."""
    cfg = plan.cfg
    # a seed where any scheduler left jobs unfinished at the env's horizon is censored: its
    # JCTs are lower bounds, so it is shown per run but left out of means and paired figures
    censored = {
        seed: [s for s in cfg.stacks if results[(s, seed)].get("censored_jobs", 0) > 0]
        for seed in cfg.seeds
    }
    seeds = [seed for seed in cfg.seeds if not censored[seed]]
    by_stack = {s: [results[(s, seed)] for seed in seeds] for s in cfg.stacks}
    rows: list[dict[str, Any]] = []
    means: list[dict[str, Any]] = []
    for stack in cfg.stacks:
        rows.extend(results[(stack, seed)] for seed in cfg.seeds)
        if len(seeds) > 1:
            means.append(mean_row(by_stack[stack], seeds))
            rows.append(means[-1])
    paired = paired_rows(by_stack, plan.baseline) if len(cfg.stacks) > 1 and seeds else []
    sections = [
        _caption(plan),
        "\n".join(workload_lines(plan.prepared)),
        markdown_table(rows, bool(plan.paper_div)),
    ]
    bad = {seed: stacks for seed, stacks in censored.items() if stacks}
    if bad:
        lines = [
            f"- seed {seed}: "
            + ", ".join(f"`{s}` {results[(s, seed)]['censored_jobs']:.0f} job(s)" for s in stacks)
            for seed, stacks in bad.items()
        ]
        sections.append(
            "**Censored runs**: jobs unfinished at the env's horizon "
            f"({plan.env_config.max_slots if plan.env_config else '-'} slots) count as finishing "
            "there, so these runs' JCTs are lower bounds (column `censored_jobs`). Their seeds "
            + ("are left out of the means and paired differences below" if seeds else
               "are all the seeds: no means or paired differences are given")
            + "; raise `workload.env.max_slots` to finish them.\n\n"
            + "\n".join(lines)
        )  # fmt: skip
    n = len(seeds)
    if means:
        sections.append(f"Mean ± 95% CI over {n} seeds (Student t):\n\n" + ci_table(means))
    if paired:
        sections.append(
            f"Paired difference vs `{plan.baseline}` on the same workload"
            + (f", mean ± 95% CI over {n} seeds" if n > 1 else " (1 seed: no CI)")
            + " (mean relative difference):\n\n"
            + paired_table(paired)
        )
    return Summary(rows, paired, "\n\n".join(sections))


def _write(
    plan: Plan, got: Collector, summary: Summary, run_dir: Path, record: dict[str, Any]
) -> None:
    """The tables, plots and ``run.json``, each written atomically, and ``summary.md`` last: it
    exists only when everything else was written."""
    cfg = plan.cfg
    write_csv(run_dir / "summary.csv", summary.rows)
    if summary.paired:
        write_csv(run_dir / "paired.csv", summary.paired)
    write_csv(run_dir / "utilisation.csv", got.util_rows)
    if cfg.plot:
        title = f"{cfg.workload.kind}: {plan.prepared[0].name}, mode {cfg.mode}"
        colors = stack_colors(list(cfg.stacks))  # one colour per scheduler in every plot
        jcts = {s: got.jcts[s] for s in cfg.stacks if s in got.jcts}  # the config's order
        series = {s: got.util_series[s] for s in cfg.stacks if s in got.util_series}
        plot_cdf(run_dir / "jct_cdf.png", jcts, f"JCT CDF: {title}", colors)
        plot_utilisation(
            run_dir / "utilisation.png",
            series,
            f"GPU utilisation, seed {cfg.seeds[0]}: {title}",
            colors,
        )
    write_text(run_dir / "run.json", json.dumps(record, indent=2, default=json_default) + "\n")
    write_text(run_dir / "summary.md", summary.text + "\n")


def _write_partial(plan: Plan, got: Collector, run_dir: Path, exc: RunsFailed) -> None:
    """What finished when some runs failed: ``summary.md`` (marked partial; statistics over
    the seeds every scheduler finished), ``summary.csv`` with every finished run, and
    ``failed.csv``; the per-job CSVs are already written."""
    cfg = plan.cfg
    complete = [k for k in cfg.seeds if all((s, k) in got.results for s in cfg.stacks)]
    head = (
        f"**PARTIAL**: {exc}. Finished runs: {len(got.results)} of {len(plan.tasks)}; "
        f"statistics over the seeds every scheduler finished: {complete or 'none'}."
    )
    text = head
    if complete:
        sub = replace(plan, cfg=replace(cfg, seeds=complete))
        text += "\n\n" + summarise(sub, got.results).text
    write_csv(run_dir / "summary.csv", list(got.results.values()))
    write_csv(
        run_dir / "failed.csv",
        [{"stack": s, "seed": k, "cause": c} for s, k, c in exc.failures],
    )
    write_text(run_dir / "summary.md", text + "\n")
    exc.args = (f"{exc}; the finished runs are in {run_dir / 'summary.md'}",)


class Interrupted(Exception):
    """Ctrl-C or SIGTERM during the runs: ``finished`` of ``total`` runs are kept in
    ``run_dir`` (a resume runs only the others)."""

    def __init__(self, finished: int, total: int, run_dir: Path, signal: str) -> None:
        self.finished, self.total, self.run_dir, self.signal = finished, total, run_dir, signal
        super().__init__(f"interrupted ({signal}): {finished} of {total} runs finished")


def evaluate(cfg: EvaluateConfig, run_dir: Path, config: dict[str, Any]) -> list[dict[str, Any]]:
    """Run every scheduler on every seed's workload; write the run directory; return the
    summary rows.  ``config`` is the resolved config recorded in ``run.json``.

    The directory is locked while the run lasts and refused when it holds an earlier run's
    files, unless ``cfg.resume`` (only the missing runs run) or ``cfg.overwrite``
    (:mod:`evaluation.rundir`); Ctrl-C / SIGTERM during the runs raise :class:`Interrupted`
    after the finished runs are recorded."""
    plan = make_plan(cfg)
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
        **provenance(),
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
