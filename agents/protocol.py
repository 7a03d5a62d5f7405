"""The learner protocol: every learner of :data:`agents.learners.LEARNERS`, in every env it
trains in, behind the same five calls.

    learner = build_learner("plan_a2c", env_id="dlsched/Contention-v0", seed=0)
    learner.learn(4)                      # its budget unit: decisions or iterations
    run = run_episode(env, learner.actor(), seed=100)
    path = learner.save("runs/mine")      # a directory
    again = load_learner("runs/mine")     # the same actor, the same actions

Why: ``train.py``'s pipelines are the one way to run a whole recipe (validation, checkpoints,
TensorBoard, the final table), but a researcher scripting an experiment, a test, or a new
pipeline needs one API for "a learner" whatever its family.  The two families differ in
what a unit of learning is and how a learner is stored, and that is all this module hides:

* :class:`SB3Learner` (``pipeline="sb3"``: DL²'s actor-critic, the group learner, PPO,
  MaskablePPO; ``dlsched/Cluster-v0``): ``learn(budget)`` is ``budget`` more decisions of
  the model's own ``learn`` (its callbacks as ``callback``); ``save`` writes a resumable
  checkpoint (:func:`agents.checkpoint.save_checkpoint`: ``model.zip`` with the optimizer,
  replay and RNG state) and the network as a policy file (``policy.npz``,
  :mod:`agents.policy_file`); its actor is the network acting one decision at a time
  (:func:`agents.policy.inference_policy`: the numpy copy where it mirrors the network).
* :class:`EpisodeLearner` (``pipeline="episodes"``: EpisodePG and its subclasses,
  ``dlsched/ClusterPlan-v0`` and ``dlsched/Contention-v0``): ``learn(budget)`` is ``budget``
  iterations (``callback(iteration, stats)`` after each); ``save`` writes the policy file
  (weights, env layout, how it acts, the record); loading rebuilds the learner on that
  network (its optimizer starts afresh: the file holds a policy, not a training state).

Both give ``actor(deterministic=True)``: an :class:`~envs.gym.episode.Actor` for
:func:`~envs.gym.episode.run_episode` (masked argmax, or sampled with a generator per
episode).  An algo, env id or pairing the registry does not know is one
:class:`~envs.sim.errors.ConfigError` (:func:`agents.learners.env_for`).
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from agents.actors import NetActor, PolicyActor
from agents.config import AgentConfig
from agents.episode_pg import (
    EpisodePG,
    EpisodePGConfig,
    PolicyNet,
    contention_net,
    load_episode_pg,
    plan_net,
)
from agents.learners import CONTENTION, PLAN, env_for, learner, resolve
from envs.files import write_json
from envs.gym.contention_env import ContentionConfig
from envs.gym.episode import Actor
from envs.gym.factory import EnvConfig, coerce_env_config, setting_of
from envs.gym.plan_env import PlanEnv, plan_label
from envs.sim.errors import ConfigError

__all__ = [
    "EpisodeLearner",
    "LearnerProtocol",
    "SB3Learner",
    "build_learner",
    "episode_learner",
    "episode_pg_config",
    "load_learner",
]

#: what :meth:`LearnerProtocol.save` writes beside the weights: which learner, in which env
LEARNER_FILE = "learner.json"


@runtime_checkable
class LearnerProtocol(Protocol):
    """One learner, whatever its family (module docstring)."""

    algo: str
    env_id: str

    def learn(self, budget: int, callback: Any = None) -> LearnerProtocol: ...

    def actor(self, deterministic: bool = True, sample_seed: int = 0) -> Actor: ...

    def save(self, path: str | os.PathLike[str]) -> Path: ...


def episode_pg_config(agent: AgentConfig, env_id: str, seed: int) -> EpisodePGConfig:
    """The :class:`~agents.episode_pg.EpisodePGConfig` of an ``episodes`` learner in
    ``env_id``: its schedule from the env's block (``agent.plan`` in ClusterPlan-v0,
    ``agent.contention`` in Contention-v0), its optimiser from ``agent``."""
    if env_id == PLAN:
        p = agent.plan
        return EpisodePGConfig(seed=seed, groups=p.groups, group_size=p.group_size,
                               epsilon=p.epsilon, lr=agent.learning_rate,
                               ent_coef=agent.ent_coef, hidden=p.hidden,
                               workers=p.workers, relative=bool(p.relative),
                               lockstep=bool(p.lockstep), epochs=int(p.epochs))  # fmt: skip
    if env_id == CONTENTION:
        c = agent.contention
        return EpisodePGConfig(seed=seed, groups=c.groups, group_size=c.group_size,
                               epsilon=c.epsilon, temperature=c.temperature,
                               lr=agent.learning_rate, ent_coef=agent.ent_coef,
                               hidden=c.hidden, workers=c.workers)  # fmt: skip
    raise ConfigError(f"{env_id} is not an env of the episodes learners ({PLAN}, {CONTENTION})")


def episode_learner(
    algo: str, agent: AgentConfig, env: Any, net: PolicyNet, config: EpisodePGConfig
) -> EpisodePG:
    """The ``episodes`` learner ``algo`` on ``env`` and ``net``: its registry entry's builder
    (``plan_a2c``'s :func:`~agents.plan_a2c.build_plan_a2c`), or EpisodePG itself."""
    build = learner(algo).build
    return EpisodePG(env, net, config) if build is None else resolve(build)(agent, env, net, config)


class SB3Learner:
    """A Stable-Baselines3-style learner of ``Cluster-v0`` behind the protocol."""

    env_id = "dlsched/Cluster-v0"

    def __init__(self, algo: str, model: Any, env: EnvConfig, agent: AgentConfig) -> None:
        self.algo, self.model, self.env, self.agent = algo, model, env, agent

    def learn(self, budget: int, callback: Any = None) -> SB3Learner:
        """``budget`` more decisions (env steps over its env copies)."""
        if int(budget) < 1:
            raise ConfigError(f"learn budget must be >= 1 decisions, got {budget}")
        total = int(self.model.num_timesteps) + int(budget)
        self.model.learn(total_timesteps=total, callback=callback, reset_num_timesteps=False)
        return self

    def actor(self, deterministic: bool = True, sample_seed: int = 0) -> Actor:
        from agents.policy import inference_policy

        return PolicyActor(inference_policy(self.model.policy), deterministic, sample_seed)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """A resumable checkpoint and the network's policy file, in directory ``path``."""
        from agents.checkpoint import save_checkpoint
        from agents.policy_file import save_dl2

        d = Path(path)
        meta = {"algo": self.algo, "env": self.env.as_dict()}
        save_checkpoint(self.model, d / "checkpoint", meta)
        record = {"algo": self.algo, "config": {"agent": dataclasses.asdict(self.agent)}}
        save_dl2(d / "policy.npz", self.model.policy, env=self.env.as_dict(),
                 policy_config=dataclasses.asdict(self.agent.policy), record=record)  # fmt: skip
        _write_record(d, self)
        return d


class EpisodeLearner:
    """EpisodePG (or a subclass built by the registry entry) behind the protocol."""

    def __init__(self, algo: str, pg: EpisodePG, env_id: str, agent: AgentConfig) -> None:
        self.algo, self.pg, self.env_id, self.agent = algo, pg, env_id, agent

    def learn(self, budget: int, callback: Any = None) -> EpisodeLearner:
        """``budget`` iterations (``callback(iteration, stats)`` after each)."""
        if int(budget) < 1:
            raise ConfigError(f"learn budget must be >= 1 iterations, got {budget}")
        try:
            self.pg.learn(int(budget), callback)
        finally:
            self.pg.close()  # the rollout workers (a next learn starts new ones)
        return self

    def actor(self, deterministic: bool = True, sample_seed: int = 0) -> Actor:
        if not deterministic:
            raise ConfigError(
                "an episodes learner's actor acts by masked argmax (as its policy files "
                "act in Contention-v0 and its validation does); sampled acting in Cluster-v0 is "
                "agents.plan_policy.PlanPolicy.actor"
            )
        return NetActor(self.pg.net)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """The network as ``policy.npz`` (the one policy file format), in directory ``path``."""
        from agents.episode_pg import save_episode_pg

        d = Path(path)
        record = {"config": {"agent": dataclasses.asdict(self.agent)}, "algo": self.algo,
                  "iteration": int(self.pg.iteration)}  # fmt: skip
        save_episode_pg(d / "policy.npz", self.pg.net, self.pg.env, record)
        _write_record(d, self)
        return d


def _write_record(d: Path, learner_: SB3Learner | EpisodeLearner) -> None:
    write_json(d / LEARNER_FILE, {"algo": learner_.algo, "env_id": learner_.env_id,
                                  "agent": dataclasses.asdict(learner_.agent)})  # fmt: skip


def build_learner(
    algo: str,
    *,
    env_id: str | None = None,
    env: EnvConfig | ContentionConfig | None = None,
    agent: AgentConfig | None = None,
    seed: int = 0,
) -> SB3Learner | EpisodeLearner:
    """A fresh learner ``algo`` in ``env_id`` (default: the learner's own env), on ``env``
    (an :class:`~envs.gym.factory.EnvConfig` for DL²'s cluster, a
    :class:`~envs.gym.contention_env.ContentionConfig` for Contention-v0; default: the
    schema's), with ``agent``'s hyperparameters (default: :class:`AgentConfig`'s)."""
    entry = learner(algo)
    where = env_for(algo, env_id)
    agent = dataclasses.replace(agent or AgentConfig(), algo=algo)
    if where == CONTENTION:
        spec = env if env is not None else ContentionConfig()
        if not isinstance(spec, ContentionConfig):
            raise ConfigError(f"{CONTENTION} takes a ContentionConfig, got {type(spec).__name__}")
    else:
        spec = env if env is not None else EnvConfig()
        if not isinstance(spec, EnvConfig):
            raise ConfigError(f"{where} takes an EnvConfig, got {type(spec).__name__}")
    if entry.pipeline == "sb3":
        return _build_sb3(algo, spec, agent, seed)  # type: ignore[arg-type]
    import torch as th

    th.manual_seed(seed)  # the network's initial weights, as train.py's run draws them
    gym_env: Any
    net: PolicyNet
    if isinstance(spec, ContentionConfig):
        gym_env = spec.make()
        c = agent.contention
        net = contention_net(c.arch, gym_env, c.hidden, [str(r) for r in agent.cem.rules])
    else:
        gym_env = PlanEnv(config=spec, plans=[str(x) for x in agent.plan.plans] or None)
        net = plan_net(agent.plan.arch, gym_env, agent.plan.hidden)
    cfg = episode_pg_config(agent, where, seed)
    return EpisodeLearner(algo, episode_learner(algo, agent, gym_env, net, cfg), where, agent)


def _build_sb3(algo: str, env: EnvConfig, agent: AgentConfig, seed: int) -> SB3Learner:
    from agents.build import build_agent, env_copies
    from agents.vec import make_training_vec_env

    n = env_copies(agent)
    vec = make_training_vec_env([env] * n, [seed + i for i in range(n)])
    model = build_agent(agent, vec, setting_of(env).J, seed)
    return SB3Learner(algo, model, env, agent)


def load_learner(path: str | os.PathLike[str]) -> SB3Learner | EpisodeLearner:
    """The learner :meth:`LearnerProtocol.save` wrote into directory ``path``: an SB3 learner
    from its checkpoint (training resumes where it stopped), an episodes learner on its saved
    network (a fresh optimizer)."""
    d = Path(path)
    try:
        record = json.loads((d / LEARNER_FILE).read_text())
        algo, env_id, agent_dict = record["algo"], record["env_id"], record["agent"]
    except (OSError, ValueError, KeyError) as exc:
        raise ConfigError(f"{d}: not a saved learner ({LEARNER_FILE}: {exc})") from None
    try:
        agent = _agent_from(agent_dict)
    except ConfigError as exc:
        raise ConfigError(f"{d / LEARNER_FILE}: {exc}") from None
    entry = learner(algo)
    if entry.pipeline == "sb3":
        from agents.build import env_copies
        from agents.checkpoint import load_checkpoint, read_meta
        from agents.vec import make_training_vec_env

        env = coerce_env_config(read_meta(d / "checkpoint")["env"])
        n = env_copies(agent)
        vec = make_training_vec_env([env] * n, list(range(n)))
        return SB3Learner(algo, load_checkpoint(d / "checkpoint", env=vec), env, agent)
    net, meta = load_episode_pg(d / "policy.npz")
    saved = meta.get("env") or {}
    if env_id == CONTENTION:
        from envs.gym.contention_env import ContentionEnv

        gym_env: Any = ContentionEnv(**saved)
    else:
        plans = [plan_label(str(n), dict(o)) for n, o in saved["plans"]]
        gym_env = PlanEnv(config=coerce_env_config(saved["env"]), plans=plans)
    cfg = episode_pg_config(agent, env_id, int(meta.get("training", {}).get("seed") or 0))
    return EpisodeLearner(algo, episode_learner(algo, agent, gym_env, net, cfg), env_id, agent)


def _agent_from(values: dict[str, Any]) -> AgentConfig:
    """An :class:`AgentConfig` from its ``asdict`` (OmegaConf rebuilds the nested blocks and
    checks every key and type against the schema)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        built = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(AgentConfig), values))
    except OmegaConfBaseException as exc:  # a key or a type the schema does not have
        raise ConfigError(f"the saved agent config does not fit AgentConfig: {exc}") from None
    if not isinstance(built, AgentConfig):
        raise ConfigError(f"not an agent config: {type(built).__name__}")
    return built
