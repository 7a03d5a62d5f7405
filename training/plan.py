"""``dlsched/ClusterPlan-v0`` for the ``episodes`` pipeline (:mod:`training.episodes`):
``python train.py +agent=plan_pg`` (or ``+agent=a2c``): SL + RL over the slot's plan.

Why: in Cluster-v0's per-increment actions RL does not improve on the EfficientSRTF clone;
with the slot's plan as ONE action (:class:`~envs.gym.plan_env.PlanEnv`: which allocator, or
EfficientSRTF efficiency, plans the slot) it does (docs/experiments/against-heuristics.md,
"One decision per slot").  Steps:

1. Record the run (``run.json``).  Evaluate ``eval.baselines`` through the env on the
   validation workloads ``eval.seeds`` (:func:`training.baselines.baseline_jcts`) and
   ``eval.windows`` Philly windows of the training VCs' validation days (default none).
2. Clone ``pretrain.teacher``'s plan (the always-the-same action: ``pretrain=esrtf`` is
   plan 0) into :class:`~agents.episode_pg.MaskedMLP` on workloads ``pretrain.seed_offset +
   i`` (``i < pretrain.num_workloads``), with label smoothing ``agent.plan.bc_smoothing``;
   ``pretrain=none`` starts from random weights.
3. ``agent.plan.iterations`` of :class:`~agents.episode_pg.EpisodePG` (``agent.learning_rate``,
   ``agent.ent_coef``, ``agent.plan.*``) on workloads it draws from [10,000, 2^31), or, with
   ``mixture=...``, on each group's scenario of the workload mixture (:mod:`envs.gym.workloads`:
   generator workloads and Philly windows of the training VCs, cluster sizes drawn).  Every
   ``agent.plan.val_every`` iterations the policy acts on the validation workloads through the
   same Cluster-v0 env as the baselines (:class:`~envs.gym.plan_env.PlanActor`; argmax when
   ``eval.deterministic``, else sampled with ``eval.sample_seed``).

Writes ``learning_curve.csv`` (decisions, iteration, avg JCT, ratio to each baseline),
TensorBoard scalars (``tb/``: reference lines of the heuristics, losses apart, KL to the clone,
timing, hparams: see :class:`EpisodeLog`), ``checkpoints/best/policy.npz`` (the best validation
point), ``checkpoints/final/policy.npz`` (the last) and, with a clone,
``checkpoints/clone/policy.npz``, each usable as ``policy:<dir>`` in ``evaluate.py``, and
``summary.json``, each written atomically (:mod:`envs.files`).  Ctrl-C (or SIGTERM, under
``train.py``) stops between iterations and still saves ``final``; the rollout workers are
stopped however the run ends.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from agents.config import PlanPGConfig
from agents.episode_pg import (
    PLAN_ARCHS,
    EpisodePG,
    EpisodePGConfig,
    PolicyNet,
    load_episode_pg,
    plan_net,
)
from agents.episode_results import EpisodeResult, aggregate, run_episode
from agents.learners import learner
from agents.plan_policy import PlanPolicy
from agents.protocol import episode_pg_config
from agents.rollout_pool import RolloutPool
from envs.gym.actors import rule_actor
from envs.gym.cluster.rewards import JCT_RETURN
from envs.gym.cluster_env import ClusterEnv
from envs.gym.factory import EnvConfig, make_env, setting_of, with_dl2_setting
from envs.gym.plan_env import (
    PLAN_ENV_ID,
    PlanEnv,
    parse_plan,
    plan_label,
    plan_specs,
)
from envs.gym.workloads import (
    TRAIN_VCS,
    VALIDATION_DAYS,
    Mixture,
    TraceWindows,
    scenario_envs,
    window_scenarios,
)
from envs.sim.errors import ConfigError
from training.baselines import baseline_jcts
from training.config import TrainConfig
from training.episodes import EpisodeWorld, Teacher, train_episodes

__all__ = ["PlanWorld", "check_plan_config", "train_plan", "validate_plan"]


def _check_learner_blocks(cfg: TrainConfig) -> None:
    """The blocks of the learner's own (plan_a2c's critic, replay and exploration;
    expert_iteration's search budget and horizon)."""
    keys = learner(cfg.agent.algo).keys
    if "a2c" in keys:
        cfg.agent.a2c.check(int(cfg.agent.plan.iterations))
    if "expert" in keys:
        cfg.agent.expert.check(contention=False)


