"""Typed env configuration shared by pretraining, training and evaluation.

:class:`EnvConfig` is a plain dataclass (registered with Hydra's ConfigStore by the entry
points, never imported from Hydra here) that names a DL² setting and overrides of its sizes;
:func:`make_env` builds a :class:`~envs.gym.cluster_env.ClusterEnv` from it.  Every run records
``asdict(config)`` so that the exact environment can be rebuilt.

Named settings: ``small`` and ``large`` (DL²'s), ``tiny`` (4 nodes, 12 jobs, ``J`` = 8,
3,000 max epochs, 8 workers/PS per job: episodes of a few hundred decisions, for tests and
smoke runs) and ``medium`` (12 nodes, 24 jobs, ``J`` = 12, 20,000 max epochs, 16 workers/PS:
a few thousand decisions, for quick experiments).

**Ada-SRSF workload family** (``ada``, ``ada_builtin``): the Ada-SRSF distribution in the
elastic world, as ``experiments/dl2_speed_models.py --ada`` runs it (details: :class:`AdaSetting`).

**Speed modes** (``speed``): ``measured`` (DL²'s table, :class:`SlotSimulator`; the default)
or ``contention`` (:class:`~envs.gym.cluster_env.EngineClusterEnv`: every slot simulated
in the contention engine; ``placer``: ``None`` = the env's own task placement, or a core
placement token such as ``lwf1``; ``comm``: the engine's communication scheduler, ``fs``
fair share or ``adasrsf``; ``min_steps``: time compression, 0 = every iteration).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Optional

from envs.gym.cluster_env import ClusterEnv, EngineClusterEnv
from envs.gym.seeds import SEED_LIMIT, check_seed
from envs.sim.elastic.allocators import ALIASES, ALLOCATORS, make_allocator
from envs.sim.elastic.engine_slots import ContentionConfig, ContentionSpeed
from envs.sim.elastic.spec import ElasticCluster, ElasticJob, SpeedModel
from envs.sim.elastic.speed import MeasuredSpeed
from envs.sim.elastic.workload import DL2_LARGE, DL2_SMALL, DL2Setting
from envs.sim.errors import ConfigError
from envs.sim.traces.options import RepairsConfig, TraceConfig

__all__ = [
    "ADA_SETTING",
    "SEED_LIMIT",
    "SETTINGS",
    "SPEEDS",
    "AdaSetting",
    "EnvConfig",
    "check_seed",
    "contention_config",
    "env_class",
    "gym_make",
    "make_env",
    "setting_of",
    "with_dl2_setting",
]

#: Speed modes of :attr:`EnvConfig.speed`.
SPEEDS = ("measured", "contention")


@dataclass(frozen=True)
class AdaSetting(DL2Setting):
    """The Ada-SRSF workload family in the elastic world.

    Defaults: 160 jobs, a fresh draw per workload seed, 16 nodes of 16 CPU and 16 GPU slots
    (4 DL² workers each), 60-s slots, the trace's milliseconds read as seconds, each job's work
    what it trains alone at its requested GPUs (one PS per worker, caps ``max_workers = max_ps
    = GPUs``) in its traced duration under the speed mode's model; window ``J`` = 64 (at least
    the active jobs of the heuristics' runs).

    ``num_jobs`` jobs drawn by :func:`~envs.sim.workload.generate_ada_srsf` (``source =
    "generated"``, any seed) or the shipped :func:`~envs.sim.workload.builtin_ada_srsf`
    workloads (``"builtin"``, seeds 0-2, 160 jobs); ``num_nodes`` nodes of ``cpu_slots`` /
    ``gpu_slots`` slots, ``slot_s``-second slots; ``time_unit`` workload ms per elastic
    second; ``work_speed`` (``"contention"`` or ``"measured"``): the model that sets each
    job's work (:func:`~envs.sim.elastic.trace.elastic_jobs_from_workload`).  The DL²
    generator's fields ``max_arrivals_per_slot`` and ``max_epochs`` are unused;
    ``max_workers`` / ``max_ps`` are the largest request (32 GPUs).
    """

    cpu_slots: int = 16
    gpu_slots: int = 16
    slot_s: float = 60.0
    time_unit: float = 1.0
    source: str = "generated"
    work_speed: str = "contention"

    def __post_init__(self) -> None:
        if self.source not in ("generated", "builtin"):
            raise ConfigError(
                f"AdaSetting.source must be 'generated' or 'builtin', got {self.source!r}"
            )
        if self.work_speed not in SPEEDS:
            raise ConfigError(
                f"AdaSetting.work_speed must be one of {SPEEDS}, got {self.work_speed!r}"
            )
        if not (math.isfinite(self.slot_s) and self.slot_s > 0):
            raise ConfigError(f"slot_s must be a finite number > 0, got {self.slot_s}")
        if not (math.isfinite(self.time_unit) and self.time_unit > 0):
            raise ConfigError(f"time_unit must be a finite number > 0, got {self.time_unit}")
        if self.source == "builtin" and self.num_jobs != 160:
            raise ConfigError(
                f"the builtin Ada-SRSF workloads have 160 jobs; num_jobs={self.num_jobs} needs "
                "the 'ada' (generated) setting"
            )

    def workload_model(self, seed: int) -> Any:
        """The core :class:`~envs.sim.spec.Workload` of ``seed`` (before conversion)."""
        from envs.sim.workload import builtin_ada_srsf, generate_ada_srsf

        if self.source == "builtin":
            if seed not in (0, 1, 2):
                raise ConfigError(
                    f"the builtin Ada-SRSF workloads are seeds 0-2, got seed {seed}; use the "
                    "'ada' (generated) setting for other seeds"
                )
            return builtin_ada_srsf(seed)
        return generate_ada_srsf(int(seed), num_jobs=self.num_jobs)

    def work_model(self) -> SpeedModel:
        """The speed model that sets the jobs' work."""
        return ContentionSpeed() if self.work_speed == "contention" else MeasuredSpeed()

    def workload(self, seed: int, **options: Any) -> tuple[ElasticJob, ...]:
        """The elastic jobs of workload ``seed``; no generator options."""
        from envs.sim.elastic.trace import elastic_jobs_from_workload

        if options:
            raise ConfigError(
                f"the Ada-SRSF setting takes no workload options, got {sorted(options)}"
            )
        return elastic_jobs_from_workload(
            self.workload_model(seed),
            slot_s=self.slot_s,
            speed=self.work_model(),
            time_unit=self.time_unit,
        )

    def submit_offset_s(self, seed: int) -> float:
        """Mean offset of the jobs' submissions inside their arrival slots (s): subtract it
        from the env's JCT (counted from the arrival slot's start) for JCT from submission."""
        jobs = self.workload_model(seed).jobs
        return sum(j.submit_ms / self.time_unit % self.slot_s for j in jobs) / len(jobs)

    def cluster(self) -> ElasticCluster:
        return ElasticCluster(
            num_nodes=self.num_nodes,
            cpu_slots=self.cpu_slots,
            gpu_slots=self.gpu_slots,
            slot_s=self.slot_s,
        )


