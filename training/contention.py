"""``dlsched/Contention-v0`` for the ``episodes`` pipeline (:mod:`training.episodes`):
``python train.py +agent=contention_pg`` (EpisodePG), ``+agent=contention_a2c`` (the
actor-critic, :mod:`agents.plan_a2c`) or any learner that trains in it with ``env=contention``.

The fixed-demand world of the Ada-SRSF paper (all-reduce jobs, time-shared GPUs, NIC
contention), one decision per job start: which job of the window starts next and with which
placement, or wait.  Until now only ``experiments/contention_h2h.py`` could train in it; this
is the same recipe as a ``train.py`` run, with the run directory, TensorBoard, checkpoints,
Ctrl-C and the record of every other learner.  Steps:

1. Record the run (``run.json``).  Run every registered Contention-v0 rule
   (:data:`~envs.gym.contention_env.CONTENTION_TEACHERS`: ``srsf`` is exactly LWF-1 + SRSF(1)
   with ``comm=srsf1``, ``exclusive`` the SRSF rule that does not time-share GPUs, and any
   rule a user registered) through the validation env on ``eval.seeds``: the baselines.
2. Clone ``agent.contention.teacher`` into :class:`~agents.episode_pg.MaskedMLP` on
   ``bc_workloads`` workloads drawn from [10,000, 2^31) (``teacher=none``: random weights;
   rules joined by ``+``, e.g. ``exclusive+srsf``: on each workload the one of lowest avg JCT,
   :class:`BestRule`).
3. ``agent.contention.iterations`` of :class:`~agents.episode_pg.EpisodePG`
   (``agent.learning_rate``, ``agent.ent_coef``, ``agent.contention.*``), validating the
   network's masked argmax every ``val_every`` iterations on ``eval.seeds``.

The env is ``train.py``'s ``contention`` block (:class:`~envs.gym.contention_env.
ContentionConfig`: paper scale, 16 x 4 GPUs, ``comm=srsf1``, placements LWF-1 / LS / FF,
J = 20, fast fidelity by default).  With ``contention.distribution.enabled`` (``contention=mix``;
:class:`~envs.gym.contention_env.ContentionDistribution`) every episode, cloned, rolled out or
validated, draws its setting from its seed (generator workloads at several loads on 8-64
servers, Philly windows of the training VCs on their natural clusters): the validation
episodes are the validation role's draws (days 75-90 for windows) of ``eval.seeds`` (below
10,000, apart from the training draws), the best checkpoint is chosen on the mean ratio to the
best rule per validation episode (``score``), each group's advantages are relative to its mean
return, and the network must be ``agent.contention.arch=set``.
Writes ``learning_curve.csv``, ``tb/`` (as ``plan_pg``'s:
:class:`~training.plan.EpisodeLog`), ``checkpoints/best/policy.npz`` (the best validation
point), ``checkpoints/final/policy.npz`` and (with a teacher) ``checkpoints/clone/policy.npz``,
each usable as ``contention:<dir>`` in ``evaluate.py``, and ``summary.json``.  Times are
seconds (the engine's), not slots.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from agents.actors import NetActor
from agents.config import ContentionPGConfig
from agents.episode_pg import (
    CONTENTION_ARCHS,
    EpisodePG,
    EpisodePGConfig,
    PolicyNet,
    contention_net,
    run_episode,
)
from agents.learners import learner
from agents.plan_a2c import no_starved_jobs
from agents.protocol import episode_pg_config
from envs.gym.actors import rule_actor
from envs.gym.contention_env import (
    CONTENTION_ENV_ID,
    CONTENTION_TEACHERS,
    ContentionEnv,
    rule_missing,
    teacher,
)
from envs.sim.errors import ConfigError, check_number
from training.config import TrainConfig
from training.episodes import EpisodeWorld, Teacher, train_episodes

__all__ = [
    "BestRule",
    "ContentionWorld",
    "check_contention_config",
    "check_distribution",
    "teacher_names",
    "train_contention",
    "validate_contention",
]

#: ``agent.contention.teacher`` that clones nothing (random weights)
NO_TEACHER = "none"
#: the first workload seed of training and cloning episodes (they are drawn from [this, 2^31))
TRAIN_SEEDS = 10_000
#: joins the rules of ``agent.contention.teacher`` cloned as the best one per episode
BEST_OF = "+"


def check_contention_config(cfg: TrainConfig) -> None:
    """One clear error per setting a ``contention_pg`` run cannot use, before anything runs."""
    c: ContentionPGConfig = cfg.agent.contention
    if c.teacher != NO_TEACHER:  # an unknown rule names the registered ones
        _check_rules_act(tuple(teacher_names(c.teacher)), cfg, "agent.contention.teacher")
    for key in ("bc_workloads", "bc_epochs", "iterations", "groups", "group_size", "val_every",
                "hidden", "workers"):  # fmt: skip
        value = getattr(c, key)
        if isinstance(value, bool) or int(value) < 1:
            raise ConfigError(f"agent.contention.{key} must be an integer >= 1, got {value!r}")
    for key, value, hi in (("epsilon", c.epsilon, 1.0), ("bc_smoothing", c.bc_smoothing, 1.0)):
        if not 0.0 <= check_number(value, f"agent.contention.{key}", ge=0.0) < hi:
            raise ConfigError(f"agent.contention.{key} must be in [0, 1), got {value!r}")
    check_number(c.temperature, "agent.contention.temperature", ge=1.0)
    if c.arch not in CONTENTION_ARCHS:
        raise ConfigError(
            f"agent.contention.arch must be one of {list(CONTENTION_ARCHS)}, got {c.arch!r}"
        )
    dist = cfg.contention.distribution
    if dist.enabled:
        check_distribution(cfg)
    unsupported = {
        "mixture": cfg.mixture.enabled,
        "federated": cfg.federated.mode != "none",
        "eval.windows": bool(cfg.eval.windows),
    }
    algo = cfg.agent.algo
    for key, used in unsupported.items():
        if used:
            raise ConfigError(
                f"{key} is not supported by agent.algo {algo} in {CONTENTION_ENV_ID}; unset it"
            )
    if "a2c" in learner(algo).keys:
        a2c = cfg.agent.a2c
        a2c.check(int(c.iterations))
        if float(a2c.explore) > 0:
            raise no_starved_jobs(a2c.explore, CONTENTION_ENV_ID)
    if "expert" in learner(algo).keys:  # expert iteration's budget, horizon and base
        cfg.agent.expert.check(contention=True)
    _check_selector(cfg)


def _check_selector(cfg: TrainConfig) -> None:
    """The rule selector goes with the cross-entropy method or distillation (no gradient),
    with no teacher; distillation's settings and source are checked before anything runs."""
    c, algo = cfg.agent.contention, cfg.agent.algo
    keys = learner(algo).keys
    cem = "cem" in keys
    if cem:  # the search's population, elite, deviations, start and rules
        rules = tuple(str(r) for r in cfg.agent.cem.rules)
        cfg.agent.cem.check(rules)
        _check_rules_act(rules, cfg, "agent.cem.rules")
    if cem != (c.arch == "selector"):
        raise ConfigError(
            f"agent.algo={algo} with agent.contention.arch={c.arch}: the rule selector has no "
            "gradient and is trained by the cross-entropy method or distilled from its search "
            "only: use agent.algo=cem (+agent=contention_cem) or agent.algo=distill "
            "(+agent=contention_distill) with agent.contention.arch=selector"
        )
    if cem and c.teacher != NO_TEACHER:
        raise ConfigError(
            f"agent.contention.teacher={c.teacher}: a rule selector is not cloned (it starts "
            f"as one rule, agent.cem.start={cfg.agent.cem.start!r}, or as the distilled "
            "source): set agent.contention.teacher=none"
        )
    if "distill" in keys:  # its settings, and a source of the run's rules
        from agents.selector_distill import checked_source

        checked_source(cfg.agent.distill, [str(r) for r in cfg.agent.cem.rules])


