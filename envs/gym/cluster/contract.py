"""What ``dlsched/Cluster-v0`` promises its callers: ids and constants, the spaces, the action
encoding and the ``info`` dict.

Everything a policy, a wrapper or a learner may rely on is defined here, so the rest of the
package (observation encoding, masks, rewards, the env's transitions) can change without
changing the contract.  :func:`step_info` builds ``info`` for ``reset`` and every ``step``
but the hot one (a placement that leaves the slot open), which writes the same dict out.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from envs.sim.elastic.simulator import ElasticResult

__all__ = [
    "ACTION_ROLES",
    "DEFAULT_MAX_SLOTS",
    "ENV_ID",
    "EXTENDED_FEATURES_PER_JOB",
    "FEATURES_PER_JOB",
    "ROLE_OFFSET",
    "Obs",
    "action_space",
    "observation_space",
    "parse_action",
    "step_info",
]

#: An observation (:func:`observation_space`).
Obs = npt.NDArray[np.float32]

#: The registered id (importing :mod:`envs.gym` registers it with
#: :func:`envs.gym.factory.gym_make` as entry point, ``reward="jct"`` by default).
ENV_ID = "dlsched/Cluster-v0"
#: Per-job features after the ``L`` one-hot type columns (``features="dl2"``).
FEATURES_PER_JOB = 5
#: ... and with ``features="extended"`` (remaining work and size, log-scaled).
EXTENDED_FEATURES_PER_JOB = 7
#: Default truncation horizon in slots (DL²'s heuristics need up to ~1140 slots in the small
#: setting, reference notes §13.9).
DEFAULT_MAX_SLOTS = 2000
#: The role of each action kind (``a - 3 * row``), as allocators name it in ``last_decisions``.
ACTION_ROLES = ("worker", "ps", "bundle")
#: The action kind of each role of ``last_decisions`` (the inverse of :data:`ACTION_ROLES`).
ROLE_OFFSET = {role: kind for kind, role in enumerate(ACTION_ROLES)}


def observation_space(J: int, width: int) -> spaces.Space[Obs]:
    """``Box(0, 1, (J * width,), float32)``: ``J`` window rows of ``width = L + features``
    columns (:class:`~envs.gym.cluster.observation.ObservationMixin` lists them); rows
    without a job are zero."""
    return spaces.Box(0.0, 1.0, shape=(J * width,), dtype=np.float32)


def action_space(J: int) -> spaces.Discrete:
    """``Discrete(3J + 1)``.  ``a = 3j`` adds one worker to window job ``j``, ``3j + 1`` one PS,
    ``3j + 2`` one worker and one PS on the same node (bundle); ``a = 3J`` is void (close the
    slot).  Tasks go to the node chosen by the cluster's placement rule (``placement=``; by
    default the least-loaded node they fit on, :class:`~envs.sim.elastic.cluster.SlotCluster`).

    **Invalid actions** (masked, out of range, or not an integer;
    :class:`~envs.gym.cluster.masks.MaskMixin` says what is masked) are a no-op: nothing is
    placed, the slot stays open, the step's reward is 0, ``info["invalid_action"]`` is True
    and ``info["invalid_actions"]`` counts them over the episode.  ``max_invalid_per_slot``
    (default 1,000) invalid actions within one slot truncate the episode (``info["stuck"]``),
    so that a policy that never closes a slot cannot loop forever."""
    return spaces.Discrete(3 * J + 1)


def parse_action(action: Any, void: int) -> int | None:
    """The action as an int in ``0 .. void``, or ``None`` (invalid)."""
    if type(action) is int or isinstance(action, np.integer):
        a = int(action)
        return a if 0 <= a <= void else None
    try:
        arr = np.asarray(action)
        if arr.size != 1 or not np.issubdtype(arr.dtype, np.integer):
            return None
        a = int(arr.reshape(()))
    except (TypeError, ValueError):
        return None
    return a if 0 <= a <= void else None


def step_info(
    slot: int,
    slot_ended: bool,
    slot_reward: float,
    closed_slot: int,
    empty_slots: int,
    empty_slots_total: int,
    invalid_actions: int,
    jobs_finished: int,
    num_jobs: int,
    invalid_action: bool,
    result: ElasticResult | None = None,
    unfinished_jobs: int | None = None,
    stuck: bool = False,
    censored: tuple[float, float, float] | None = None,
) -> dict[str, Any]:
    """The ``info`` of ``reset`` and of every ``step``, a fresh dict, keys in this order:

    ``slot`` (index of the open slot, or of the next one once the episode ended),
    ``slot_ended`` (True on the step that closed a slot: its reward is the slot's),
    ``slot_reward`` (the slot's reward, unwrapped, for logging; 0 otherwise),
    ``closed_slot`` (index of the slot closed at this step, -1 if none), ``empty_slots``
    (empty slots run at this step), ``empty_slots_total`` (over the episode),
    ``invalid_actions`` (over the episode), ``jobs_finished``, ``num_jobs``; at the episode's
    end, terminated or truncated: ``avg_jct_slots``, ``avg_jct_s``, ``makespan_slots``
    (SB3's ``Monitor(env, info_keywords=("avg_jct_slots", "unfinished_jobs"))`` logs them),
    from ``result`` (the simulator's ``result()``) when every job finished, else from
    ``censored``: a truncated episode's figures with every unfinished job counted as
    finishing at the episode's end (slot ``slot``; a job that had not arrived yet, at its
    arrival): lower bounds, finite, the convention of ``evaluate.py`` and
    :class:`agents.episode_results.EpisodeResult`, and with ``reward="jct"`` the episode's return
    is still exactly ``-avg_jct_slots * num_jobs / jct_scale``; then ``invalid_action``
    (this step's action was invalid); at the episode's end (``unfinished_jobs`` given):
    ``unfinished_jobs`` (jobs unfinished: 0 when terminated, else how many of the figures
    are censored) and ``stuck`` (truncated by ``max_invalid_per_slot``).

    ``ClusterEnv.step``'s hot path writes this dict out for its values (a call costs ~2% of
    a step); the recorded episode digests (``tests/gym/test_cluster_env.py``) hold both to the
    same keys, order and values.
    """
    info: dict[str, Any] = {
        "slot": slot,
        "slot_ended": slot_ended,
        "slot_reward": slot_reward,
        "closed_slot": closed_slot,
        "empty_slots": empty_slots,
        "empty_slots_total": empty_slots_total,
        "invalid_actions": invalid_actions,
        "jobs_finished": jobs_finished,
        "num_jobs": num_jobs,
    }
    if result is not None:
        info["avg_jct_slots"] = result.avg_jct_slots
        info["avg_jct_s"] = result.avg_jct_s
        info["makespan_slots"] = result.makespan_slots
    elif censored is not None:
        info["avg_jct_slots"], info["avg_jct_s"], info["makespan_slots"] = censored
    info["invalid_action"] = invalid_action
    if unfinished_jobs is not None:
        info["unfinished_jobs"] = unfinished_jobs
        info["stuck"] = stuck
    return info
