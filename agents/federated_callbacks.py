"""Per-cluster metrics of a federated run (issue 11), as an SB3 callback.

:class:`FederatedMetricsCallback` logs, for every cluster ``i`` (env index ``i`` of the
training vec env, and ``env_configs[i]``, normally the same clusters; ``labels[i]`` names it):

* ``federated/cluster{i}/rollout_avg_jct``: average JCT (slots) of cluster ``i``'s training
  episodes, from ``info["avg_jct_slots"]`` of env ``i`` when its episode terminates; the
  logger's mean over the episodes since its last dump;
* ``federated/cluster{i}/val_avg_jct`` (and ``val_p95_jct``, ``val_unfinished``): the policy
  evaluated on cluster ``i``'s own env config on the fixed validation ``seeds``
  (:func:`agents.episode_results.evaluate_policy`) at the start of training, at the first update
  boundary after every ``every`` decisions, and at the end; ``federated/val_avg_jct_mean``
  averages the clusters.

Every validation point is also a row per cluster of ``curve_csv`` (``timesteps``, ``updates``
(gradient updates so far), ``wall_s`` (seconds since training started), ``train_s``
(``wall_s`` less this callback's own validation time), ``cluster``,
``label``, the metrics), the data of "validation JCT vs updates / vs wall time" plots.
"""

from __future__ import annotations

import csv
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from stable_baselines3.common.callbacks import BaseCallback

from agents.episode_results import aggregate, evaluate_policy
from envs.gym.factory import EnvConfig

__all__ = ["FederatedMetricsCallback", "cluster_label"]

_CSV_FIELDS = (
    "timesteps",
    "updates",
    "wall_s",
    "train_s",
    "cluster",
    "label",
    "avg_jct",
    "p95_jct",
    "unfinished",
)


def cluster_label(config: EnvConfig) -> str:
    """A short name for a cluster: setting, overrides and arrival pattern (or trace file)."""
    parts = [config.setting]
    parts += [f"{k}={v}" for k, v in sorted((config.overrides or {}).items())]
    parts.append(Path(config.trace).name if config.trace else config.arrival)
    return " ".join(parts)


class FederatedMetricsCallback(BaseCallback):
    """Per-cluster rollout and validation metrics (see the module docstring)."""

    def __init__(
        self,
        env_configs: Sequence[EnvConfig],
        seeds: Sequence[int],
        every: int,
        *,
        deterministic: bool = False,
        sample_seed: int = 0,
        curve_csv: Path | None = None,
        labels: Sequence[str] | None = None,
    ) -> None:
        super().__init__()
        self.env_configs = list(env_configs)
        self.seeds = list(seeds)
        self.every = int(every)
        self.deterministic = deterministic
        self.sample_seed = sample_seed
        self.curve_csv = curve_csv
        self.labels = list(labels) if labels else [cluster_label(c) for c in self.env_configs]
        #: every training episode's avg JCT (slots), per training env
        self.rollout_jct: list[list[float]] = [[] for _ in self.env_configs]
        #: one row per cluster per validation point (the CSV's rows)
        self.history: list[dict[str, Any]] = []
        self._next = 0
        self._t0 = time.perf_counter()
        self._eval_s = 0.0  # seconds spent in this callback's validations

    def _on_training_start(self) -> None:
        self._t0 = time.perf_counter()
        self._eval_s = 0.0
        n_envs = self.training_env.num_envs if self.training_env is not None else 0
        self.rollout_jct += [[] for _ in range(n_envs - len(self.rollout_jct))]
        if not self._evaluated_now():
            self.evaluate()
        self._next = self.num_timesteps + self.every if self.every > 0 else -1

    def _on_rollout_start(self) -> None:
        # after an update and before the next rollout: validation points fall on whole updates
        if self._next > 0 and self.num_timesteps >= self._next:
            self.evaluate()
            while self._next <= self.num_timesteps:
                self._next += self.every

    def _on_step(self) -> bool:
        infos = self.locals.get("infos") or []
        dones = self.locals.get("dones")
        for i, info in enumerate(infos):
            # finished episodes only: a truncated one carries a lower bound (unfinished_jobs > 0)
            if dones is not None and dones[i] and not info.get("unfinished_jobs", 1):
                jct = float(info["avg_jct_slots"])
                self.rollout_jct[i].append(jct)
                self.logger.record_mean(f"federated/cluster{i}/rollout_avg_jct", jct)
        return True

    def _on_training_end(self) -> None:
        if not self._evaluated_now():
            self.evaluate()

    def _evaluated_now(self) -> bool:
        if not self.history:
            return False
        last = self.history[-1]
        updates = int(getattr(self.model, "_n_updates", 0))
        return bool(last["timesteps"] == self.num_timesteps and last["updates"] == updates)

    def evaluate(self) -> list[dict[str, Any]]:
        """Validate the current policy on every cluster; log, record and return the rows."""
        start = time.perf_counter()
        wall = start - self._t0
        updates = int(getattr(self.model, "_n_updates", 0))
        rows: list[dict[str, Any]] = []
        for i, config in enumerate(self.env_configs):
            res = aggregate(
                evaluate_policy(
                    self.model,
                    config,
                    self.seeds,
                    deterministic=self.deterministic,
                    sample_seed=self.sample_seed,
                )
            )
            row: dict[str, Any] = {
                "timesteps": int(self.num_timesteps),
                "updates": updates,
                "wall_s": wall,
                "train_s": wall - self._eval_s,
                "cluster": i,
                "label": self.labels[i],
                "avg_jct": res["avg_jct"],
                "p95_jct": res["p95_jct"],
                "unfinished": res["unfinished"],
            }
            rows.append(row)
            self.logger.record(f"federated/cluster{i}/val_avg_jct", res["avg_jct"])
            self.logger.record(f"federated/cluster{i}/val_p95_jct", res["p95_jct"])
            self.logger.record(f"federated/cluster{i}/val_unfinished", res["unfinished"])
        mean = sum(r["avg_jct"] for r in rows) / len(rows)
        self.logger.record("federated/val_avg_jct_mean", mean)
        self.logger.dump(self.num_timesteps)
        self.history.extend(rows)
        self._eval_s += time.perf_counter() - start
        self._write(rows)
        return rows

    def _write(self, rows: list[dict[str, Any]]) -> None:
        if self.curve_csv is None:
            return
        new = not self.curve_csv.exists()
        with self.curve_csv.open("a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(_CSV_FIELDS))
            if new:
                w.writeheader()
            w.writerows(rows)

    def summary(self) -> dict[str, Any]:
        """Per cluster: label, first and last validation avg JCT, training episodes seen."""
        out: dict[str, Any] = {}
        for i, label in enumerate(self.labels):
            points = [r for r in self.history if r["cluster"] == i]
            episodes = self.rollout_jct[i] if i < len(self.rollout_jct) else []
            out[f"cluster{i}"] = {
                "label": label,
                "initial_val_avg_jct": points[0]["avg_jct"] if points else None,
                "final_val_avg_jct": points[-1]["avg_jct"] if points else None,
                "training_episodes": len(episodes),
            }
        return out
