"""The learners ``train.py +agent=<name>`` runs, in one registry: ``agent.algo`` ->
:class:`Learner`.

A learner's name used to live in five tables (the builders, the checkpoint class of each
algo, the classes a checkpoint may hold, the list of algos, the ``agent.*`` keys each reads)
and the pipeline branched on name strings (``algo == "plan_pg"``, ``algo != "group_ppo"``).
Now each learner is one :class:`Learner` entry saying what the rest of the project needs to
know about it; everything else is derived from :data:`LEARNERS`:

* :func:`agents.build.build_agent` builds it (``build``, a ``module:function`` path);
* :mod:`agents.checkpoint` loads its checkpoints (``checkpoint_class``, ``module:Class``);
* :mod:`training.run` picks its env (``envs``: the env ids it trains in; ``train.py env=...``
  chooses among them, any other pairing is one clear error: :func:`env_for`), its pipeline
  (``pipeline``) and its env copies (``env_copies``), and checks a resumed run's
  hyperparameters (``resume_keys``);
* :mod:`training.runinfo` records only the ``agent.*`` keys it reads (``keys``).

Adding a learner: an entry here (and its builder, and a ``conf/agent/<name>.yaml`` whose
``algo`` names it).  Paths are resolved on use, so this module imports nothing heavy.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from envs.sim.errors import ConfigError

__all__ = [
    "CLUSTER",
    "CONTENTION",
    "ENV_BLOCKS",
    "ENV_IDS",
    "LEARNERS",
    "PIPELINES",
    "PLAN",
    "Learner",
    "env_for",
    "learner",
    "resolve",
]

#: ``sb3``: :mod:`training.run`'s loop (a Stable-Baselines3-style ``learn`` on ``Cluster-v0``
#: env copies, checkpoints as ``model.zip``); ``episodes``: :mod:`training.episodes` (whole
#: episodes of a decision-point env, :class:`~agents.episode_pg.EpisodePG` or a subclass,
#: ``policy.npz``), in the env the run names: ``ClusterPlan-v0`` (:mod:`training.plan`) or
#: ``Contention-v0`` (:mod:`training.contention`).
PIPELINES = ("sb3", "episodes")

#: the env ids a learner may train in (``train.py env=...`` picks one: the ``env`` groups
#: ``small``/``medium``/... are DL²'s cluster, ``env=contention`` is Ada-SRSF's world)
CLUSTER, PLAN, CONTENTION = "dlsched/Cluster-v0", "dlsched/ClusterPlan-v0", "dlsched/Contention-v0"
ENV_IDS = (CLUSTER, PLAN, CONTENTION)
#: the ``agent.*`` block holding an ``episodes`` learner's schedule, network and teacher in
#: each env (:meth:`Learner.keys_in`)
ENV_BLOCKS = {PLAN: "plan", CONTENTION: "contention"}

_SB3_COMMON = ("learning_rate", "gamma", "ent_coef", "vf_coef", "max_grad_norm", "policy")
#: what a resumed SB3-style run keeps (``n_steps`` too, where the learner reads it)
_SB3_RESUME = ("gamma", "ent_coef", "vf_coef", "max_grad_norm")


@dataclass(frozen=True)
class Learner:
    """What the project needs to know about one learner.

    ``algo``: its ``agent.algo`` name; ``pipeline``: one of :data:`PIPELINES`; ``keys``: the
    ``agent.*`` keys it reads besides ``name`` and ``algo``; ``build``: ``module:function`` that
    builds it (``sb3``: ``(cfg, env, policy_kwargs, seed, tensorboard_log)``; ``plan``: ``(agent
    config, plan env, network, EpisodePGConfig)``; ``None`` where its pipeline builds it: the
    plan pipeline then runs :class:`~agents.episode_pg.EpisodePG`); ``checkpoint_class``:
    ``module:Class`` its checkpoints hold (``None``: it saves no ``model.zip``); ``env_copies``:
    ``n_envs`` (the run's ``n_envs``) or ``groups`` (``agent.group``'s groups x group size);
    ``resume_keys``: hyperparameters a resumed run must keep (compared with the checkpoint's);
    ``envs``: the env ids it trains in, its default first (:data:`ENV_IDS`)."""

    algo: str
    pipeline: str
    keys: tuple[str, ...]
    envs: tuple[str, ...] = (CLUSTER,)
    build: str | None = None
    checkpoint_class: str | None = None
    env_copies: str = "n_envs"
    resume_keys: tuple[str, ...] = ()

    def keys_in(self, env_id: str) -> tuple[str, ...]:
        """The ``agent.*`` keys it reads when it trains in ``env_id``: :attr:`keys` without the
        blocks of its other envs (:data:`ENV_BLOCKS`: ``plan`` is ClusterPlan-v0's schedule,
        ``contention`` Contention-v0's)."""
        others = {ENV_BLOCKS[e] for e in self.envs if e != env_id and e in ENV_BLOCKS}
        return tuple(k for k in self.keys if k not in others)

    @property
    def class_name(self) -> str | None:
        """The checkpoint class's name (``meta.json``'s ``class``)."""
        return None if self.checkpoint_class is None else self.checkpoint_class.rpartition(":")[2]


LEARNERS: dict[str, Learner] = {
    entry.algo: entry
    for entry in (
        Learner(
            "dl2_a2c",
            "sb3",
            (
                *_SB3_COMMON,
                "n_steps",
                "returns",
                "critic",
                "baseline_momentum",
                "gradient_steps",
                "normalize_advantage",
                "exploration",
                "replay",
            ),
            build="agents.build:build_dl2",
            checkpoint_class="agents.dl2:DL2A2C",
            resume_keys=(*_SB3_RESUME, "n_steps"),
        ),
        Learner(
            "group_ppo",
            "sb3",
            (*_SB3_COMMON, "normalize_advantage", "group"),
            build="agents.build:build_group",
            checkpoint_class="agents.group:GroupPPO",
            env_copies="groups",
            resume_keys=_SB3_RESUME,
        ),
        Learner(
            "ppo",
            "sb3",
            (*_SB3_COMMON, "n_steps", "ppo"),
            build="agents.build:build_ppo",
            checkpoint_class="stable_baselines3:PPO",
            resume_keys=(*_SB3_RESUME, "n_steps"),
        ),
        Learner(
            "maskable_ppo",
            "sb3",
            (*_SB3_COMMON, "n_steps", "ppo"),
            build="agents.build:build_maskable_ppo",
            checkpoint_class="sb3_contrib:MaskablePPO",
            resume_keys=(*_SB3_RESUME, "n_steps"),
        ),
        Learner(
            "plan_pg",
            "episodes",
            ("learning_rate", "ent_coef", "plan", "contention"),
            envs=(PLAN, CONTENTION),
        ),
        Learner(
            "plan_a2c",
            "episodes",
            ("learning_rate", "ent_coef", "plan", "contention", "a2c"),
            build="agents.plan_a2c:build_plan_a2c",
            envs=(PLAN, CONTENTION),
        ),
        Learner(
            "expert_iteration",
            "episodes",
            ("learning_rate", "plan", "contention", "expert"),
            build="agents.expert_iteration:build_expert",
            envs=(PLAN, CONTENTION),
        ),
        Learner(
            "contention_pg",
            "episodes",
            ("learning_rate", "ent_coef", "contention"),
            envs=(CONTENTION,),
        ),
        Learner(
            "cem",
            "episodes",
            ("contention", "cem"),
            build="agents.cem:build_cem",
            envs=(CONTENTION,),
        ),
        Learner(
            "distill",
            "episodes",
            ("contention", "cem", "distill"),
            build="agents.selector_distill:build_distill",
            envs=(CONTENTION,),
        ),
    )
}


def learner(algo: str) -> Learner:
    """The learner ``agent.algo`` names; an unknown name is one :class:`ConfigError` listing
    the known ones."""
    found = LEARNERS.get(str(algo))
    if found is None:
        raise ConfigError(f"unknown agent.algo {algo!r}; known: {', '.join(sorted(LEARNERS))}")
    return found


def env_for(algo: str, env_id: str | None) -> str:
    """The env id a run of learner ``algo`` trains in: ``env_id`` (``train.py``'s ``env_id``,
    set by ``env=contention``), or the learner's default; a pairing the learner does not
    support is one :class:`ConfigError` naming the learners that train in that env."""
    entry = learner(algo)
    if env_id is None:
        return entry.envs[0]
    if env_id not in ENV_IDS:
        raise ConfigError(f"unknown env_id {env_id!r}; known: {', '.join(ENV_IDS)}")
    if env_id == CLUSTER and PLAN in entry.envs:
        return PLAN  # the plan learners act in the cluster env through its plan wrapper
    if env_id not in entry.envs:
        others = sorted(a for a, e in LEARNERS.items() if env_id in e.envs or
                        (env_id == CLUSTER and PLAN in e.envs))  # fmt: skip
        raise ConfigError(
            f"agent.algo={algo} does not train in {env_id} (it trains in "
            f"{', '.join(entry.envs)}); learners for {env_id}: {', '.join(others)}"
        )
    return env_id


def resolve(path: str) -> Any:
    """The object a ``module:name`` path names (imported now)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)
