"""Env mode: every elastic scheduler runs through the DL² Gymnasium env.

A learned policy sees only the env's window of ``J`` jobs and places tasks by the env's
placement rule, whereas ``elastic:<allocator>`` on the slot simulator sees every job.  For a
fair head-to-head, when a ``policy:`` scheduler is present, when ``elastic.through_env`` is
set, or with workload kind ``env``, every ``elastic:`` scheduler is driven through the same
env (:class:`~envs.gym.heuristic.HeuristicDriver`, as
:func:`agents.episode_results.evaluate_allocator` does) on the same workload seeds.
``max_wall_s`` / ``progress_s`` hold there as in the contention engine: the env's slot
simulator keeps the run's :class:`~envs.sim.elastic.simulator.Heartbeat` (:func:`with_heartbeat`).

The env (:class:`~envs.gym.factory.EnvConfig`) comes from ``workload.env`` over the first
policy's training env (workload kind ``env``), or from ``workload.dl2``,
``cluster.num_servers`` and ``elastic.max_slots`` (kind ``dl2``; the env's nodes have 8 CPU and
8 GPU slots, 1200-s slots and the measured speeds, so the elastic world must match).
"""

from __future__ import annotations

import math
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping, Set
from dataclasses import asdict, replace
from typing import Any

import numpy as np
from hydra.utils import to_absolute_path

from agents.episode_results import Actor, run_episode_detailed
from envs.gym.actors import AllocatorActor
from envs.gym.cluster_env import ClusterEnv
from envs.gym.episode import SlotPlanningActor, as_actor
from envs.gym.factory import (
    EnvConfig,
    coerce_env_config,
    env_class,
    env_kwargs,
    make_env,
    setting_of,
)
from envs.memo import file_stamp, memo
from envs.sim import ConfigError
from envs.sim.elastic.allocators import Allocator
from envs.sim.elastic.simulator import Heartbeat
from envs.sim.elastic.spec import ElasticCluster, ElasticJob
from envs.sim.elastic.workload import DL2_SMALL
from evaluation.config import EvaluateConfig, TraceConfig
from evaluation.runs import RunOutput, RunTask, run_heartbeat, slot_utilisation
from evaluation.workloads import Prepared, memo_prepared

__all__ = [
    "ActorFactory",
    "allocator_actor",
    "env_mode",
    "fresh_env",
    "prepare_env_workloads",
    "resolve_env_config",
    "run_in_env",
    "with_heartbeat",
]

#: ``(env, workload seed) -> actor`` for one episode.
ActorFactory = Callable[[ClusterEnv, int], Actor]


def env_mode(cfg: EvaluateConfig, needs: set[str]) -> bool:
    """Whether elastic schedulers run through the env (see the module docstring)."""
    return "env" in needs or cfg.elastic.through_env or cfg.workload.kind == "env"


def _policy_window(meta_env: Mapping[str, Any] | None) -> int | None:
    return None if meta_env is None else setting_of(coerce_env_config(meta_env)).J


def _env_from_dl2(cfg: EvaluateConfig, J: int) -> EnvConfig:
    c, e, d = cfg.cluster, cfg.elastic, cfg.workload.dl2
    node = ElasticCluster()
    bad = []
    if c.gpus_per_server * e.cpu_slots_per_gpu != node.cpu_slots:
        bad.append(f"{node.cpu_slots} CPU slots per node (gpus_per_server x cpu_slots_per_gpu)")
    if c.gpus_per_server * e.gpu_slots_per_gpu != node.gpu_slots:
        bad.append(f"{node.gpu_slots} GPU slots per node (gpus_per_server x gpu_slots_per_gpu)")
    if e.slot_s != node.slot_s:
        bad.append(f"elastic.slot_s={node.slot_s:g}")
    if e.speed != "measured":
        bad.append("elastic.speed=measured")
    if e.scaling_overhead_s != 0.0:
        bad.append("elastic.scaling_overhead_s=0")
    if bad:
        raise ConfigError(
            "running elastic schedulers through the DL² env with workload kind 'dl2' needs the "
            f"env's world: {'; '.join(bad)} (e.g. cluster=dl2_small), or use workload=env"
        )
    overrides = {
        "num_nodes": c.num_servers,
        "num_jobs": d.num_jobs,
        "max_arrivals_per_slot": d.max_arrivals_per_slot,
        "max_epochs": d.max_epochs,
        "max_workers": d.max_workers,
        "max_ps": d.max_ps,
        "J": J,
    }
    return EnvConfig(setting="small", overrides=overrides, arrival=d.arrival, max_slots=e.max_slots)


