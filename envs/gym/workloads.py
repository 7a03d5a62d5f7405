"""Training on a distribution of workloads: DL²'s generator at random load and cluster size, and
windows of the public Philly corpus.

A :class:`Mixture` draws one *scenario* per group of rollouts: with probability ``trace_share``
a window of real jobs, otherwise a DL² generator workload at a cluster size (``nodes``) and
arrival rate (``arrivals``) drawn uniformly; :func:`scenario_envs` builds the group's envs.

**Trace windows** (:class:`TraceWindows`): ``jobs`` consecutive submissions of one VC, the VC
drawn uniformly from ``vcs`` and the first job uniformly among that VC's submissions inside
``days`` (days since the corpus's first submission; the window ends there too); durations
capped at ``duration_cap_h`` hours; arrivals rescaled to ``load`` x the cluster's capacity
(:func:`~envs.sim.traces.transform.scale_to_load`); larger requests clipped; models drawn with
the window's seed (Philly records none).  :func:`trace_window` makes DL² elastic jobs of it
(:func:`~envs.sim.elastic.trace.elastic_jobs_from_workload`), :func:`contention_window` a
contention-engine workload for ``dlsched/Contention-v0`` and ``simulate()``.

**The corpus and its split** (:data:`PHILLY_CORPUS`: the 80,847-job public Philly digest, all
15 VCs, ``envs/sim/data/README.md``): training draws from :data:`TRAIN_VCS` in
:data:`TRAIN_DAYS`, validation from the same VCs in :data:`VALIDATION_DAYS`, tests from
:data:`TEST_VCS` (never trained on, any day; the training VCs in :data:`TEST_DAYS` give a
split in time).  ``path`` may name any file :func:`~envs.sim.traces.read_trace` reads.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from envs.gym.cluster_env import ClusterEnv, EngineClusterEnv
from envs.gym.factory import EnvConfig, env_kwargs, setting_of, with_dl2_setting
from envs.sim.elastic.trace import elastic_jobs_from_workload
from envs.sim.elastic.types import dl2_job_types
from envs.sim.elastic.workload import DL2Setting
from envs.sim.errors import ConfigError, WorkloadError
from envs.sim.spec import ClusterSpec, Workload
from envs.sim.traces.model import Trace

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
    "contention_window",
    "scenario_envs",
    "trace_window",
    "usable_vcs",
    "window_scenarios",
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
        if (
            isinstance(self.vcs, str)
            or not self.vcs
            or not all(isinstance(v, str) for v in self.vcs)
        ):
            raise ConfigError(f"trace windows need a list of VC names (windows.vcs), got "
                              f"{self.vcs!r}")  # fmt: skip
        try:
            days = [float(d) for d in self.days]
        except (TypeError, ValueError):
            days = []
        if len(days) != 2 or not (0 <= days[0] < days[1] < math.inf):
            raise ConfigError(
                f"windows.days must be [start, end) with 0 <= start < end, got {self.days}"
            )
        if isinstance(self.jobs, bool) or not isinstance(self.jobs, int | np.integer):
            raise ConfigError(f"windows.jobs must be an integer, got {self.jobs!r}")
        if self.jobs < 0:
            raise ConfigError(f"windows.jobs must be >= 0 (0 = the setting's), got {self.jobs}")
        for name in ("duration_cap_h", "load"):
            try:
                v = float(getattr(self, name))
            except (TypeError, ValueError):
                v = math.nan
            if not (math.isfinite(v) and v > 0):
                raise ConfigError(
                    f"windows.{name} must be a finite number > 0, got {getattr(self, name)!r}"
                )


@dataclass
class MixtureConfig:
    """Training workloads: ``trace_share`` of the groups from trace windows, the rest from the
    DL² generator; ``nodes`` / ``arrivals``: ``[lo, hi]`` ranges drawn per group (empty: the
    env setting's value).  ``settings``: DL² settings (names of
    :data:`~envs.gym.factory.SETTINGS`) drawn uniformly per group, each with its own window
    ``J``, job count, arrival rate and job sizes (empty: the env's setting; a network of one
    window ``J`` needs one setting or equal windows); ``scale``: ``[lo, hi]`` factors drawn
    log-uniformly per group that multiply the drawn setting's node count (Pollux's and Sia's
    cluster scaling; not with ``nodes``); ``trace_loads``: ``[lo, hi]`` factors drawn
    log-uniformly per trace window, its offered load (instead of ``windows.load``; Pollux's and
    Sia's load scaling).  Options left empty draw nothing, so a mixture without them draws
    the same scenarios as before they existed."""

    enabled: bool = False
    trace_share: float = 0.0
    nodes: list[int] = field(default_factory=list)
    arrivals: list[int] = field(default_factory=list)
    settings: list[str] = field(default_factory=list)
    scale: list[float] = field(default_factory=list)
    trace_loads: list[float] = field(default_factory=list)
    windows: TraceWindows = field(default_factory=TraceWindows)


@dataclass(frozen=True)
class Scenario:
    """One drawn workload: the setting (cluster size, generator), the workload seed, and the
    jobs of a trace window (``None``: the generator's jobs for ``seed``)."""

    setting: DL2Setting
    seed: int
    jobs: tuple[Any, ...] | None
    label: str


def _scale_range(values: list[float], name: str) -> tuple[float, float] | None:
    """``mixture.<name>``'s ``[lo, hi]`` factors (finite, ``0 < lo <= hi``), or ``None``."""
    if not values:
        return None
    bad = len(values) != 2 or not all(isinstance(v, int | float) for v in values)
    if bad or not (0 < float(values[0]) <= float(values[1]) < math.inf):
        raise ConfigError(
            f"mixture.{name} must be [lo, hi] factors with 0 < lo <= hi (finite), got {values}"
        )
    return float(values[0]), float(values[1])


def _log_uniform(bounds: tuple[float, float], rng: np.random.Generator) -> float:
    lo, hi = math.log(bounds[0]), math.log(bounds[1])
    return math.exp(lo + (hi - lo) * float(rng.random()))


def _range(values: list[int], name: str) -> tuple[int, int] | None:
    if not values:
        return None
    if len(values) != 2 or not (1 <= int(values[0]) <= int(values[1])):
        raise ConfigError(f"mixture.{name} must be [lo, hi] with 1 <= lo <= hi, got {values}")
    return int(values[0]), int(values[1])


@functools.lru_cache(maxsize=32)
def _starts(path: str, vcs: tuple[str, ...], lo: float, hi: float) -> dict[str, tuple[float, ...]]:
    """Submission times (s) of each VC of ``vcs`` in ``[lo, hi)``: the possible window starts."""
    corpus = _corpus(path)
    return {
        vc: tuple(j.submit_s for j in corpus.jobs if j.vc == vc and lo <= j.submit_s < hi)
        for vc in vcs
    }


@functools.lru_cache(maxsize=8)
def _corpus_vcs(path: str) -> frozenset[str]:
    return frozenset(j.vc for j in _corpus(path).jobs)


def usable_vcs(windows: TraceWindows, num_jobs: int) -> list[str]:
    """The VCs of ``windows`` that can give a window of ``num_jobs`` jobs (at least ``max(2,
    num_jobs // 2)`` submissions in its days); none is a :class:`ConfigError`, and so is a VC
    the trace does not have (e.g. a YAML ``6214e9`` read as a number: quote it)."""
    windows.check()
    path = str(windows.path or PHILLY_CORPUS)
    unknown = sorted(set(windows.vcs) - _corpus_vcs(path))
    if unknown:
        raise ConfigError(
            f"{path}: no job of VC(s) {unknown} in the trace (windows.vcs); its VCs: "
            f"{sorted(_corpus_vcs(path))}"
        )
    need = max(2, num_jobs // 2)
    starts = _starts(path, tuple(windows.vcs), windows.days[0] * _DAY, windows.days[1] * _DAY)
    usable = [vc for vc, s in starts.items() if len(s) >= need]
    if not usable:
        raise ConfigError(
            f"{path}: no usable trace window: no VC of {windows.vcs} has {need} "
            f"submissions in days {windows.days}"
        )
    return usable


T = TypeVar("T")


def _draw_window(
    windows: TraceWindows,
    n: int,
    rng: np.random.Generator,
    *,
    capacity: int | Callable[[Trace], int],
    max_gpus: int | Callable[[Trace], int],
    build: Callable[[Trace, int], T],
    tries: int,
) -> tuple[T, str, Trace]:
    """One window of ``n`` jobs drawn with ``rng`` (module docstring), its arrivals scaled to
    ``windows.load`` x ``capacity``, requests above ``max_gpus`` clipped (counted in the
    trace's steps), then ``build(trace, seed)`` with a seed drawn from ``rng``; a window that
    ``build`` or the scaling rejects (:class:`WorkloadError`) is redrawn, up to ``tries``.
    ``capacity`` and ``max_gpus`` may be functions of the window (its jobs as selected, their
    durations capped): a cluster sized to the window."""
    from envs.sim.traces.transform import cap_durations, fit_to_cluster, scale_to_load, select

    usable = usable_vcs(windows, n)
    path = str(windows.path or PHILLY_CORPUS)
    corpus = _corpus(path)
    lo, hi = windows.days[0] * _DAY, windows.days[1] * _DAY
    starts = _starts(path, tuple(windows.vcs), lo, hi)
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
            t = scale_to_load(t, capacity(t) if callable(capacity) else capacity, windows.load)
            t = fit_to_cluster(t, max_gpus(t) if callable(max_gpus) else max_gpus, "clip")
            out = build(t, int(rng.integers(2**31 - 1)))
        except WorkloadError as exc:  # e.g. a window whose jobs all submit at once
            last = exc
            continue
        return out, f"philly:{vc}@{first / _DAY:.2f}d:{len(t.jobs)}", t
    raise ConfigError(f"{path}: no usable trace window in {tries} draws ({last})")


def trace_window(
    windows: TraceWindows, setting: DL2Setting, rng: np.random.Generator, *, tries: int = 20
) -> tuple[tuple[Any, ...], str]:
    """The elastic jobs of one window drawn with ``rng`` and a label naming it."""
    from envs.sim.elastic.speed import MeasuredSpeed
    from envs.sim.traces import ConvertOptions, convert_trace

    cluster = setting.cluster()
    types = dl2_job_types()
    worker_gpu = max(min(t.worker_gpu for t in types), 1)
    capacity = max(cluster.num_nodes * cluster.gpu_slots // worker_gpu, 1)

    def build(t: Trace, seed: int) -> tuple[Any, ...]:
        workload, _ = convert_trace(t, seed=seed, options=ConvertOptions(unknown_models="draw"))
        return elastic_jobs_from_workload(
            workload,
            slot_s=cluster.slot_s,
            speed=MeasuredSpeed(max_ps=setting.max_ps, max_workers=setting.max_workers),
        )

    jobs, label, _ = _draw_window(
        windows,
        int(windows.jobs or setting.num_jobs),
        rng,
        capacity=capacity,
        max_gpus=setting.max_workers,
        build=build,
        tries=tries,
    )
    return jobs, label


def window_scenarios(
    windows: TraceWindows, setting: DL2Setting, n: int, seed: int
) -> list[Scenario]:
    """``n`` trace windows of ``windows`` for ``setting``, drawn in turn from one generator
    seeded ``seed`` (the same ``seed``, the same windows), each a :class:`Scenario` with a
    workload seed drawn after its window."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        jobs, label = trace_window(windows, setting, rng)
        out.append(Scenario(setting, int(rng.integers(2**31 - 1)), jobs, label))
    return out


def contention_window(
    windows: TraceWindows,
    cluster: ClusterSpec | Callable[[int], ClusterSpec],
    rng: np.random.Generator,
    *,
    num_jobs: int = 160,
    max_iterations: int | None = 200,
    tries: int = 20,
) -> tuple[Workload, dict[str, Any]]:
    """A contention-engine :class:`~envs.sim.spec.Workload` (``dlsched/Contention-v0``,
    ``simulate()``) from one window drawn with ``rng``, and the record of how it was made.

    The window and its cuts as for the DL² env (module docstring: ``windows.jobs`` jobs, or
    ``num_jobs`` when 0; durations capped at ``windows.duration_cap_h``), with the conventions
    of ``evaluate.py``'s Philly workloads (``conf/workload/philly.yaml``) for the rest: arrivals
    scaled so the offered load is ``windows.load`` x ``cluster.num_gpus`` GPUs; a request above
    ``cluster.num_gpus`` GPUs clipped to it, keeping its duration (``record["clipped"]`` counts
    them); :func:`~envs.sim.traces.convert_trace` in real time (1000 sim ms per trace second)
    with ``unknown_models="draw"``: each job's model drawn uniformly over
    :data:`~envs.sim.models.REFERENCE_MODELS` with a seed drawn from ``rng``, iterations =
    ``round(duration_s * 1000 / (forward_ms + backward_ms))``, run as at most
    ``max_iterations`` macro-iterations (``None``: every iteration).  The workload's name is
    the window's label, ``philly:<vc>@<first submission, days>d:<jobs>``.

    ``cluster`` may be a function of the window's largest request (GPUs, before any clipping)
    that gives the cluster for it (a cluster sized to the window, e.g. "natural" sizes:
    :class:`~envs.gym.contention_env.ContentionDistribution`); the record's ``num_servers``
    then says which it gave, and the load and the clipping are of that cluster."""
    from envs.sim.traces import ConvertOptions, convert_trace

    if max_iterations is not None and not (
        isinstance(max_iterations, (int, np.integer)) and max_iterations >= 1
    ):
        raise ConfigError(f"max_iterations must be an integer >= 1 or None, got {max_iterations!r}")
    if not (isinstance(num_jobs, (int, np.integer)) and num_jobs >= 1):
        raise ConfigError(f"num_jobs must be an integer >= 1, got {num_jobs!r}")
    options = ConvertOptions(unknown_models="draw", max_iterations=max_iterations)

    def build(t: Trace, seed: int) -> tuple[Workload, dict[str, Any]]:
        return convert_trace(t, seed=seed, options=options)

    sized: dict[str, ClusterSpec] = {}
    size_of = cluster

    def gpus(t: Trace) -> int:  # the cluster of this window (its largest request's)
        assert not isinstance(size_of, ClusterSpec)
        sized["cluster"] = size_of(max(j.num_gpus for j in t.jobs))
        return sized["cluster"].num_gpus

    fixed = isinstance(cluster, ClusterSpec)
    at: int | Callable[[Trace], int] = (
        cluster.num_gpus if isinstance(cluster, ClusterSpec) else gpus
    )
    (workload, rules), label, t = _draw_window(
        windows,
        int(windows.jobs or num_jobs),
        rng,
        capacity=at,
        max_gpus=at,
        build=build,
        tries=tries,
    )
    used = cluster if isinstance(cluster, ClusterSpec) else sized["cluster"]
    workload = Workload(workload.jobs, name=label, source=workload.source)
    workload.check_fits(used)
    record = {
        "label": label,
        **t.record(),
        "clipped": int(t.steps[-1]["changed"]),
        "conversion": rules,
    }
    if not fixed:
        record["num_servers"] = used.num_servers
    return workload, record


class Mixture:
    """Draws scenarios for the group learner (see the module docstring)."""

    def __init__(self, config: MixtureConfig, env: EnvConfig) -> None:
        if not 0.0 <= config.trace_share <= 1.0:
            raise ConfigError(f"mixture.trace_share must be in [0, 1], got {config.trace_share}")
        self.nodes = _range(list(config.nodes), "nodes")
        self.arrivals = _range(list(config.arrivals), "arrivals")
        self.scale = _scale_range(list(config.scale), "scale")
        self.trace_loads = _scale_range(list(config.trace_loads), "trace_loads")
        if self.scale is not None and self.nodes is not None:
            raise ConfigError("give mixture.nodes or mixture.scale, not both")
        if env.trace or env.speed != "measured":
            raise ConfigError(
                "a workload mixture draws its own workloads in the measured speed mode; "
                "leave env.trace unset and env.speed=measured"
            )
        self.config = config
        self.env = env
        self.base = setting_of(env)
        self.settings = [
            setting_of(with_dl2_setting(env, str(name), "mixture.settings"))
            for name in config.settings
        ]
        if config.trace_share > 0:
            config.windows.check()

    def draw(self, rng: np.random.Generator) -> Scenario:
        """One scenario (all draws from ``rng``)."""
        changes: dict[str, int] = {}
        base = self.base
        if self.settings:
            base = self.settings[int(rng.integers(len(self.settings)))]
        if self.nodes:
            changes["num_nodes"] = int(rng.integers(self.nodes[0], self.nodes[1] + 1))
        if self.scale:
            changes["num_nodes"] = max(1, round(base.num_nodes * _log_uniform(self.scale, rng)))
        if self.arrivals:
            changes["max_arrivals_per_slot"] = int(
                rng.integers(self.arrivals[0], self.arrivals[1] + 1)
            )
        setting = replace(base, **changes)
        seed = int(rng.integers(2**31 - 1))
        if rng.random() < self.config.trace_share:
            windows = self.config.windows
            if self.trace_loads:
                windows = replace(windows, load=_log_uniform(self.trace_loads, rng))
            jobs, label = trace_window(windows, setting, rng)
            load = f" load={windows.load:.2f}" if self.trace_loads else ""
            return Scenario(setting, seed, jobs, f"{label} nodes={setting.num_nodes}{load}")
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
    cls = EngineClusterEnv if env.speed == "contention" else ClusterEnv
    return [cls(**kwargs) for _ in range(k)]