def _check_rules_act(rules: tuple[str, ...], cfg: TrainConfig, key: str) -> None:
    """Every rule of ``key`` (the selector's or the teachers) is registered and places with
    candidates the run's env has (``exclusive_overlap`` needs ``ovl``): one
    :class:`ConfigError` naming the rule and the missing candidates, before anything runs."""
    placements = [str(p) for p in cfg.contention.placements]
    for name in rules:
        missing = rule_missing(name, placements)
        if missing:
            raise ConfigError(
                f"{key}: {name} places with {missing}, which the env's placement "
                f"candidates {placements} lack: add them to contention.placements"
            )


def teacher_names(spec: str) -> list[str]:
    """The rules of ``agent.contention.teacher``: one registered rule, or several joined by
    ``+`` (:class:`BestRule`); an unknown or repeated one is one :class:`ConfigError`."""
    names = str(spec).split(BEST_OF)
    for name in names:
        teacher(name)  # an unknown rule names the registered ones
    if len(set(names)) != len(names):
        raise ConfigError(f"agent.contention.teacher={spec}: a rule named twice")
    return names


class BestRule:
    """Several rules as one teacher: on each workload seed the rule whose episode through
    ``env`` has the lowest avg JCT (ties to the first named), which then acts for the whole
    episode.  An :class:`~envs.gym.episode.Actor` (its ``reset`` takes the episode's workload
    seed) and a rule of the view for that episode; ``choice``: the rule of each seed."""

    def __init__(self, env: ContentionEnv, names: list[str], seeds: list[int]) -> None:
        self.names = names
        self.choice: dict[int, str] = {}
        for s in seeds:
            jcts = [run_episode(env, s, act=rule_actor(env, n, role="teacher")).info["avg_jct_s"]
                    for n in names]  # fmt: skip
            self.choice[int(s)] = names[int(np.argmin(jcts))]
        self.rule = teacher(names[0])

    def reset(self, seed: int | None) -> None:
        if seed is None or int(seed) not in self.choice:
            raise ConfigError(f"BestRule: no choice made for workload seed {seed}")
        self.rule = teacher(self.choice[int(seed)])

    def act(self, _obs: Any, view: Any) -> int:
        return self.rule(view)

    def __call__(self, view: Any) -> int:
        return self.rule(view)


