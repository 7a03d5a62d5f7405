#!/usr/bin/env python
"""Head-to-head evaluation: schedulers x workloads (seeds) -> tables, per-job CSVs and plots.

Every scheduler in ``stacks`` runs on every seed's workload, over ``workers`` processes (0 =
one per core); a progress bar goes to stderr, the tables to stdout, and everything into
``out_dir`` (default ``runs/<date>_<time>_evaluate``)::

    python evaluate.py                                   # the paper's 4 headline stacks, seed 0
    python evaluate.py seeds=[0,1,2] mode=reference      # the reference simulator's model
    python evaluate.py stacks=[lwf1_srsf1,lwf1_srsf2] cluster=paper_10gbe
    python evaluate.py workload=generated seeds=[0,1,2,3] baseline=lwf1_srsf1
    python evaluate.py workload=csv workload.path=jobs.csv
    python evaluate.py workload=csv workload.path=jobs.csv workload.jitter=0.001 \\
        seeds=[0,1,2,3,4]                               # one workload, 5 timing draws
    python evaluate.py workload=philly stacks=[lwf1_srsf1,ff_adasrsf,elastic:drf]
    python evaluate.py workload=trace workload.path=cluster_log.csv \\
        workload.trace.repairs.zero_gpus=skip workload.trace.max_jobs=2000 \\
        workload.trace.duration_cap_s=86400 workload.trace.target_load=0.8
    python evaluate.py workload=dl2 cluster=dl2_small seeds=[0,1,2] \\
        stacks=[elastic:drf,elastic:fifo,elastic:srtf,elastic:tetris,elastic:optimus]
    python evaluate.py workload=env workload.env.setting=small seeds=[0,1,2] \\
        stacks=[policy:runs/<train run>/checkpoint,elastic:drf,elastic:optimus]
    python evaluate.py bench=v1 workers=2               # dlsched-bench: every scheduler on
                                                         # suite v1, the leaderboard (docs/bench.md)
    python evaluate.py bench=v1 bench.only=[tiresias-60] bench.schedulers=[lwf1_adasrsf,drf]

Schedulers are ``<kind>:<argument>`` or stack names (:mod:`evaluation.kinds`); the schema is
:class:`evaluation.config.EvaluateConfig`; a bad value exits with status 2 (see :func:`main`).
Details: docs/design/evaluation.md#scheduler-specs-workload-kinds-and-the-run-directory
"""

from __future__ import annotations

import os
import signal
import sys


def _stopped_while_starting(signum: int, frame: object) -> None:
    """Ctrl-C or SIGTERM while Python imports the project: nothing has run, nothing to keep."""
    name = signal.Signals(signum).name
    print(f"evaluate.py: interrupted ({name}) while starting; nothing was run", file=sys.stderr)
    os._exit(130)


if __name__ == "__main__":  # until main() takes over: a quiet exit, not a traceback
    for _sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(_sig, _stopped_while_starting)

import shlex  # after the handlers above
import tempfile
from pathlib import Path
from typing import Any, cast

import hydra
from hydra.core.config_store import ConfigStore
from hydra.core.hydra_config import HydraConfig
from hydra.errors import HydraException
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import MissingMandatoryValue, OmegaConfBaseException

from envs.configkeys import check_known_keys
from envs.files import os_error, sigterm_as_interrupt
from envs.numerics import use_portable
from envs.sim import ConfigError, DlschedError
from evaluation.config import EvaluateConfig
from evaluation.pipeline import Interrupted
from evaluation.pipeline import evaluate as run_evaluation

use_portable()  # before torch runs a kernel: the same bits on every x86-64 machine
ConfigStore.instance().store(name="evaluate_schema", node=EvaluateConfig)


def evaluate(dcfg: DictConfig, run_dir: Path) -> list[dict[str, Any]]:
    """Run the evaluation ``dcfg`` describes into ``run_dir``; the summary rows."""
    check_known_keys(dcfg, EvaluateConfig, where="conf/evaluate.yaml")
    cfg = OmegaConf.to_object(dcfg)
    if not isinstance(cfg, EvaluateConfig):  # pragma: no cover - the schema guarantees it
        raise ConfigError(f"config is not an EvaluateConfig: {type(cfg).__name__}")
    resolved = cast(dict[str, Any], OmegaConf.to_container(dcfg, resolve=True))
    return run_evaluation(cfg, run_dir, resolved)