def _env_from_section(cfg: EvaluateConfig, meta_env: Mapping[str, Any] | None) -> EnvConfig:
    base = coerce_env_config(meta_env) if meta_env is not None else EnvConfig()
    s = cfg.workload.env
    changes: dict[str, Any] = {}
    if s.setting is not None:
        changes["setting"] = s.setting
    if s.max_slots is not None:
        changes["max_slots"] = s.max_slots
    if s.arrival is not None:
        changes["arrival"] = s.arrival
    if s.backlog is not None:
        changes["backlog"] = s.backlog
    if s.trace is not None:
        changes["trace"] = to_absolute_path(s.trace)
        changes["trace_options"] = cfg.workload.trace  # the same options as workload=trace
    elif asdict(cfg.workload.trace) != asdict(TraceConfig()):
        raise ConfigError(
            "workload.trace.* options apply to a trace: give workload.env.trace=<file> (or use "
            "workload=trace)"
        )
    if s.overrides:
        changes["overrides"] = {**(base.overrides or {}), **dict(s.overrides)}
    return replace(base, **changes)


def resolve_env_config(
    cfg: EvaluateConfig,
    policy_envs: Mapping[str, Mapping[str, Any] | None],
    any_window: Set[str] = frozenset(),
) -> EnvConfig:
    """The env every elastic scheduler runs through; ``policy_envs``: each ``policy:``
    scheduler's training env (``None`` if its checkpoint records none); ``any_window``: the
    policies that act on any window and cluster (size-agnostic networks).  The first
    policy's training env is the base of the env's config (its features, reward...); with
    workload kind ``dl2`` the first window-bound policy's ``J`` is the env's.  A policy whose
    window ``J`` differs from the env's is a :class:`ConfigError`, unless it acts on any."""
    first = next((m for m in policy_envs.values() if m is not None), None)
    bound = next((m for s, m in policy_envs.items() if m is not None and s not in any_window), None)
    kind = cfg.workload.kind
    if kind == "env":
        env_config = _env_from_section(cfg, first)
    elif kind == "dl2":
        window = _policy_window(bound)
        if window is not None and window != DL2_SMALL.J:
            print(
                f"note: every scheduler runs through the env's window of J={window} jobs, the "
                f"window the policy was trained with (DL²'s own is J={DL2_SMALL.J}); a policy "
                "acts only on the window it was trained for",
                file=sys.stderr,
            )
        env_config = _env_from_dl2(cfg, window or DL2_SMALL.J)
        if first is not None:  # the policy's observation columns (its feature set)
            env_config = replace(env_config, features=coerce_env_config(first).features)
    else:
        raise ConfigError(
            f"policy: schedulers and elastic.through_env run through the DL² env, which draws "
            f"its own jobs; use workload=env (workload.env.setting=small|large|tiny|medium) or "
            f"workload=dl2, not workload kind {kind!r}"
            + (
                "; for a trace: workload=env workload.env.trace=<csv>"
                if kind in ("trace", "philly_builtin")
                else ""
            )
        )
    J = setting_of(env_config).J
    for spec, meta_env in policy_envs.items():
        trained = None if spec in any_window else _policy_window(meta_env)
        if trained is not None and trained != J:
            raise ConfigError(
                f"{spec} was trained with a window of J={trained} jobs but the evaluation env "
                f"has J={J}; {_window_hint(cfg, trained)}"
            )
    return env_config


