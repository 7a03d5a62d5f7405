"""Held-out evaluation that can see a 5% gain: the same workloads for every scheduler, paired.

:func:`heldout_workloads` lists the test workloads: generator seeds of the env config and/or
trace windows drawn (with a fixed seed) from held-out VCs and days of the Philly corpus
(:mod:`envs.gym.workloads`).  :func:`run_schedulers` runs heuristics (through the env, by
:class:`~envs.gym.heuristic.HeuristicDriver`) and learned policies (masked argmax, or sampled
with a seed per workload) on every one of them, so each scheduler's figures are paired by
workload.  :func:`paired` gives the mean relative difference of two schedulers over the
workloads with its 95% Student-t CI; learned policies trained with several seeds are averaged
per workload first (the CI is over workloads; the spread over training seeds is reported
separately by the callers).
"""

from __future__ import annotations

import functools
import glob
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from agents.episode_results import run_episode
from envs.gym.actors import AllocatorActor
from envs.gym.cluster_env import ClusterEnv
from envs.gym.factory import EnvConfig, setting_of
from envs.gym.workloads import TEST_VCS, Scenario, TraceWindows, scenario_envs, window_scenarios
from envs.sim.elastic.allocators import allocator_from_label
from envs.sim.elastic.bounds import capacity_bound, mean_jct, solo_bounds, window_bounds
from envs.sim.errors import ConfigError
from evaluation.stats import mean_ci95

__all__ = [
    "Table",
    "Workload",
    "heldout_workloads",
    "load_policies",
    "lower_bound",
    "paired",
    "run_schedulers",
]


@dataclass(frozen=True)
class Workload:
    """One test workload: a label, the scenario its envs are built on."""

    label: str
    scenario: Scenario

    def env(self, config: EnvConfig) -> ClusterEnv:
        return scenario_envs(config, self.scenario, 1)[0]

    def lower_bound(self, config: EnvConfig, capacity: bool = False) -> float:
        """:func:`lower_bound` of this workload through ``config``'s env."""
        env = self.env(config)
        env.reset(seed=self.scenario.seed)
        return lower_bound(env, config, capacity)


def lower_bound(env: ClusterEnv, config: EnvConfig, capacity: bool = False) -> float:
    """No policy of ``env`` (a ``config`` env, reset on its workload) can have a lower avg JCT
    (slots) on that workload (:mod:`envs.sim.elastic.bounds`): the window bound, or the solo
    bound when the jobs beyond the window are allocated too (``config.backlog``); with
    ``capacity``, the same plus the cluster's capacity (``capacity_bound``, a linear
    programme: seconds, not microseconds); NaN in the contention speed mode, whose rates do not
    come from the speed model the bounds use."""
    if config.speed != "measured":
        return math.nan
    window = None if config.backlog != "none" else env.J
    if capacity:
        return capacity_bound(env.jobs, env.cluster_spec, env.speed, window)
    if window is None:
        return mean_jct(solo_bounds(env.jobs, env.cluster_spec, env.speed))
    return mean_jct(window_bounds(env.jobs, env.cluster_spec, env.speed, window))


def heldout_workloads(
    config: EnvConfig,
    seeds: Sequence[int] = (),
    *,
    windows: int = 0,
    window_seed: int = 0,
    trace: TraceWindows | None = None,
) -> list[Workload]:
    """Generator workloads ``seeds`` of ``config`` and ``windows`` trace windows drawn with
    ``window_seed`` from ``trace`` (default: the held-out VCs, any day, ``config``'s
    ``num_jobs`` jobs per window)."""
    setting = setting_of(config)
    out = [Workload(f"seed {s}", Scenario(setting, int(s), None, f"seed {s}")) for s in seeds]
    if windows:
        spec = trace or TraceWindows(vcs=list(TEST_VCS), days=[0.0, 120.0])
        drawn = window_scenarios(spec, setting, windows, window_seed)
        out += [Workload(sc.label, sc) for sc in drawn]
    return out


@dataclass
class Table:
    """Per-workload figures of each scheduler: ``avg_jct[name]`` and ``p95_jct[name]`` (each
    workload's 95th-percentile JCT; workloads, or training seeds x workloads for a learned
    policy) and ``unfinished[name]`` (jobs unfinished at the horizon, summed over its runs:
    those runs count such jobs as finishing there)."""

    avg_jct: dict[str, np.ndarray]
    unfinished: dict[str, int]
    p95_jct: dict[str, np.ndarray]


def _run(env: ClusterEnv, actor: Any, seed: int) -> tuple[float, int, float]:
    r = run_episode(env, actor, seed)
    return r.avg_jct, r.unfinished, r.p95_jct


Actor = Callable[[ClusterEnv, np.ndarray], int]