#: ``experiments/dl2_speed_models.py --ada``'s world: 160 jobs, 16 nodes x 4 workers, 60-s slots.
ADA_SETTING = AdaSetting(
    num_nodes=16,
    num_jobs=160,
    max_arrivals_per_slot=0,
    J=64,
    max_epochs=0,
    max_workers=32,
    max_ps=32,
)
#: overrides (:attr:`EnvConfig.overrides`) that mean something in the Ada-SRSF setting
_ADA_OVERRIDES = ("J", "num_jobs", "num_nodes")

SETTINGS: dict[str, DL2Setting] = {
    "small": DL2_SMALL,
    "large": DL2_LARGE,
    "tiny": DL2Setting(
        num_nodes=4,
        num_jobs=12,
        max_arrivals_per_slot=2,
        J=8,
        max_epochs=3000,
        max_workers=8,
        max_ps=8,
    ),
    "medium": DL2Setting(
        num_nodes=12,
        num_jobs=24,
        max_arrivals_per_slot=2,
        J=12,
        max_epochs=20000,
        max_workers=16,
        max_ps=16,
    ),
    "ada": ADA_SETTING,
    "ada_builtin": replace(ADA_SETTING, source="builtin"),
}
_SETTING_FIELDS = {f.name for f in fields(DL2Setting)}


