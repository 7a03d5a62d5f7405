"""Clairvoyant local search over a plan policy's sequence of plans, on one workload: a
measurement of how low any sequence of the policy's plans goes (never a scheduler; it reads
the jobs still to arrive).  ``experiments/plan_sequences.py`` runs it and says what it is:
at each slot of a pass, every "plan ``k`` for the next ``m`` slots" (``m`` of the blocks;
:data:`~agents.plan_search.TO_THE_END`: to the end) is tried on a copy of the env that keeps
the jobs still to arrive, continued by the previous pass's sequence (by slot index; its last
plan held past its end), and the lowest total JCT of every job wins (ties: the previous
pass's plan); a block taken rewrites the sequence the later slots continue with, so a pass is
never above the one before."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from agents.episode_results import run_episode
from agents.plan_search import PLANNED, PlannedSequence, PlanSearch, SearchPlanActor
from envs.gym.cluster_env import ClusterEnv
from envs.gym.factory import EnvConfig, make_env
from envs.gym.plan_env import PlanSpec
from envs.sim.errors import ConfigError

__all__ = ["SequenceImprover", "improve"]


class SequenceImprover(SearchPlanActor):
    """One pass of the clairvoyant local search (module docstring) over ``previous``, the
    plan indices of the pass before, slot by slot: the receding-horizon search
    (:class:`~agents.plan_search.SearchPlanActor`, ``base: planned``) with copies that see
    the future and a margin of 1e-12, starting from ``previous`` instead of the network's
    plan.  :attr:`chosen` is this pass's sequence, :attr:`changed` the slots where it left
    the plan, :attr:`base_totals` the total JCT of the option "the plan from here" at each
    slot (at slot 0 that is ``previous``'s own run: the consistency the tests check)."""

    def __init__(
        self,
        env: ClusterEnv,
        plans: Sequence[PlanSpec] | None,
        previous: Sequence[int],
        blocks: Sequence[int] = (1,),
    ) -> None:
        if not previous:
            raise ConfigError("a pass needs the previous pass's plan sequence (it is empty)")
        if not blocks or any(m < 0 for m in blocks):
            raise ConfigError(f"blocks must be slot counts >= 0 (0: to the end), got {blocks}")
        search = PlanSearch(base=PLANNED, tol=1e-12, future=True, blocks=tuple(blocks))
        super().__init__(env, lambda _obs: 0, plans, search)
        bad = [k for k in previous if not 0 <= k < len(self.allocators)]
        if bad:
            raise ConfigError(f"plan indices {bad} are not plans of the policy")
        self.previous = list(previous)
        self.base_totals: list[float] = []

    def _first_plan(self, env: ClusterEnv, k0: int) -> PlannedSequence:
        return PlannedSequence.of(env.slot, self.previous)

    def plan_for(self, env: ClusterEnv, obs: npt.NDArray[np.float32]) -> int:
        k = super().plan_for(env, obs)
        # (the plan's own option is block_totals' first: its value before any block is written)
        self.base_totals.append(next(iter(self.last_values.values()))[0])
        return k


def improve(
    config: EnvConfig,
    plans: Sequence[PlanSpec] | None,
    start: Sequence[int],
    seed: int,
    passes: int,
    blocks: Sequence[int] = (1,),
) -> list[tuple[float, int]]:
    """Up to ``passes`` passes of :class:`SequenceImprover` from ``start`` on workload
    ``seed``: each pass's ``(avg JCT, slots changed)``; stops after a pass that changes none."""
    if passes < 1:
        raise ConfigError(f"passes must be >= 1, got {passes}")
    out: list[tuple[float, int]] = []
    sequence = list(start)
    for _ in range(passes):
        env = make_env(config)
        actor = SequenceImprover(env, plans, sequence, blocks)
        result = run_episode(env, actor, seed)
        if not math.isfinite(result.avg_jct) or result.unfinished:
            raise ConfigError(f"workload {seed}: a pass left jobs unfinished")
        out.append((result.avg_jct, actor.changed))
        sequence = list(actor.chosen)
        if actor.changed == 0:
            break
    return out
