#!/usr/bin/env python
"""Head-to-head evaluation of scheduler stacks on one workload.

Every stack in ``stacks`` runs on the workload of every seed in ``seeds``; a Markdown table of
JCT statistics goes to stdout and everything else into the run directory (``out_dir``,
default ``runs/<date>_<time>_evaluate``)::

    python evaluate.py                                   # the paper's 4 headline stacks, seed 0
    python evaluate.py seeds=[0,1,2] mode=reference      # the reference simulator's model
    python evaluate.py stacks=[lwf1_srsf1,lwf1_srsf2] cluster=paper_10gbe
    python evaluate.py workload=ada160_paper_scale fidelity=fast
    python evaluate.py workload=generated seeds=[0,1,2,3]
    python evaluate.py workload=csv workload.path=jobs.csv
    python evaluate.py workload=trace workload.path=trace.csv workload.time_unit=10

Run directory: ``summary.md`` / ``summary.csv`` (the table), ``jobs_<stack>_seed<k>.csv``
(one row per job; a ``:`` in a stack name becomes ``-``), ``jct_cdf.png``, ``run.json``
(resolved config, versions, git commit, each run's ``SimConfig``) and Hydra's ``.hydra/``.

Times in the table are seconds of simulated time (sim ms / 1000).  The Ada-SRSF workloads at
their shipped 1/100 scale (``workload=ada160``, ``generated``, ``csv`` with scale 1) also get
"paper s" columns: the paper's seconds = sim ms / 10.

A bad value (unknown stack, mode, fidelity, workload kind, seed, file) prints one line
``error: ...`` to stderr and exits with status 2; so does a config Hydra rejects (unknown key,
wrong type), after Hydra's own message.
"""

from __future__ import annotations

import csv
import json
import math
import platform
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import hydra
import numpy as np
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.utils import to_absolute_path
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from envs.sim import (
    STACKS,
    ClusterSpec,
    ConfigError,
    DlschedError,
    Fidelity,
    NetworkSpec,
    SimConfig,
    SimResult,
    Workload,
    make_stack,
    simulate,
)
from envs.sim.workload import (
    builtin_ada_srsf,
    generate_ada_srsf,
    load_ada_srsf_csv,
    load_trace_csv,
    scale_workload,
)

#: The Ada-SRSF paper's headline comparison.
HEADLINE_STACKS: tuple[str, ...] = ("lwf1_adasrsf", "lwf1_srsf1", "ff_adasrsf", "ls_adasrsf")

# --------------------------------------------------------------------------------------------
# Config schema (YAML defaults under conf/)
# --------------------------------------------------------------------------------------------


@dataclass
class NetworkConfig:
    """:class:`envs.sim.NetworkSpec`: ms, ms/MB."""

    a_ms: float = 0.0
    b_ms_per_mb: float = 0.856
    eta_ms_per_mb: float = 0.235


@dataclass
class ClusterConfig:
    """:class:`envs.sim.ClusterSpec`."""

    num_servers: int = 16
    gpus_per_server: int = 4
    gpu_memory_mb: float = 32768.0
    network: NetworkConfig = field(default_factory=NetworkConfig)


@dataclass
class WorkloadConfig:
    """Where the jobs come from; ``kind`` decides which other keys are used.

    - ``ada_srsf_builtin``: shipped ``microsoft160_seed<seed>.csv``; ``iterations_scale``,
      ``time_scale`` (applied with ``scale_workload`` when not 1).
    - ``ada_srsf_csv``: ``path`` (Ada-SRSF layout); ``iterations_scale``, ``time_scale``.
    - ``generator``: ``generate_ada_srsf(seed, num_jobs, iterations_scale, arrival_window_ms)``.
    - ``trace``: ``load_trace_csv(path, seed=seed, time_unit=time_unit)``.
    """

    kind: str = "ada_srsf_builtin"
    path: str | None = None
    iterations_scale: float = 1.0
    time_scale: float = 1.0
    num_jobs: int = 160
    arrival_window_ms: float = 12000.0
    time_unit: float = 1000.0


@dataclass
class EvaluateConfig:
    """The ``evaluate.py`` command's config (see ``conf/evaluate.yaml``)."""

    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    stacks: list[str] = field(default_factory=lambda: list(HEADLINE_STACKS))
    mode: str = "correct"
    fidelity: str = "full"
    seeds: list[int] = field(default_factory=lambda: [0])
    out_dir: str = "runs/${now:%Y-%m-%d_%H-%M-%S}_evaluate"
    check_invariants: bool = False
    plot: bool = True


ConfigStore.instance().store(name="evaluate_schema", node=EvaluateConfig)