def _window_hint(cfg: EvaluateConfig, trained: int) -> str:
    """How to give the evaluation env a policy's window ``trained``: a Hydra override that
    works as written (``overrides`` is an empty dict in the schema, so a new key needs ``+``;
    ``++`` adds or replaces one the command already sets)."""
    if cfg.workload.kind != "env":  # kind dl2: the env's window is the first policy's
        return (
            "every scheduler runs through one env, so evaluate policies trained with other "
            "windows in separate runs"
        )
    plus = "++" if "J" in (cfg.workload.env.overrides or {}) else "+"
    return (
        f"add {plus}workload.env.overrides.J={trained} to the command (or evaluate on the "
        "setting it was trained in)"
    )


#: The jobs of the trace envs this process built (:func:`fresh_env`).
_TRACE_JOBS: OrderedDict[Hashable, tuple[ElasticJob, ...]] = OrderedDict()


def fresh_env(config: EnvConfig) -> ClusterEnv:
    """``make_env(config)``.  An env of a trace reads and converts the trace when it is built,
    which costs more than an episode: this process does that once per trace file (by its size
    and mtime), trace options and setting (what the jobs depend on, with the env's seed, 0),
    and builds the envs of every other config with those jobs (``jobs=``, the same tuple a
    build from the file gives), so that each run and each cell of a scenario gets the env
    :func:`make_env` would give, without reading the trace again."""
    stamp = file_stamp(config.trace) if config.trace else None
    if stamp is None:  # the generator's envs are cheap to build (or the trace is unreadable)
        return make_env(config)
    kwargs = env_kwargs(config)
    key = (stamp, repr(kwargs.get("trace_options")), repr(kwargs["setting"]))
    if key not in _TRACE_JOBS:
        env = make_env(config)
        assert env.fixed_jobs is not None
        memo(_TRACE_JOBS, key, lambda: env.fixed_jobs)
        return env
    del kwargs["trace"]
    kwargs.pop("trace_options", None)
    kwargs["jobs"] = memo(_TRACE_JOBS, key, tuple)
    return env_class(config)(**kwargs)


def prepare_env_workloads(cfg: EvaluateConfig, env_config: EnvConfig) -> list[Prepared]:
    """Every seed's workload as the env draws it (``env.reset(seed=...)``), with its record;
    drawn once per process for the same env, seeds and workload kind (and trace file)."""
    return memo_prepared(
        env_config.trace,
        ["env", asdict(env_config), list(cfg.seeds), cfg.workload.kind],
        lambda: _draw(cfg, env_config),
    )


def _draw(cfg: EvaluateConfig, env_config: EnvConfig) -> list[Prepared]:
    env = fresh_env(env_config)
    out = []
    for seed in cfg.seeds:
        env.reset(seed=int(seed))
        kind = cfg.workload.kind
        name = f"dl2-seed{seed}" if kind == "dl2" else f"env-{env_config.setting}-seed{seed}"
        record: dict[str, Any] = {
            "kind": kind,
            "env": env_config.as_dict(),
            "window_J": env.J,
            "cluster": asdict(env.cluster_spec),
            "jobs": len(env.jobs),
            "name": name,
        }
        out.append(Prepared(seed, name, None, env.jobs, 1000.0, record))
    return out


def allocator_actor(allocator: Callable[[], Allocator]) -> ActorFactory:
    """A fresh allocator per episode, driven through the env (:class:`AllocatorActor`)."""

    def make(env: ClusterEnv, seed: int) -> Actor:
        return AllocatorActor(env, allocator)

    return make


class _Watched:
    """``actor``, handing ``heartbeat`` to the env's slot simulator of the episode at every
    decision (a reset builds a new simulator; the heartbeat's clock runs on)."""

    def __init__(self, actor: Actor, heartbeat: Heartbeat) -> None:
        self.actor, self.heartbeat = as_actor(actor), heartbeat

    def attach(self, env: ClusterEnv) -> None:
        sim = env.sim
        if sim is not None and sim.heartbeat is not self.heartbeat:
            sim.heartbeat = self.heartbeat

    def reset(self, seed: int | None) -> None:
        self.actor.reset(seed)

    def act(self, obs: np.ndarray, view: ClusterEnv) -> int:
        self.attach(view)
        return self.actor.act(obs, view)


