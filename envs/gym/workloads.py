"""Training on a distribution of workloads: DL²'s generator at random load and cluster size, and
windows of the public Philly corpus.

A :class:`Mixture` draws one *scenario* per group of rollouts (:meth:`Mixture.draw`): with
probability ``trace_share`` a window of real jobs, otherwise a DL² generator workload; the
cluster size (``nodes``) and the generator's arrival rate (``arrivals``, DL²'s
``max_arrivals_per_slot``) are drawn uniformly from their ranges.  :func:`scenario_envs` builds
the ``K`` envs of a group on it (all with the same jobs).  How a window of real jobs is
drawn: :func:`trace_window`.

**The corpus and its split** (:data:`PHILLY_CORPUS`, shipped gzip-compressed: the 80,847-job
public Philly digest, all 15 VCs; see ``envs/sim/data/README.md``).  Training draws from
:data:`TRAIN_VCS` in days :data:`TRAIN_DAYS`; validation from the same VCs in
:data:`VALIDATION_DAYS`; tests use :data:`TEST_VCS` (never trained on, any day) and the training
VCs after day :data:`TEST_DAYS` ``[0]``.  Users with the full source trace can point
``path`` at any file :func:`~envs.sim.traces.read_trace` reads.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from envs.gym.cluster_env import ClusterEnv, ContentionClusterEnv
from envs.gym.factory import EnvConfig, env_kwargs, setting_of
from envs.sim.elastic.trace import elastic_jobs_from_workload
from envs.sim.elastic.types import dl2_job_types
from envs.sim.elastic.workload import DL2Setting
from envs.sim.errors import ConfigError, WorkloadError

__all__ = [
    "PHILLY_CORPUS",
    "TEST_DAYS",
    "TEST_VCS",
    "TRAIN_DAYS",
    "TRAIN_VCS",
    "VALIDATION_DAYS",
    "Mixture",
    "MixtureConfig",
    "Scenario",
    "TraceWindows",
    "scenario_envs",
    "trace_window",
]

#: The public Philly corpus shipped with the package (gzip).
PHILLY_CORPUS = (
    Path(__file__).resolve().parents[1] / "sim" / "data" / "traces" / "philly_digest_public.csv.gz"
)
#: VCs whose windows training may use (7 of the 11 VCs with > 300 jobs).
TRAIN_VCS = ("6214e9", "11cb48", "b436b2", "103959", "0e4a51", "ed69ec", "7f04ca")
#: VCs held out for testing (never in training or validation).
TEST_VCS = ("6c71a0", "ee9e8c", "2869ce", "e13805")
#: Days (since the corpus's first submission) of training, validation and test windows.
TRAIN_DAYS = (0.0, 75.0)
VALIDATION_DAYS = (75.0, 90.0)
TEST_DAYS = (90.0, 120.0)
_DAY = 86400.0


@functools.lru_cache(maxsize=4)
def _corpus(path: str) -> Any:
    from envs.sim.traces import read_trace

    return read_trace(path)


@dataclass
class TraceWindows:
    """How trace windows are drawn (see the module docstring); ``path`` ``None`` = the shipped
    corpus; ``jobs`` ``0`` = the setting's ``num_jobs``."""

    path: str | None = None
    vcs: list[str] = field(default_factory=lambda: list(TRAIN_VCS))
    days: list[float] = field(default_factory=lambda: list(TRAIN_DAYS))
    jobs: int = 0
    duration_cap_h: float = 24.0
    load: float = 1.0

    def check(self) -> None:
        if not self.vcs:
            raise ConfigError("trace windows need at least one VC (windows.vcs)")
        if len(self.days) != 2 or not (0 <= self.days[0] < self.days[1] < math.inf):
            raise ConfigError(
                f"windows.days must be [start, end) with 0 <= start < end, got {self.days}"
            )
        if self.jobs < 0:
            raise ConfigError(f"windows.jobs must be >= 0 (0 = the setting's), got {self.jobs}")
        for name in ("duration_cap_h", "load"):
            v = float(getattr(self, name))
            if not (math.isfinite(v) and v > 0):
                raise ConfigError(f"windows.{name} must be a finite number > 0, got {v}")


@dataclass
class MixtureConfig:
    """Training workloads: ``trace_share`` of the groups from trace windows, the rest from the
    DL² generator; ``nodes`` / ``arrivals``: ``[lo, hi]`` ranges drawn per group (empty: the
    env setting's value)."""

    enabled: bool = False
    trace_share: float = 0.0
    nodes: list[int] = field(default_factory=list)
    arrivals: list[int] = field(default_factory=list)
    windows: TraceWindows = field(default_factory=TraceWindows)


@dataclass(frozen=True)
class Scenario:
    """One drawn workload: the setting (cluster size, generator), the workload seed, and the
    jobs of a trace window (``None``: the generator's jobs for ``seed``)."""

    setting: DL2Setting
    seed: int
    jobs: tuple[Any, ...] | None
    label: str


def _range(values: list[int], name: str) -> tuple[int, int] | None:
    if not values:
        return None
    if len(values) != 2 or not (1 <= int(values[0]) <= int(values[1])):
        raise ConfigError(f"mixture.{name} must be [lo, hi] with 1 <= lo <= hi, got {values}")
    return int(values[0]), int(values[1])


