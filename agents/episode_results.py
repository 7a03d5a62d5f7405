"""Run schedulers (heuristics or learned policies) through the same env on the same seeds.

Every scheduler is driven through :class:`~envs.gym.cluster_env.ClusterEnv` one decision at a
time, so heuristics and learned policies face the same window, the same placement rule and the
same simulator.  :func:`run_episode` returns an :class:`EpisodeResult` with the per-job JCTs;
an episode that hits the truncation horizon counts its unfinished jobs as finishing at the
horizon (a lower bound, flagged by ``unfinished``).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from envs.gym.actors import AllocatorActor, DriverActor
from envs.gym.cluster_env import ClusterEnv
from envs.gym.episode import Actor as EnvActor
from envs.gym.episode import run_episode as play
from envs.gym.factory import EnvConfig, make_env
from envs.gym.heuristic import HeuristicDriver
from envs.sim.elastic.allocators import Allocator, allocator_from_label
from envs.sim.elastic.simulator import SlotRecord

__all__ = [
    "DriverActor",
    "EpisodeDetail",
    "EpisodeResult",
    "JobOutcome",
    "aggregate",
    "best_heuristic_jct",
    "driver_actor",
    "evaluate_allocator",
    "evaluate_policy",
    "run_episode",
    "run_episode_detailed",
]

#: A decision rule: an :class:`envs.gym.episode.Actor` (``reset(seed)``, ``act(obs, view)``),
#: or the older ``(env, obs) -> action`` callable.
Actor = EnvActor | Callable[[ClusterEnv, np.ndarray], int]


@dataclass(frozen=True)
class EpisodeResult:
    """One workload run to the end (or to the horizon); times in slots."""

    seed: int
    avg_jct: float
    median_jct: float
    p95_jct: float
    makespan: float
    cpu_util: float
    gpu_util: float
    decisions: int
    unfinished: int
    invalid_actions: int

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _result(env: ClusterEnv, seed: int, decisions: int) -> EpisodeResult:
    sim = env.simulator
    jcts, makespan, unfinished = env.episode_jcts()  # unfinished jobs censored at the horizon
    arr = np.asarray(jcts, dtype=float)
    cpu, gpu = sim.utilisation if hasattr(sim, "utilisation") else ([], [])
    return EpisodeResult(
        seed=int(seed),
        avg_jct=float(arr.mean()),
        median_jct=float(np.median(arr)),
        p95_jct=float(np.percentile(arr, 95)),
        makespan=float(makespan),
        cpu_util=float(np.mean(cpu)) if len(cpu) else 0.0,
        gpu_util=float(np.mean(gpu)) if len(gpu) else 0.0,
        decisions=int(decisions),
        unfinished=unfinished,
        invalid_actions=int(env.invalid_actions),
    )


def _play(
    env: ClusterEnv,
    actor: Actor,
    seed: int,
    on_reset: Callable[[ClusterEnv], None] | None = None,
) -> int:
    """Reset ``env`` with workload ``seed`` and let ``actor`` decide until the episode ends
    (:func:`envs.gym.episode.run_episode`; an invalid action is a counted no-op, reported in
    :attr:`EpisodeResult.invalid_actions`); the env steps taken.  An actor that plans whole
    slots (a :class:`DriverActor`, a :class:`~envs.gym.plan_env.PlanActor`) has each slot
    applied in one call (``ClusterEnv.plan_slot``: the same episode as its increments one
    step at a time, step count included, tested bit for bit).  ``on_reset(env)`` runs after
    the reset."""
    return play(env, actor, seed, on_reset=on_reset, strict=False).steps


def run_episode(env: ClusterEnv, actor: Actor, seed: int) -> EpisodeResult:
    """Reset ``env`` with workload ``seed`` and let ``actor`` decide until the episode ends."""
    return _result(env, seed, _play(env, actor, seed))


def driver_actor(driver: HeuristicDriver) -> Actor:
    """An actor that lets ``driver`` (a heuristic on the same env) pick every increment."""
    return DriverActor(driver)


def evaluate_allocator(
    allocator_factory: Callable[[], Allocator], env_config: EnvConfig, seeds: Sequence[int]
) -> list[EpisodeResult]:
    """A heuristic driven through the env (:class:`HeuristicDriver`) on each seed."""
    env = make_env(env_config)
    return [run_episode(env, AllocatorActor(env, allocator_factory), seed) for seed in seeds]


def best_heuristic_jct(labels: Sequence[str], env_config: EnvConfig, seed: int) -> float:
    """The lowest avg JCT (slots) of the allocators ``labels`` (e.g. ``"esrtf(backfill=True)"``)
    through the env on workload ``seed``; ``inf`` for no label."""
    runs = (
        evaluate_allocator(functools.partial(allocator_from_label, label), env_config, [seed])[0]
        for label in labels
    )
    return min((run.avg_jct for run in runs), default=float("inf"))


def evaluate_policy(
    policy: Any,
    env_config: EnvConfig,
    seeds: Sequence[int],
    *,
    deterministic: bool = True,
    sample_seed: int = 0,
) -> list[EpisodeResult]:
    """A :class:`~agents.policy.DL2Policy` (or an SB3 model holding one: ``model.policy``) on
    each seed, every seed in lockstep with one batched forward per step
    (:func:`agents.rollouts.run_batched`: the same decisions as one at a time): masked argmax
    (``deterministic``) or draws from the masked softmax with
    ``numpy.random.default_rng([sample_seed, seed])`` per workload seed, exactly as
    ``evaluate.py``'s ``policy:`` scheduler draws them (so a checkpoint's validation figures
    and its ``evaluate.py`` figures agree)."""
    from agents.policy import NumpyPolicy  # torch only when a learned policy is evaluated
    from agents.rollouts import run_batched

    if not seeds:
        return []
    fast = NumpyPolicy(getattr(policy, "policy", policy))
    envs = [make_env(env_config) for _ in seeds]
    draws = None if deterministic else [[int(sample_seed), int(s)] for s in seeds]
    batch = run_batched(envs, list(seeds), fast, deterministic=deterministic, sample_seeds=draws)
    return [
        _result(e, int(s), ep.decisions)
        for e, s, ep in zip(envs, seeds, batch.episodes, strict=True)
    ]


def aggregate(results: Sequence[EpisodeResult]) -> dict[str, float]:
    """Means over episodes of every metric (``avg_jct`` is the mean of per-seed averages)."""
    if not results:
        return {}
    keys = ("avg_jct", "median_jct", "p95_jct", "makespan", "cpu_util", "gpu_util")
    out = {k: float(np.mean([getattr(r, k) for r in results])) for k in keys}
    out["unfinished"] = float(sum(r.unfinished for r in results))
    return out


# --------------------------------------------------------------------------------------------
# Per-job records (evaluate.py's per-job tables)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class JobOutcome:
    """One job of an episode; times in slots.

    ``first_slot``: the first slot in which it had a worker (``None``: it never ran);
    ``finish``: its fractional completion slot (``None``: unfinished at the horizon);
    ``slots_run`` / ``num_changes`` as in :class:`~envs.sim.elastic.simulator.ElasticJobRecord`.
    """

    job_id: int
    arrival_slot: int
    first_slot: int | None
    finish: float | None
    slots_run: int
    num_changes: int


@dataclass(frozen=True)
class EpisodeDetail:
    """An episode's :class:`EpisodeResult` with its per-job outcomes (in ``env.jobs`` order),
    the GPU utilisation of every slot from slot 0, and the slot reached (``horizon``)."""

    result: EpisodeResult
    jobs: tuple[JobOutcome, ...]
    gpu_util: tuple[float, ...]
    horizon: float


class _SlotLog:
    """``SlotSimulator.on_slot`` hook: first slot with a worker, slots run and allocation
    changes per job (the simulator's own rule: a change is a new non-idle allocation that
    differs from the job's previous one, after its first slot)."""

    def __init__(self) -> None:
        self.first: dict[int, int] = {}
        self.runs: dict[int, int] = {}
        self.changes: dict[int, int] = {}
        self.last: dict[int, tuple[int, int]] = {}

    def __call__(self, rec: SlotRecord) -> None:
        for jid, alloc in rec.allocation.items():
            alloc = (int(alloc[0]), int(alloc[1]))
            prev = self.last.get(jid, (0, 0))
            self.last[jid] = alloc
            if alloc == (0, 0):
                continue
            if alloc[0] > 0:
                self.first.setdefault(jid, rec.t)
            if self.runs.get(jid, 0) > 0 and alloc != prev:
                self.changes[jid] = self.changes.get(jid, 0) + 1
            self.runs[jid] = self.runs.get(jid, 0) + 1


def run_episode_detailed(env: ClusterEnv, actor: Actor, seed: int) -> EpisodeDetail:
    """:func:`run_episode` (the same decisions and result), also recording per-job outcomes;
    ``env`` holds the episode's jobs (``env.jobs``) afterwards."""
    log = _SlotLog()

    def hook(e: ClusterEnv) -> None:
        e.simulator.on_slot = log  # slots run empty during reset have nothing to record

    n = _play(env, actor, seed, hook)
    sim = env.simulator
    jobs = tuple(
        JobOutcome(
            job_id=job.job_id,
            arrival_slot=job.arrival_slot,
            first_slot=log.first.get(job.job_id),
            finish=sim.finish_time(job.job_id),
            slots_run=log.runs.get(job.job_id, 0),
            num_changes=log.changes.get(job.job_id, 0),
        )
        for job in env.jobs
    )
    gpu = tuple(float(u) for u in getattr(sim, "_gpu_util", ()))
    return EpisodeDetail(_result(env, seed, n), jobs, gpu, float(sim.t))


def evaluate_random(
    env_config: EnvConfig,
    seeds: Sequence[int],
    *,
    exploration: Any = None,
    sample_seed: int = 0,
) -> list[EpisodeResult]:
    """A uniform-random policy over the valid actions (void included), optionally with the
    job-aware exploration rules applied on top (``exploration``: an
    :class:`~agents.exploration.ExplorationConfig`; DL²'s "random + rules" baseline)."""
    from agents.exploration import JobAwareExploration

    env = make_env(env_config)
    rng = np.random.default_rng(sample_seed)
    rules = (
        None
        if exploration is None
        else JobAwareExploration(
            exploration, env.J, env.L, env.setting.max_workers, env.setting.max_ps
        )
    )
    step = [0]

    def actor(e: ClusterEnv, obs: np.ndarray) -> int:
        mask = e.action_masks()
        valid = np.flatnonzero(mask)
        a = int(valid[rng.integers(len(valid))])
        if rules is not None:
            a = rules.apply(a, obs, mask, step[0], rng)[0]
        step[0] += 1
        return a

    return [run_episode(env, actor, seed) for seed in seeds]
