"""How far the released search is from the best priority list that sees the whole workload.

Usage::

    python benchmarks/list_frontier.py                                  # medium:6, seed 100
    python benchmarks/list_frontier.py --settings medium:6 medium small:24 small:24/bundle \\
        --seeds 100 101 102 --evals 3000

Every heuristic of the elastic world serves the jobs in some order, each towards an allocation
of its own (EfficientSRTF: shortest first, each at the fewest tasks within ``efficiency`` of its
best speed); so does every plan of ``policies/general_search``, slot by slot.  A *static
priority list* (one order of the workload's jobs, fixed for the episode) with one efficiency
per job (EfficientSRTF's target rule at that efficiency), optionally backfilled by Optimus'
greedy as ``esrtf(backfill=True)``, is a scheduler of that family that a searcher can tune to a
workload.  Here it is tuned **seeing the whole workload** (every job, arrivals included): an
iterated local search over the order (a job moved by one to three places) and the efficiencies
(one job's set to a level of :data:`EFFICIENCIES`), each candidate rolled out through the env,
restarting from the best found after ``--patience`` candidates without a gain.  It starts from
every job at 0.7 in order of its size at that efficiency.  That is not a scheduler (it knows
the future); it says how much lower a schedule of this family can go on the workload, so the
distance from the released search to it is what any scheduler that orders jobs and sizes them
by a rule could still gain.

``--receding B`` adds a scheduler of the same family that **sees no future**
(:class:`RecedingList`, a "list MPC"): before every slot the list is searched again, ``B``
candidates from the last slot's list, on copies that know only the arrived jobs, and the slot
is planned by the best one found.

Per ``setting[:nodes][/backlog]`` (DL²'s generator through the released search's env; seeds
are validation seeds by default) and seed: the best of ``--heuristics``
through the same env, then over it: the list at its start, the best list found (without and
with backfill), with ``--receding`` the receding list, and the released search (``--search``;
``--search none`` skips it).  Then the mean per setting.  Progress goes to stderr every 500
candidates (and every 25 slots of a receding list); Ctrl-C stops with the rows done.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from tabulate import tabulate

from agents.episode_results import best_heuristic_jct, run_episode
from agents.plan_policy import PlanPolicy
from envs.gym.actors import AllocatorActor
from envs.gym.factory import EnvConfig, coerce_env_config, make_env
from envs.sim.elastic.allocator_base import AllocatorBase, JobState
from envs.sim.elastic.allocators import allocator_from_label
from envs.sim.elastic.cluster import SlotCluster
from envs.sim.elastic.spec import SpeedModel
from envs.sim.elastic.speed_aware import EfficientSRTF, Optimus, grow_towards
from envs.sim.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
RELEASED = ROOT / "policies" / "general_search" / "policy.npz"
HEURISTICS = ("esrtf_load", "esrtf(backfill=True)", "optimus")
#: The efficiency levels a job of the list can have (EfficientSRTF's target rule at each).
EFFICIENCIES = (0.4, 0.5, 0.6, 0.7, 0.8, 0.92, 1.0)
START_EFFICIENCY = 0.7
_TARGETS = {e: EfficientSRTF(e) for e in EFFICIENCIES}


class PriorityList(AllocatorBase):
    """Jobs in the order of ``rank`` (job id -> place; ids not in it after, by arrival), each
    given workers and PSs towards EfficientSRTF's target at its ``efficiency`` (job id -> one of
    :data:`EFFICIENCIES`; others at :data:`START_EFFICIENCY`), as EfficientSRTF places them: the
    role further behind its target share first, each on the least-loaded node; a task that
    does not fit ends the job's growth, and a job left without a worker or a PS releases its
    tasks.  ``backfill``: what is left is handed out by :meth:`Optimus.fill`."""

    def __init__(
        self, rank: Mapping[int, int], efficiency: Mapping[int, float], backfill: bool = False
    ) -> None:
        super().__init__()
        self.rank, self.efficiency = rank, efficiency
        self._filler = Optimus() if backfill else None

    def allocate(
        self, jobs: Sequence[JobState], cluster: SlotCluster, speed: SpeedModel, slot_s: float
    ) -> dict[int, tuple[int, int]]:
        by_id, counts = self._start(jobs)
        order = sorted(
            by_id.values(), key=lambda j: (self.rank.get(j.job_id, math.inf), j.arrival, j.job_id)
        )
        for job in order:
            rule = _TARGETS[self.efficiency.get(job.job_id, START_EFFICIENCY)]
            _, tw, tp = rule.target(job, speed)
            grow_towards(self, job, counts[job.job_id], tw, tp, cluster)
        if self._filler is not None:
            self._filler.fill_after(self, by_id, counts, cluster, speed, slot_s)
        return self._result(counts)


Candidate = tuple[tuple[int, ...], dict[int, float]]


def solo_slots(job: Any, speed: SpeedModel, efficiency: float) -> float:
    """``job``'s size: slots alone at EfficientSRTF's target at ``efficiency``."""
    its = _TARGETS[efficiency].target(JobState(job), speed)[0]
    return float(job.num_epochs * job.type.iterations_per_epoch / max(its, 1e-12))


def _shifted(order: Sequence[int], rng: np.random.Generator) -> list[int]:
    """``order`` with one job moved by one to three places (clipped to the ends)."""
    i = int(rng.integers(len(order)))
    k = min(max(i + int(rng.choice((-3, -2, -1, 1, 2, 3))), 0), len(order) - 1)
    moved = list(order)
    moved.insert(k, moved.pop(i))
    return moved


def local_search(
    value: Callable[[Candidate], float],
    start: Candidate,
    evals: int,
    rng: np.random.Generator,
    *,
    patience: int = 400,
    progress: Callable[[int, float], None] | None = None,
) -> tuple[float, Candidate]:
    """The lowest ``value`` found from ``start`` (an order of job ids and their efficiencies)
    in ``evals`` candidates: each one move from the current (half the time a job moved by one to
    three places, else one job's efficiency set to a random level), kept when lower; after
    ``patience`` candidates without a gain, the best found perturbed by six random moves (a
    job moved anywhere, a job's level redrawn) becomes the current one."""
    cur_val, cur = value(start), start
    best_val, best = cur_val, cur
    stale = 0
    for n in range(1, evals + 1):
        order, eff = cur
        if stale >= patience:
            shaken, eff = list(best[0]), dict(best[1])
            for _ in range(6):
                job = shaken.pop(int(rng.integers(len(shaken))))
                shaken.insert(int(rng.integers(len(shaken) + 1)), job)
                eff[shaken[int(rng.integers(len(shaken)))]] = float(rng.choice(EFFICIENCIES))
            cur = (tuple(shaken), eff)
            cur_val, stale = value(cur), 0
            continue
        if rng.random() < 0.5:
            cand: Candidate = (tuple(_shifted(order, rng)), eff)
        else:
            cand = (
                order,
                {**eff, order[int(rng.integers(len(order)))]: float(rng.choice(EFFICIENCIES))},
            )
        v = value(cand)
        stale += 1
        if v < cur_val - 1e-9:
            cur_val, cur, stale = v, cand, 0
            if v < best_val:
                best_val, best = v, cand
        if progress is not None and n % 500 == 0:
            progress(n, best_val)
    return best_val, best


def _setting(spec: str, base: EnvConfig) -> EnvConfig:
    """``setting[:nodes][/backlog]`` over ``base``; checked by building its env once (an
    unknown setting or backlog, or a node count that is not a positive integer, is a
    :class:`ConfigError` naming ``spec``)."""
    name, _, rest = spec.partition(":")
    nodes, _, backlog = rest.partition("/")
    if nodes and not (nodes.isdigit() and int(nodes) > 0):
        raise ConfigError(f"--settings {spec!r}: the node count must be a positive integer")
    config = replace(base, setting=name, overrides={"num_nodes": int(nodes)} if nodes else {})
    config = replace(config, backlog=backlog) if backlog else config
    try:
        make_env(config)
    except ConfigError as exc:
        raise ConfigError(f"--settings {spec!r}: {exc}") from None
    return config


def frontier(config: EnvConfig, seed: int, evals: int, backfill: bool, spec: str) -> float:
    """The best avg JCT (slots) of a static priority list found on workload ``seed``."""
    env = make_env(config)

    def value(cand: Candidate) -> float:
        rank = {jid: k for k, jid in enumerate(cand[0])}
        actor = AllocatorActor(env, lambda: PriorityList(rank, cand[1], backfill))
        return run_episode(env, actor, seed).avg_jct

    env.reset(seed=seed)

    def size(job: Any) -> float:
        return solo_slots(job, env.speed, START_EFFICIENCY)

    order = tuple(
        j.job_id for j in sorted(env.jobs, key=lambda j: (size(j), j.arrival_slot, j.job_id))
    )
    start: Candidate = (order, {jid: START_EFFICIENCY for jid in order})
    tag = f"{spec} seed {seed}{' backfill' if backfill else ''}"
    t0 = time.monotonic()

    def progress(n: int, best: float) -> None:
        print(f"  {tag}: {n}/{evals} candidates, best {best:.3f} ({time.monotonic() - t0:.0f} s)",
              file=sys.stderr, flush=True)  # fmt: skip

    rng = np.random.default_rng([seed, int(backfill)])
    return local_search(value, start, evals, rng, progress=progress)[0]


class RecedingList:
    """A scheduler of the same family that **sees no future**: before every slot, the list is
    searched again (``budget`` candidates, one move each from the incumbent as in
    :func:`local_search`, plus a flip of the backfill, kept when lower) on copies of the env
    that know only the arrived jobs (:meth:`~envs.gym.cluster.env.ClusterEnv.lookahead`), each
    candidate valued by the known jobs' total JCT with the list held to their end; the
    incumbent is the last slot's list, with the jobs that arrived since at
    :data:`START_EFFICIENCY`, each placed before the first job that is longer at its own
    efficiency.  The slot is planned by the best list found.  ``future``: the copies keep the
    jobs still to arrive (clairvoyant, for the tests' power only).  :attr:`values` records
    each slot's ``(incumbent's value, chosen value)``."""

    def __init__(self, budget: int, seed: int, *, future: bool = False) -> None:
        self.budget, self.future = budget, future
        self.rng = np.random.default_rng([seed, 2])
        self.order: list[int] = []
        self.efficiency: dict[int, float] = {}
        self.backfill = False
        self.values: list[tuple[float, float]] = []

    def _admit(self, env: Any, known: Sequence[Any]) -> None:
        """Drop finished jobs from the list; place new ones by size (slots alone at their
        efficiency)."""

        def size(job: Any) -> float:
            return solo_slots(job, env.speed, self.efficiency[job.job_id])

        by_id = {j.job_id: j for j in known}
        self.order = [i for i in self.order if i in by_id]
        for job in sorted(known, key=lambda j: (j.arrival_slot, j.job_id)):
            if job.job_id in self.order:
                continue
            self.efficiency[job.job_id] = START_EFFICIENCY
            s = size(job)
            at = next((k for k, i in enumerate(self.order) if size(by_id[i]) > s), None)
            self.order.insert(len(self.order) if at is None else at, job.job_id)

    def plan(self, env: Any) -> PriorityList:
        """The allocator of ``env``'s open slot (nothing placed yet)."""
        copies = env.lookahead(known_only=not self.future, observe=False)
        sim = env.simulator
        known = [j for j in copies().jobs if sim.finish_time(j.job_id) is None]
        self._admit(env, known)

        def value(order: Sequence[int], eff: Mapping[int, float], backfill: bool) -> float:
            copy = copies()
            allocator = PriorityList({jid: k for k, jid in enumerate(order)}, eff, backfill)
            term = trunc = False
            while not (term or trunc):
                _, _, term, trunc, _, _ = copy.plan_slot(allocator)
            return float(sum(copy.episode_jcts()[0]))

        order, eff, backfill = list(self.order), dict(self.efficiency), self.backfill
        start = best = value(order, eff, backfill)
        n = len(order)
        for _ in range(self.budget if n else 0):
            o, e, b = list(order), dict(eff), backfill
            r = self.rng.random()
            if n >= 2 and r < 0.5:
                o = _shifted(o, self.rng)
            elif r < 0.95:
                e[o[int(self.rng.integers(n))]] = float(self.rng.choice(EFFICIENCIES))
            else:
                b = not b
            v = value(o, e, b)
            if v < best - 1e-9:
                order, eff, backfill, best = o, e, b, v
        self.order, self.efficiency, self.backfill = order, eff, backfill
        self.values.append((start, best))
        return PriorityList({jid: k for k, jid in enumerate(order)}, eff, backfill)


def receding(config: EnvConfig, seed: int, budget: int, spec: str) -> float:
    """The avg JCT (slots) of :class:`RecedingList` on workload ``seed``."""
    env = make_env(config)
    env.reset(seed=seed)
    scheduler = RecedingList(budget, seed)
    t0, term, trunc = time.monotonic(), False, False
    while not (term or trunc):
        _, _, term, trunc, _, _ = env.plan_slot(scheduler.plan(env))
        if env.slot % 25 == 0:
            print(f"  {spec} seed {seed} receding: slot {env.slot} "
                  f"({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)  # fmt: skip
    return float(np.mean(env.episode_jcts()[0]))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--settings", nargs="+", default=["medium:6"],
                    help="setting[:nodes][/backlog], e.g. small:24/bundle")  # fmt: skip
    ap.add_argument("--seeds", nargs="+", type=int, default=[100])
    ap.add_argument("--evals", type=int, default=3000, help="candidates per local search")
    ap.add_argument("--search", default=str(RELEASED), help="a plan policy with a search, or none")
    ap.add_argument("--heuristics", nargs="+", default=list(HEURISTICS))
    ap.add_argument("--receding", type=int, default=0, metavar="B",
                    help="also the list searched again every slot on the known jobs, "
                         "B candidates a slot (sees no future); 0: not run")  # fmt: skip
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    if args.evals < 1:
        ap.error(f"--evals must be >= 1, got {args.evals}")
    if args.receding < 0:
        ap.error(f"--receding must be >= 0, got {args.receding}")
    try:
        _run(args)
    except ConfigError as exc:  # a bad setting, heuristic or policy file: one line
        sys.exit(f"error: {exc}")


def _run(args: argparse.Namespace) -> None:
    search = None if args.search == "none" else PlanPolicy.load(
        Path(args.search) if args.search.endswith(".npz") else Path(args.search) / "policy.npz"
    )  # fmt: skip
    base = coerce_env_config(
        (search.env if search is not None else None) or {"features": "extended"}
    )
    configs = {spec: _setting(spec, base) for spec in args.settings}  # every spec checked first
    for label in args.heuristics:
        allocator_from_label(label)
    rows: list[dict[str, Any]] = []
    try:
        for spec, config in configs.items():
            for seed in args.seeds:
                best = best_heuristic_jct(args.heuristics, config, seed)
                row: dict[str, Any] = {
                    "setting": spec,
                    "seed": seed,
                    "best heuristic": round(best, 3),
                }
                lists = [frontier(config, seed, args.evals, bf, spec) for bf in (False, True)]
                row["list"] = round(min(lists) / best, 4)
                row["list (no backfill)"] = round(lists[0] / best, 4)
                row["list (backfill)"] = round(lists[1] / best, 4)
                if args.receding:
                    got = receding(config, seed, args.receding, spec)
                    row["receding list"] = round(got / best, 4)
                if search is not None:
                    env = make_env(config)
                    row["search"] = round(
                        run_episode(env, search.actor(env), seed).avg_jct / best, 4
                    )
                rows.append(row)
                print(f"{spec} seed {seed}: {row}", file=sys.stderr, flush=True)
    except KeyboardInterrupt:
        print("interrupted: the rows done so far", file=sys.stderr)
    keys = ["list"] + (["receding list"] if args.receding else [])
    keys += ["search"] if search is not None else []
    means = []
    for spec in dict.fromkeys(r["setting"] for r in rows):
        mine = [r for r in rows if r["setting"] == spec]
        means.append(
            {"setting": spec, **{k: round(float(np.mean([r[k] for r in mine])), 4) for k in keys}}
        )
    if args.json:
        print(json.dumps({"evals": args.evals, "rows": rows, "means": means}))
    else:
        print(tabulate(rows, headers="keys", tablefmt="github"))
        print()
        print(tabulate(means, headers="keys", tablefmt="github"))


if __name__ == "__main__":
    main()
