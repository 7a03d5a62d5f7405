"""Running a suite: every applicable scheduler on every selected scenario, each cell cached.

A cell is one (scenario, scheduler): its runs on the scenario's seeds, made by
:func:`evaluation.pipeline.evaluate` with ``stacks=[scheduler]`` into its own run directory

    <out>/<suite>-<suite version>/<code version>/<scenario>/<scheduler>/

with ``resume=true``, so a killed run resumes where it stopped (the pipeline keeps every
finished run), a rerun reads the finished cells and runs nothing, and adding a scheduler runs
only its cells.  One directory per scheduler, not one per scenario: in the DL² env a
``policy:`` scheduler's training env is the base of the scenario's env (the scenario pins the
world: setting, nodes, backlog, trace), and each scheduler's runs stay independent of which
others are on the board.

Before running, each scheduler is checked alone in the scenario
(:func:`evaluation.pipeline.make_plan` on the cell's config): a :class:`ConfigError` (a policy
trained for another window or cluster, a scheduler of the other world) makes the cell ``n/a``
with the reason's first line, cached in ``na.txt``.  A cell whose runs fail is ``failed`` with
the cause; neither stops the board.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import functools
import io
import json
import math
import os
import resource
import shutil
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envs.files import die_with_parent
from envs.provenance import code_version
from envs.sim.errors import ConfigError, DlschedError
from evaluation.bench.scenarios import SUITES, WORLDS, Scenario, suite_version
from evaluation.report import safe_name

__all__ = [
    "POLICIES",
    "BenchError",
    "BenchResult",
    "Cell",
    "cell_dir",
    "cpu_now",
    "cpu_record",
    "default_schedulers",
    "resolve_schedulers",
    "run_suite",
    "select_scenarios",
    "suite_dir",
    "world_of",
]

#: The released policies (``policies/<name>/``) of the source checkout.
POLICIES = Path(__file__).resolve().parents[2] / "policies"
#: The file a cell's n/a reason is cached in.
NA_FILE = "na.txt"


class BenchError(Exception):
    """Bad input to the benchmark (an unknown scenario, scheduler or suite): one line."""


@dataclass
class Cell:
    """One (scenario, scheduler): ``ok`` with avg JCT (s) per seed, ``n/a`` or ``failed`` with
    the reason; ``ran``: runs this invocation made (0 when every run came from the cache)."""

    scenario: str
    scheduler: str
    status: str
    reason: str = ""
    jct: dict[int, float] = field(default_factory=dict)
    ran: int = 0
    cpu_s: float = 0.0
    notes: list[str] = field(default_factory=list)
    censored: int = 0  # jobs unfinished at the env's horizon, over the seeds (JCT lower bounds)
    #: this invocation's CPU seconds in the cell's process, by :data:`PHASES`
    phases: dict[str, float] = field(default_factory=dict)


#: Where a cell's CPU goes: checking it and composing its config (``plan``), building its
#: workloads (``workloads``), its runs' simulations or episodes (``runs``: each run's
#: ``cpu_s`` in ``run.json``), and the pipeline's collecting and writing of the run directory
#: (``write``: per-job CSVs, tables, ``run.json``).
PHASES = ("plan", "workloads", "runs", "write")


@dataclass
class BenchResult:
    suite: str
    version: str
    code: str
    root: Path
    scenarios: list[Scenario]
    schedulers: list[str]
    cells: dict[tuple[str, str], Cell]
    ran: int
    cpu_s: float
    wall_s: float
    phases: dict[str, float] = field(default_factory=dict)  # the cells', summed (Cell.phases)


def select_scenarios(
    suite: str,
    only: Sequence[str] = (),
    exclude: Sequence[str] = (),
    world: str | None = None,
) -> list[Scenario]:
    """The suite's scenarios, only ``only`` (if given), not ``exclude``, and only ``world``'s
    (if given), in suite order."""
    if suite not in SUITES:
        raise BenchError(f"unknown suite {suite!r}; known: {', '.join(SUITES)}")
    if world is not None and world not in WORLDS:
        raise BenchError(f"--world: {world!r} is not one of {', '.join(WORLDS)}")
    scenarios = list(SUITES[suite])
    names = [s.name for s in scenarios]
    for flag, given in (("--only", only), ("--exclude", exclude)):
        unknown = [n for n in given if n not in names]
        if unknown:
            raise BenchError(
                f"{flag}: unknown scenario(s) {', '.join(unknown)} in suite {suite}; "
                f"choices: {', '.join(names)}"
            )
    keep = set(only) if only else set(names)
    picked = [s for s in scenarios if s.name in keep and s.name not in set(exclude)]
    picked = [s for s in picked if world is None or s.world == world]
    if not picked:
        raise BenchError("no scenario selected (--only / --exclude / --world leave none)")
    return picked


def _released() -> list[str]:
    """Every released policy as a scheduler spec, by the env its policy file names
    (:func:`agents.policy_file.read_meta`): ``contention:`` for ``Contention-v0``'s,
    ``policy:`` for the others (``Cluster-v0`` networks and ``ClusterPlan-v0`` plan
    policies, which act in the DL² env)."""
    from agents.policy_file import CONTENTION_ID, read_meta

    out: list[str] = []
    if not POLICIES.is_dir():
        return out
    for d in sorted(p for p in POLICIES.iterdir() if p.is_dir()):
        rel = d.relative_to(POLICIES.parent)
        try:
            env_id = read_meta(d)["layout"]["env_id"]
        except ConfigError:  # no policy file in it
            continue
        out.append(f"{'contention' if env_id == CONTENTION_ID else 'policy'}:{rel}")
    return out


def _blank() -> Any:
    from evaluation.config import EvaluateConfig

    return EvaluateConfig()


def world_of(spec: str) -> str:
    """The world a scheduler acts in: ``contention`` for kinds that need job-level workloads
    (stacks, ``contention:``, ``bound:``), ``grouper`` for Grouper's cojob policies
    (``grouper:``), else ``elastic``."""
    from evaluation.kinds import SCHEDULER_KINDS, parse_scheduler

    kind, _ = parse_scheduler(spec)
    needs = SCHEDULER_KINDS[kind].needs
    return {"workload": "contention", "cojobs": "grouper"}.get(needs, "elastic")


def default_schedulers() -> list[str]:
    """Every registered elastic allocator, every named contention-engine stack,
    every registered Contention-v0 rule (``contention:srsf``, ``contention:exclusive``, ...),
    every released policy, and every network policy of Grouper's simulator (``grouper:``)."""
    from envs.gym.contention_env import CONTENTION_TEACHERS
    from envs.sim.elastic.allocators import ALLOCATORS
    from envs.sim.grouper import POLICIES as GROUPER_POLICIES
    from envs.sim.stacks import STACKS, TIRESIAS_STACKS

    return [
        *(f"elastic:{name}" for name in ALLOCATORS),
        *STACKS,
        *TIRESIAS_STACKS,
        *(f"contention:{name}" for name in CONTENTION_TEACHERS),
        *_released(),
        *(f"grouper:{name}" for name in GROUPER_POLICIES),
    ]


