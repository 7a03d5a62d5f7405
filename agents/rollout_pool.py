"""Rollouts split over processes, with the numbers of the one-process run.

Why: an iteration of the plan recipe (``train.py +agent=plan_pg``) is 32 independent
rollouts, and one core runs them one after the other.  :class:`RolloutPool` hands a share of
them to worker processes: each worker runs :func:`agents.episode_pg.run_episode`, the same
code on the same inputs (the policy's weights, the env, the workload seed and the rollout's
own generator), so every rollout is the one the learner's process would have run, bit for
bit (the per-decision forward is a batch of one on one torch thread, as in that process).
The results come back in the rollouts' order.

Workers are started once, forked where the platform forks (as PyTorch's data loaders are:
the learner runs torch on its own thread count and no worker thread is alive at the fork;
elsewhere spawned, which needs the ``if __name__ == "__main__"`` guard in the script), with
the learner's env, and ignore Ctrl-C: the learner's process stops them
(:meth:`RolloutPool.close`, also at exit).  A drawn env (a workload mixture's scenario)
travels with its rollouts.
"""

from __future__ import annotations

import atexit
import copy
import multiprocessing as mp
import os
import signal
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any

import numpy as np
import torch as th

from envs.files import die_with_parent
from envs.sim.errors import ConfigError

__all__ = ["RolloutPool", "Task", "replicas", "side_by_side_envs"]

#: one rollout: its env (``None``: the learner's own env), workload seed and generator
Task = tuple[Any | None, int, np.random.Generator]

#: ``(env, workload seed, net, rng, temperature, epsilon) -> episode``
Runner = Callable[[Any, int, Any, np.random.Generator, float, float], Any]

#: ``(envs, workload seeds, net, rngs, temperature, epsilon) -> episodes``: rollouts side by
#: side, one forward per step over the live ones (:func:`agents.episode_pg.run_lockstep`)
BatchRunner = Callable[..., list[Any]]

_ENV: Any = None  # the worker's copy of the learner's env
_NET: Any = None  # the worker's network (weights loaded per call)
_RUN: Runner | None = None
_BATCH: BatchRunner | None = None
_COPIES: list[Any] = []  # the worker's copies of _ENV for side-by-side rollouts