def bench(dcfg: DictConfig, task: list[str]) -> int:
    """``bench=v1``: run dlsched-bench's suite as ``python -m evaluation.bench`` would, with
    the ``bench`` block, ``workers``, ``runner`` and ``plot``; its exit status (0, 2 for bad
    input, 130 when interrupted, the finished cells kept).  ``task``: the command line's
    overrides, to refuse the keys a benchmark does not use."""
    from evaluation.bench.__main__ import main as bench_main
    from evaluation.bench.entry import bench_argv, check_overrides

    check_known_keys(dcfg, EvaluateConfig, where="conf/evaluate.yaml")
    check_overrides(task)
    cfg = OmegaConf.to_object(dcfg)
    if not isinstance(cfg, EvaluateConfig):  # pragma: no cover - the schema guarantees it
        raise ConfigError(f"config is not an EvaluateConfig: {type(cfg).__name__}")
    return bench_main(bench_argv(cfg))


def _error_message(exc: BaseException) -> str:
    """One line: OmegaConf errors carry the key in ``full_key``."""
    if isinstance(exc, MissingMandatoryValue) and exc.full_key:
        return f"{exc.full_key} must be set, e.g. {exc.full_key}=<value>"
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, OmegaConfBaseException) and exc.full_key and exc.full_key not in msg:
        msg = f"{exc.full_key}: {msg}"
    return msg


def _drop_if_empty(run_dir: Path) -> None:
    """A run that failed before writing anything leaves no directory behind (Hydra made it,
    with only its ``.hydra`` record)."""
    import shutil

    if run_dir.is_dir() and {p.name for p in run_dir.iterdir()} <= {".hydra", ".lock"}:
        shutil.rmtree(run_dir, ignore_errors=True)


_task_started = [False]
#: keys that say where the run goes and how it treats an existing directory
_RUN_DIR_KEYS = ("out_dir", "resume", "overwrite", "hydra.run.dir", "hydra.sweep.dir")
_failed: list[str] = []  # jobs of a ``-m`` sweep that failed (the others still run)
#: a ``-m`` sweep's finished jobs: (sweep dir, job number, its overrides, its summary rows)
_sweep: list[tuple[Path, int, str, list[dict[str, Any]]]] = []


@hydra.main(version_base=None, config_path="conf", config_name="evaluate")
def _hydra_main(dcfg: DictConfig) -> None:
    _task_started[0] = True
    hc = HydraConfig.get()
    try:
        if dcfg.bench.suite is not None:  # bench=v1: the benchmark, not one evaluation
            if hc.mode == RunMode.MULTIRUN:
                raise ConfigError("bench= runs a whole suite; it does not take -m (a sweep)")
            status = bench(dcfg, list(hc.overrides.task))
            _drop_if_empty(Path(hc.runtime.output_dir))  # the board is under bench.out
            if status:
                sys.exit(status)
            return
        rows = evaluate(dcfg, Path(hc.runtime.output_dir))
        if hc.mode == RunMode.MULTIRUN:
            job = " ".join(hc.overrides.task)
            _sweep.append((Path(hc.sweep.dir), int(hc.job.num), job, rows))
    except Interrupted as exc:
        _drop_if_empty(Path(hc.runtime.output_dir))
        args = [a for a in sys.argv[1:] if a.split("=")[0].lstrip("+") not in _RUN_DIR_KEYS]
        again = shlex.join(
            ["python", "evaluate.py", *args, f"out_dir={exc.run_dir}", "resume=true"]
        )
        print(
            f"evaluate.py: interrupted ({exc.signal}); {exc.finished} of {exc.total} runs "
            f"finished and are kept in {exc.run_dir}; to run the rest: {again}",
            file=sys.stderr,
        )
        # everything is on disk and the lock released; exit now, not after the exit hooks
        # (Ray's would shut down a local Ray for a second or two): a local Ray this process
        # started is killed here (and its watchdog would end whatever is left)
        if "ray" in sys.modules:
            from agents.ray_setup import end_own_ray_now

            end_own_ray_now()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(130)
    except KeyboardInterrupt as exc:  # before the runs started: nothing to keep
        _drop_if_empty(Path(hc.runtime.output_dir))
        print(f"evaluate.py: interrupted ({str(exc) or 'SIGINT'}) before any run finished; "
              "nothing was saved", file=sys.stderr)  # fmt: skip
        sys.exit(130)
    except (DlschedError, OmegaConfBaseException, HydraException) as exc:
        print(f"error: {_error_message(exc)}", file=sys.stderr)
        _drop_if_empty(Path(hc.runtime.output_dir))
        if hc.mode == RunMode.MULTIRUN:  # one failing job does not end the sweep
            _failed.append(f"job {hc.job.num} ({' '.join(hc.overrides.task)}): {exc}")
            return
        sys.exit(2)


