"""The learners ``train.py +agent=<name>`` runs, in one registry: ``agent.algo`` ->
:class:`Learner`.

A learner's name used to live in five tables (the builders, the checkpoint class of each
algo, the classes a checkpoint may hold, the list of algos, the ``agent.*`` keys each reads)
and the pipeline branched on name strings (``algo == "plan_pg"``, ``algo != "group_ppo"``).
Now each learner is one :class:`Learner` entry saying what the rest of the project needs to
know about it; everything else is derived from :data:`LEARNERS`:

* :func:`agents.build.build_agent` builds it (``build``, a ``module:function`` path);
* :mod:`agents.checkpoint` loads its checkpoints (``checkpoint_class``, ``module:Class``);
* :mod:`training.run` picks its pipeline (``pipeline``) and its env copies (``env_copies``),
  and checks a resumed run's hyperparameters (``resume_keys``);
* :mod:`training.runinfo` records only the ``agent.*`` keys it reads (``keys``).

Adding a learner: an entry here (and its builder, and a ``conf/agent/<name>.yaml`` whose
``algo`` names it).  Paths are resolved on use, so this module imports nothing heavy.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from envs.sim.errors import ConfigError

__all__ = ["LEARNERS", "PIPELINES", "Learner", "learner", "resolve"]

#: ``sb3``: :mod:`training.run`'s loop (a Stable-Baselines3-style ``learn`` on ``Cluster-v0``
#: env copies, checkpoints as ``model.zip``); ``plan``: :mod:`training.plan` (the slot's plan
#: as the action, :class:`~agents.episode_pg.EpisodePG`, ``policy.npz``); ``contention``:
#: :mod:`training.contention` (EpisodePG in ``dlsched/Contention-v0``, ``policy.npz``).
PIPELINES = ("sb3", "plan", "contention")

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
    ``resume_keys``: hyperparameters a resumed run must keep (compared with the checkpoint's)."""

    algo: str
    pipeline: str
    keys: tuple[str, ...]
    build: str | None = None
    checkpoint_class: str | None = None
    env_copies: str = "n_envs"
    resume_keys: tuple[str, ...] = ()

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
        Learner("plan_pg", "plan", ("learning_rate", "ent_coef", "plan")),
        Learner(
            "plan_a2c",
            "plan",
            ("learning_rate", "ent_coef", "plan", "a2c"),
            build="agents.plan_a2c:build_plan_a2c",
        ),
        Learner("contention_pg", "contention", ("learning_rate", "ent_coef", "contention")),
    )
}


def learner(algo: str) -> Learner:
    """The learner ``agent.algo`` names; an unknown name is one :class:`ConfigError` listing
    the known ones."""
    found = LEARNERS.get(str(algo))
    if found is None:
        raise ConfigError(f"unknown agent.algo {algo!r}; known: {', '.join(sorted(LEARNERS))}")
    return found


def resolve(path: str) -> Any:
    """The object a ``module:name`` path names (imported now)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)