def _init(
    env: Any,
    make_net: Callable[[], Any],
    runner: Runner,
    threads: int,
    parent: int,
    batch: BatchRunner | None = None,
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the learner's process decides
    die_with_parent(parent)  # and no worker outlives it, even a learner killed with kill -9
    global _ENV, _NET, _RUN, _BATCH
    th.set_num_threads(threads)
    _ENV, _NET, _RUN, _BATCH = env, make_net(), runner, batch


def replicas(env: Any, n: int) -> list[Any]:
    """``env`` and ``n - 1`` independent copies of it (``env.replica()`` where the env has
    one, else a deep copy): episodes reset with the same seed run the same in each."""
    make = getattr(env, "replica", None)
    return [env] + [make() if make is not None else copy.deepcopy(env) for _ in range(n - 1)]


def side_by_side_envs(own: Any, copies: list[Any], envs: Sequence[Any | None]) -> list[Any]:
    """One env per rollout for side-by-side rollouts: a task's env ``None`` takes the next
    of ``copies`` (copies of ``own``, made as needed and kept); a drawn env, the same object
    for several tasks, gives each of them a copy of it."""
    need = sum(e is None for e in envs)
    if len(copies) < need:
        copies += replicas(own, need - len(copies) + 1)[1:]
    out: list[Any] = []
    used = 0
    drawn: dict[int, list[Any]] = {}
    for env in envs:
        if env is None:
            out.append(copies[used])
            used += 1
            continue
        pool = drawn.get(id(env))
        if pool is None:  # every copy this chunk needs of this env, at once (and the env)
            pool = drawn[id(env)] = replicas(env, sum(e is env for e in envs))
        out.append(pool.pop())
    return out


def _run_batched(
    state: dict[str, Any], tasks: Sequence[Task], temperature: float, epsilon: Any
) -> list[Any]:
    assert _BATCH is not None
    _NET.load_state_dict(state)
    envs = side_by_side_envs(_ENV, _COPIES, [env for env, _, _ in tasks])
    seeds = [s for _, s, _ in tasks]
    return _BATCH(envs, seeds, _NET, [r for _, _, r in tasks], temperature, epsilon)


def _map(state: dict[str, Any], items: Sequence[Any], fn: Callable[[Any, Any], Any]) -> list[Any]:
    _NET.load_state_dict(state)
    return [fn(_NET, item) for item in items]


def _map_env(
    state: dict[str, Any], items: Sequence[Any], fn: Callable[[Any, Any, Any], Any]
) -> list[Any]:
    _NET.load_state_dict(state)
    return [fn(_NET, _ENV, item) for item in items]


def _run(
    state: dict[str, Any], tasks: Sequence[Task], temperature: float, epsilon: Any
) -> list[Any]:
    assert _RUN is not None
    _NET.load_state_dict(state)
    return [
        _RUN(_ENV if env is None else env, seed, _NET, rng, temperature, epsilon)
        for env, seed, rng in tasks
    ]


class RolloutPool:
    """``workers`` worker processes (started at the first :meth:`run`; with one, the
    rollouts run in this process).  ``env``: the learner's env (copied once into each
    worker); ``make_net()`` builds a network of the learner's shape in a worker (a
    picklable callable, e.g. a ``functools.partial`` of the class); ``runner`` runs one
    rollout (a module-level function, e.g. :func:`agents.episode_pg.run_episode`), ``batch``
    rollouts side by side (:meth:`run_side_by_side`); each worker runs torch on one thread (a
    batch of one never uses more; a batched forward in a forked child must not start the
    parent's thread pool)."""

    def __init__(
        self,
        workers: int,
        env: Any,
        make_net: Callable[[], Any],
        runner: Runner,
        batch: BatchRunner | None = None,
    ) -> None:
        if int(workers) < 1:
            raise ConfigError(f"workers must be >= 1, got {workers}")
        self.workers = int(workers)
        self.env = env
        self.make_net = make_net
        self.runner = runner
        self.batch = batch
        self._copies: list[Any] = []  # the env's copies for side-by-side rollouts here
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.workers,
                mp_context=mp.get_context(
                    "fork" if "fork" in mp.get_all_start_methods() else "spawn"
                ),
                initializer=_init,
                initargs=(
                    self.env,
                    self.make_net,
                    self.runner,
                    1,  # a worker is one core's share (and no OpenMP pool after a fork)
                    os.getpid(),
                    self.batch,
                ),
            )
            atexit.register(self.close)
        return self._pool

    def run(
        self,
        net: Any,
        tasks: Sequence[Task],
        temperature: float = 1.0,
        epsilon: Any = 0.0,
    ) -> list[Any]:
        """One :func:`~agents.episode_pg.run_episode` per task, with ``net``'s current
        weights; the episodes in the tasks' order.  Tasks whose env is this learner's own
        env give ``None`` as their env."""
        run_episode = self.runner
        if self.workers == 1 or len(tasks) < 2:
            return [
                run_episode(self.env if env is None else env, s, net, rng, temperature, epsilon)
                for env, s, rng in tasks
            ]
        # small chunks, queued: a worker that finishes early takes the next one
        return self._scatter(_run, net, tasks, 4 * self.workers, temperature, epsilon)

    def run_side_by_side(
        self, net: Any, tasks: Sequence[Task], temperature: float = 1.0, epsilon: Any = 0.0
    ) -> list[Any]:
        """The tasks' rollouts side by side in each worker (one forward per step over that
        worker's live rollouts, ``batch``), the tasks cut into one contiguous share per
        worker; the episodes in the tasks' order.  Each rollout draws from its own generator,
        but a batched forward's logits differ from a batch of one's (and from another batch
        size's) in the last bits of float32: the numbers depend on the worker count."""
        if self.batch is None:
            raise ConfigError("this rollout pool has no side-by-side runner (batch=)")
        if self.workers == 1 or len(tasks) < 2:
            envs = side_by_side_envs(self.env, self._copies, [env for env, _, _ in tasks])
            return self.batch(envs, [s for _, s, _ in tasks], net, [r for _, _, r in tasks],
                              temperature, epsilon)  # fmt: skip
        return self._scatter(_run_batched, net, tasks, self.workers, temperature, epsilon)

    def map(self, net: Any, fn: Callable[[Any, Any], Any], items: Sequence[Any]) -> list[Any]:
        """``[fn(net, item) for item in items]`` over the workers (``fn`` a module-level
        function, each item picklable; in a worker ``net`` is its copy with ``net``'s current
        weights): e.g. the validation episodes of a plan policy."""
        if self.workers == 1 or len(items) < 2:
            return [fn(net, item) for item in items]
        return self._scatter(_map, net, items, self.workers, fn)

    def map_env(
        self, net: Any, fn: Callable[[Any, Any, Any], Any], items: Sequence[Any]
    ) -> list[Any]:
        """``[fn(net, env, item) for item in items]`` over the workers, ``env`` the pool's env
        (in a worker its copy, with ``net`` its copy at ``net``'s current weights): e.g. a
        population's episodes, each item naming its policy and workload."""
        if self.workers == 1 or len(items) < 2:
            return [fn(net, self.env, item) for item in items]
        # smaller chunks than map's: episodes of one population differ in length by 100x
        return self._scatter(_map_env, net, items, 4 * self.workers, fn)

    def _scatter(
        self,
        work: Callable[..., list[Any]],
        net: Any,
        items: Sequence[Any],
        pieces: int,
        *args: Any,
    ) -> list[Any]:
        """``work(weights, chunk, *args)`` in the workers over ``items`` cut into about
        ``pieces`` contiguous chunks, with ``net``'s current weights; the results in the
        items' order (an error or Ctrl-C here cancels the chunks not yet started)."""
        size = max(1, -(-len(items) // pieces))
        chunks = [list(items[i : i + size]) for i in range(0, len(items), size)]
        state = {k: v.detach().clone() for k, v in net.state_dict().items()}
        pool = self._executor()
        futures: list[Future[list[Any]]] = [pool.submit(work, state, c, *args) for c in chunks]
        out: list[Any] = []
        try:
            for f in futures:
                out += f.result()
        except BaseException:
            for f in futures:
                f.cancel()
            raise
        return out

    def close(self) -> None:
        """Stop the workers (idempotent)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