def check_distribution(cfg: TrainConfig) -> None:
    """One clear error per setting a run over ``contention.distribution`` cannot use: a
    network other than ``set`` (the settings' clusters differ in size: the flat MLP has one
    observation size), validation seeds among the training draws' ([10,000, 2^31): the two
    must be disjoint), and the distribution's own keys."""
    arch = cfg.agent.contention.arch
    if arch not in ("set", "selector"):
        raise ConfigError(
            f"contention.distribution draws clusters of several sizes: it needs "
            f"agent.contention.arch=set (the network of any cluster) or selector (the rule "
            f"selector), got {arch!r}"
        )
    clash = [int(s) for s in cfg.eval.seeds if int(s) >= TRAIN_SEEDS]
    if clash:
        raise ConfigError(
            f"eval.seeds {clash}: with contention.distribution the validation seeds must be "
            f"below {TRAIN_SEEDS:,} (training and cloning draw their episodes from "
            f"[{TRAIN_SEEDS:,}, 2^31))"
        )
    dist = cfg.contention.distribution
    dist.check(int(cfg.contention.gpus_per_server))


def validate_contention(
    net: PolicyNet, env: ContentionEnv, seeds: list[int], best: list[float] | None = None
) -> dict[str, float]:
    """The network's masked argmax on each validation workload: mean avg JCT and p95 JCT (s)
    and the unfinished jobs in all (an unfinished job counts as finishing at the end); with
    ``best`` (the best rule's avg JCT per workload) also ``score``, the mean ratio to it."""
    act = NetActor(net) if getattr(net, "acts_on_env", False) else None  # a rule selector
    infos = [run_episode(env, int(s), net, act=act).info for s in seeds]
    out = _metrics(infos)
    if best is not None:
        ratios = [i["avg_jct_s"] / b for i, b in zip(infos, best, strict=True)]
        out["score"] = float(np.mean(ratios))
    return out


def _metrics(infos: list[dict[str, Any]]) -> dict[str, float]:
    return {
        "avg_jct": float(np.mean([i["avg_jct_s"] for i in infos])),
        "p95_jct": float(np.mean([i["p95_jct_s"] for i in infos])),
        "unfinished": float(sum(int(i.get("unfinished_jobs", 0)) for i in infos)),
    }


def rule_runs(env: ContentionEnv, seeds: list[int]) -> dict[str, list[float]]:
    """The avg JCT (s) of every registered rule that acts in ``env`` (its placement candidates
    are the env's) through ``env`` on each of ``seeds``."""
    out = {}
    for name in CONTENTION_TEACHERS:
        if rule_missing(name, env.placements):
            continue  # it places with a candidate this env lacks (exclusive_overlap: ovl)
        actor = rule_actor(env, name, role="baseline")  # (RuleActor: the rule of the view)
        out[name] = [float(run_episode(env, int(s), act=actor).info["avg_jct_s"]) for s in seeds]
    return out


def rule_baselines(env: ContentionEnv, seeds: list[int]) -> dict[str, float]:
    """Mean avg JCT (s) of every registered rule through ``env`` on ``seeds``."""
    return {name: float(np.mean(v)) for name, v in rule_runs(env, seeds).items()}