def resolve_schedulers(names: Sequence[str]) -> list[str]:
    """Scheduler specs from user names: a spec as ``evaluate.py`` takes it, a bare allocator
    name (``drf`` -> ``elastic:drf``) or a path to a policy (``policy:`` or ``contention:`` by
    its kind).  An unknown name is a :class:`BenchError` naming it."""
    from envs.sim.elastic.allocators import ALIASES, ALLOCATORS
    from evaluation.kinds import SCHEDULER_KINDS, check_stacks, parse_scheduler

    out: list[str] = []
    for name in names:
        spec = name
        kind, _ = parse_scheduler(name)
        if kind == "stack" and ":" not in name and name.lower() in {*ALLOCATORS, *ALIASES}:
            spec = f"elastic:{name}"
        elif kind == "stack" and Path(name).exists():
            try:
                SCHEDULER_KINDS["policy"].check(name, _blank())
                spec = f"policy:{name}"
            except ConfigError:
                spec = f"contention:{name}"
        try:
            check_stacks(_with_stacks([spec]))
        except DlschedError as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise BenchError(
                f"--schedulers: unknown or unusable scheduler {name!r}: {first}"
            ) from None
        if spec not in out:
            out.append(spec)
    return out


def _with_stacks(stacks: list[str]) -> Any:
    cfg = _blank()
    cfg.stacks = stacks
    return cfg