def trace_window(
    windows: TraceWindows, setting: DL2Setting, rng: np.random.Generator, *, tries: int = 20
) -> tuple[tuple[Any, ...], str]:
    """The elastic jobs of one window drawn with ``rng`` and a label naming it.

    **Trace windows** (:class:`TraceWindows`): ``jobs`` consecutive submissions of one VC, the VC
    drawn uniformly from ``vcs`` and the first job uniformly among that VC's submissions inside
    ``days`` (days since the corpus's first submission); durations capped at ``duration_cap_h``
    hours; arrivals rescaled so the offered load is ``load`` x the cluster's worker capacity
    (:func:`~envs.sim.traces.transform.scale_to_load`); requests above the setting's
    ``max_workers`` clipped; models drawn with the window's seed (Philly records none); then the
    env's trace rules (:func:`~envs.sim.elastic.trace.elastic_jobs_from_workload`: requested GPUs
    become the caps, work = the traced duration at that allocation).
    """
    from envs.sim.elastic.speed import MeasuredSpeed
    from envs.sim.traces import ConvertOptions, convert_trace
    from envs.sim.traces.transform import cap_durations, fit_to_cluster, scale_to_load, select

    windows.check()
    path = str(windows.path or PHILLY_CORPUS)
    corpus = _corpus(path)
    n = int(windows.jobs or setting.num_jobs)
    lo, hi = windows.days[0] * _DAY, windows.days[1] * _DAY
    starts = {
        vc: [j.submit_s for j in corpus.jobs if j.vc == vc and lo <= j.submit_s < hi]
        for vc in windows.vcs
    }
    usable = [vc for vc, s in starts.items() if len(s) >= max(2, n // 2)]
    if not usable:
        raise ConfigError(
            f"{path}: no usable trace window: no VC of {windows.vcs} has {max(2, n // 2)} "
            f"submissions in days {windows.days}"
        )
    cluster = setting.cluster()
    types = dl2_job_types()
    worker_gpu = max(min(t.worker_gpu for t in types), 1)
    capacity = max(cluster.num_nodes * cluster.gpu_slots // worker_gpu, 1)
    last: Exception | None = None
    for _ in range(tries):
        vc = usable[int(rng.integers(len(usable)))]
        cand = starts[vc]
        first = cand[int(rng.integers(len(cand)))]
        try:
            t = select(corpus, start_s=first, end_s=hi, vcs=[vc], max_jobs=n)
            if len(t.jobs) < max(2, n // 2):
                continue
            t = cap_durations(t, windows.duration_cap_h * 3600.0)
            t = scale_to_load(t, capacity, windows.load)
            t = fit_to_cluster(t, setting.max_workers, "clip")
            seed = int(rng.integers(2**31 - 1))
            workload, _ = convert_trace(t, seed=seed, options=ConvertOptions(unknown_models="draw"))
            jobs = elastic_jobs_from_workload(
                workload,
                slot_s=cluster.slot_s,
                speed=MeasuredSpeed(max_ps=setting.max_ps, max_workers=setting.max_workers),
            )
        except WorkloadError as exc:  # e.g. a window whose jobs all submit at once
            last = exc
            continue
        return jobs, f"philly:{vc}@{first / _DAY:.2f}d:{len(jobs)}"
    raise ConfigError(f"{path}: no usable trace window in {tries} draws ({last})")


class Mixture:
    """Draws scenarios for the group learner (see the module docstring)."""

    def __init__(self, config: MixtureConfig, env: EnvConfig) -> None:
        if not 0.0 <= config.trace_share <= 1.0:
            raise ConfigError(f"mixture.trace_share must be in [0, 1], got {config.trace_share}")
        self.nodes = _range(list(config.nodes), "nodes")
        self.arrivals = _range(list(config.arrivals), "arrivals")
        if env.trace or env.speed != "measured":
            raise ConfigError(
                "a workload mixture draws its own workloads in the measured speed mode; "
                "leave env.trace unset and env.speed=measured"
            )
        self.config = config
        self.env = env
        self.base = setting_of(env)
        if config.trace_share > 0:
            config.windows.check()

    def draw(self, rng: np.random.Generator) -> Scenario:
        """One scenario (all draws from ``rng``)."""
        changes: dict[str, int] = {}
        if self.nodes:
            changes["num_nodes"] = int(rng.integers(self.nodes[0], self.nodes[1] + 1))
        if self.arrivals:
            changes["max_arrivals_per_slot"] = int(
                rng.integers(self.arrivals[0], self.arrivals[1] + 1)
            )
        setting = replace(self.base, **changes)
        seed = int(rng.integers(2**31 - 1))
        if rng.random() < self.config.trace_share:
            jobs, label = trace_window(self.config.windows, setting, rng)
            return Scenario(setting, seed, jobs, f"{label} nodes={setting.num_nodes}")
        return Scenario(
            setting,
            seed,
            None,
            f"dl2 seed={seed} nodes={setting.num_nodes} arrivals={setting.max_arrivals_per_slot}",
        )


def scenario_envs(env: EnvConfig, scenario: Scenario, k: int) -> list[ClusterEnv]:
    """``k`` envs of ``env``'s kind on ``scenario`` (reset them with ``scenario.seed``)."""
    kwargs = env_kwargs(env, scenario.seed)
    kwargs["setting"] = scenario.setting
    if scenario.jobs is not None:
        kwargs.pop("workload_options", None)
        kwargs.pop("trace", None)
        kwargs["jobs"] = scenario.jobs
    cls = ContentionClusterEnv if env.speed == "contention" else ClusterEnv
    return [cls(**kwargs) for _ in range(k)]