def check_plan_config(cfg: TrainConfig) -> None:
    """Clear errors for what ``plan_pg`` does not take or cannot use."""
    p: PlanPGConfig = cfg.agent.plan
    for key in ("iterations", "groups", "val_every", "bc_epochs", "hidden", "workers", "epochs"):
        if int(getattr(p, key)) < 1:
            raise ConfigError(f"agent.plan.{key} must be >= 1, got {getattr(p, key)}")
    if p.arch not in PLAN_ARCHS:
        raise ConfigError(f"agent.plan.arch must be one of {list(PLAN_ARCHS)}, got {p.arch!r}")
    mixture = cfg.mixture.settings if cfg.mixture.enabled else []
    for key, names in (("mixture.settings", mixture), ("eval.settings", cfg.eval.settings)):
        windows = {setting_of(with_dl2_setting(cfg.env, str(n), key)).J for n in names}
        windows.add(setting_of(cfg.env).J)
        if p.arch == "mlp" and len(windows) > 1:
            raise ConfigError(
                f"{key} {list(names)} and env.setting={cfg.env.setting} have windows "
                f"J={sorted(windows)}; the flat network takes one window: use "
                "agent.plan.arch=set"
            )
    plan_specs([str(x) for x in p.plans] or None)
    _check_learner_blocks(cfg)
    if not 0.0 <= float(p.bc_smoothing) < 1.0:
        raise ConfigError(f"agent.plan.bc_smoothing must be in [0, 1), got {p.bc_smoothing}")
    if cfg.env.reward not in JCT_RETURN:
        raise ConfigError(
            f"plan_pg minimises avg JCT: it needs a reward whose return is minus the JCT, "
            f"env.reward={'|'.join(sorted(JCT_RETURN))} (got {cfg.env.reward!r}; DL²'s reward "
            "returns the number of jobs whatever the policy)"
        )
    if cfg.federated.mode == "ray":
        raise ConfigError(
            f"federated=ray is not available to the plan learners (agent.algo="
            f"{cfg.agent.algo}); federated=local trains one policy over the clusters, their "
            "rollouts spread over agent.plan.workers processes"
        )
    if cfg.federated.mode == "local" and cfg.resume:
        raise ConfigError(
            "resume= is not available to federated=local runs (the clusters' turn is not "
            "saved); start the run again"
        )
    if cfg.federated.mode == "local" and (
        cfg.mixture.enabled or cfg.eval.settings or cfg.eval.windows
    ):
        raise ConfigError(
            "federated=local draws each group's workload from its clusters and validates on "
            "them: leave mixture, eval.settings and eval.windows at their defaults"
        )
    unsupported = {
        "pretrain.on_mixture": bool(cfg.pretrain.on_mixture),
    }
    bad = [k for k, v in unsupported.items() if v]
    if bad:
        raise ConfigError(
            f"plan_pg does not support {', '.join(bad)}; leave them at their defaults"
        )
    if cfg.pretrain.enabled:
        seeds = set(
            range(cfg.pretrain.seed_offset, cfg.pretrain.seed_offset + cfg.pretrain.num_workloads)
        )
        overlap = sorted(seeds & {int(s) for s in cfg.eval.seeds})
        if overlap:
            raise ConfigError(
                f"the clone's workloads (pretrain.seed_offset..) include validation seeds {overlap}"
            )


def _teacher_plan(teacher: str, env: PlanEnv) -> int:
    """The plan ``teacher`` names (a label as ``agent.plan.plans`` writes it, e.g.
    ``esrtf(backfill=True)``; a bare name in any case)."""
    name = str(teacher)
    try:  # the label in its one spelling (names lower case, options as plan_label writes them)
        n, o = parse_plan(name)
        name = plan_label(n.lower(), o)
    except ConfigError:
        pass  # not a label: named below with the choices
    if name not in env.labels:
        raise ConfigError(
            f"pretrain.teacher={teacher!r} is not one of the plans {list(env.labels)}; plan_pg "
            "clones one plan (e.g. pretrain=esrtf) or none (pretrain=none)"
        )
    return env.labels.index(name)


