"""How low can any sequence of a plan policy's plans go on one workload?  A clairvoyant local
search over plan sequences, to measure the room a plan policy (learned or searched) has left.

    python experiments/plan_sequences.py                                  # medium:6, seed 100
    python experiments/plan_sequences.py --settings medium:6 medium small:24 --seeds 100 101 102
    python experiments/plan_sequences.py --policy policies/general --passes 4 --blocks 1 4 16 0

A ``dlsched/ClusterPlan-v0`` policy (default ``policies/general_search``: the released network
inside its search) picks one of its plans (allocators) at every slot.  Whatever it learns, its
schedule is a **sequence of those plans**.  This script starts from the policy's own sequence on
a workload (DL²'s generator, validation seeds by default) and improves it, pass after pass,
**seeing the whole workload** (a measurement, never a scheduler):

- at each slot ``s`` of pass ``i``, every option ``(k, m)``, plan ``k`` for the next ``m``
  slots (``--blocks``; ``0``: to the end), is tried on a copy of the env that keeps the jobs
  still to arrive, continued by pass ``i-1``'s sequence by slot index (its last plan held past
  its end), and valued by the total JCT of every job;
- the slot takes the lowest (ties: pass ``i-1``'s own plan, then the shorter block); a block
  taken rewrites the sequence the later slots continue with.

The option "pass ``i-1``'s plan, then pass ``i-1``'s sequence" is always there and, the
continuation being the same sequence at every slot, is what the run does if nothing is better
(rollout with a fixed base: Bertsekas): each pass is at most the one before, to the bit.  The
passes stop at ``--passes`` or when a pass changes no slot.  Printed per workload: the ratio of
the policy's run and of each pass to the best of ``--heuristics`` on the same workload
(through the same env), and the CPU seconds; last, the mean ratio per setting.
docs/experiments/general-policy.md has the measured figures.
"""

from __future__ import annotations

import argparse
import functools
import math
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from agents.episode_results import evaluate_allocator, run_episode
from agents.plan_policy import PlanPolicy
from envs.gym.cluster_env import ClusterEnv
from envs.gym.factory import EnvConfig, coerce_env_config, make_env
from envs.gym.plan_env import PlanActor, PlanSpec
from envs.sim.elastic.allocators import allocator_from_label
from envs.sim.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
RELEASED = ROOT / "policies" / "general_search" / "policy.npz"
HEURISTICS = ("esrtf_load", "esrtf(backfill=True)", "optimus")

#: A block of this many slots runs to the end of the episode.
TO_THE_END = 0


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


def _setting(spec: str, base: EnvConfig, backlog: str | None) -> EnvConfig:
    name, _, nodes = spec.partition(":")
    config = replace(base, setting=name, overrides={"num_nodes": int(nodes)} if nodes else {})
    return replace(config, backlog=backlog) if backlog is not None else config


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--policy", type=Path, default=RELEASED)
    ap.add_argument("--settings", nargs="+", default=["medium:6"],
                    help="DL² settings, each optionally :<nodes>")  # fmt: skip
    ap.add_argument("--backlog", default=None, help="the env's backlog (e.g. bundle)")
    ap.add_argument("--seeds", nargs="+", type=int, default=[100])
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--blocks", nargs="+", type=int, default=[1, 4, 16, TO_THE_END],
                    help="block lengths in slots tried at each slot (0: to the end)")  # fmt: skip
    ap.add_argument("--heuristics", nargs="+", default=list(HEURISTICS))
    args = ap.parse_args(argv)
    path = args.policy if args.policy.suffix == ".npz" else args.policy / "policy.npz"
    policy = PlanPolicy.load(path)
    ratios: dict[str, list[float]] = {}
    for spec in args.settings:
        config = _setting(spec, coerce_env_config(policy.env), args.backlog)
        for seed in args.seeds:
            best = min(
                r.avg_jct
                for label in args.heuristics
                for r in evaluate_allocator(
                    functools.partial(allocator_from_label, label), config, [seed]
                )
            )
            start = time.process_time()
            env = make_env(config)
            actor = policy.actor(env)
            own = run_episode(env, actor, seed).avg_jct
            passes = improve(config, policy.plans, actor.chosen, seed, args.passes, args.blocks)
            line = [f"{spec} seed {seed}: policy {own / best:.4f}"]
            line += [f"pass {i + 1} {jct / best:.4f} ({n} changed)" for i, (jct, n) in
                     enumerate(passes)]  # fmt: skip
            print(" | ".join(line), f"[{time.process_time() - start:.0f} CPU-s]", flush=True)
            ratios.setdefault(f"{spec} policy", []).append(own / best)
            ratios.setdefault(f"{spec} last pass", []).append(passes[-1][0] / best)
    print()
    for name, values in ratios.items():
        print(f"{name}: mean ratio {float(np.mean(values)):.4f} over {len(values)} workload(s)")


if __name__ == "__main__":
    main()