def suite_dir(out: Path, suite: str, code: str | None = None) -> Path:
    """``<out>/<suite>-<version>/<code version>``: where a suite's cells and board go."""
    version = suite_version(SUITES[suite])
    return Path(out) / f"{suite}-{version}" / (code or code_version())


def cell_dir(root: Path, scenario: str, scheduler: str) -> Path:
    return root / scenario / safe_name(scheduler)


def _print(line: str) -> None:
    print(line, flush=True)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def cpu_now() -> float:
    """User + system CPU seconds of this process and of its children that have ended (the
    cell workers, git): what ``/usr/bin/time`` reports of a command."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def cpu_record(
    result: BenchResult, start_s: float, board_s: float, total_s: float, on_ray: bool = False
) -> dict[str, float | None]:
    """Where a command's CPU went (``cpu.json`` of ``python -m evaluation.bench``): ``total``
    (:func:`cpu_now` at its end), ``start`` (interpreter start-up and imports before the
    suite), each of :data:`PHASES` summed over the cells run now, ``board`` (the leaderboard's
    tables and files), ``other`` (the rest: listing the schedulers, checking the cells that
    are n/a, reading cached cells, the cell workers' start-up), and ``overhead`` = 1 -
    ``runs`` / ``total``, the share not spent simulating (of a local run: with ``runner=ray``
    the runs' CPU is the cluster's, not the command's: ``on_ray`` makes ``overhead`` ``None``,
    and ``runs`` the CPU the runs recorded on the cluster).  Seconds, but ``overhead``."""
    phases = {k: float(result.phases.get(k, 0.0)) for k in PHASES}
    known = start_s + board_s + sum(phases.values())
    out: dict[str, float | None] = {"total": total_s, "start": start_s, **phases, "board": board_s}
    out["other"] = max(total_s - known, 0.0)
    out["overhead"] = 1.0 - phases["runs"] / total_s if total_s > 0 else math.nan
    if on_ray:  # the runs' CPU was spent on the cluster, not in this command
        out["overhead"] = None
    return out


def _read_cached(d: Path, seeds: Sequence[int]) -> tuple[dict[int, float], int] | None:
    """The avg JCT per seed of a finished cell directory and its censored jobs, or ``None``
    if it is not finished (or unreadable: then it is recomputed, never used)."""
    summary, md, record = d / "summary.csv", d / "summary.md", d / "run.json"
    if not (summary.is_file() and md.is_file() and record.is_file()):
        return None
    try:
        if md.read_text(encoding="utf-8").startswith("**PARTIAL**"):
            return None
        recorded = json.loads(record.read_text(encoding="utf-8")).get("seeds")
        if sorted(recorded) != sorted(seeds):
            return None
        with summary.open(newline="", encoding="utf-8") as f:
            rows = list(csv.DictReader(f))
        jct = {int(r["seed"]): float(r["avg_jct_s"]) for r in rows}
        censored = sum(int(float(r.get("censored_jobs") or 0)) for r in rows)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if sorted(jct) != sorted(seeds) or not all(math.isfinite(v) for v in jct.values()):
        return None
    return jct, censored


def _run_cell(
    scenario: Scenario,
    spec: str,
    d: Path,
    *,
    workers: int,
    runner: dict[str, Any],
    log: Callable[[str], None],
) -> Cell:
    from evaluation.pipeline import evaluate, make_plan
    from evaluation.runner import RunsFailed

    if world_of(spec) != scenario.world:
        return Cell(scenario.name, spec, "n/a", f"acts in the {world_of(spec)} world")
    na = d / NA_FILE
    if na.is_file():
        reason = na.read_text(encoding="utf-8").strip()
        if reason:
            return Cell(scenario.name, spec, "n/a", reason)
    cached = _read_cached(d, scenario.seeds)
    if cached is not None:
        return Cell(scenario.name, spec, "ok", jct=cached[0], censored=cached[1])
    c0 = time.process_time()
    try:
        cfg, resolved = _cell_config(scenario, spec, d, workers, runner)
        plan = make_plan(cfg)
    except DlschedError as exc:  # cannot act here: n/a, with the reason
        return _na(scenario, spec, d, _first_line(exc))
    plan.provenance = _provenance()
    phases = {
        "plan": time.process_time() - c0 - plan.build_cpu_s,
        "workloads": plan.build_cpu_s,
    }
    c0 = time.process_time()
    d.mkdir(parents=True, exist_ok=True)
    out, err = io.StringIO(), io.StringIO()
    notes: list[str] = []
    if (d / "summary.md").is_file() or (d / "summary.csv").is_file():
        notes.append(f"  cache entry {d} incomplete or unreadable: recomputing it, not using it")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                evaluate(cfg, d, resolved, plan)  # the plan checked above: made once
            except ConfigError as exc:  # the plan was valid: the directory is not resumable
                notes.append(f"  cache entry {d} unusable ({_first_line(exc)}); recomputing it")
                cfg.resume, cfg.overwrite = False, True
                evaluate(cfg, d, resolved, plan)
    except RunsFailed as exc:
        return Cell(scenario.name, spec, "failed", _first_line(exc), ran=len(scenario.seeds))
    finally:
        for note in notes:
            log(note)
        for line in err.getvalue().splitlines():  # the pipeline's warnings and Ray nodes, by cell
            if line.startswith(("warning", "note", "ray:")):
                log(f"  {scenario.name} / {spec}: {line}")
    evaluated = time.process_time() - c0
    got = _read_cached(d, scenario.seeds)
    if got is None:
        return Cell(scenario.name, spec, "failed", f"no readable results in {d}")
    try:
        record = json.loads((d / "run.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        record = {}
    kept = _get(record, ("resumed", "kept_runs"), 0)
    ran = len(scenario.seeds) - int(kept)
    runs = record.get("runs") if isinstance(record, dict) else None
    # run.json lists a resumed cell's kept runs too: the runs made now count at their mean
    cpus = [float(r.get("cpu_s") or 0.0) for r in runs or () if isinstance(r, dict)]
    sims = sum(cpus) * ran / len(cpus) if cpus else 0.0
    phases.update(runs=sims, write=max(evaluated - sims, 0.0))
    return Cell(scenario.name, spec, "ok", jct=got[0], censored=got[1], ran=ran, phases=phases)


def _get(record: Any, path: Sequence[str], default: Any) -> Any:
    """``record[path[0]][path[1]]...``, or ``default`` where a level is missing or not a
    mapping."""
    for key in path:
        if not isinstance(record, dict) or key not in record:
            return default
        record = record[key]
    return record


def _cell_config(
    scenario: Scenario, spec: str, d: Path, workers: int, runner: dict[str, Any]
) -> tuple[Any, dict[str, Any]]:
    """The cell's ``evaluate.py`` config and its resolved dict (``run.json``'s ``config``):
    the scenario's, composed once per process (:func:`_scenario_config`), with the cell's
    scheduler and directory; what composing the cell's own overrides gives."""
    base, resolved = _scenario_config(
        tuple(scenario.overrides), tuple(scenario.seeds), workers, json.dumps(runner)
    )
    cfg = copy.deepcopy(base)
    cfg.stacks, cfg.out_dir = [spec], str(d)
    record = copy.deepcopy(resolved)
    record["stacks"], record["out_dir"] = [spec], str(d)
    return cfg, record


