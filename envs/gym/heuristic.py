"""Heuristics through the environment: an allocator's slot decision as incremental actions.

Why: a learned policy sees only the env's window of jobs and the env's placement, so a fair
comparison (and behaviour cloning from a teacher) needs the hand-written allocators to act
through the same env.  :class:`HeuristicDriver` makes any
:class:`~envs.sim.elastic.allocators.Allocator` (DRF, FIFO, SRTF, Tetris, Optimus,
FixedDemand, ...) drive a :class:`~envs.gym.cluster_env.ClusterEnv`, one env action per
increment of the allocator's slot decision; how it does so, where the env's placement differs
and what the window restricts: :class:`HeuristicDriver`.  :meth:`HeuristicDriver.predict`
follows Stable-Baselines3's ``predict`` signature so heuristics run through the same
evaluation code as trained policies.
Details: docs/design/envs.md#heuristics-through-the-env-envsgymheuristicpy
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt

from envs.gym.cluster.contract import ROLE_OFFSET
from envs.gym.cluster_env import ClusterEnv
from envs.gym.episode import play_on, run_episode
from envs.sim.elastic.allocators import Allocator
from envs.sim.elastic.cluster import SlotCluster
from envs.sim.elastic.simulator import SlotSimulator
from envs.sim.errors import ConfigError

__all__ = ["ROLE_OFFSET", "HeuristicDriver"]


class HeuristicDriver:
    """Drives ``env`` (a :class:`ClusterEnv`, possibly wrapped) with ``allocator``.

    ``act()`` returns the next action for the env's current state (an
    :class:`~envs.gym.episode.Actor`); ``predict(obs, ...)`` is the SB3-style adapter (the
    observation is not needed: the driver reads the env's state).

    At the start of every slot it runs the allocator on a *scratch copy* of the slot (the same
    active-job views, an empty :class:`~envs.sim.elastic.cluster.SlotCluster` of the same spec and
    placement rule, the same speed model and slot length), takes its per-job ``(workers, ps)``
    target and its ordered increments (``last_decisions``: ``(job_id, role, node)``), and emits
    one env action per increment (``3 * row + 0/1/2`` for worker/PS/bundle of the job's window
    row) followed by void.

    **Placement.**  The env places every task by its placement rule (``placement=``, by default
    the least-loaded node it fits on); the allocator, run on a scratch cluster with the same
    rule, may have chosen another node (Tetris fills node by node; Optimus releases the tasks
    of a job whose first worker/PS does not fit).  The simulator's outcome depends only on the
    per-job ``(workers, ps)`` counts, so results are identical whenever every increment can
    still be placed by the env.  An increment the env masks (no node fits under the env's
    placement) is skipped; the slot then runs with less than the allocator's target for that
    job (:attr:`HeuristicDriver.shortfalls` counts such skipped increments).

    **Window restriction.**  The allocator is given only the window jobs (the first ``J`` active
    jobs): the env cannot act for jobs beyond the window.  With ``J`` at least the number of
    simultaneously active jobs (e.g. ``J >= num_jobs``) the driver reproduces
    ``SlotSimulator(..., allocator).run()`` exactly (per-job finish times); with a smaller window
    the jobs beyond it wait (or get the env's ``allocator_for_unused``) and results differ.
    """

    def __init__(self, allocator: Allocator, env: gym.Env[Any, Any] | ClusterEnv) -> None:
        base = env.unwrapped if isinstance(env, gym.Env) else env
        if not isinstance(base, ClusterEnv):
            raise ConfigError(f"HeuristicDriver needs a ClusterEnv, got {type(base).__name__}")
        if not hasattr(allocator, "last_decisions"):
            raise ConfigError(
                f"allocator {allocator!r} records no last_decisions (ordered increments)"
            )
        self.allocator = allocator
        self.env: ClusterEnv = base
        self.shortfalls = 0
        self._plan: list[int] = []
        self._pos = 0
        self._plan_sim: SlotSimulator | None = None
        self._plan_t = -1
        self._scratch: SlotCluster | None = None  # reused, emptied for every slot
        self.last_target: dict[int, tuple[int, int]] = {}

    # ------------------------------------------------------------------ planning
    def _plan_slot(self) -> None:
        env = self.env
        sim = env._require_sim()
        window = list(env._window)
        scratch = self._scratch
        if (
            scratch is None
            or scratch.spec != env.cluster_spec
            or scratch.placement != env.placement
        ):
            scratch = self._scratch = SlotCluster(env.cluster_spec, placement=env.placement)
        else:
            scratch.release_all()
        self.last_target = dict(
            self.allocator.allocate(window, scratch, env.speed, env.cluster_spec.slot_s)
        )
        rows = {job.job_id: j for j, job in enumerate(window)}
        decisions = self.allocator.last_decisions
        self._plan = [3 * rows[jid] + ROLE_OFFSET[role] for jid, role, _node in decisions]
        self._pos = 0
        self._plan_sim = sim
        self._plan_t = sim.t

    def reset(self, seed: int | None = None) -> None:
        """Nothing (:class:`~envs.gym.episode.Actor`): each new slot, of a new episode too, is
        planned afresh."""

    def act(self, _obs: Any = None, _view: Any = None) -> int:
        """The next action: the slot plan's next placeable increment, else void (the driver
        reads its env, not ``obs`` and ``view``: an :class:`~envs.gym.episode.Actor`)."""
        env = self.env
        if not env._slot_open:
            return env.void_action
        if self._plan_sim is not env.sim or self._plan_t != env._t:  # a new slot: plan it
            self._plan_slot()
        plan, valid = self._plan, env._mbytes  # the mask's bytes (no copy)
        pos, end = self._pos, len(plan)
        while pos < end:
            a = plan[pos]
            pos += 1
            if valid[a]:
                self._pos = pos
                return a
            self.shortfalls += 1
        self._pos = pos
        return env.void_action

    # ------------------------------------------------------------------ SB3 adapter
    def predict(
        self,
        observation: Any,
        state: tuple[np.ndarray, ...] | None = None,
        episode_start: np.ndarray | None = None,
        deterministic: bool = True,
    ) -> tuple[npt.NDArray[np.int64], tuple[np.ndarray, ...] | None]:
        """SB3's ``predict``: ``(action, state)``; a batched observation (leading dimension 1)
        gets a batched action.  ``state``, ``episode_start`` and ``deterministic`` are unused."""
        a = np.int64(self.act())
        obs = np.asarray(observation)
        if obs.ndim > 1:
            if obs.shape[0] != 1:
                raise ConfigError("HeuristicDriver drives one env; got a batch of observations")
            return np.array([a], dtype=np.int64), state
        return np.asarray(a, dtype=np.int64), state

    def run_episode(self, seed: int | None = None) -> dict[str, Any]:
        """Reset the env (``seed``) and drive it to the end, increment by increment
        (:func:`envs.gym.episode.run_episode`); the last step's ``info``."""
        return run_episode(self.env, self, seed, strict=False).info

    def finish(self) -> dict[str, Any]:
        """Drive the env from where it is to the end of its episode, increment by increment
        (:func:`envs.gym.episode.play_on`); the last step's ``info``."""
        return play_on(self.env, self, None, strict=False).info