#: Workload keys each kind uses (besides ``kind``); any other key must keep its default.
WORKLOAD_KEYS: dict[str, tuple[str, ...]] = {
    "ada_srsf_builtin": ("iterations_scale", "time_scale"),
    "ada_srsf_csv": ("path", "iterations_scale", "time_scale"),
    "generator": ("num_jobs", "iterations_scale", "arrival_window_ms"),
    "trace": ("path", "time_unit"),
}

# --------------------------------------------------------------------------------------------
# Validation and construction
# --------------------------------------------------------------------------------------------


def check_workload_config(w: WorkloadConfig) -> None:
    """Unknown kind, missing path, or a key the kind does not use -> :class:`ConfigError`."""
    if w.kind not in WORKLOAD_KEYS:
        raise ConfigError(f"unknown workload kind {w.kind!r}; known: {sorted(WORKLOAD_KEYS)}")
    used = WORKLOAD_KEYS[w.kind]
    defaults = WorkloadConfig()
    for key in (
        "path",
        "iterations_scale",
        "time_scale",
        "num_jobs",
        "arrival_window_ms",
        "time_unit",
    ):
        if key not in used and getattr(w, key) != getattr(defaults, key):
            raise ConfigError(
                f"workload.{key} is not used by workload kind {w.kind!r} (it uses: "
                f"{', '.join(used)})"
            )
    if "path" in used and not w.path:
        raise ConfigError(f"workload kind {w.kind!r} needs workload.path=<file>")


def build_workload(w: WorkloadConfig, seed: int) -> Workload:
    """The workload of one seed."""
    if w.kind == "generator":
        return generate_ada_srsf(
            seed,
            num_jobs=w.num_jobs,
            iterations_scale=w.iterations_scale,
            arrival_window_ms=w.arrival_window_ms,
        )
    if w.kind == "trace":
        assert w.path is not None
        return load_trace_csv(to_absolute_path(w.path), seed=seed, time_unit=w.time_unit)
    if w.kind == "ada_srsf_csv":
        assert w.path is not None
        base = load_ada_srsf_csv(to_absolute_path(w.path))
    else:
        base = builtin_ada_srsf(seed)
    if w.iterations_scale != 1.0 or w.time_scale != 1.0:
        return scale_workload(base, w.iterations_scale, w.time_scale)
    return base


def paper_ms_per_s(w: WorkloadConfig) -> float | None:
    """Sim ms per paper second for an Ada-SRSF workload at its 1/100 scale (10), else None."""
    if w.kind == "trace" or w.iterations_scale != 1.0 or w.time_scale != 1.0:
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


def check_stacks(stacks: Sequence[str]) -> None:
    if not stacks:
        raise ConfigError("stacks is empty; give at least one, e.g. stacks=[lwf1_adasrsf]")
    seen: set[str] = set()
    for name in stacks:
        if name in seen:
            raise ConfigError(f"stack {name!r} is listed twice in stacks")
        seen.add(name)
        try:
            make_stack(name)
        except ConfigError as exc:
            msg = str(exc)
            raise ConfigError(msg if repr(name) in msg else f"stack {name!r}: {msg}") from exc


def sim_config(cfg: EvaluateConfig, seed: int) -> SimConfig:
    """``SimConfig.named(mode)`` with the run's fidelity, invariant checks and seed."""
    try:
        fidelity = Fidelity(cfg.fidelity)
    except ValueError:
        known = sorted(f.value for f in Fidelity)
        raise ConfigError(f"unknown fidelity {cfg.fidelity!r}; known: {known}") from None
    return SimConfig.named(
        cfg.mode, fidelity=fidelity, check_invariants=cfg.check_invariants, seed=seed
    )


# --------------------------------------------------------------------------------------------
# Table
# --------------------------------------------------------------------------------------------

_STATS = ("avg", "median", "p95", "p99")


def result_row(res: SimResult, seed: int, paper_div: float | None) -> dict[str, Any]:
    """One table row (machine-readable keys; times in simulated seconds)."""
    s = res.summary()
    row: dict[str, Any] = {
        "stack": res.stack,
        "paper_name": STACKS.get(res.stack, "-"),
        "seed": str(seed),
        "jobs": int(s["jobs"]),
    }
    for stat in _STATS:
        row[f"{stat}_jct_s"] = s[f"{stat}_jct_ms"] / 1000.0
    if paper_div is not None:
        for stat in _STATS:
            row[f"{stat}_jct_paper_s"] = s[f"{stat}_jct_ms"] / paper_div
    row["makespan_s"] = s["makespan_ms"] / 1000.0
    row["gpu_util_pct"] = 100.0 * s["gpu_util"]
    row["avg_queue_s"] = s["avg_queue_ms"] / 1000.0
    row["wall_s"] = res.wall_s
    return row


