"""Typed configs of ``train.py`` and ``python -m pretrain`` (registered with Hydra's
ConfigStore by :func:`register_configs`; the YAML files under ``conf/`` fill them in, and a key
that is not a field is an error)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from agents.config import AgentConfig
from agents.learners import LEARNERS, PLAN, env_for
from agents.policy import PolicyConfig
from envs.gym.contention_env import ContentionConfig
from envs.gym.factory import EnvConfig
from envs.gym.workloads import MixtureConfig
from pretrain.bc import BCConfig
from training.pretraining import PretrainConfig

__all__ = [
    "ClusterEntry",
    "EvalConfig",
    "FederatedConfig",
    "PretrainRunConfig",
    "TrainConfig",
    "check_train_config",
    "register_configs",
]


@dataclass
class EvalConfig:
    """Periodic validation on fixed held-out workloads (``seeds``; training workloads are
    drawn with 31-bit seeds from the env's generator and pretraining uses ``1000 ..``):
    every ``every`` decisions (0: only at start and end), masked argmax (``deterministic``)
    or sampling with ``sample_seed`` (DL²'s validation samples); ``baselines``: allocators
    (names of :data:`envs.sim.elastic.allocators.ALLOCATORS`) evaluated once at start, each
    logged as ``eval/ratio_to_<name>``.  ``windows`` (``plan_pg`` only; default 0): as many
    Philly trace windows of the training VCs' validation days
    (:data:`~envs.gym.workloads.VALIDATION_DAYS`, drawn with ``window_seed``) join the
    validation workloads, so that the best checkpoint is chosen on real-trace windows too
    (never on the held-out VCs).  ``settings`` (``plan_pg`` only; default none): more DL²
    settings (names of :data:`~envs.gym.factory.SETTINGS`) whose generator workloads
    ``seeds`` join the validation, each in its own env (the run's env config with that setting),
    for a policy of any window.  The validation figure is the mean over all of them of each
    workload's avg JCT; with ``settings``, the best checkpoint is chosen on the mean over the
    workloads of the ratio of the policy's avg JCT to the best baseline's on that workload
    (so that a setting of long jobs does not outweigh the others)."""

    seeds: list[int] = field(default_factory=lambda: [100, 101, 102])
    every: int = 20000
    deterministic: bool = False
    sample_seed: int = 0
    baselines: list[str] = field(
        default_factory=lambda: ["drf", "srtf", "optimus", "esrtf", "adasrsf"]
    )
    windows: int = 0
    window_seed: int = 777
    settings: list[str] = field(default_factory=list)


@dataclass
class ClusterEntry:
    """One cluster of a federated run: an env config and the seed of its first workload."""

    env: EnvConfig = field(default_factory=EnvConfig)
    seed: int = 0


@dataclass
class FederatedConfig:
    """``mode``: ``none`` (one cluster: the top-level env, ``n_envs`` copies), ``local`` (one
    env per listed cluster in this process), ``ray`` (clusters hosted in Ray actors);
    ``address``: an existing Ray cluster (``None``: start one locally);
    ``envs_per_actor``: clusters per Ray actor."""

    mode: str = "none"
    clusters: list[ClusterEntry] = field(default_factory=list)
    address: Optional[str] = None  # noqa: UP045 (OmegaConf structured config)
    envs_per_actor: int = 2


@dataclass
class TrainConfig:
    """``python train.py +agent=<name>``: see ``conf/train.yaml``."""

    agent: Any = None  # AgentConfig, from ``+agent=...`` (not in the defaults list)
    env: EnvConfig = field(default_factory=EnvConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    federated: FederatedConfig = field(default_factory=FederatedConfig)
    mixture: MixtureConfig = field(default_factory=MixtureConfig)
    contention: ContentionConfig = field(default_factory=ContentionConfig)  # Contention-v0's
    #: the env the learner trains in (``env=contention`` sets ``dlsched/Contention-v0``); unset:
    #: the learner's own (:func:`agents.learners.env_for`)
    env_id: Optional[str] = None  # noqa: UP045 (OmegaConf structured config)
    seed: int = 0
    total_timesteps: int = 60_000  # decisions (env steps); a short run of a few minutes
    n_envs: int = 1
    torch_threads: int = 1
    progress_bar: bool = True
    checkpoint_every: int = 50_000
    resume: Optional[str] = None  # noqa: UP045 (OmegaConf structured config)
    pretrain_cache: Optional[str] = "runs/cache/pretrain"  # noqa: UP045
    run_name: str = ""


@dataclass
class PretrainRunConfig(PretrainConfig):
    """``python -m pretrain teacher=drf``: the pretraining stage's fields plus the env, the
    policy shape and process settings; see ``conf/pretrain_run.yaml``."""

    env: EnvConfig = field(default_factory=EnvConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    torch_threads: int = 1
    progress_bar: bool = True


def check_train_config(cfg: TrainConfig) -> None:
    """Clear errors for out-of-range numbers of a training run, naming the key (before any
    library sees them: SB3 and numpy would raise their own, less helpful, errors)."""
    from envs.sim.errors import ConfigError, check_number

    if not 0 <= int(cfg.seed) < 2**32:
        raise ConfigError(f"seed must be in [0, 2**32 - 1], got {cfg.seed}")
    if cfg.total_timesteps < 1:
        raise ConfigError(f"total_timesteps must be >= 1, got {cfg.total_timesteps}")
    if cfg.checkpoint_every < 0:
        raise ConfigError(f"checkpoint_every must be >= 0, got {cfg.checkpoint_every}")
    if cfg.torch_threads < 1:
        raise ConfigError(f"torch_threads must be >= 1, got {cfg.torch_threads}")
    if not cfg.eval.seeds:
        raise ConfigError("eval.seeds must list at least one validation workload seed")
    if isinstance(cfg.eval.windows, bool) or not 0 <= int(cfg.eval.windows) <= 10_000:
        raise ConfigError(f"eval.windows must be an integer in [0, 10000], got {cfg.eval.windows}")
    if not 0 <= int(cfg.eval.window_seed) < 2**63:
        raise ConfigError(f"eval.window_seed must be in [0, 2**63), got {cfg.eval.window_seed}")
    algo = getattr(cfg.agent, "algo", None)
    env_id = env_for(str(algo), cfg.env_id) if str(algo) in LEARNERS else None
    plan_only = (
        ("windows", "trace-window validation", "eval.windows=0"),
        ("settings", "validation on more DL² settings", "eval.settings=[]"),
    )
    for key, what, unset in plan_only:
        if getattr(cfg.eval, key) and env_id != PLAN:
            plan = sorted(a for a, e in LEARNERS.items() if PLAN in e.envs)
            raise ConfigError(
                f"eval.{key} ({what}) is supported in {PLAN} only (agent.algo "
                f"{', '.join(plan)}), got agent.algo={algo!r} in {env_id}; set {unset}"
            )
    if cfg.eval.every < 0:
        raise ConfigError(
            f"eval.every must be >= 0 (0: only at start and end), got {cfg.eval.every}"
        )
    agent = cfg.agent
    if isinstance(agent, AgentConfig):
        check_number(agent.learning_rate, "agent.learning_rate", gt=0)
        check_number(agent.gamma, "agent.gamma", ge=0)
        if agent.gamma > 1:
            raise ConfigError(f"agent.gamma must be <= 1, got {agent.gamma}")
        for key in ("ent_coef", "vf_coef", "max_grad_norm"):
            check_number(getattr(agent, key), f"agent.{key}", ge=0)
        if agent.ppo.batch_size < 1 or agent.ppo.n_epochs < 1:
            raise ConfigError(
                f"agent.ppo.batch_size and agent.ppo.n_epochs must be >= 1, got "
                f"{agent.ppo.batch_size} and {agent.ppo.n_epochs}"
            )
        check_number(agent.ppo.clip_range, "agent.ppo.clip_range", gt=0)
        _check_learner_settings(cfg, agent)


def _check_learner_settings(cfg: TrainConfig, agent: AgentConfig) -> None:
    """Settings of the learner in use that cannot work together, before anything runs: DL²'s
    exploration and replay (probabilities in [0, 1], a replay batch the buffer can hold), and
    PPO's mini-batches (a whole number of them per rollout of ``n_steps`` x the env copies)."""
    from envs.sim.errors import ConfigError

    entry = LEARNERS.get(str(agent.algo))
    keys = set(entry.keys) if entry is not None else set()
    try:
        if "exploration" in keys:
            agent.exploration.validate()
        if "replay" in keys:
            agent.replay.validate()
    except ConfigError as exc:
        raise ConfigError(f"agent.{exc}") from None
    replay = agent.replay
    if "replay" in keys and replay.batch_size > replay.capacity > 0:
        raise ConfigError(
            f"agent.replay.batch_size {replay.batch_size} is larger than agent.replay.capacity "
            f"{replay.capacity}: a replayed batch could never be drawn from the buffer"
        )
    if "ppo" in keys and "n_steps" in keys and cfg.federated.mode == "none":
        rollout = int(agent.n_steps) * int(cfg.n_envs)
        if rollout % int(agent.ppo.batch_size):
            raise ConfigError(
                f"agent.ppo.batch_size {agent.ppo.batch_size} does not divide a rollout of "
                f"agent.n_steps x n_envs = {agent.n_steps} x {cfg.n_envs} = {rollout} "
                "decisions: pick a batch size that does (PPO would cut the last mini-batch)"
            )


def register_configs() -> None:
    """Register the schemas with Hydra's ConfigStore (idempotent)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(name="pretrain_run_schema", node=PretrainRunConfig)
    cs.store(group="agent", name="agent_schema", node=AgentConfig)
    cs.store(group="env", name="env_schema", node=EnvConfig)
    cs.store(group="pretrain", name="pretrain_schema", node=PretrainConfig)
    cs.store(group="eval", name="eval_schema", node=EvalConfig)
    cs.store(group="federated", name="federated_schema", node=FederatedConfig)
    cs.store(group="mixture", name="mixture_schema", node=MixtureConfig)
    cs.store(group="bc", name="bc_schema", node=BCConfig)