def validate_plan(
    net: PolicyNet,
    env: PlanEnv,
    seeds: list[int],
    *,
    deterministic: bool = True,
    sample_seed: int = 0,
    extra: Sequence[tuple[ClusterEnv, int]] = (),
    pool: RolloutPool | None = None,
    best: Sequence[float] | None = None,
) -> dict[str, float]:
    """The plan policy on ``seeds`` through ``env``'s inner Cluster-v0 env, as the baselines
    run, then on each ``(env, seed)`` of ``extra`` (e.g. the trace windows of ``eval.windows``,
    each env holding its window's jobs): :func:`agents.episode_results.aggregate` of all the
    episodes (``avg_jct``, ``unfinished``...); with ``pool``, the episodes run in its
    worker processes (the same episodes: each is a function of the weights, env and seed).
    ``best``: per workload (in that order) the best baseline's avg JCT; then ``score`` is the
    mean over the workloads of the policy's avg JCT over it."""
    runs = [(env.inner, int(s)) for s in seeds] + [(e, int(s)) for e, s in extra]
    items = [(e, s, env.plans, deterministic, sample_seed) for e, s in runs]
    if pool is None:
        results = [_validation_episode(net, item) for item in items]
    else:
        results = pool.map(net, _validation_episode, items)
    out = aggregate(results)
    if best is not None:
        if len(best) != len(results):
            raise ConfigError(f"{len(best)} best-baseline figures for {len(results)} workloads")
        out["score"] = float(np.mean([r.avg_jct / b for r, b in zip(results, best, strict=True)]))
    return out


def _validation_episode(
    net: PolicyNet, item: tuple[ClusterEnv, int, Any, bool, int]
) -> EpisodeResult:
    """One validation episode of the plan policy ``net``: ``(env, seed, plans,
    deterministic, sample seed)``."""
    env, seed, plans, deterministic, sample_seed = item
    rng = np.random.default_rng([sample_seed, seed])
    return run_episode(env, PlanPolicy(net, plans).actor(env, deterministic, rng), seed)


def _validation_windows(cfg: TrainConfig) -> tuple[list[tuple[ClusterEnv, int]], list[str]]:
    """``eval.windows`` trace windows of the training VCs' validation days (drawn with
    ``eval.window_seed``): their ``(env, seed)`` pairs and their labels."""
    ev = cfg.eval
    if not ev.windows:
        return [], []
    trace = TraceWindows(vcs=list(TRAIN_VCS), days=list(VALIDATION_DAYS))
    scenarios = window_scenarios(trace, setting_of(cfg.env), int(ev.windows), int(ev.window_seed))
    pairs = [(scenario_envs(cfg.env, sc, 1)[0], sc.seed) for sc in scenarios]
    return pairs, [sc.label for sc in scenarios]


def federated_clusters(cfg: TrainConfig, env: PlanEnv, arch: str) -> list[PlanEnv]:
    """``federated=local``'s clusters, one plan env each (``env``'s plans, the run's
    ``env.reward``: the learner minimises one objective everywhere); a cluster whose
    observation the network cannot read (the flat MLP: another window or feature set; the
    set network: another row) is a :class:`ConfigError` listing every cluster's layout."""
    from agents.federated import cluster_configs  # (the clusters' list and its checks)

    configs, _ = cluster_configs(cfg.federated)
    # one objective: every cluster runs the run's env.reward (a JCT return, checked above)
    configs = [dataclasses.replace(c, reward=cfg.env.reward) for c in configs]
    envs = [PlanEnv(config=c, plans=env.plans) for c in configs]

    def layout(e: PlanEnv) -> int:
        return e.obs_size if arch == "mlp" else e.row_width

    if len({layout(e) for e in [env, *envs]}) > 1:
        what = "observation size" if arch == "mlp" else "job-row width"
        listed = ", ".join(
            f"clusters[{i}] ({c.setting}, J={e.inner.J}): {layout(e)}"
            for i, (c, e) in enumerate(zip(configs, envs, strict=True))
        )
        raise ConfigError(
            f"federated clusters must share the network's {what}: env ({cfg.env.setting}): "
            f"{layout(env)}, {listed}"
            + ("; agent.plan.arch=set reads any window" if arch == "mlp" else "")
        )
    return envs


def _cluster_draw(
    clusters: Sequence[PlanEnv],
) -> Callable[[np.random.Generator], tuple[PlanEnv, int]]:
    """``rng -> (cluster env, seed)``, the clusters in turn (an iteration of ``groups x
    len(clusters)`` groups gives each cluster ``groups``)."""
    turn = [0]

    def draw(rng: np.random.Generator) -> tuple[PlanEnv, int]:
        env = clusters[turn[0] % len(clusters)]
        turn[0] += 1
        return env, int(rng.integers(10_000, 2**31))

    return draw


def _per_cluster(
    net: PolicyNet, clusters: Sequence[PlanEnv], seeds: list[int], deterministic: bool,
    sample_seed: int,
) -> list[float]:  # fmt: skip
    """The policy's avg JCT on each cluster's validation workloads."""
    out = []
    for c in clusters:
        m = validate_plan(net, c, seeds, deterministic=deterministic, sample_seed=sample_seed)
        out.append(float(m["avg_jct"]))
    return out