def mean_row(rows: Sequence[dict[str, Any]], seeds: Sequence[int]) -> dict[str, Any]:
    """Mean over seeds of every numeric column."""
    out: dict[str, Any] = {
        "stack": rows[0]["stack"],
        "paper_name": rows[0]["paper_name"],
        "seed": "mean(" + ",".join(str(s) for s in seeds) + ")",
    }
    for key in rows[0]:
        if key not in out:
            out[key] = float(np.mean([r[key] for r in rows]))
    return out


#: column key -> (Markdown header, format)
_COLUMNS: dict[str, tuple[str, str]] = {
    "stack": ("stack", "{}"),
    "paper_name": ("paper name", "{}"),
    "seed": ("seed(s)", "{}"),
    "avg_jct_paper_s": ("avg JCT (paper s)", "{:.1f}"),
    "median_jct_paper_s": ("median (paper s)", "{:.1f}"),
    "p95_jct_paper_s": ("p95 (paper s)", "{:.1f}"),
    "p99_jct_paper_s": ("p99 (paper s)", "{:.1f}"),
    "avg_jct_s": ("avg JCT (s)", "{:.3f}"),
    "median_jct_s": ("median (s)", "{:.3f}"),
    "p95_jct_s": ("p95 (s)", "{:.3f}"),
    "p99_jct_s": ("p99 (s)", "{:.3f}"),
    "makespan_s": ("makespan (s)", "{:.3f}"),
    "gpu_util_pct": ("GPU util %", "{:.1f}"),
    "avg_queue_s": ("mean queue (s)", "{:.3f}"),
    "wall_s": ("wall (s)", "{:.2f}"),
}


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    keys = [k for k in _COLUMNS if k in rows[0]]
    right = [not isinstance(rows[0][k], str) for k in keys]
    lines = [
        "| " + " | ".join(_COLUMNS[k][0] for k in keys) + " |",
        "|" + "|".join("---:" if r else ":---" for r in right) + "|",
    ]
    for row in rows:
        cells = [_COLUMNS[k][1].format(row[k]) for k in keys]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_summary_csv(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    keys = [k for k in _COLUMNS if k in rows[0]] + ["jobs"]
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys, extrasaction="ignore")
        w.writeheader()
        for row in rows:
            w.writerow(row)


