"""Tiresias placement: count-only, and consolidate-if-skewed (NSDI'19 §3.3).

Both give a job *exclusive* GPUs (no other job resident), as Tiresias does.

- **count** (Tiresias's ``--scheme=count``): only the number of free GPUs matters; we take
  the first free GPUs in (server, GPU) index order.
- **skew**: a model whose largest tensor is a large share of its total size (``skew =
  max tensor / sum of tensors >= threshold``, default 0.5) is sensitive to being spread
  out (its parameter traffic is dominated by one tensor, so one PS/link carries most of it):
  it is packed onto as few servers as possible — the best-fitting single server if one has
  room (the one with the fewest free GPUs that suffice), else servers taken in order of most
  free GPUs.  Other models are placed count-only and may spread.  Never waits for a
  consolidated slot (work-conserving).

The threshold 0.5 is our choice (Tiresias's code has no skew placement; the paper's profiler
measures skew from traffic): on the upstream tensor lists it separates VGG-11/16/19 and
AlexNet (0.61-0.77) from the ResNets and Inceptions (0.04-0.14).  Tensor lists come from
``envs/sim/data/tiresias/model_tensors.csv`` (Tiresias's ``simulator/models.py``), keyed by
model name; ``googlenet`` and ``inception-v3`` use Inception-v3's list (upstream maps
unknown names to it); a model missing there (``lstm``) takes its parameter tensors from its
shipped op graph (``envs/sim/data/opgraphs``).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Mapping, Sequence
from importlib import resources

import numpy as np

from envs.sim.errors import ConfigError
from envs.sim.policies.base import ClusterView
from envs.sim.spec import JobSpec

#: model-name aliases onto the upstream tensor table
TENSOR_ALIASES = {"googlenet": "inception3", "inception-v3": "inception3"}


def builtin_tensor_sizes() -> dict[str, tuple[float, ...]]:
    """Per-model tensor sizes (MB) of Tiresias's simulator, plus the aliases, plus every model
    with a shipped op graph that Tiresias's table lacks (e.g. ``lstm``): its parameter tensors
    (float32) from the graph's recv list, so every model of the model tables can be placed."""
    from envs.sim.tictac.graph import available_graphs, load_raw

    ref = resources.files("envs.sim") / "data" / "tiresias" / "model_tensors.csv"
    with ref.open("r", encoding="utf-8") as fh:
        table = {
            row["model"]: tuple(float(x) for x in row["tensors_mb"].split(";"))
            for row in csv.DictReader(fh)
        }
    for alias, name in TENSOR_ALIASES.items():
        table.setdefault(alias, table[name])
    for name in available_graphs():
        if name not in table:
            table[name] = tuple(4.0 * int(n) / 1e6 for _, n in load_raw(name)["recvs"])
    return table


def skew_of(tensors_mb: Sequence[float]) -> float:
    """Largest tensor / total size."""
    if not tensors_mb or any(not (x > 0 and math.isfinite(x)) for x in tensors_mb):
        raise ConfigError(f"a tensor-size list must be non-empty and positive, got {tensors_mb}")
    return max(tensors_mb) / sum(tensors_mb)


def exclusive_free(cluster: ClusterView) -> list[int]:
    """GPUs (index order) with no job resident (all memory free)."""
    cap = cluster.spec.gpu_memory_mb * (1.0 - 1e-9)
    return [g for g, free in enumerate(cluster.free_mem_mb) if free >= cap]


class ExclusiveFit:
    """``fits`` for placers that succeed exactly when enough GPUs are wholly free and whose
    refusals change nothing (:class:`~envs.sim.policies.base.FitIndexedPlacer`)."""

    randomised = False

    def fits(self, job: JobSpec, cluster: ClusterView) -> bool:
        return len(exclusive_free(cluster)) >= job.num_gpus

    def refusal_changes_state(self, job: JobSpec) -> bool:
        return False

    def refuse(self, cluster: ClusterView) -> None:
        return None


class CountPlacer(ExclusiveFit):
    """Tiresias ``count``: the first ``num_gpus`` free GPUs, exclusive."""

    name = "count"
    comm_estimate_ms_per_mb: float | None = None
    reads_load = False

    def place(
        self, job: JobSpec, cluster: ClusterView, rng: np.random.Generator
    ) -> list[int] | None:
        avail = exclusive_free(cluster)
        return avail[: job.num_gpus] if len(avail) >= job.num_gpus else None


class SkewPlacer(ExclusiveFit):
    """Consolidate-if-skewed (module docstring).  ``tensors``: model name -> tensor sizes
    (MB); a job whose model is not listed raises ConfigError naming the known models."""

    name = "skew"
    comm_estimate_ms_per_mb: float | None = None
    reads_load = False

    def __init__(
        self,
        threshold: float = 0.5,
        tensors: Mapping[str, Sequence[float]] | None = None,
    ) -> None:
        if not 0 < threshold <= 1:
            raise ConfigError(f"skew threshold must be in (0, 1], got {threshold}")
        self.threshold = threshold
        table = builtin_tensor_sizes() if tensors is None else dict(tensors)
        self.skew = {name.lower(): skew_of(t) for name, t in table.items()}

    def is_skewed(self, job: JobSpec) -> bool:
        s = self.skew.get(job.model.name.lower())
        if s is None:
            raise ConfigError(
                f"skew placement: no tensor sizes for model {job.model.name!r} (job "
                f"{job.job_id}); known: {sorted(self.skew)}"
            )
        return s >= self.threshold

    def place(
        self, job: JobSpec, cluster: ClusterView, rng: np.random.Generator
    ) -> list[int] | None:
        avail = exclusive_free(cluster)
        n = job.num_gpus
        if len(avail) < n:
            return None
        if not self.is_skewed(job):
            return avail[:n]
        per = cluster.spec.gpus_per_server
        by_server: dict[int, list[int]] = {}
        for g in avail:
            by_server.setdefault(g // per, []).append(g)
        fits = [s for s, gs in by_server.items() if len(gs) >= n]
        if fits:
            best = min(fits, key=lambda s: (len(by_server[s]), s))
            return by_server[best][:n]
        chosen: list[int] = []
        for s in sorted(by_server, key=lambda s: (-len(by_server[s]), s)):
            chosen.extend(by_server[s][: n - len(chosen)])
            if len(chosen) == n:
                break
        return chosen
