"""The ``evaluate.py`` config schema (YAML defaults under ``conf/``).

Plain dataclasses: the entry point registers :class:`EvaluateConfig` with Hydra's ConfigStore;
nothing here reads config at import time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from envs.sim.config import FidelityOptions, RunOptions
from envs.sim.traces.options import RepairsConfig, TraceConfig

__all__ = [
    "HEADLINE_STACKS",
    "WORKLOAD_FIELDS",
    "WORKLOAD_KEYS",
    "BenchConfig",
    "ClusterConfig",
    "DL2Config",
    "ElasticConfig",
    "EnvSection",
    "EvaluateConfig",
    "GrouperSection",
    "NetworkConfig",
    "PolicyEvalConfig",
    "RepairsConfig",
    "RunnerConfig",
    "TraceConfig",
    "WorkloadConfig",
]

#: The Ada-SRSF paper's headline comparison.
HEADLINE_STACKS: tuple[str, ...] = ("lwf1_adasrsf", "lwf1_srsf1", "ff_adasrsf", "ls_adasrsf")


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
class DL2Config:
    """:func:`envs.sim.elastic.workload.generate_dl2_workload` (kind ``dl2``)."""

    num_jobs: int = 60
    max_arrivals_per_slot: int = 3
    arrival: str = "google"
    max_epochs: int = 80000
    max_workers: int = 32
    max_ps: int = 32


@dataclass
class EnvSection:
    """The DL² Gymnasium env (:class:`envs.gym.factory.EnvConfig`) of workload kind ``env``.

    A ``None`` (or empty ``overrides``) keeps the value of the first ``policy:`` scheduler's
    training env (its checkpoint's ``meta["env"]``), or else :class:`EnvConfig`'s default;
    ``overrides`` are merged key by key.  ``setting``: ``small``, ``large``, ``tiny`` or
    ``medium``; ``overrides``: :class:`DL2Setting` fields (``num_nodes``, ``num_jobs``, ``J``,
    ...); ``max_slots``: the truncation horizon (slots); ``arrival``: ``google``, ``poisson``
    or ``uniform``; ``trace``: a normalised trace CSV instead of the generator; ``backlog``:
    what the jobs beyond the window get when a slot closes (``none`` or an allocator name,
    :class:`~envs.gym.factory.EnvConfig`'s ``backlog``), e.g. ``bundle`` for DL²'s.
    """

    setting: str | None = None
    overrides: dict[str, int] = field(default_factory=dict)
    max_slots: int | None = None
    arrival: str | None = None
    trace: str | None = None
    backlog: str | None = None


@dataclass
class GrouperSection:
    """Grouper's cojobs in its flow-level simulator (:mod:`envs.sim.grouper`, workload kind
    ``grouper``): the shipped trace ``trace`` (``40cojobs`` or ``small_2cojobs``), its first
    ``cojobs`` cojobs (``None``: all) with every stage plan divided by ``divisor``
    (:func:`~envs.sim.grouper.scale_trace`; Grouper's 1/20 scale is 20 and 20, 1/10 is all
    and 10), and the run options of :class:`~envs.sim.grouper.GrouperConfig`: ``num_queues``
    priority queues per port (``None``: unlimited) and the cojob stage ``barrier``."""

    trace: str = "40cojobs"
    cojobs: int | None = None
    divisor: int = 1
    num_queues: int | None = None
    barrier: bool = True


@dataclass
class WorkloadConfig:
    """Where the jobs come from; ``kind`` decides which other keys are used
    (:data:`WORKLOAD_KEYS`; any other key must keep its default).

    - ``ada_srsf_builtin``: shipped ``microsoft160_seed<seed>.csv``; ``iterations_scale``,
      ``time_scale`` (applied with ``scale_workload`` when not 1).
    - ``ada_srsf_csv``: ``path`` (Ada-SRSF layout); ``iterations_scale``, ``time_scale``.
    - ``generator``: ``generate_ada_srsf(seed, num_jobs, iterations_scale, arrival_window_ms)``.
    - ``trace``: ``path`` in any trace layout; ``time_unit`` (sim ms per trace second) and
      ``trace.*`` (:class:`TraceConfig`).  Each seed draws the models of jobs without one.
    - ``philly_builtin``: the shipped Philly slice; ``time_unit``, ``trace.*``.
    - ``tiresias_builtin``: Tiresias's 60-job example trace with its own model table,
      ``copies`` copies of it, copy ``k`` shifted by ``k x shift_s`` seconds
      (:func:`envs.sim.workload.builtin_tiresias_trace`: 40 copies = the 2,400-job stress
      trace); the same jobs for every seed.
    - ``grouper``: Grouper's cojobs (``grouper.*``, :class:`GrouperSection`), run by
      ``grouper:<policy>`` schedulers only, in Grouper's own flow-level simulator.
    - ``dl2``: DL²'s elastic generator, one draw per seed; ``dl2.*``.
    - ``env``: the DL² Gymnasium env's own workload (``env.*``, :class:`EnvSection`), one per
      seed; every scheduler runs through the env (``elastic:`` and ``policy:`` kinds only).

    ``jitter`` (job-level kinds): each seed's workload gets every model's forward and backward
    time multiplied by its own factor in ``[1 - jitter, 1 + jitter]``, drawn from the seed
    (:func:`envs.sim.workload.jitter_compute`).  With a fixed workload (``ada_srsf_csv``,
    ``trace``) the seeds then form an ensemble of the same jobs under timing noise; a single
    run's avg JCT can move by several percent under 0.1% jitter (EXPERIMENTS.md).
    """

    kind: str = "ada_srsf_builtin"
    path: str | None = None
    iterations_scale: float = 1.0
    time_scale: float = 1.0
    num_jobs: int = 160
    arrival_window_ms: float = 12000.0
    time_unit: float = 1000.0
    jitter: float = 0.0
    copies: int = 1
    shift_s: float = 7.0
    trace: TraceConfig = field(default_factory=TraceConfig)
    dl2: DL2Config = field(default_factory=DL2Config)
    env: EnvSection = field(default_factory=EnvSection)
    grouper: GrouperSection = field(default_factory=GrouperSection)


@dataclass
class ElasticConfig:
    """The elastic (DL²) world for ``elastic:`` schedulers, mapped from ``cluster``:
    ``cluster.num_servers`` nodes, each with ``gpus_per_server x gpu_slots_per_gpu`` GPU slots
    and ``gpus_per_server x cpu_slots_per_gpu`` CPU slots (DL²'s GPU worker takes 4 GPU and 2
    CPU slots, a PS 2 CPU slots: 4/4 gives every GPU room for one worker and one PS).
    Jobs of a job-level workload become elastic jobs by :mod:`envs.sim.elastic.trace`'s rules
    (requested GPUs = caps; work = the traced duration at the request).

    ``through_env``: run ``elastic:`` schedulers through the DL² Gymnasium env (its window of
    ``J`` jobs and its placement, as a learned policy sees them) instead of the slot simulator
    on every job; always so when a ``policy:`` scheduler is present or the workload kind is
    ``env``.  With workload kind ``dl2`` the env is built from ``workload.dl2``,
    ``cluster.num_servers`` and ``elastic.max_slots`` (see :mod:`evaluation.env_runs`)."""

    slot_s: float = 1200.0
    speed: str = "measured"  # measured | analytical
    scaling_overhead_s: float = 0.0
    gpu_slots_per_gpu: int = 4
    cpu_slots_per_gpu: int = 4
    max_slots: int = 100_000
    through_env: bool = False


@dataclass
class RunnerConfig:
    """Where the runs run (``runner=local`` / ``runner=ray``).

    ``local``: this process (``workers: 1``) or a process pool of ``workers`` processes.
    ``ray``: each run is a Ray task (one CPU) on the cluster at ``address`` (``host:port`` of a
    running head; ``null`` starts a one-machine Ray on 127.0.0.1); the per-job results are
    those of the local pool, byte for byte.  A run whose node dies is run again on another node
    up to ``max_retries`` times; past that it is reported failed and the finished runs are
    kept (``summary.md`` marked partial, ``failed.csv``).  ``policy:`` checkpoints must be
    readable at the same absolute path on every node."""

    kind: str = "local"  # local | ray
    address: str | None = None
    max_retries: int = 3


@dataclass
class PolicyEvalConfig:
    """How ``policy:`` schedulers act: masked argmax (``deterministic: true``) or a draw from
    the masked softmax with ``numpy.random.default_rng([sample_seed, workload seed])``
    (``false``).  ``null`` (default): as the policy was validated in training (its recorded
    ``act``: ``policy.json``, or the checkpoint's ``meta.json``), else sampled, as
    ``train.py``'s validation samples by default."""

    deterministic: bool | None = None
    sample_seed: int = 0


@dataclass
class BenchConfig:
    """``evaluate.py bench=v1``: run dlsched-bench's suite (``docs/bench.md``) instead of one
    evaluation, as ``python -m evaluation.bench`` does.  ``suite``: ``null`` = no benchmark (a
    plain evaluation); ``only`` / ``exclude`` / ``world`` select scenarios; ``schedulers``:
    ``null`` = every registered heuristic and released policy; ``imports``: modules that register
    a user's schedulers; ``out``: where the cells and the board go.  The cells run ``workers``
    at a time (0: one per core) with ``runner`` (``runner=ray runner.address=...``), and
    ``plot`` draws the heat map."""

    suite: str | None = None
    only: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)
    world: str | None = None
    schedulers: list[str] | None = None
    imports: list[str] = field(default_factory=list)
    out: str = "runs/bench"


@dataclass
class EvaluateConfig:
    """The ``evaluate.py`` command's config (see ``conf/evaluate.yaml``)."""

    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    elastic: ElasticConfig = field(default_factory=ElasticConfig)
    policy_eval: PolicyEvalConfig = field(default_factory=PolicyEvalConfig)
    stacks: list[str] = field(default_factory=lambda: list(HEADLINE_STACKS))
    baseline: str | None = None
    # the simulation: a SimConfig.named mode and settings by their flat SimConfig keys
    # (envs.sim.config.FLAT_FIELDS), at SimConfig's defaults but for the heartbeat
    mode: str = "correct"
    fidelity: str = FidelityOptions().level.value
    engine: str = RunOptions().engine
    max_wall_s: float | None = RunOptions().max_wall_s
    progress_s: float | None = 60.0
    seeds: list[int] = field(default_factory=lambda: [0])
    workers: int = 0
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    out_dir: str = "runs/${now:%Y-%m-%d_%H-%M-%S}_evaluate"
    # a non-empty out_dir is refused unless the run resumes it (runs only what is missing)
    # or overwrites it (starts it afresh)
    resume: bool = False
    overwrite: bool = False
    check_invariants: bool = RunOptions().check_invariants
    plot: bool = True
    # ``bench=v1``: run the benchmark suite instead (BenchConfig)
    bench: BenchConfig = field(default_factory=BenchConfig)


#: Workload keys each kind uses (besides ``kind``); any other key must keep its default.
WORKLOAD_KEYS: dict[str, tuple[str, ...]] = {
    "ada_srsf_builtin": ("iterations_scale", "time_scale", "jitter"),
    "ada_srsf_csv": ("path", "iterations_scale", "time_scale", "jitter"),
    "generator": ("num_jobs", "iterations_scale", "arrival_window_ms", "jitter"),
    "trace": ("path", "time_unit", "trace", "jitter"),
    "philly_builtin": ("time_unit", "trace", "jitter"),
    "tiresias_builtin": ("copies", "shift_s", "jitter"),
    "grouper": ("grouper",),
    "dl2": ("dl2",),
    "env": ("env", "trace"),  # workload.trace.*: the options of workload.env.trace
}
#: Every workload key besides ``kind``.
WORKLOAD_FIELDS = (
    "path",
    "iterations_scale",
    "time_scale",
    "num_jobs",
    "arrival_window_ms",
    "time_unit",
    "jitter",
    "copies",
    "shift_s",
    "trace",
    "dl2",
    "env",
    "grouper",
)