@functools.lru_cache(maxsize=4)
def _scenario_config(
    overrides: tuple[str, ...], seeds: tuple[int, ...], workers: int, runner: str
) -> tuple[Any, dict[str, Any]]:
    """A scenario's composed config (:func:`evaluation.compose.compose`: the schema, its
    overrides and the benchmark's values), every cell's but for ``stacks`` and ``out_dir``."""
    from evaluation.compose import compose

    values = {
        "stacks": [],
        "seeds": list(seeds),
        "workers": workers,
        "runner": json.loads(runner),
        "plot": False,
        "progress_s": None,
        "out_dir": "",
        "resume": True,
    }
    return compose(overrides, values)


@functools.lru_cache(maxsize=1)
def _provenance() -> dict[str, Any]:
    """``run.json``'s provenance, once per process: the benchmark's cells are of the code
    version it found at the start (:func:`suite_dir`), so git is asked once, not per cell."""
    from evaluation.provenance import provenance

    return provenance()


def _na(scenario: Scenario, spec: str, d: Path, reason: str) -> Cell:
    d.mkdir(parents=True, exist_ok=True)
    (d / NA_FILE).write_text(reason + "\n", encoding="utf-8")
    return Cell(scenario.name, spec, "n/a", reason)


def _eta(cpu_per_run: float | None, runs_left: int, workers: int) -> str:
    if cpu_per_run is None:
        return "?"
    s = cpu_per_run * runs_left / max(workers, 1)
    return f"{s / 60:.1f} min" if s >= 90 else f"{s:.0f} s"


