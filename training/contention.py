"""``python train.py +agent=contention_pg``: SL + RL in ``dlsched/Contention-v0``.

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
   ``bc_workloads`` workloads drawn from [10,000, 2^31) (``teacher=none``: random weights).
3. ``agent.contention.iterations`` of :class:`~agents.episode_pg.EpisodePG`
   (``agent.learning_rate``, ``agent.ent_coef``, ``agent.contention.*``), validating the
   network's masked argmax every ``val_every`` iterations on ``eval.seeds``.

The env is ``train.py``'s ``contention`` block (:class:`~envs.gym.contention_env.
ContentionConfig`: paper scale, 16 x 4 GPUs, ``comm=srsf1``, placements LWF-1 / LS / FF,
J = 20, fast fidelity by default).  Writes ``learning_curve.csv``, ``tb/`` (as ``plan_pg``'s:
:class:`~training.plan.EpisodeLog`), ``checkpoints/best/policy.npz`` (the best validation
point) and ``checkpoints/final/policy.npz``, each usable as ``contention:<dir>`` in
``evaluate.py``, and ``summary.json``.  Times are seconds (the engine's), not slots.
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch as th

from agents.checkpoint import signals_deferred
from agents.config import AgentConfig, ContentionPGConfig
from agents.episode_pg import (
    EpisodePG,
    EpisodePGConfig,
    MaskedMLP,
    clone,
    run_episode,
    save_episode_pg,
)
from envs.files import write_json
from envs.gym.actors import rule_actor
from envs.gym.contention_env import CONTENTION_TEACHERS, ContentionEnv, teacher
from envs.sim.errors import ConfigError, check_number
from training.config import TrainConfig
from training.episodes import EpisodeLog, run_iterations
from training.runinfo import agent_in_use, provenance, run_record, write_run_record

__all__ = ["check_contention_config", "train_contention", "validate_contention"]

#: ``agent.contention.teacher`` that clones nothing (random weights)
NO_TEACHER = "none"


def check_contention_config(cfg: TrainConfig) -> None:
    """One clear error per setting a ``contention_pg`` run cannot use, before anything runs."""
    c: ContentionPGConfig = cfg.agent.contention
    if c.teacher != NO_TEACHER:
        teacher(c.teacher)  # an unknown rule names the registered ones
    for key in ("bc_workloads", "bc_epochs", "iterations", "groups", "group_size", "val_every",
                "hidden", "workers"):  # fmt: skip
        value = getattr(c, key)
        if isinstance(value, bool) or int(value) < 1:
            raise ConfigError(f"agent.contention.{key} must be an integer >= 1, got {value!r}")
    for key, value, hi in (("epsilon", c.epsilon, 1.0), ("bc_smoothing", c.bc_smoothing, 1.0)):
        if not 0.0 <= check_number(value, f"agent.contention.{key}", ge=0.0) < hi:
            raise ConfigError(f"agent.contention.{key} must be in [0, 1), got {value!r}")
    check_number(c.temperature, "agent.contention.temperature", ge=1.0)
    unsupported = {
        "mixture": cfg.mixture.enabled,
        "federated": cfg.federated.mode != "none",
        "resume": bool(cfg.resume),
        "eval.windows": bool(cfg.eval.windows),
    }
    for key, used in unsupported.items():
        if used:
            raise ConfigError(f"{key} is not supported by agent.algo contention_pg; unset it")


def validate_contention(net: MaskedMLP, env: ContentionEnv, seeds: list[int]) -> dict[str, float]:
    """The network's masked argmax on each validation workload: mean avg JCT and p95 JCT (s)
    and the unfinished jobs in all (an unfinished job counts as finishing at the end)."""
    infos = [run_episode(env, int(s), net).info for s in seeds]
    return _metrics(infos)


def _metrics(infos: list[dict[str, Any]]) -> dict[str, float]:
    return {
        "avg_jct": float(np.mean([i["avg_jct_s"] for i in infos])),
        "p95_jct": float(np.mean([i["p95_jct_s"] for i in infos])),
        "unfinished": float(sum(int(i.get("unfinished_jobs", 0)) for i in infos)),
    }


def rule_baselines(env: ContentionEnv, seeds: list[int]) -> dict[str, float]:
    """Mean avg JCT (s) of every registered rule through ``env`` on ``seeds``."""
    out = {}
    for name in CONTENTION_TEACHERS:
        actor = rule_actor(env, name, role="baseline")  # (RuleActor: the rule of the view)
        infos = [run_episode(env, int(s), act=actor).info for s in seeds]
        out[name] = _metrics(infos)["avg_jct"]
    return out


def train_contention(cfg: TrainConfig, out: Path, resolved: dict[str, Any]) -> dict[str, Any]:
    """One ``contention_pg`` run into ``out`` (see the module docstring); its summary."""
    agent: AgentConfig = cfg.agent
    c: ContentionPGConfig = agent.contention
    check_contention_config(cfg)
    th.set_num_threads(max(int(cfg.torch_threads), 1))
    th.manual_seed(cfg.seed)
    env, val = cfg.contention.make(), cfg.contention.make()
    write_run_record(out / "run.json", run_record(resolved, cfg.seed, kind="train"))
    net = MaskedMLP(env.obs_size, env.wait_action + 1, c.hidden)
    summary: dict[str, Any] = {"run_dir": str(out), "agent": agent.name}
    bc_losses: list[float] = []
    reference = None
    if c.teacher != NO_TEACHER:
        rng = np.random.default_rng([cfg.seed, 2])  # (experiments/contention_h2h.py's draws)
        seeds = [int(s) for s in rng.integers(10_000, 2**31, size=c.bc_workloads)]
        t0 = time.perf_counter()
        loss = clone(net, env, teacher(c.teacher), seeds, epochs=c.bc_epochs, seed=cfg.seed,
                     smoothing=c.bc_smoothing,
                     on_epoch=lambda _epoch, x: bc_losses.append(x))  # fmt: skip
        summary["pretrain"] = {"teacher": c.teacher, "workloads": seeds, "loss": loss}
        summary["pretrain_s"] = round(time.perf_counter() - t0, 1)
        reference = copy.deepcopy(net).requires_grad_(False)
    seeds_val = [int(s) for s in cfg.eval.seeds]
    t0 = time.perf_counter()
    baselines = rule_baselines(val, seeds_val)
    summary["baselines_avg_jct"] = baselines
    summary["baselines_s"] = round(time.perf_counter() - t0, 1)
    log = EpisodeLog(out, baselines, tag="contention_pg", unit="s", decision="decisions")
    log.pretrain(bc_losses)
    pg_cfg = EpisodePGConfig(seed=cfg.seed, groups=c.groups, group_size=c.group_size,
                             epsilon=c.epsilon, temperature=c.temperature,
                             lr=agent.learning_rate, ent_coef=agent.ent_coef, hidden=c.hidden,
                             workers=c.workers)  # fmt: skip
    pg = EpisodePG(env, net, pg_cfg)
    pg.reference = reference  # each iteration's KL to the frozen clone (None: no clone)
    record = {"config": agent_in_use(resolved), "seed": cfg.seed, **provenance()}

    def save(name: str, extra: dict[str, Any]) -> Path:
        with signals_deferred():
            return save_episode_pg(out / "checkpoints" / name / "policy.npz", net, env,
                                   {**record, **extra}, act="argmax")  # fmt: skip

    hparams = {"seed": int(cfg.seed), "learning_rate": float(agent.learning_rate),
               "ent_coef": float(agent.ent_coef),
               **{f"contention.{k}": v for k, v in asdict(c).items()},
               **{f"env.{k}": str(v) for k, v in asdict(cfg.contention).items()}}  # fmt: skip
    fields, interrupted = run_iterations(
        pg, log, lambda: validate_contention(net, val, seeds_val), save, c.iterations,
        c.val_every, hparams, "val_avg_jct_s",
    )  # fmt: skip
    summary.update(
        {
            **fields,
            "best_checkpoint": str(out / "checkpoints" / "best"),
            "agent_config": asdict(c),
            "env": asdict(cfg.contention),
            "unit": "s",  # (train.py's report)
            "act": "argmax",
            "decisions_are": "job starts and waits",
        }
    )
    write_json(out / "summary.json", summary)
    if interrupted is not None:
        raise interrupted
    return summary
