"""``evaluate.py bench=v1``: the benchmark through ``evaluate.py``'s Hydra config.

The ``bench`` block of :class:`evaluation.config.EvaluateConfig` (``conf/bench/v1.yaml``),
with ``evaluate.py``'s own ``workers``, ``runner`` and ``plot``, becomes the argument list of
``python -m evaluation.bench`` (:func:`bench_argv`), so both commands are one code path.  The
keys that define one evaluation's workload, cluster and schedulers have no meaning here (each
scenario sets its own): given on the command line with ``bench=``, they are refused in one
line (:func:`check_overrides`) rather than silently ignored.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from envs.sim.errors import ConfigError
from evaluation.config import EvaluateConfig

__all__ = ["IGNORED_KEYS", "bench_argv", "check_overrides"]

#: ``evaluate.py`` keys (and groups) a benchmark run does not use: its scenarios set them.
IGNORED_KEYS = (
    "stacks",
    "seeds",
    "baseline",
    "workload",
    "cluster",
    "mode",
    "fidelity",
    "engine",
    "elastic",
    "policy_eval",
    "out_dir",
    "resume",
    "overwrite",
    "max_wall_s",
    "check_invariants",
)


def check_overrides(task: Sequence[str]) -> None:
    """A :class:`ConfigError` naming the first command-line override (Hydra's task overrides,
    ``key=value``) that sets a key a benchmark run does not use."""
    for override in task:
        key = override.split("=", 1)[0].lstrip("+~")
        top = key.split(".", 1)[0].split("@", 1)[0]
        if top in IGNORED_KEYS:
            where = "bench.out" if top == "out_dir" else "bench.only / bench.schedulers"
            raise ConfigError(
                f"{key}: not used with bench= (each scenario of the suite sets its own "
                f"workload, cluster, seeds and simulation); choose with {where} instead"
            )


def bench_argv(cfg: EvaluateConfig) -> list[str]:
    """``python -m evaluation.bench``'s arguments for ``cfg`` (whose ``bench.suite`` is set)."""
    b = cfg.bench
    if b.suite is None:
        raise ConfigError("bench.suite is not set (bench=v1 sets it)")
    from evaluation.bench.run import BenchError, select_scenarios

    try:  # the same checks as the command's, named by this config's keys
        select_scenarios(b.suite, b.only, b.exclude, b.world)
    except BenchError as exc:
        msg = str(exc)
        for flag in ("only", "exclude", "world"):
            msg = msg.replace(f"--{flag}", f"bench.{flag}")
        raise ConfigError(msg.replace("unknown suite", "bench: unknown suite")) from None
    workers = cfg.workers if cfg.workers > 0 else (os.cpu_count() or 1)
    argv = ["--suite", b.suite, "--out", b.out, "--workers", str(workers)]
    argv += ["--runner", cfg.runner.kind]
    if cfg.runner.address is not None:
        argv += ["--address", cfg.runner.address]
    for flag, values in (("--only", b.only), ("--exclude", b.exclude), ("--import", b.imports)):
        if values:
            argv += [flag, *values]
    if b.schedulers is not None:
        if not b.schedulers:
            raise ConfigError("bench.schedulers is empty; give at least one, or null for all")
        argv += ["--schedulers", *b.schedulers]
    if b.world is not None:
        argv += ["--world", b.world]
    if not cfg.plot:
        argv.append("--no-plot")
    return argv