def _validation_settings(cfg: TrainConfig) -> list[tuple[ClusterEnv, int]]:
    """``eval.settings``' validation workloads: per setting, ``eval.seeds`` in an env of the
    run's env config with that setting."""
    out: list[tuple[ClusterEnv, int]] = []
    for name in cfg.eval.settings:
        env = make_env(with_dl2_setting(cfg.env, str(name), "eval.settings"))
        out += [(env, int(s)) for s in cfg.eval.seeds]
    return out


def _baseline_runs(
    names: Sequence[str], pairs: Sequence[tuple[ClusterEnv, int]]
) -> dict[str, list[float]]:
    """Each baseline's avg JCT on each ``(env, seed)``, through the env (as
    :mod:`evaluation.heldout` runs heuristics; a fresh allocator per episode)."""
    out: dict[str, list[float]] = {}
    for name in names:
        out[str(name)] = []
        for env, seed in pairs:
            actor = rule_actor(env, str(name), role="plan")
            out[str(name)].append(run_episode(env, actor, seed).avg_jct)
    return out


@dataclass
class PlanWorld(EpisodeWorld):
    """``dlsched/ClusterPlan-v0`` for the ``episodes`` pipeline (the module docstring's
    steps): the plan env of ``env``, ``agent.plan``'s network and schedule, the clone of
    ``pretrain.teacher``'s plan, validation through the Cluster-v0 env as the baselines run
    (``eval.windows``, ``eval.settings``, ``federated=local``'s clusters), and the per-cluster
    table of a federated run."""

    env_id: ClassVar[str] = PLAN_ENV_ID
    block: ClassVar[str] = "plan"
    val: Any = None
    clusters: list[PlanEnv] = field(default_factory=list)
    windows: list[tuple[ClusterEnv, int]] = field(default_factory=list)
    best_per_workload: list[float] | None = None
    cluster_runs: dict[str, list[float]] = field(default_factory=dict)
    clone_per_cluster: list[float] | None = None

    def __post_init__(self) -> None:
        self.act = "argmax" if self.cfg.eval.deterministic else "sampled"

    @property
    def p(self) -> PlanPGConfig:
        return self.cfg.agent.plan

    @property
    def iterations(self) -> int:
        return int(self.p.iterations)

    @property
    def val_every(self) -> int:
        return int(self.p.val_every)

    @property
    def seeds_val(self) -> list[int]:
        return [int(s) for s in self.cfg.eval.seeds]

    def check(self) -> None:
        check_plan_config(self.cfg)

    def setup(self) -> None:
        cfg, p = self.cfg, self.p
        plans = [str(x) for x in p.plans] or None
        self.env = PlanEnv(config=cfg.env, plans=plans)
        self.val = PlanEnv(config=cfg.env, plans=plans)
        self.net = plan_net(p.arch, self.env, p.hidden)
        if cfg.federated.mode == "local":
            self.clusters = federated_clusters(cfg, self.env, p.arch)
        self.summary["plans"] = list(self.env.labels)

    def teacher(self) -> Teacher | None:
        cfg = self.cfg
        if not cfg.pretrain.enabled:
            return None
        k = _teacher_plan(str(cfg.pretrain.teacher), self.env)
        seeds = [cfg.pretrain.seed_offset + i for i in range(cfg.pretrain.num_workloads)]
        return Teacher(lambda _e: k, self.env.labels[k], seeds, int(self.p.bc_epochs),
                       float(self.p.bc_smoothing))  # fmt: skip

    def baselines(self) -> dict[str, float]:
        cfg, ev, seeds_val, val = self.cfg, self.cfg.eval, self.seeds_val, self.val
        names = [str(b) for b in ev.baselines]
        windows, window_labels = _validation_windows(cfg)
        if windows:
            self.summary["validation_windows"] = window_labels
        if self.clusters:  # validation on every cluster; the best checkpoint on the ratio
            self.val = val = PlanEnv(env=self.clusters[0].inner.replica(), plans=self.env.plans)
            windows = [(c.inner, s) for c in self.clusters[1:] for s in seeds_val]
            self.cluster_runs = _baseline_runs(names, [(val.inner, s) for s in seeds_val] + windows)
            self.best_per_workload = [min(v) for v in zip(*self.cluster_runs.values(), strict=True)]
            baselines = {b: float(np.mean(v)) for b, v in self.cluster_runs.items()}
        elif ev.settings:  # more settings; the best checkpoint chosen on the ratio to the best
            windows += _validation_settings(cfg)
            runs = _baseline_runs(names, [(val.inner, s) for s in seeds_val] + windows)
            self.best_per_workload = [min(v) for v in zip(*runs.values(), strict=True)]
            baselines = {b: float(np.mean(v)) for b, v in runs.items()}
            self.summary["validation_settings"] = [str(x) for x in ev.settings]
        else:
            baselines = baseline_jcts(names, cfg.env, seeds_val)
            if windows:  # the mean over generator seeds and windows together
                sums = {b: sum(v) for b, v in _baseline_runs(names, windows).items()}
                n = len(seeds_val) + len(windows)
                baselines = {b: (v * len(seeds_val) + sums[b]) / n for b, v in baselines.items()}
        self.windows = windows
        self.scored = self.best_per_workload is not None
        self.val_key = "val_avg_jct" if self.best_per_workload is None else "val_score"
        return baselines

    def pg_config(self) -> EpisodePGConfig:
        # federated: each iteration takes agent.plan.groups groups from every cluster
        cfg = episode_pg_config(self.cfg.agent, PLAN_ENV_ID, self.cfg.seed)
        return dataclasses.replace(cfg, groups=cfg.groups * max(len(self.clusters), 1))

    def attach(self, pg: EpisodePG) -> None:
        cfg, ev = self.cfg, self.cfg.eval
        if self.clusters and cfg.pretrain.enabled:  # the clone on every cluster
            self.clone_per_cluster = _per_cluster(
                self.net, self.clusters, self.seeds_val, bool(ev.deterministic), ev.sample_seed
            )
        if self.clusters:
            pg.draw_workload = _cluster_draw(self.clusters)
        if cfg.mixture.enabled:  # each group's workload from the mixture, in its own env
            pg.draw_workload = _mixture_draw(Mixture(cfg.mixture, cfg.env), cfg.env, self.env)
            self.summary["mixture"] = asdict(cfg.mixture)

    def measure(self, pg: EpisodePG) -> dict[str, float]:
        ev = self.cfg.eval
        return validate_plan(self.net, self.val, self.seeds_val,
                             deterministic=bool(ev.deterministic), sample_seed=ev.sample_seed,
                             extra=self.windows, pool=pg.rollout_pool(),
                             best=self.best_per_workload)  # fmt: skip

    def env_hparams(self) -> dict[str, Any]:
        cfg = self.cfg
        return {
            "env.setting": str(cfg.env.setting),
            "env.backlog": str(cfg.env.backlog),
            "pretrain.teacher": str(cfg.pretrain.teacher) if cfg.pretrain.enabled else "none",
            "mixture": bool(cfg.mixture.enabled),
        }

    def finish(self, fields: dict[str, Any], out: Path) -> dict[str, Any]:
        ev, clusters = self.cfg.eval, self.clusters
        extra: dict[str, Any] = {}
        if clusters:  # per cluster: the clone, the final and best policies, each heuristic
            best_net, _ = load_episode_pg(out / "checkpoints" / "best" / "policy.npz")
            seeds, n = self.seeds_val, len(self.seeds_val)
            det, ss = bool(ev.deterministic), ev.sample_seed
            final = _per_cluster(self.net, clusters, seeds, det, ss)
            best = _per_cluster(best_net, clusters, seeds, det, ss)
            clone_runs = self.clone_per_cluster
            extra["clusters"] = [
                {
                    "env": c.config.as_dict() if c.config is not None else None,
                    "final_avg_jct": final[i],
                    "best_avg_jct": best[i],
                    **({"clone_avg_jct": clone_runs[i]} if clone_runs else {}),
                    "baselines_avg_jct": {
                        b: float(np.mean(v[i * n : (i + 1) * n]))
                        for b, v in self.cluster_runs.items()
                    },
                }
                for i, c in enumerate(clusters)
            ]
        return extra


def train_plan(cfg: TrainConfig, out: Path, resolved: dict[str, Any]) -> dict[str, Any]:
    """One run of a plan learner in ``dlsched/ClusterPlan-v0`` into ``out`` (the module
    docstring); its summary."""
    return train_episodes(cfg, out, resolved, PlanWorld(cfg))


def _mixture_draw(
    mixture: Mixture, env_config: EnvConfig, env: PlanEnv
) -> Callable[[np.random.Generator], tuple[PlanEnv, int]]:
    """``rng -> (PlanEnv, seed)``: a scenario of ``mixture`` in a plan env of its own."""

    def draw(rng: np.random.Generator) -> tuple[PlanEnv, int]:
        scenario = mixture.draw(rng)
        inner = scenario_envs(env_config, scenario, 1)[0]
        return PlanEnv(env=inner, plans=env.plans), scenario.seed

    return draw