@dataclass
class EnvConfig:
    """Which environment to build.

    ``setting``: a name in :data:`SETTINGS`; ``overrides``: fields of :class:`DL2Setting` to
    change (``num_nodes``, ``num_jobs``, ``J``, ...); ``reward``: ``"dl2"`` (per-slot sum of
    normalised epochs), ``"jct"`` (minus job-slots in the system / ``jct_scale``) or any
    other ``"cluster"`` reward of :mod:`envs.gym.rewards`; ``max_slots``: truncation
    horizon; ``arrival``: ``"google"``, ``"poisson"`` or ``"uniform"``; ``trace``: a
    normalised trace CSV instead of the generator (``None``).

    ``speed``: ``"measured"`` (default) or ``"contention"`` (every slot simulated in the
    contention engine); contention only: ``placer`` (``None``: the env's own task placement;
    or a core placement token, e.g. ``"lwf1"``), ``comm`` (engine communication scheduler,
    ``"fs"`` or e.g. ``"adasrsf"``), ``min_steps`` (merged steps per slot; 0 = every
    iteration).  ``slot_s``: slot length of the Ada-SRSF settings (``None``: 60 s).

    ``backlog``: what the jobs beyond the window get when a slot closes, on the capacity the
    window left: ``"none"`` (default: nothing, they wait), ``"bundle"`` (one worker + one PS
    each while they fit, arrival order: DL²'s ``ASSIGN_BUNDLE``, which DL² applies before the
    policy acts, here after), or an allocator name (``"drf"``, ``"optimus"``, ...).

    ``features``: ``"dl2"`` (default) or ``"extended"`` (two more columns per row, log-scaled
    remaining work and requested size: for traces, where the type does not set a job's size;
    :class:`~envs.gym.cluster_env.ClusterEnv`).

    ``trace_options``: how ``trace`` is read, windowed and converted, the same options as
    ``evaluate.py``'s ``workload.trace.*`` (:class:`~envs.sim.traces.options.TraceConfig`:
    any layout, repairs, a window, a duration cap, a load, fitting, unknown models, GPU
    shares); at their defaults the trace is a normalised CSV read as before.
    """

    setting: str = "small"
    overrides: dict[str, int] = field(default_factory=dict)
    reward: str = "dl2"
    jct_scale: float = 1.0
    max_slots: int = 2000
    arrival: str = "google"
    trace: Optional[str] = None  # noqa: UP045 (OmegaConf structured config)
    speed: str = "measured"
    placer: Optional[str] = None  # noqa: UP045 (OmegaConf structured config)
    comm: str = "fs"
    min_steps: int = 50
    slot_s: Optional[float] = None  # noqa: UP045 (OmegaConf structured config)
    backlog: str = "none"
    features: str = "dl2"
    trace_options: TraceConfig = field(default_factory=TraceConfig)

    def as_dict(self) -> dict[str, Any]:
        """The fields (what runs record and cache keys hash); the speed-mode fields are left
        out at their defaults, so that earlier configs keep their records and keys."""
        d = asdict(self)
        for name, default in _MODE_DEFAULTS.items():
            if d[name] == default:
                del d[name]
        if d["trace_options"] == asdict(TraceConfig()):
            del d["trace_options"]
        return d


#: the mode fields of :class:`EnvConfig` and their defaults (see ``as_dict``)
_MODE_DEFAULTS: dict[str, Any] = {
    f.name: f.default
    for f in fields(EnvConfig)
    if f.name in ("speed", "placer", "comm", "min_steps", "slot_s", "backlog", "features")
}


def with_dl2_setting(config: EnvConfig, name: str, key: str) -> EnvConfig:
    """``config`` with DL² setting ``name`` (its overrides kept); a name that is not a DL²
    setting of :data:`SETTINGS` (the Ada-SRSF ones are another world) is a
    :class:`ConfigError` naming ``key`` and the choices."""
    known = sorted(k for k, v in SETTINGS.items() if not isinstance(v, AdaSetting))
    if name not in known:
        raise ConfigError(f"{key}: unknown DL² setting {name!r}; known: {known}")
    return replace(config, setting=name)