def _cell_job(scenario: Scenario, spec: str, d: Path, runner: dict[str, Any]) -> Cell:
    """One cell in this process (a pool worker's job): its runs one after another."""
    from envs.numerics import use_portable

    use_portable()  # as evaluate.py: the same bits on every x86-64 machine
    c0 = cpu_now()
    notes: list[str] = []
    cell = _run_cell(scenario, spec, d, workers=1, runner=runner, log=notes.append)
    cell.notes = notes
    cell.cpu_s = cpu_now() - c0 if cell.ran else 0.0
    return cell


def import_modules(names: Sequence[str]) -> None:
    """Import the user's modules (they may register allocators, stacks or scheduler kinds);
    one that does not import is a :class:`BenchError`."""
    import importlib

    for name in names:
        try:
            importlib.import_module(name)
        except Exception as exc:  # any failure of the user's module: one line
            raise BenchError(f"--import {name}: {type(exc).__name__}: {_first_line(exc)}") from None


def _worker_init(parent: int, imports: Sequence[str]) -> None:
    """A cell worker ignores Ctrl-C (the parent kills it; its cell's finished runs are kept),
    dies with its parent, even one killed with ``kill -9``, and imports the user's modules
    (a spawned process has only what it imports)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent)
    import_modules(imports)


@contextlib.contextmanager
def _cell_pool(workers: int, imports: Sequence[str]) -> Iterator[ProcessPoolExecutor | None]:
    """``workers`` spawned processes that each run whole cells (imports paid once per
    process, not once per cell); killed at once on Ctrl-C or an error."""
    if workers <= 1:
        yield None
        return
    import multiprocessing

    from evaluation.runner import killing_pool

    spawn = multiprocessing.get_context("spawn")
    with killing_pool(workers, _worker_init, (os.getpid(), tuple(imports)), spawn) as pool:
        yield pool


class _Progress:
    """Collects the cells and prints a line per scenario once all its cells are in, in
    suite order: its cells' notes, ok / n/a / failed, runs done of all, CPU, ETA."""

    def __init__(
        self,
        scenarios: list[Scenario],
        specs: list[str],
        applicable: dict[str, list[str]],
        cells: dict[tuple[str, str], Cell],
        total: int,
        workers: int,
        log: Callable[[str], None],
        on_ray: bool = False,
    ) -> None:
        self.scenarios, self.specs, self.applicable = scenarios, specs, applicable
        self.cells, self.total, self.workers, self.log = cells, total, workers, log
        # on Ray the runs' CPU is the cluster's and the cells go one at a time: the ETA is
        # from the wall time per run so far, and the CPU shown is this driver's
        self.on_ray, self.t0 = on_ray, time.perf_counter()
        self.done = self.ran = self.next = 0
        self.cpu = 0.0
        self.phases = dict.fromkeys(PHASES, 0.0)

    def take(self, cell: Cell) -> None:
        self.cells[(cell.scenario, cell.scheduler)] = cell
        self.ran += cell.ran
        self.cpu += cell.cpu_s
        for k, v in cell.phases.items():
            self.phases[k] += v
        self.report()

    def report(self) -> None:
        while self.next < len(self.scenarios):
            i = self.next
            sc = self.scenarios[i]
            if not all((sc.name, p) in self.cells for p in self.specs):
                return
            self.next = i + 1
            here = [self.cells[(sc.name, p)] for p in self.applicable[sc.name]]
            for c in here:
                for note in c.notes:
                    self.log(note)
            self.done += len(here) * len(sc.seeds)
            counts = {k: sum(c.status == k for c in here) for k in ("ok", "n/a", "failed")}
            spent = time.perf_counter() - self.t0 if self.on_ray else self.cpu
            per_run = spent / self.ran if self.ran else None
            self.log(
                f"[{i + 1}/{len(self.scenarios)}] {sc.name}: {counts['ok']} ok, "
                f"{counts['n/a']} n/a, {counts['failed']} failed; runs {self.done}/{self.total} "
                f"({sum(c.ran for c in here)} run now); "
                f"{'driver CPU' if self.on_ray else 'CPU'} {self.cpu:.0f} s; "
                f"ETA {_eta(per_run, self.total - self.done, 1 if self.on_ray else self.workers)}"
            )


