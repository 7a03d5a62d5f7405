"""Trained policies: a released one (``policies/<name>``) or a training run's, ready to act.

:func:`load_policy` takes what ``evaluate.py``'s ``policy:<path>`` and ``contention:<path>``
schedulers take — a policy file ``policy.npz`` (the one format of
:mod:`agents.policy_file`: a ``Cluster-v0``, ``ClusterPlan-v0`` or ``Contention-v0`` policy;
also its older EpisodePG form), a checkpoint directory (``model.zip`` + ``meta.json``), a
``model.zip`` (Stable-Baselines3), older pretrained weights ``policy.pt`` (+ ``policy.json``),
or a directory holding one of these — and also a ``train.py`` run directory (its
``checkpoints/best``, else ``checkpoints/final``) or the name of a released policy (a folder
of the source checkout's ``policies/``, :func:`released_policies`).

The :class:`Policy` is loaded by the evaluation's loaders and acts as they make it act
(:mod:`evaluation.policy`, :mod:`evaluation.contention`): a DL² network (also a stock SB3
``.zip``, where :mod:`evaluation.policy` takes one) through its numpy copy
(:class:`agents.policy.NumpyPolicy`, or the torch network where the copy cannot mirror it),
a plan policy through :class:`agents.plan_policy.PlanPolicy`, a Contention-v0 network by its
masked argmax.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import gymnasium as gym

__all__ = ["Policy", "load_policy", "released_policies"]

#: The released policies: the source checkout's ``policies/`` (not installed with a wheel).
_RELEASED = Path(__file__).resolve().parents[1] / "policies"
#: The files that make a folder a policy.
_POLICY_FILES = ("policy.npz", "policy.pt", "model.zip")
_CLUSTER_ID = "dlsched/Cluster-v0"
_PLAN_ID = "dlsched/ClusterPlan-v0"
_CONTENTION_ID = "dlsched/Contention-v0"


def released_policies() -> dict[str, Path]:
    """Name -> folder of each released policy (``policies/`` of the source checkout; empty
    when the package was installed without it)."""
    if not _RELEASED.is_dir():
        return {}
    return {
        d.name: d
        for d in sorted(_RELEASED.iterdir())
        if d.is_dir() and any((d / f).is_file() for f in _POLICY_FILES)
    }


def _resolve(path: str | os.PathLike[str]) -> Path:
    """The absolute path of the policy ``path`` names (module docstring)."""
    from envs.sim.errors import ConfigError

    p = Path(path).expanduser()
    if not p.exists():
        released = released_policies()
        if str(path) in released:
            return released[str(path)]
        raise ConfigError(
            f"policy {str(path)!r}: no such file or directory, nor a released policy "
            + (f"({', '.join(released)})" if released else "(policies/ is not in this install)")
        )
    if p.is_dir() and (p / "checkpoints").is_dir():  # a train.py run directory
        for name in ("best", "final"):
            if (p / "checkpoints" / name).is_dir():
                return (p / "checkpoints" / name).resolve()
        raise ConfigError(
            f"policy {str(path)!r}: a run directory without checkpoints/best or checkpoints/final"
        )
    return p.resolve()


@dataclass
class Policy:
    """A loaded policy (:func:`load_policy`).

    ``kind``: ``"network"`` (a DL² policy acting per increment in ``dlsched/Cluster-v0``),
    ``"plan"`` (one plan per slot: ``dlsched/ClusterPlan-v0``) or ``"contention"``
    (``dlsched/Contention-v0``); ``env_id``: the env whose observations :meth:`predict`
    takes; ``env``: the config it was trained in as recorded (an
    :class:`~envs.gym.factory.EnvConfig` mapping, a Contention-v0 layout, or ``None``);
    ``deterministic``: how it was validated (masked argmax, else sampled: its recorded
    ``act``), the default of :meth:`predict`, :meth:`act` and :meth:`actor`; ``meta``: the
    saved metadata (training command, versions, ...).
    """

    path: Path
    kind: str
    env_id: str
    env: dict[str, Any] | None
    deterministic: bool
    meta: dict[str, Any]
    model: Any = field(repr=False)  # NumpyPolicy (or TorchPolicy), PlanPolicy or MaskedMLP
    #: the generator of sampled actions in :meth:`predict` / :meth:`act` (``load_policy``'s seed)
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0), repr=False)

    @property
    def n_actions(self) -> int:
        """The size of the action space of :attr:`env_id`."""
        if self.kind == "network":
            return int(self.model.policy.action_space.n)
        net = self.model.net if self.kind == "plan" else self.model
        return int(net.net[-1].out_features)

    def predict(
        self,
        observation: Any,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool | None = None,
        action_masks: Any = None,
        rng: np.random.Generator | None = None,
    ) -> tuple[np.ndarray, None]:
        """Stable-Baselines3's ``predict`` for one observation of :attr:`env_id`: ``(action,
        None)``.  ``action_masks``: the env's ``action_masks()`` (``None``: every action
        valid); ``deterministic``: ``None`` = as validated; sampling draws from ``rng`` (else
        :attr:`rng`).  ``state`` / ``episode_start`` are ignored (no recurrent policies)."""
        from envs.sim.errors import ConfigError

        det = self.deterministic if deterministic is None else bool(deterministic)
        gen = self.rng if rng is None else rng
        n = self.n_actions
        mask = np.ones(n, dtype=bool) if action_masks is None else np.asarray(action_masks, bool)
        if mask.shape != (n,):
            raise ConfigError(f"{self.path}: action_masks of shape {mask.shape}, expected ({n},)")
        obs = np.asarray(observation, dtype=np.float32)
        if self.kind == "network":
            action = self.model.act(obs, mask, deterministic=det, rng=gen)
        elif self.kind == "plan":
            action = self.model.chooser(det, gen)(obs)
        else:
            if not det:
                raise ConfigError(
                    f"{self.path}: a Contention-v0 policy acts by its masked argmax only (as "
                    "evaluate.py's contention: scheduler); use deterministic=True"
                )
            action = int(self.model.logits_one(obs, mask).argmax())
        return np.asarray(action, dtype=np.int64), None

    def _check_env(self, env: Any) -> Any:
        """The unwrapped ``env``, if it is one this policy acts in."""
        from envs.gym.cluster_env import ClusterEnv
        from envs.gym.contention_env import ContentionEnv
        from envs.gym.plan_env import PlanEnv
        from envs.sim.errors import ConfigError

        base = getattr(env, "unwrapped", env)
        want = {"network": ClusterEnv, "plan": PlanEnv, "contention": ContentionEnv}[self.kind]
        if not isinstance(base, want):
            hint = (
                "; in Cluster-v0 it acts through policy.actor(env, seed)"
                if self.kind == "plan" and isinstance(base, ClusterEnv)
                else ""
            )
            raise ConfigError(
                f"{self.path}: a {self.env_id} policy cannot act in a {type(base).__name__}" + hint
            )
        if isinstance(self.meta.get("layout"), dict):  # a policy file: its layout, checked
            from agents.policy_file import check_fits

            spaces: Any = base  # (narrowed to object by the isinstance of a computed class)
            (size,) = spaces.observation_space.shape
            width = size // spaces.J if isinstance(base, ClusterEnv) else 0
            check_fits(self.path, self.meta, self.env_id, size, spaces.action_space.n, width)
        return base

    def act(self, env: Any, obs: Any, deterministic: bool | None = None) -> int:
        """One action in ``env`` (an env of :attr:`env_id`, wrapped or not) for ``obs``,
        masked by ``env.action_masks()``."""
        base = self._check_env(env)
        masks = base.action_masks()
        return int(self.predict(obs, deterministic=deterministic, action_masks=masks)[0])

    def actor(
        self, env: Any, seed: int = 0, *, deterministic: bool | None = None, sample_seed: int = 0
    ) -> Callable[[Any, Any], int]:
        """A fresh ``(env, obs) -> action`` actor for one episode of workload ``seed`` in a
        ``dlsched/Cluster-v0`` env: the one ``evaluate.py``'s ``policy:<path>`` makes (sampling
        seeded by ``[sample_seed, seed]``; a plan policy picks each slot's plan), for
        :func:`agents.episode_results.run_episode`."""
        from envs.gym.cluster_env import ClusterEnv
        from envs.sim.errors import ConfigError
        from evaluation.policy import act_deterministic, network_actor, plan_actor

        base = getattr(env, "unwrapped", env)
        if self.kind == "contention" or not isinstance(base, ClusterEnv):
            raise ConfigError(
                f"{self.path}: actor() makes a dlsched/Cluster-v0 actor of a network or plan "
                f"policy; this is a {self.env_id} policy and the env a {type(base).__name__} "
                "(use act())"
            )
        det = act_deterministic(deterministic, self.meta)
        spec = f"policy:{self.path}"
        make = network_actor if self.kind == "network" else plan_actor
        actor: Callable[[Any, Any], int] = make(self.model, det, sample_seed, spec)(base, seed)
        return actor

    def make_env(self, seed: int = 0) -> gym.Env[Any, Any]:
        """The env this policy was trained in, of :attr:`env_id` (the env class itself, not
        ``gymnasium.make``'s wrappers), whose first unseeded reset uses workload ``seed``."""
        from envs.sim.errors import ConfigError

        if self.env is None:
            raise ConfigError(f"{self.path}: the policy records no training env ('env')")
        if self.kind == "network":
            from envs.gym.factory import make_env

            return make_env(self.env, seed)
        if self.kind == "plan":
            from envs.gym.plan_env import PlanEnv

            return PlanEnv(config=self.env, plans=self.model.plans, seed=seed)
        import inspect

        from envs.gym.contention_env import ContentionEnv

        takes = inspect.signature(ContentionEnv).parameters
        return ContentionEnv(**{k: v for k, v in self.env.items() if k in takes})


def load_policy(path: str | os.PathLike[str], *, seed: int = 0) -> Policy:
    """The policy at ``path`` (module docstring: a released policy's name, a checkpoint
    directory, ``model.zip``, ``policy.pt``, ``policy.npz`` or a ``train.py`` run directory),
    loaded as the evaluation loads it; ``seed`` seeds :attr:`Policy.rng` (sampled actions of
    :meth:`Policy.predict`).  A missing path, an unknown layout or a corrupt file is a
    :class:`~envs.sim.errors.ConfigError` naming the path."""
    from agents.policy_file import load as load_file
    from envs.numerics import use_portable
    from evaluation.policy import act_deterministic, plan_file

    use_portable()  # the same bits on every x86-64 machine (envs/numerics.py)
    p = _resolve(path)
    rng = np.random.default_rng(seed)
    npz = plan_file(p)  # an EpisodePG network's policy file (a Cluster-v0 one: load_network)
    if npz is not None:
        loaded = load_file(npz)  # the one loader (agents/policy_file.py)
        meta = loaded.meta
        if loaded.env_id == _PLAN_ID:
            from agents.plan_policy import PlanPolicy

            plan = PlanPolicy.load(npz)
            det = act_deterministic(None, meta)
            return Policy(npz, "plan", _PLAN_ID, plan.env, det, meta, plan, rng)
        return Policy(npz, "contention", _CONTENTION_ID, dict(meta["env"]), True, meta,
                      loaded.net, rng)  # fmt: skip
    from evaluation.policy import load_network

    fast, meta = load_network(str(p))  # evaluate.py's loader (cached): its numpy or torch network
    env = meta.get("env")
    det = act_deterministic(None, meta)
    return Policy(p, "network", _CLUSTER_ID, dict(env) if isinstance(env, dict) else None,
                  det, meta, fast, rng)  # fmt: skip