def setting_of(config: EnvConfig) -> DL2Setting:
    """The :class:`DL2Setting` that ``config`` names, with its overrides applied."""
    if config.setting not in SETTINGS:
        raise ConfigError(f"unknown env setting {config.setting!r}; known: {sorted(SETTINGS)}")
    overrides = dict(config.overrides or {})
    unknown = sorted(set(overrides) - _SETTING_FIELDS)
    if unknown:
        raise ConfigError(
            f"unknown env override(s) {unknown}; DL2Setting fields: {sorted(_SETTING_FIELDS)}"
        )
    base = SETTINGS[config.setting]
    if isinstance(base, AdaSetting):
        bad = sorted(set(overrides) - set(_ADA_OVERRIDES))
        if bad:
            raise ConfigError(
                f"env override(s) {bad} have no effect in the {config.setting!r} setting; "
                f"it takes {list(_ADA_OVERRIDES)}"
            )
    try:
        setting = replace(base, **{k: int(v) for k, v in overrides.items()})
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"bad env overrides {overrides}: {exc}") from None
    if isinstance(setting, AdaSetting):
        extra: dict[str, Any] = {"work_speed": config.speed}
        if config.slot_s is not None:
            extra["slot_s"] = float(config.slot_s)
        setting = replace(setting, **extra)
    return setting


def _check_modes(config: EnvConfig) -> None:
    """Clear errors for speed-mode and Ada-SRSF options that do not go together."""
    if config.speed not in SPEEDS:
        raise ConfigError(f"env speed must be one of {list(SPEEDS)}, got {config.speed!r}")
    if config.speed != "contention":
        set_ = [
            name
            for name in ("placer", "comm", "min_steps")
            if getattr(config, name) != _MODE_DEFAULTS[name]
        ]
        if set_:
            raise ConfigError(
                f"env option(s) {set_} apply only to speed='contention' (speed is {config.speed!r})"
            )
    if isinstance(config.min_steps, bool) or int(config.min_steps) != config.min_steps:
        raise ConfigError(f"min_steps must be an integer >= 0, got {config.min_steps!r}")
    if config.min_steps < 0:
        raise ConfigError(f"min_steps must be >= 0 (0 = every iteration), got {config.min_steps}")
    ada = isinstance(SETTINGS.get(config.setting), AdaSetting)
    if config.slot_s is not None and not ada:
        raise ConfigError(
            f"slot_s applies to the Ada-SRSF settings ('ada', 'ada_builtin'), not "
            f"{config.setting!r}"
        )
    if ada and config.trace:
        raise ConfigError(
            f"the {config.setting!r} setting draws its own workloads; trace= is not allowed"
        )
    if ada and config.arrival != "google":
        raise ConfigError(
            f"arrival={config.arrival!r} is a DL² generator option; the {config.setting!r} "
            "setting draws Ada-SRSF arrivals (uniform over 12,000 trace ms)"
        )


def contention_config(config: EnvConfig) -> ContentionConfig:
    """The :class:`ContentionConfig` of a contention-mode ``config``."""
    return ContentionConfig(min_steps_per_slot=int(config.min_steps) or None, comm=config.comm)


def env_kwargs(config: EnvConfig, seed: int = 0) -> dict[str, Any]:
    """Keyword arguments of :class:`ClusterEnv` for ``config``."""
    _check_modes(config)
    kwargs: dict[str, Any] = {
        "setting": setting_of(config),
        "seed": check_seed(seed, "env seed", None),
        "reward": config.reward,
        "jct_scale": float(config.jct_scale),
        "max_slots": int(config.max_slots),
        "features": config.features,
    }
    if config.trace:
        kwargs["trace"] = config.trace
        if asdict(config.trace_options) != asdict(TraceConfig()):
            kwargs["trace_options"] = config.trace_options
    elif not isinstance(kwargs["setting"], AdaSetting):
        kwargs["workload_options"] = {"arrival": config.arrival}
    if config.backlog != "none":
        if str(config.backlog).lower() not in {*ALLOCATORS, *ALIASES}:
            raise ConfigError(
                f"env backlog must be 'none' or an allocator name {sorted(ALLOCATORS)}, "
                f"got {config.backlog!r}"
            )
        kwargs["allocator_for_unused"] = make_allocator(config.backlog, role="env backlog")
    if config.speed == "contention":
        kwargs["contention"] = contention_config(config)
        kwargs["placer"] = config.placer
    elif isinstance(kwargs["setting"], AdaSetting):
        kwargs["speed"] = kwargs["setting"].work_model()  # experiments' MeasuredSpeed()
    return kwargs


