"""Training callbacks: periodic validation against fixed baselines, checkpoints, hparams; and
the run's SB3 logger (:func:`run_logger`)."""

from __future__ import annotations

import csv
import io
import sys
import time
from pathlib import Path
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback, EveryNTimesteps
from stable_baselines3.common.logger import (
    HParam,
    HumanOutputFormat,
    KVWriter,
    Logger,
    make_output_format,
)

from agents.checkpoint import save_checkpoint
from agents.episode_results import aggregate, evaluate_policy
from envs.files import write_text
from envs.gym.factory import EnvConfig

__all__ = ["CheckpointCallback", "ValidationCallback", "run_logger"]


class _StepLogger(Logger):
    """Every dump carries its step (``time/total_timesteps``), so each CSV/JSON row says when."""

    def dump(self, step: int = 0) -> None:
        self.record("time/total_timesteps", step)
        super().dump(step)


def run_logger(out: Path, tb_dir: Path, verbose: int) -> Logger:
    """SB3's logger for a training run: every scalar the learner and the callbacks record
    (``train/*``, ``rollout/*``, ``time/*``, ``eval/*``) goes, at each dump, to
    ``out/progress.csv`` and ``out/progress.json`` (one JSON object per line: SB3's own
    formats, read by its and other tools) and to TensorBoard under ``tb_dir``; to stdout too
    when ``verbose``."""
    out.mkdir(parents=True, exist_ok=True)
    formats: list[KVWriter] = [
        make_output_format("csv", str(out)),
        make_output_format("json", str(out)),
        make_output_format("tensorboard", str(tb_dir)),
    ]
    if verbose:
        formats.append(HumanOutputFormat(sys.stdout))
    return _StepLogger(str(out), formats)


class ValidationCallback(EveryNTimesteps):
    """Every ``every`` decisions (and at the start and end of training) evaluate the policy on
    the fixed validation workloads; log ``eval/avg_jct``, ``eval/median_jct``,
    ``eval/p95_jct``, ``eval/gpu_util``, ``eval/cpu_util``, ``eval/unfinished`` and
    ``eval/ratio_to_<baseline>`` (the baselines' average JCTs are computed once, by the
    caller); append each point to ``curve_csv`` (with wall seconds since the start).

    The "every ``every`` decisions" is SB3's :class:`EveryNTimesteps` (its event: one
    evaluation), counted from the decisions at the start of training (a resumed run's too),
    on the grid ``start + k x every`` (a point a few decisions late, as ``n_envs`` > 1 steps
    land, does not shift the next ones); ``every`` = 0: only at the start and the end."""

    def __init__(
        self,
        env_config: EnvConfig,
        seeds: list[int],
        every: int,
        baselines: dict[str, float],
        *,
        deterministic: bool,
        sample_seed: int,
        curve_csv: Path,
        hparams: dict[str, Any] | None = None,
        first_is_clone: bool = False,
    ) -> None:
        super().__init__(max(int(every), 1), callback=None)  # type: ignore[arg-type]
        self.first_is_clone = first_is_clone
        self.env_config = env_config
        self.seeds = list(seeds)
        self.every = int(every)
        self.baselines = dict(baselines)
        self.deterministic = deterministic
        self.sample_seed = sample_seed
        self.curve_csv = curve_csv
        self.hparams = hparams or {}
        self._start = 0
        self._t0 = time.perf_counter()
        self.history: list[dict[str, float]] = []

    def _on_training_start(self) -> None:
        self._t0 = time.perf_counter()
        if self.hparams:
            metrics = {"eval/avg_jct": 0.0}
            hp = {
                k: (v if isinstance(v, int | float | str | bool) else str(v))
                for k, v in self.hparams.items()
            }
            self.logger.record(
                "hparams", HParam(hp, metrics), exclude=("stdout", "log", "json", "csv")
            )
        if not self.history or self.history[-1]["timesteps"] != self.num_timesteps:
            self.evaluate()
        self._start = self.last_time_trigger = self.num_timesteps

    def _on_step(self) -> bool:
        return super()._on_step() if self.every > 0 else True

    def _on_event(self) -> bool:
        # SB3 set the trigger to now; back to the grid point passed, so the next is on it
        self.last_time_trigger -= (self.last_time_trigger - self._start) % self.every
        self.evaluate()
        return True

    def _on_training_end(self) -> None:
        if not self.history or self.history[-1]["timesteps"] != self.num_timesteps:
            self.evaluate()

    def evaluate(self) -> dict[str, float]:
        res = aggregate(
            evaluate_policy(
                self.model,
                self.env_config,
                self.seeds,
                deterministic=self.deterministic,
                sample_seed=self.sample_seed,
            )
        )
        row = {
            "timesteps": float(self.num_timesteps),
            "wall_s": time.perf_counter() - self._t0,
            **{k: v for k, v in res.items()},
        }
        for name, jct in self.baselines.items():
            row[f"ratio_to_{name}"] = res["avg_jct"] / jct
        self.history.append(row)
        for k, v in row.items():
            if k not in ("timesteps", "wall_s"):
                self.logger.record(f"eval/{k}", v)
        # reference lines (the same value at every point): each heuristic's validation avg
        # JCT and, when the run started from a clone, the clone's (its first point)
        for name, jct in self.baselines.items():
            self.logger.record(f"reference/avg_jct_{name}", jct)
        if self.first_is_clone:
            self.logger.record("reference/avg_jct_clone", self.history[0]["avg_jct"])
        self.logger.dump(self.num_timesteps)
        # the whole (small) file rewritten atomically per point: never a torn row
        old = self.curve_csv.read_text() if self.curve_csv.is_file() else ""
        buf = io.StringIO(newline="")
        w = csv.DictWriter(buf, fieldnames=list(row))
        if not old:
            w.writeheader()
        w.writerow(row)
        write_text(self.curve_csv, old + buf.getvalue())
        return row


# Not SB3's CheckpointCallback: it saves inside a rollout (``_on_step``, every save_freq calls),
# non-atomically; a resumable checkpoint must be taken between an update and the next rollout.
class CheckpointCallback(BaseCallback):
    """Every ``every`` decisions (at the next update boundary), save a resumable checkpoint to
    ``directory`` (replaced atomically: :func:`~agents.checkpoint.save_checkpoint`)."""

    def __init__(self, directory: Path, every: int, meta: dict[str, Any]) -> None:
        super().__init__()
        self.directory = directory
        self.every = int(every)
        self.meta = meta
        self._next = 0

    def _on_training_start(self) -> None:
        self._next = self.num_timesteps + self.every if self.every > 0 else -1

    def _on_rollout_start(self) -> None:
        # Between an update and the next rollout: the only point where a checkpoint captures
        # everything (no half-collected rollout), so a resumed run continues identically.
        if self._next > 0 and self.num_timesteps >= self._next:
            save_checkpoint(self.model, self.directory, self.meta)
            while self._next <= self.num_timesteps:
                self._next += self.every

    def _on_step(self) -> bool:
        return True
