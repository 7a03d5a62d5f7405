"""Trained networks as :class:`~envs.gym.episode.Actor`\\ s: what acts beside the rules of
:mod:`envs.gym.actors` in ``evaluate.py``, validation and rollouts.

- :class:`NetActor`: an EpisodePG network (:class:`~agents.episode_pg.MaskedMLP`,
  :class:`~agents.set_plan.SetPlanNet`) by masked argmax, in the env it was trained in
  (``Contention-v0``, ``ClusterPlan-v0``);
- a ``ClusterPlan-v0`` policy in ``Cluster-v0``: :meth:`agents.plan_policy.PlanPolicy.actor`
  (a :class:`~envs.gym.plan_env.PlanActor`);
- a ``Cluster-v0`` policy (:class:`~agents.policy.NumpyPolicy`): :class:`PolicyActor`.

Each is also callable in the older ``(env, obs) -> action`` form.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["NetActor", "PolicyActor"]


class NetActor:
    """An EpisodePG network's masked argmax (``net.act(view, obs)``: the network's own
    deterministic policy, bit for bit)."""

    def __init__(self, net: Any) -> None:
        self.net = net

    def reset(self, seed: int | None) -> None:
        """Nothing: the argmax draws nothing."""

    def __call__(self, env: Any, obs: npt.NDArray[np.float32]) -> int:
        """The older ``(env, obs) -> action`` form of :meth:`act`."""
        return self.act(obs, env)

    def act(self, obs: npt.NDArray[np.float32], view: Any) -> int:
        return int(self.net.act(view, obs))


class PolicyActor:
    """A ``Cluster-v0`` policy (:class:`~agents.policy.NumpyPolicy` or
    :class:`~agents.policy.TorchPolicy`: ``act(obs, mask, deterministic=, rng=)``): masked
    argmax, or a draw from the masked softmax with ``numpy.random.default_rng([sample_seed,
    seed])``, a fresh generator per episode (``deterministic=False``), as ``evaluate.py``'s
    ``policy:`` scheduler draws them."""

    def __init__(
        self, policy: Any, deterministic: bool = True, sample_seed: int = 0, seed: int = 0
    ) -> None:
        self.policy, self.deterministic, self.sample_seed = policy, deterministic, sample_seed
        self.reset(seed)

    def reset(self, seed: int | None) -> None:
        """The draws of workload ``seed``'s episode: a fresh generator."""
        self.rng = np.random.default_rng([self.sample_seed, 0 if seed is None else seed])

    def __call__(self, env: Any, obs: npt.NDArray[np.float32]) -> int:
        """The older ``(env, obs) -> action`` form of :meth:`act`."""
        return self.act(obs, env)

    def act(self, obs: npt.NDArray[np.float32], view: Any) -> int:
        return int(
            self.policy.act(
                obs, view.action_masks(), deterministic=self.deterministic, rng=self.rng
            )
        )