def make_env(config: EnvConfig | dict[str, Any], seed: int = 0) -> ClusterEnv:
    """A :class:`ClusterEnv` for ``config`` (an :class:`EnvConfig` or a mapping of its fields)
    whose first unseeded reset uses workload ``seed``."""
    if not isinstance(config, EnvConfig):
        config = coerce_env_config(config)
    return env_class(config)(**env_kwargs(config, seed))


def env_class(config: EnvConfig) -> type[ClusterEnv]:
    """The env class of ``config``: :class:`EngineClusterEnv` for ``speed: contention``, else
    :class:`ClusterEnv`."""
    return EngineClusterEnv if config.speed == "contention" else ClusterEnv


#: ClusterEnv keyword arguments that are not EnvConfig fields (the class's own, lower-level
#: interface: :func:`gym_make` passes a call that uses one straight to the class)
_ENV_ONLY = frozenset(
    {"J", "L", "jobs", "workload_options", "scaling_overhead_s", "strict_reference_placement",
     "placement", "allocator_for_unused"}
)  # fmt: skip


def gym_make(
    setting: str | DL2Setting = "small",
    *,
    seed: int = 0,
    render_mode: str | None = None,
    **kwargs: Any,
) -> ClusterEnv:
    """The entry point of ``gymnasium.make("dlsched/Cluster-v0", ...)``: the keys of
    :class:`EnvConfig` (``setting`` any name in :data:`SETTINGS`, ``reward``, ``speed``,
    ``features``, ``overrides``, ...), validated as Hydra's ``env=`` is, with ``reward="jct"``
    by default (its episode return is minus the total JCT: learnable by stock learners; DL²'s
    ``"dl2"`` returns the number of jobs whatever the policy).  A :class:`DL2Setting` object or
    a lower-level :class:`ClusterEnv` argument (``J``, ``jobs``, ``speed`` as a model, ...)
    builds the class directly, as before."""
    speed = kwargs.get("speed")
    direct = (
        isinstance(setting, DL2Setting)
        or bool(_ENV_ONLY & set(kwargs))
        or (speed is not None and not isinstance(speed, str))
    )
    if direct:
        if isinstance(setting, str):
            if setting not in SETTINGS:
                raise ConfigError(f"unknown setting {setting!r}; known: {sorted(SETTINGS)}")
            setting = SETTINGS[setting]
        kwargs.setdefault("reward", "jct")
        seed = check_seed(seed, "dlsched/Cluster-v0 seed", None)
        return ClusterEnv(setting, seed=seed, render_mode=render_mode, **kwargs)
    config = coerce_env_config({"setting": setting, "reward": "jct", **kwargs})
    env = make_env(config, seed)
    if render_mode is not None:
        if render_mode not in env.metadata["render_modes"]:
            raise ConfigError(
                f"render_mode must be one of {env.metadata['render_modes']}, got {render_mode!r}"
            )
        env.render_mode = render_mode
    return env


def coerce_env_config(data: Any) -> EnvConfig:
    """An :class:`EnvConfig` from a mapping (e.g. a Hydra ``DictConfig`` section)."""
    if isinstance(data, EnvConfig):
        return data
    items = dict(data)
    names = {f.name for f in fields(EnvConfig)}
    unknown = sorted(set(items) - names)
    if unknown:
        raise ConfigError(f"unknown env config key(s) {unknown}; known: {sorted(names)}")
    if "overrides" in items and items["overrides"] is not None:
        items["overrides"] = dict(items["overrides"])
    if "trace_options" in items and not isinstance(items["trace_options"], TraceConfig):
        items["trace_options"] = _trace_config(dict(items["trace_options"] or {}))
    return EnvConfig(**items)


def _trace_config(data: dict[str, Any]) -> TraceConfig:
    """A :class:`TraceConfig` from a mapping; unknown keys are a :class:`ConfigError`."""
    known = {f.name for f in fields(TraceConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"unknown trace_options key(s) {unknown}; known: {sorted(known)}")
    if "repairs" in data and not isinstance(data["repairs"], RepairsConfig):
        rep = dict(data["repairs"] or {})
        names = {f.name for f in fields(RepairsConfig)}
        if set(rep) - names:
            raise ConfigError(
                f"unknown trace_options.repairs key(s) {sorted(set(rep) - names)}; "
                f"known: {sorted(names)}"
            )
        data["repairs"] = RepairsConfig(**rep)
    for key in ("vcs", "statuses"):
        if key in data:
            data[key] = list(data[key])
    return TraceConfig(**data)