@dataclass
class ContentionWorld(EpisodeWorld):
    """``dlsched/Contention-v0`` for the ``episodes`` pipeline (the module docstring's
    steps): ``train.py``'s ``contention`` env, ``agent.contention``'s network, teacher and
    schedule, every registered rule as a baseline; times in seconds."""

    env_id: ClassVar[str] = CONTENTION_ENV_ID
    block: ClassVar[str] = "contention"
    unit: ClassVar[str] = "s"
    decision: ClassVar[str] = "decisions"
    val: Any = None
    val_key: str = "val_avg_jct_s"
    #: with a distribution: the best rule's validation avg JCT per episode (the score's base)
    best_per_workload: list[float] | None = None
    #: the training and the validation env instead of two of the ``contention`` block's (for
    #: envs the block does not describe, such as Philly trace windows:
    #: ``experiments/contention_h2h.py --workload philly``)
    envs: tuple[ContentionEnv, ContentionEnv] | None = None

    @property
    def c(self) -> ContentionPGConfig:
        return self.cfg.agent.contention

    @property
    def iterations(self) -> int:
        return int(self.c.iterations)

    @property
    def val_every(self) -> int:
        return int(self.c.val_every)

    def check(self) -> None:
        check_contention_config(self.cfg)

    @property
    def distribution(self) -> bool:
        """Whether the run draws its episodes from ``contention.distribution``."""
        return bool(self.cfg.contention.distribution.enabled) and self.envs is None

    def setup(self) -> None:
        contention = self.cfg.contention
        if self.distribution:  # training and validation episodes drawn apart
            self.env = contention.make_distribution("train")
            self.val = contention.make_distribution("validation")
        else:
            make = contention.make
            self.env, self.val = self.envs if self.envs is not None else (make(), make())
        rules = [str(r) for r in self.cfg.agent.cem.rules]
        self.net = contention_net(self.c.arch, self.env, self.c.hidden, rules)

    def teacher(self) -> Teacher | None:
        c = self.c
        if c.teacher == NO_TEACHER:
            return None
        rng = np.random.default_rng([self.cfg.seed, 2])  # (experiments/contention_h2h.py's draws)
        seeds = [int(s) for s in rng.integers(TRAIN_SEEDS, 2**31, size=c.bc_workloads)]
        names = teacher_names(c.teacher)
        if len(names) == 1:
            rule: Callable[[Any], int] = teacher(c.teacher)
        else:  # the best rule of each cloning workload (the same draws: one env per role)
            best = BestRule(self.env, names, seeds)
            self.summary["teacher_choices"] = {n: list(best.choice.values()).count(n)
                                               for n in names}  # fmt: skip
            rule = best
        return Teacher(rule, c.teacher, seeds, int(c.bc_epochs), float(c.bc_smoothing))

    def baselines(self) -> dict[str, float]:
        seeds = [int(s) for s in self.cfg.eval.seeds]
        if not self.distribution:
            return rule_baselines(self.val, seeds)
        # settings of every size and length: the best checkpoint on the mean ratio to the best
        # rule per validation episode (a long trace window does not outweigh the others)
        runs = rule_runs(self.val, seeds)
        self.best_per_workload = [min(v) for v in zip(*runs.values(), strict=True)]
        self.scored, self.val_key = True, "val_score"
        self.summary["distribution"] = asdict(self.cfg.contention.distribution)
        self.summary["validation_settings"] = [self.val.drawn(s).record["label"] for s in seeds]
        self.summary["validation_rules_avg_jct"] = runs
        return {name: float(np.mean(v)) for name, v in runs.items()}

    def pg_config(self) -> EpisodePGConfig:
        config = episode_pg_config(self.cfg.agent, CONTENTION_ENV_ID, self.cfg.seed)
        # a distribution's settings differ in JCT by orders of magnitude (a 20-minute generator
        # workload, a week of trace): each group's advantages relative to its mean return
        return replace(config, relative=True) if self.distribution else config

    def measure(self, pg: EpisodePG) -> dict[str, float]:
        seeds = [int(s) for s in self.cfg.eval.seeds]
        return validate_contention(self.net, self.val, seeds, self.best_per_workload)

    def env_hparams(self) -> dict[str, Any]:
        return {f"env.{k}": str(v) for k, v in asdict(self.cfg.contention).items()}

    def finish(self, fields: dict[str, Any], out: Path) -> dict[str, Any]:
        return {
            "env": asdict(self.cfg.contention),
            "unit": "s",  # (train.py's report)
            "act": "argmax",
            "decisions_are": "job starts and waits",
        }


def train_contention(
    cfg: TrainConfig,
    out: Path,
    resolved: dict[str, Any],
    envs: tuple[ContentionEnv, ContentionEnv] | None = None,
) -> dict[str, Any]:
    """One run of an ``episodes`` learner in ``dlsched/Contention-v0`` into ``out`` (see the
    module docstring); its summary.  ``envs``: :attr:`ContentionWorld.envs`."""
    return train_episodes(cfg, out, resolved, ContentionWorld(cfg, envs=envs))