def load_policies(pattern: str, skipped: Callable[[Path], None] | None = None) -> list[object]:
    """The learned schedulers of every path matching the glob ``pattern`` (one per training
    seed, for :func:`run_schedulers`): a run directory (its ``checkpoints/final``), a
    pretraining output (a directory holding ``policy.pt``) or a policy file (a ``policy.npz`` or
    a directory holding one: a ``dlsched/ClusterPlan-v0`` plan policy or a ``Cluster-v0``
    network, as its layout says).  A run with no final checkpoint yet
    is passed to ``skipped``; nothing matching, or nothing finished, is a
    :class:`~envs.sim.errors.ConfigError`."""
    from agents.checkpoint import load_policy
    from agents.plan_policy import PlanPolicy
    from agents.policy_file import read_meta
    from envs.gym.plan_env import PLAN_ENV_ID

    paths = sorted(glob.glob(pattern))
    if not paths:
        raise ConfigError(f"nothing matches {pattern!r}")
    out: list[object] = []
    for p in map(Path, paths):
        target = p / "checkpoints" / "final" if (p / "checkpoints" / "final").is_dir() else p
        npz = target if target.suffix == ".npz" else target / "policy.npz"
        if npz.is_file() and read_meta(npz)["layout"]["env_id"] == PLAN_ENV_ID:
            out.append(PlanPolicy.load(npz))  # a ClusterPlan-v0 policy (+agent=plan_pg)
            continue
        if npz.is_file():  # a Cluster-v0 network (a released policy of an SB3 learner)
            out.append(load_policy(npz)[0])
            continue
        if not ((target / "model.zip").is_file() or (target / "policy.pt").is_file()):
            if skipped is not None:
                skipped(p)
            continue
        out.append(load_policy(target)[0])
    if not out:
        raise ConfigError(f"no finished run matches {pattern!r}")
    return out


def _policy_actors(
    policy: Any, deterministic: bool
) -> Callable[[ClusterEnv, np.random.Generator], Actor]:
    """``(env, rng) -> actor`` for one episode of ``policy``: a
    :class:`~agents.plan_policy.PlanPolicy` through its :class:`~envs.gym.plan_env.PlanActor`,
    else an SB3 policy (or its ``.policy``) as a numpy network on the env's observations."""
    from agents.plan_policy import PlanPolicy
    from agents.policy import NumpyPolicy

    if isinstance(policy, PlanPolicy):
        return lambda env, rng: policy.actor(env, deterministic, rng)
    fast = NumpyPolicy(getattr(policy, "policy", policy))
    return lambda _env, rng: (
        lambda env, obs: fast.act(obs, env.action_masks(), deterministic=deterministic, rng=rng)
    )


def run_schedulers(
    config: EnvConfig,
    workloads: Sequence[Workload],
    *,
    heuristics: Sequence[str] = (),
    policies: Mapping[str, Sequence[Any]] | None = None,
    deterministic: bool = True,
) -> Table:
    """Average JCT (slots) per workload of each scheduler: ``heuristics`` by name or label
    (``"esrtf(efficiency=0.85)"``: :func:`~envs.sim.elastic.allocators.parse_allocator_label`),
    and
    ``policies`` (name -> one policy per training seed; the array is training seeds x
    workloads; a :class:`~agents.plan_policy.PlanPolicy` acts through
    :class:`~envs.gym.plan_env.PlanActor`).  Unfinished jobs count as finishing at the
    horizon (as everywhere in :mod:`agents.episode_results`); callers flag truncated runs."""
    out = Table({}, {}, {})
    for name in heuristics:
        factory = functools.partial(allocator_from_label, name)
        vals = []
        for w in workloads:
            env = w.env(config)
            vals.append(_run(env, AllocatorActor(env, factory), w.scenario.seed))
        out.avg_jct[name] = np.asarray([v[0] for v in vals])
        out.p95_jct[name] = np.asarray([v[2] for v in vals])
        out.unfinished[name] = sum(v[1] for v in vals)
    for name, seeds_policies in (policies or {}).items():
        rows, p95 = [], []
        missing = 0
        for policy in seeds_policies:
            actors = _policy_actors(policy, deterministic)
            vals = []
            for k, w in enumerate(workloads):
                env = w.env(config)
                actor = actors(env, np.random.default_rng(k))
                vals.append(_run(env, actor, w.scenario.seed))
            rows.append([v[0] for v in vals])
            p95.append([v[2] for v in vals])
            missing += sum(v[1] for v in vals)
        out.avg_jct[name] = np.asarray(rows)
        out.p95_jct[name] = np.asarray(p95)
        out.unfinished[name] = missing
    return out


def paired(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """Mean over workloads of ``100 (a / b - 1)`` (%) and its 95% CI half-width; a 2-d
    ``a`` or ``b`` (training seeds x workloads) is averaged over seeds first."""
    a1 = a.mean(axis=0) if a.ndim == 2 else a
    b1 = b.mean(axis=0) if b.ndim == 2 else b
    return mean_ci95(list(100.0 * (a1 / b1 - 1.0)))