def _write_sweep_table() -> None:
    """One table for a whole ``-m`` sweep: every job's per-run and mean rows, with the job's
    number and overrides, as ``summary.md``, ``summary.csv`` (per run) and
    ``summary_means.csv`` (means over seeds) in the sweep directory."""
    from evaluation.report import markdown_table, write_csv

    rows = [
        {"job": num, "overrides": job, **row}
        for _, num, job, job_rows in sorted(_sweep, key=lambda x: x[1])
        for row in job_rows
    ]
    sweep_dir = _sweep[0][0]
    is_mean = [str(r["seed"]).startswith("mean(") for r in rows]  # as a run's own files:
    write_csv(sweep_dir / "summary.csv", [r for r, m in zip(rows, is_mean, strict=True) if not m])
    means = [r for r, m in zip(rows, is_mean, strict=True) if m]
    if means:
        write_csv(sweep_dir / "summary_means.csv", means)  # means over seeds, with CIs
    parts = [f"Sweep of {len(_sweep)} job(s); per job: its overrides, then its runs.\n"]
    for _, num, job, job_rows in sorted(_sweep, key=lambda x: x[1]):
        parts.append(f"**job {num}**: `{job}`\n\n" + markdown_table(job_rows, False) + "\n")
    (sweep_dir / "summary.md").write_text("\n".join(parts))
    print(f"sweep table: {sweep_dir / 'summary.md'}")


def main() -> None:
    """Entry point; a config Hydra rejects before the run exits with status 2 (not Hydra's 1);
    a ``-m`` sweep runs every job, then exits with status 2 listing those that failed.

    A bad value (unknown scheduler, mode, fidelity, workload kind, seed, file, bad trace row)
    prints one line ``error: ...`` to stderr and exits with status 2; so does a config Hydra
    rejects (unknown key, wrong type), after Hydra's own message."""
    flags = {}
    for arg in sys.argv[1:]:
        key, _, value = arg.partition("=")
        flags[key.lstrip("+")] = value
    given = {"out_dir", "hydra.run.dir", "hydra.sweep.dir", "--help", "-h", "--cfg", "-c"}
    if not given & set(flags):  # the default out_dir is runs/<date>_<time>_evaluate
        flags["out_dir"] = "runs"
    for key in ("out_dir", "hydra.run.dir", "hydra.sweep.dir"):
        if key not in flags:
            continue
        value = flags[key]
        if not value.strip():  # the run's files would go straight into the current directory
            print(f"error: {key} is empty; give a directory, e.g. {key}=runs/my_eval",
                  file=sys.stderr)  # fmt: skip
            sys.exit(2)
        p = Path(value)
        if p.exists() and not p.is_dir():  # Hydra would fail with a traceback
            print(f"error: {key}={value}: exists and is not a directory", file=sys.stderr)
            sys.exit(2)
        try:  # Hydra would fail with a traceback when it cannot make the directory
            p.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=p):
                pass
        except OSError as exc:
            print(f"error: {os_error(p, exc, 'write to').args[0]} ({key})", file=sys.stderr)
            sys.exit(2)
        keep = (
            flags.get("resume", "").lower() == "true"
            or flags.get("overwrite", "").lower() == "true"
        )
        if (
            key == "out_dir"
            and value != "runs"
            and p.is_dir()
            and not keep
            and any(q.name not in (".hydra", ".lock") for q in p.iterdir())
        ):  # refused before Hydra rewrites the earlier run's .hydra record
            print(
                f"error: out_dir {p} already holds files; add resume=true to finish the runs it "
                "lacks, overwrite=true to start it afresh, or choose another out_dir",
                file=sys.stderr,
            )
            sys.exit(2)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with sigterm_as_interrupt():
            _hydra_main()
    except KeyboardInterrupt as exc:  # while Hydra composed the config: nothing has run
        print(f"evaluate.py: interrupted ({str(exc) or 'SIGINT'}) while starting; nothing was run",
              file=sys.stderr)  # fmt: skip
        sys.exit(130)
    except SystemExit as exc:
        if exc.code == 1 and not _task_started[0]:
            raise SystemExit(2) from None
        raise
    if _sweep:
        _write_sweep_table()
    if _failed:
        print(f"error: {len(_failed)} sweep job(s) failed:", file=sys.stderr)
        for line in _failed:
            print(f"  {line}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
