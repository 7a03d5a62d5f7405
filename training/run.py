"""The training run behind ``python train.py +agent=<name>`` (the entry point is thin).

Steps: record the run (``run.json``: resolved config, seed, versions, git commit); build the
training envs (``n_envs`` copies of ``env``, or the federated clusters); build the agent
(:mod:`agents.build`); pretrain or load cached pretrained weights (``pretrain=...``); evaluate
the baselines once on the validation workloads; ``learn`` with validation, checkpoints,
TensorBoard and a progress bar; save the final model and print where everything is.
``resume=<checkpoint dir>`` (or a run's ``checkpoints/`` directory, or the run directory)
continues a run (same config) to its ``total_timesteps`` (the checkpoint's decisions count),
into the new run directory, from the newest complete checkpoint there
(:func:`agents.checkpoint.find_checkpoint`: a run killed mid-save leaves one);
``checkpoints/latest`` and ``checkpoints/final`` both hold the last state at the end.  Every
file is written atomically (:mod:`envs.files`).
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from omegaconf import DictConfig, OmegaConf

from agents.build import build_agent, env_copies, load_pretrained_weights
from agents.checkpoint import (
    copy_checkpoint,
    find_checkpoint,
    load_checkpoint,
    read_meta,
    save_checkpoint,
    verify_policy_weights,
)
from agents.config import AgentConfig
from agents.learners import env_for, learner
from agents.vec import make_training_vec_env
from envs.files import write_json
from envs.gym.factory import EnvConfig, make_env
from envs.sim.errors import ConfigError
from training.baselines import baseline_jcts
from training.callbacks import CheckpointCallback, ValidationCallback, run_logger
from training.config import EvalConfig, TrainConfig, check_train_config
from training.contention import ContentionWorld
from training.episodes import EpisodeWorld, train_episodes
from training.plan import PlanWorld
from training.pretraining import pretrain
from training.runinfo import run_record, write_run_record

__all__ = ["WORLDS", "train"]

#: the envs of the ``episodes`` pipeline, by id (:func:`agents.learners.env_for` picks one)
WORLDS: dict[str, type[EpisodeWorld]] = {w.env_id: w for w in (PlanWorld, ContentionWorld)}


def to_train_config(cfg: DictConfig) -> TrainConfig:
    """The typed config (validated by OmegaConf against the schema)."""
    obj = OmegaConf.to_object(cfg)
    if not isinstance(obj, TrainConfig):
        raise ConfigError("train config did not resolve to TrainConfig")
    if not isinstance(obj.agent, AgentConfig):
        raise ConfigError("agent config missing or malformed")
    check_train_config(obj)
    return obj


def _training_envs(cfg: TrainConfig) -> tuple[Any, list[EnvConfig]]:
    from agents.federated import federated_vec_env  # one place for multi-cluster envs

    if cfg.federated.mode != "none":
        return federated_vec_env(cfg.federated, cfg.seed, reference=cfg.env)
    n_envs = _n_envs(cfg)
    configs = [cfg.env] * n_envs
    return make_training_vec_env(configs, [cfg.seed + i for i in range(n_envs)]), configs


def _n_envs(cfg: TrainConfig) -> int:
    """Env copies: ``n_envs``, or ``groups x group_size`` for the group learner."""
    if cfg.n_envs < 1:
        raise ConfigError(f"n_envs must be >= 1, got {cfg.n_envs}")
    return env_copies(cfg.agent, int(cfg.n_envs))


def _check_resume(cfg: TrainConfig) -> Path:
    """The checkpoint ``resume=`` continues (the newest complete one there, said in one line
    when it is not the named one); it must hold the configured learner (else the run would
    train one learner under another's name)."""
    path, note = find_checkpoint(str(cfg.resume))
    if note:
        print(f"train.py: {note}", file=sys.stderr, flush=True)
    if not (path / "meta.json").is_file():
        raise ConfigError(f"resume={cfg.resume}: no checkpoint there (meta.json missing)")
    meta = read_meta(path)
    saved_env = meta.get("env")
    if isinstance(saved_env, dict) and saved_env != cfg.env.as_dict():
        now = cfg.env.as_dict()
        diff = {k: (saved_env.get(k), now.get(k)) for k in {*saved_env, *now}
                if saved_env.get(k) != now.get(k)}  # fmt: skip
        raise ConfigError(
            f"resume={cfg.resume} was trained in another env: "
            + ", ".join(f"env.{k}={a!r} there, {b!r} here" for k, (a, b) in sorted(diff.items()))
            + "; resume with the checkpoint's env settings"
        )
    held, want = meta.get("class"), learner(cfg.agent.algo).class_name
    if held != want:
        raise ConfigError(
            f"resume={cfg.resume} holds a {held} (agent {meta.get('agent')!r}) but the run is "
            f"configured as agent {cfg.agent.name!r} ({want}); resume it with "
            f"+agent={meta.get('agent')}"
        )
    return path


def train(cfg: TrainConfig, out: Path, resolved: dict[str, Any]) -> dict[str, Any]:
    """Run one training job into ``out`` by its learner's pipeline
    (:data:`agents.learners.LEARNERS`); its summary."""
    entry = learner(cfg.agent.algo)
    env_id = env_for(entry.algo, cfg.env_id)  # an unsupported pairing: one clear line
    if entry.pipeline == "sb3":  # below: SB3-style learners on Cluster-v0 env copies
        return _train_sb3(cfg, out, resolved)
    return train_episodes(cfg, out, resolved, WORLDS[env_id](cfg))


def _train_sb3(cfg: TrainConfig, out: Path, resolved: dict[str, Any]) -> dict[str, Any]:
    """One run of an ``sb3``-pipeline learner (DL²'s actor-critic, the group learner, PPO,
    MaskablePPO) into ``out``; its summary."""
    th.set_num_threads(max(int(cfg.torch_threads), 1))
    th.manual_seed(cfg.seed)
    write_run_record(out / "run.json", run_record(resolved, cfg.seed, kind="train"))
    agent_cfg: AgentConfig = cfg.agent
    env, env_configs = _training_envs(cfg)
    J = {c.setting: make_env(c).J for c in env_configs}
    if len(set(J.values())) != 1:
        raise ConfigError(f"all training clusters need the same window J; got {J}")
    window = next(iter(J.values()))
    tb = str(out / "tb")
    meta = {
        "agent": agent_cfg.name,
        "env": cfg.env.as_dict(),
        "policy": asdict(agent_cfg.policy),
        # how its validation acted: evaluate.py acts the same way by default
        "act": "argmax" if cfg.eval.deterministic else "sampled",
    }
    summary: dict[str, Any] = {"run_dir": str(out), "agent": agent_cfg.name}
    if cfg.resume:
        resume = _check_resume(cfg)
        model = load_checkpoint(resume, env=None)
        keys = learner(agent_cfg.algo).resume_keys
        changed = [
            f"agent.{k}={getattr(agent_cfg, k)!r} (the checkpoint has {getattr(model, k)!r})"
            for k in keys
            if hasattr(model, k) and float(getattr(model, k)) != float(getattr(agent_cfg, k))
        ]
        if changed:
            raise ConfigError(
                f"resume={cfg.resume}: a resumed run keeps its checkpoint's hyperparameters "
                f"(only agent.learning_rate may change), but {', '.join(changed)}"
            )
        lr = float(agent_cfg.learning_rate)
        if model.learning_rate != lr:  # the command line's rate applies from here on
            summary["learning_rate_changed"] = {"checkpoint": model.learning_rate, "now": lr}
            model.learning_rate = lr
            model._setup_lr_schedule()
        if model.get_env() is None:  # a checkpoint without env.pkl (a Ray run): fresh episodes
            model.set_env(env)
        model.tensorboard_log = tb
        summary["resumed_from"] = str(resume)
    else:
        model = build_agent(agent_cfg, env, window, cfg.seed, tb)
        if cfg.pretrain.enabled:
            t0 = time.perf_counter()
            pre = pretrain(
                cfg.pretrain,
                cfg.env,
                agent_cfg.policy,
                out / "pretrain",
                cache_dir=cfg.pretrain_cache,
                progress=cfg.progress_bar,
                mixture=cfg.mixture,
            )
            verify_policy_weights(pre["policy_path"])  # a cached copy may have rotted
            load_pretrained_weights(model, pre["policy_path"])
            if hasattr(model, "set_anchor"):  # the clone, frozen: an anchor or a KL reference
                model.set_anchor()
            summary["pretrain"] = {k: v for k, v in pre.items() if k != "policy_path"}
            summary["pretrain_s"] = round(time.perf_counter() - t0, 1)
    if cfg.mixture.enabled:  # training workloads from a distribution (group learner)
        from envs.gym.workloads import Mixture

        if not hasattr(model, "set_mixture"):
            raise ConfigError(
                f"mixture.enabled needs the group learner (agent.algo=group_ppo), got "
                f"{agent_cfg.algo!r}"
            )
        model.set_mixture(Mixture(cfg.mixture, cfg.env))
    ev: EvalConfig = cfg.eval
    t0 = time.perf_counter()
    baselines = baseline_jcts(list(ev.baselines), cfg.env, list(ev.seeds))
    summary["baselines_avg_jct"] = baselines
    summary["baselines_s"] = round(time.perf_counter() - t0, 1)
    hparams: dict[str, Any] = getattr(model, "hparams", dict)()
    validation = ValidationCallback(
        cfg.env,
        list(ev.seeds),
        ev.every,
        baselines,
        deterministic=ev.deterministic,
        sample_seed=ev.sample_seed,
        curve_csv=out / "learning_curve.csv",
        hparams={**hparams, "seed": cfg.seed},
        first_is_clone="pretrain" in summary and not cfg.resume,
    )
    ckpt_dir = out / "checkpoints" / "latest"
    callbacks = [validation, CheckpointCallback(ckpt_dir, cfg.checkpoint_every, meta)]
    federated = None
    if cfg.federated.mode != "none":  # per-cluster metrics (agents/federated_callbacks.py)
        from agents.federated_callbacks import FederatedMetricsCallback

        federated = FederatedMetricsCallback(
            env_configs,
            list(ev.seeds),
            ev.every,
            deterministic=ev.deterministic,
            sample_seed=ev.sample_seed,
            curve_csv=out / "cluster_curves.csv",
        )
        callbacks.append(federated)
    todo = int(cfg.total_timesteps)
    if cfg.resume:  # continue the run to its total, not another total_timesteps on top
        todo -= int(model.num_timesteps)
        if todo <= 0:
            raise ConfigError(
                f"resume={cfg.resume} already has {model.num_timesteps} decisions, not fewer "
                f"than total_timesteps={cfg.total_timesteps}; raise total_timesteps to train on"
            )
        summary["resumed_at"] = int(model.num_timesteps)
    # SB3's CSV/JSON/TensorBoard outputs; a resumed run writes its own files in its own
    # directory (its TensorBoard run continues the step axis of the checkpoint's)
    model.set_logger(run_logger(out, Path(tb) / f"{agent_cfg.name}_1", int(model.verbose)))
    t0 = time.perf_counter()
    model.learn(
        todo,
        callback=callbacks,
        progress_bar=cfg.progress_bar,
        tb_log_name=agent_cfg.name,
        reset_num_timesteps=not cfg.resume,
    )
    summary["train_s"] = round(time.perf_counter() - t0, 1)
    final = save_checkpoint(model, out / "checkpoints" / "final", meta)
    copy_checkpoint(final, ckpt_dir)  # ``latest`` is the last state too
    if federated is not None:
        summary["federated"] = federated.summary()
        env.close()  # a RayVecEnv ends its actors (and the Ray it started)
    curve = validation.history
    summary["timesteps"] = int(model.num_timesteps)
    summary["initial"] = curve[0] if curve else None
    if curve and "pretrain" in summary and not cfg.resume:  # the clone's figure, for the table
        summary["clone_avg_jct"] = float(curve[0]["avg_jct"])
    summary["final"] = curve[-1] if curve else None
    summary["best_avg_jct"] = float(np.min([r["avg_jct"] for r in curve])) if curve else None
    summary["tensorboard"] = tb
    summary["checkpoint"] = str(out / "checkpoints" / "final")
    write_json(out / "summary.json", summary)
    return summary