def plot_cdf(path: Path, jcts_ms: dict[str, list[np.ndarray]], title: str) -> None:
    """One empirical CDF per stack (pooled over seeds); x = JCT in s, log scale."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.0, 4.5))
    for stack, parts in jcts_ms.items():
        x = np.sort(np.concatenate(parts)) / 1000.0
        x = x[x > 0]
        if x.size == 0:
            continue
        y = np.arange(1, x.size + 1) / x.size
        label = f"{stack} ({STACKS[stack]})" if stack in STACKS else stack
        ax.step(x, y, where="post", label=label)
    ax.set_xscale("log")
    ax.set_xlabel("JCT (s of simulated time)")
    ax.set_ylabel("fraction of jobs")
    ax.set_ylim(0.0, 1.0)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# --------------------------------------------------------------------------------------------
# Provenance
# --------------------------------------------------------------------------------------------


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


def provenance() -> dict[str, Any]:
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain") if commit else None
    return {
        "git_commit": commit or "unknown",
        "git_dirty": (status != "") if status is not None else None,
        "versions": {
            "python": platform.python_version(),
            **{
                d: _version(d)
                for d in ("dlsched", "numpy", "hydra-core", "omegaconf", "matplotlib")
            },
        },
        "command": [sys.executable, *sys.argv],
    }


# --------------------------------------------------------------------------------------------
# The command
# --------------------------------------------------------------------------------------------


def _safe(stack: str) -> str:
    return stack.replace(":", "-").replace("/", "-")


def evaluate(dcfg: DictConfig, run_dir: Path) -> list[dict[str, Any]]:
    """Run every stack on every seed's workload; write the run directory; return the rows."""
    obj = OmegaConf.to_object(dcfg)
    if not isinstance(obj, EvaluateConfig):  # pragma: no cover - the schema guarantees it
        raise ConfigError(f"config is not an EvaluateConfig: {type(obj).__name__}")
    cfg = obj

    # Validate everything before the first simulation.
    check_stacks(cfg.stacks)
    if not cfg.seeds:
        raise ConfigError("seeds is empty; give at least one, e.g. seeds=[0]")
    if len(set(cfg.seeds)) != len(cfg.seeds):
        raise ConfigError(f"seeds has duplicates: {list(cfg.seeds)}")
    for seed in cfg.seeds:
        sim_config(cfg, seed)
    if cfg.fidelity == Fidelity.FAST.value:
        print(
            "warning: fidelity=fast merges iterations; its avg JCT differs from full fidelity "
            "by up to ~5% on the Ada-SRSF workloads (EXPERIMENTS.md). Report full-fidelity runs.",
            file=sys.stderr,
        )
    check_workload_config(cfg.workload)
    cluster = build_cluster(cfg.cluster)
    workloads = {seed: build_workload(cfg.workload, seed) for seed in cfg.seeds}
    for w in workloads.values():
        w.check_fits(cluster)
    paper_div = paper_ms_per_s(cfg.workload)

    run_dir.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    rows_by_stack: dict[str, list[dict[str, Any]]] = {s: [] for s in cfg.stacks}
    jcts: dict[str, list[np.ndarray]] = {s: [] for s in cfg.stacks}
    runs: list[dict[str, Any]] = []
    total = len(cfg.seeds) * len(cfg.stacks)
    for seed in cfg.seeds:
        for stack in cfg.stacks:
            res = simulate(cluster, workloads[seed], stack, sim_config(cfg, seed))
            jobs_csv = f"jobs_{_safe(stack)}_seed{seed}.csv"
            res.write_jobs_csv(run_dir / jobs_csv)
            row = result_row(res, seed, paper_div)
            rows_by_stack[stack].append(row)
            jcts[stack].append(res.jcts_ms())
            runs.append(
                {
                    "stack": stack,
                    "seed": seed,
                    "workload": res.workload,
                    "sim_config": res.config,
                    "events": res.events,
                    "wall_s": res.wall_s,
                    "summary": res.summary(),
                    "jobs_csv": jobs_csv,
                }
            )
            print(
                f"[{len(runs)}/{total}] {stack} seed {seed}: avg JCT {row['avg_jct_s']:.3f} s, "
                f"makespan {row['makespan_s']:.3f} s ({res.wall_s:.2f} s wall)",
                file=sys.stderr,
                flush=True,
            )

    rows: list[dict[str, Any]] = []
    for stack in cfg.stacks:
        rows.extend(rows_by_stack[stack])
        if len(cfg.seeds) > 1:
            rows.append(mean_row(rows_by_stack[stack], cfg.seeds))

    first = workloads[cfg.seeds[0]]
    caption = (
        f"workload `{cfg.workload.kind}` ({len(first)} jobs; "
        f"{', '.join(w.name for w in workloads.values())}), mode `{cfg.mode}`, "
        f"fidelity `{cfg.fidelity}`, cluster {cluster.num_servers}x{cluster.gpus_per_server} GPUs. "
        "Times in s of simulated time"
        + ("; paper s = sim ms / 10 (1/100 of the paper's scale)." if paper_div else ".")
    )
    if cfg.workload.kind != "trace" and cfg.workload.iterations_scale == 100.0:
        caption += " At the paper's scale, simulated s are the paper's seconds."
    table = markdown_table(rows)
    (run_dir / "summary.md").write_text(caption + "\n\n" + table + "\n")
    write_summary_csv(run_dir / "summary.csv", rows)
    if cfg.plot:
        plot_cdf(run_dir / "jct_cdf.png", jcts, f"JCT CDF: {cfg.workload.kind}, mode {cfg.mode}")

    record = {
        "config": OmegaConf.to_container(dcfg, resolve=True),
        "run_dir": str(run_dir),
        "seeds": list(cfg.seeds),
        "stacks": list(cfg.stacks),
        **provenance(),
        "cluster": asdict(cluster),
        "workloads": {
            str(seed): {"name": w.name, "source": w.source, "jobs": len(w)}
            for seed, w in workloads.items()
        },
        "runs": runs,
        "wall_s_total": time.perf_counter() - t_start,
    }
    (run_dir / "run.json").write_text(json.dumps(record, indent=2, default=_json_default) + "\n")

    print(caption)
    print()
    print(table)
    print()
    print(f"run dir: {run_dir}")
    return rows


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def _error_message(exc: BaseException) -> str:
    """One line: OmegaConf errors carry the key in ``full_key``."""
    if isinstance(exc, MissingMandatoryValue) and exc.full_key:
        return f"{exc.full_key} must be set, e.g. {exc.full_key}=<value>"
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, OmegaConfBaseException) and exc.full_key and exc.full_key not in msg:
        msg = f"{exc.full_key}: {msg}"
    return msg


_task_started = [False]


@hydra.main(version_base=None, config_path="conf", config_name="evaluate")
def _hydra_main(dcfg: DictConfig) -> None:
    _task_started[0] = True
    try:
        evaluate(dcfg, Path(HydraConfig.get().runtime.output_dir))
    except (DlschedError, OmegaConfBaseException, HydraException) as exc:
        print(f"error: {_error_message(exc)}", file=sys.stderr)
        sys.exit(2)


def main() -> None:
    """Entry point; a config Hydra rejects before the run exits with status 2 (not Hydra's 1)."""
    try:
        _hydra_main()
    except SystemExit as exc:
        if exc.code == 1 and not _task_started[0]:
            raise SystemExit(2) from None
        raise


if __name__ == "__main__":
    main()
