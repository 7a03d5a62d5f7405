"""The rewards of ``dlsched/Cluster-v0`` (``reward=``), by name in :data:`REWARDS`.

A reward is computed once per slot, when the slot closes, from the simulator's record of
the slot; the env returns it on the step that closed the slot and 0 on the other steps (DL²:
the env returns the slot reward on the decision that closes it), with ``info["slot_ended"]``
True on that step so that an algorithm can credit every decision of the slot with it (DL²'s
training rule), and ``info["slot_reward"]`` repeating it for logging (the unwrapped value).
Empty slots have reward 0.  A new reward is one function of the :data:`RewardFn` signature
plus one line in :data:`REWARDS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from envs.sim.elastic.allocators import JobState
from envs.sim.elastic.simulator import SlotRecord, SlotSimulator

__all__ = ["JCT_RETURN", "REWARDS", "RewardEnv", "RewardFn", "dl2_reward", "jct_reward"]


class RewardEnv(Protocol):
    """What a reward reads of the env (not the whole env: the rewards do not import it):
    its simulator and its options."""

    @property
    def sim(self) -> SlotSimulator | None: ...

    @property
    def jct_scale(self) -> float: ...


#: ``reward(env, record, active, t)``: the env right after the slot closed (its simulator
#: ``env.sim``, options such as ``env.jct_scale``: :class:`RewardEnv`), the slot's
#: :class:`SlotRecord`, the jobs that were active in the slot (the window and the jobs waiting
#: beyond it), the slot's index.
RewardFn = Callable[[RewardEnv, SlotRecord, Sequence[JobState], int], float]


def dl2_reward(env: RewardEnv, record: SlotRecord, active: Sequence[JobState], t: int) -> float:
    """``"dl2"`` (the class's default; ``gymnasium.make`` defaults to ``"jct"``): DL²'s slot
    reward, the sum over jobs that ran in the slot of epochs trained / declared
    ``num_epochs`` (:attr:`SlotRecord.reward`).  Over a complete episode it sums to the number
    of jobs (each job's fractions add up to 1), whatever the policy: learners that maximise
    the return see no difference between policies, only DL²'s per-slot credit rule gives it a
    signal."""
    return float(record.reward)


def jct_reward(env: RewardEnv, record: SlotRecord, active: Sequence[JobState], t: int) -> float:
    """``"jct"``: minus the job-time spent in the system during the slot, ``-sum over active
    jobs (in the window or waiting beyond it) of (min(finish, t + 1) - t)`` divided by
    ``jct_scale`` (default 1): 1 slot for a job that does not finish, the used fraction of the
    slot for one that does.  Over a complete episode the sum is exactly ``-(sum of JCTs in
    slots) / jct_scale`` with the simulator's fractional finish times."""
    sim = env.sim
    assert sim is not None  # the slot just closed in it
    if not record.finished:
        # Every job active in the slot was unfinished when it began (the simulator's active
        # jobs), so with no job finished in it each counts 1 slot: the loop below would add
        # 1.0 once per job, which is exactly float(len(active)).
        return -float(len(active)) / env.jct_scale
    in_system = 0.0
    for view in active:
        finish = sim.finish_time(view.job_id)
        in_system += 1.0 if finish is None else finish - t
    return -in_system / env.jct_scale


#: The rewards by name (``ClusterEnv(reward=name)``, ``EnvConfig.reward``).
REWARDS: dict[str, RewardFn] = {"dl2": dl2_reward, "jct": jct_reward}
#: The rewards whose episode return is minus the total JCT (over the scale): what a learner
#: that minimises average JCT needs (``plan_pg`` checks it; a new reward of that kind is
#: added here too).
JCT_RETURN: frozenset[str] = frozenset({"jct"})