class _WatchedPlanner(_Watched):
    """:class:`_Watched` of a slot planner (an actor with ``slot_allocator``)."""

    def slot_allocator(self, obs: np.ndarray, view: ClusterEnv) -> Allocator:
        self.attach(view)
        return self.actor.slot_allocator(obs, view)  # type: ignore[attr-defined]


def with_heartbeat(actor: Actor, heartbeat: Heartbeat | None) -> Actor:
    """``actor`` driving an env whose slot simulator keeps ``heartbeat`` (its progress lines
    and wall-clock budget) from the first decision on; ``actor`` itself if ``None``.  A slot
    planner stays one (``slot_allocator``), so the episode is the same, decision for
    decision."""
    if heartbeat is None:
        return actor
    if isinstance(as_actor(actor), SlotPlanningActor):
        return _WatchedPlanner(actor, heartbeat)
    return _Watched(actor, heartbeat)


def run_in_env(task: RunTask, make_actor: ActorFactory, info: dict[str, Any]) -> RunOutput:
    """One episode of ``task``'s seed through the env; per-job times in seconds.

    As :class:`~evaluation.kinds.ElasticKind`: ``submit = arrival_slot x slot_s``, ``start`` =
    the first slot with a worker, ``finish`` = fractional completion slot x ``slot_s``.  A job
    unfinished at the horizon counts as finishing there (and, if it never ran, as starting
    there), as in :class:`agents.episode_results.EpisodeResult`.  ``task.sim_config.run``'s
    ``max_wall_s`` / ``progress_s`` hold for the episode (:func:`with_heartbeat`)."""
    assert task.env_config is not None
    # the run's span (wall_s, cpu_s): building its env, the simulator of this world, and the
    # episode with its actor, as a contention-engine run's span is building its simulator
    # and running it
    t0, c0 = time.perf_counter(), time.process_time()
    env = fresh_env(task.env_config)
    seed = task.prepared.seed
    actor = with_heartbeat(make_actor(env, seed), run_heartbeat(task))
    detail = run_episode_detailed(env, actor, seed)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    s = env.cluster_spec.slot_s
    specs = {j.job_id: j for j in env.jobs}
    outcomes = detail.jobs
    finish = [o.finish if o.finish is not None else max(detail.horizon, o.arrival_slot)
              for o in outcomes]  # fmt: skip
    start = [float(o.first_slot) if o.first_slot is not None else f
             for o, f in zip(outcomes, finish, strict=True)]  # fmt: skip
    ideal = []
    for o in outcomes:
        j = specs[o.job_id]
        its = env.speed.speed(j.type, j.max_ps, j.max_workers) * j.speed_factor
        ideal.append(j.real_num_epochs * j.type.iterations_per_epoch / its if its > 0 else math.nan)
    makespan = detail.result.makespan * s
    util_t, util = slot_utilisation(np.array(detail.gpu_util), s, makespan)
    return RunOutput(
        scheduler=task.scheduler,
        seed=seed,
        job_id=np.array([o.job_id for o in outcomes]),
        name=[f"j{o.job_id}" for o in outcomes],
        num_gpus=np.array([specs[o.job_id].max_workers for o in outcomes]),
        submit_s=np.array([o.arrival_slot * s for o in outcomes], dtype=float),
        start_s=np.array(start, dtype=float) * s,
        finish_s=np.array(finish, dtype=float) * s,
        ideal_s=np.array(ideal),
        makespan_s=makespan,
        gpu_util=detail.result.gpu_util,
        util_t=util_t,
        util=util,
        info={
            "env": task.env_config.as_dict(),
            "window_J": env.J,
            "slot_s": s,
            "episode": detail.result.as_dict(),
            "wall_s": wall,
            "cpu_s": cpu,
            **info,
        },
        extra={
            "type": [specs[o.job_id].type.model for o in outcomes],
            "slots_run": [o.slots_run for o in outcomes],
            "num_changes": [o.num_changes for o in outcomes],
            "finished": [o.finish is not None for o in outcomes],
        },
    )