def run_suite(
    suite: str = "v1",
    *,
    schedulers: Sequence[str] | None = None,
    out: Path = Path("runs/bench"),
    workers: int = 1,
    runner: str = "local",
    address: str | None = None,
    only: Sequence[str] = (),
    exclude: Sequence[str] = (),
    imports: Sequence[str] = (),
    log: Callable[[str], None] | None = None,
    world: str | None = None,
) -> BenchResult:
    """Run (or read from the cache) every cell of the selected scenarios, ``workers`` cells at
    a time (``runner=ray``: one cell at a time, its runs spread over the Ray cluster); one
    progress line per scenario.  ``schedulers``: ``None`` = :func:`default_schedulers`.
    Ctrl-C raises :class:`evaluation.pipeline.Interrupted` (or ``KeyboardInterrupt``) with
    every finished run kept.  ``imports``: modules to import first, here and in every worker
    (a user's allocator, stack or kind registers itself there)."""
    log = log or _print
    import_modules(imports)
    scenarios = select_scenarios(suite, only, exclude, world)
    specs = default_schedulers() if schedulers is None else resolve_schedulers(schedulers)
    if runner not in ("local", "ray"):
        raise BenchError(f"--runner: {runner!r} is not one of local, ray")
    if workers < 1:
        raise BenchError(f"--workers must be >= 1, got {workers}")
    if runner == "ray" and address is not None:
        _check_address(address)
    code = code_version()
    root = suite_dir(out, suite, code)
    version = suite_version(SUITES[suite])
    runner_cfg = {"kind": runner, "address": address}
    applicable = {s.name: [p for p in specs if world_of(p) == s.world] for s in scenarios}
    total = sum(len(applicable[s.name]) * len(s.seeds) for s in scenarios)
    log(
        f"bench {suite} (version {version}, code {code}): {len(scenarios)} scenario(s), "
        f"{len(specs)} scheduler(s), {total} runs -> {root}"
    )
    others = sorted(p.name for p in root.parent.glob("*") if p.is_dir() and p != root)
    if others:
        log(
            f"note: {len(others)} other code version(s) in {root.parent} ({', '.join(others[:3])}"
            f"{', ...' if len(others) > 3 else ''}): their cells are not used; this code's run"
        )
    cells: dict[tuple[str, str], Cell] = {}
    t0 = time.perf_counter()
    progress = _Progress(scenarios, specs, applicable, cells, total, workers, log, runner == "ray")
    jobs = []
    for sc in scenarios:
        for spec in specs:
            if spec in applicable[sc.name]:
                jobs.append((sc, spec, cell_dir(root, sc.name, spec)))
            else:
                cells[(sc.name, spec)] = Cell(
                    sc.name, spec, "n/a", f"acts in the {world_of(spec)} world"
                )
    with _cell_pool(1 if runner == "ray" else workers, imports) as pool:
        if pool is None:
            for sc, spec, d in jobs:
                progress.take(_cell_job(sc, spec, d, runner_cfg))
        else:
            futures = [pool.submit(_cell_job, sc, spec, d, runner_cfg) for sc, spec, d in jobs]
            for fut in as_completed(futures):
                progress.take(fut.result())
    progress.report()
    return BenchResult(
        suite,
        version,
        code,
        root,
        scenarios,
        specs,
        cells,
        progress.ran,
        progress.cpu,
        time.perf_counter() - t0,
        progress.phases,
    )


def _check_address(address: str) -> None:
    """A Ray head that does not answer is one line, before anything runs."""
    import socket

    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=5):
            pass
    except (OSError, ValueError) as exc:
        raise BenchError(f"--address {address}: no Ray head answers there ({exc})") from None


def remove_cell(root: Path, scenario: str, scheduler: str) -> None:
    """Forget one cell (tests, or to recompute it)."""
    shutil.rmtree(cell_dir(root, scenario, scheduler), ignore_errors=True)
