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
from typing import Any

import numpy as np
import numpy.typing as npt

from agents.episode_results import run_episode
from agents.plan_search import TO_THE_END
from envs.gym.cluster_env import ClusterEnv
from envs.gym.factory import EnvConfig, make_env
from envs.gym.plan_env import PlanActor, PlanSpec
from envs.sim.errors import ConfigError

__all__ = ["SequenceImprover", "improve"]


class SequenceImprover(PlanActor):
    """One pass of the clairvoyant local search (module docstring) over ``previous``, the
    plan indices of the pass before, slot by slot; :attr:`chosen` is this pass's sequence,
    :attr:`changed` the slots where it left ``previous``, :attr:`base_totals` the total JCT
    of the option "``previous`` from here" at each slot (at slot 0 that is ``previous``'s own
    run: the consistency the tests check)."""

    def __init__(
        self,
        env: ClusterEnv,
        plans: Sequence[PlanSpec] | None,
        previous: Sequence[int],
        blocks: Sequence[int] = (1,),
    ) -> None:
        super().__init__(env, lambda _obs: 0, plans)
        if not previous:
            raise ConfigError("a pass needs the previous pass's plan sequence (it is empty)")
        if not blocks or any(m < 0 for m in blocks):
            raise ConfigError(f"blocks must be slot counts >= 0 (0: to the end), got {blocks}")
        self.allocators = [d.allocator for d in self.planner.drivers]
        bad = [k for k in previous if not 0 <= k < len(self.allocators)]
        if bad:
            raise ConfigError(f"plan indices {bad} are not plans of the policy")
        self.sequence = list(previous)
        self.blocks = tuple(blocks)
        self.changed = 0
        self.base_totals: list[float] = []

    def _at(self, j: int) -> int:
        return self.sequence[j] if j < len(self.sequence) else self.sequence[-1]

    def plan_for(self, env: ClusterEnv, obs: npt.NDArray[np.float32]) -> int:
        s = len(self.chosen)
        base = self._at(s)
        copies = env.lookahead(known_only=False, observe=False)
        options = [(base, 1)] + [(k, m) for m in self.blocks for k in range(len(self.allocators))]
        seen: dict[tuple[Any, ...], float] = {}
        values: dict[tuple[int, int], float] = {}
        for k, m in options:
            if (k, m) in values:
                continue
            copy = copies()
            term = trunc = False
            j = s
            while not (term or trunc) and (m == TO_THE_END or j < s + m):
                _, _, term, trunc, _, _ = copy.plan_slot(self.allocators[k])
                j += 1
            held = m == TO_THE_END
            key = (held, k if held else None, j, copy.state_key())
            if key not in seen:  # (the same state, then the same continuation)
                while not (term or trunc):
                    _, _, term, trunc, _, _ = copy.plan_slot(self.allocators[self._at(j)])
                    j += 1
                seen[key] = float(sum(copy.episode_jcts()[0]))
            values[(k, m)] = seen[key]
        here = values[(base, 1)]
        self.base_totals.append(here)
        (k, m), best = min(
            values.items(), key=lambda kv: (kv[1], kv[0][1] == TO_THE_END, kv[0][1], kv[0][0])
        )
        if not here - best > 1e-12 * abs(best):
            return base
        self.changed += 1
        # the later slots must continue as the option was valued: pad the sequence with its
        # last plan (what "held past its end" ran) before writing the block over it
        self.sequence += [self.sequence[-1]] * (s + max(m, 1) + 1 - len(self.sequence))
        if m == TO_THE_END:
            self.sequence = [*self.sequence[:s], k]
        else:
            self.sequence[s : s + m] = [k] * m
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
