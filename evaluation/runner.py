"""Running the tasks: in this process, a process pool, or as Ray tasks on a cluster
(``runner=ray``), with a tqdm progress bar on stderr.

A run that fails (a bad input its simulation meets, a worker process that dies) does not stop
the others: every other run still finishes and reaches ``on_result``, then :class:`RunsFailed`
names the failed runs and their causes, so that the caller can keep what finished.  A dead
worker breaks the whole pool; the runs lost with it run again one per process.  On Ray, a
run whose worker or node dies runs again on another node (``runner.max_retries`` times) before
it counts as failed.  Every runner gives the same per-job results: a run is a pure function of
its task, and Ray's workers get this process's BLAS thread settings.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from tqdm import tqdm

from envs.files import die_with_parent
from envs.sim.errors import ConfigError, DlschedError
from evaluation import kinds
from evaluation.config import RunnerConfig
from evaluation.runs import RunOutput, RunTask

__all__ = ["RunsFailed", "run_all"]


class RunsFailed(DlschedError):
    """Some runs failed; ``failures`` lists ``(scheduler, seed, cause)``."""

    def __init__(self, failures: list[tuple[str, int, str]], total: int) -> None:
        self.failures = failures
        causes = {c for _, _, c in failures}
        if len(causes) == 1:  # one cause (e.g. the workload itself): say it once
            runs = ", ".join(f"{s} seed {k}" for s, k, _ in failures[:4])
            runs += ", ..." if len(failures) > 4 else ""
            super().__init__(f"{len(failures)} of {total} runs failed ({runs}): {causes.pop()}")
            return
        first = "; ".join(f"{s} seed {k}: {c}" for s, k, c in failures[:3])
        more = f" (and {len(failures) - 3} more)" if len(failures) > 3 else ""
        super().__init__(f"{len(failures)} of {total} runs failed: {first}{more}")


def _label(out: RunOutput) -> str:
    return f"{out.scheduler} seed {out.seed}: avg JCT {out.jct_s.mean():.4g} s"


def _cause(exc: BaseException) -> str:
    if isinstance(exc, BrokenProcessPool):
        return "its worker process died (killed, or out of memory)"
    cause = getattr(exc, "cause", None)  # a Ray task's own exception
    if isinstance(cause, BaseException) and type(exc).__name__.startswith("RayTaskError"):
        return _cause(cause)
    if type(exc).__module__.startswith("ray"):  # its worker or node died, retries spent
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"its Ray worker or node died ({type(exc).__name__}: {text})"
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, DlschedError) else text


def run_all(
    tasks: Sequence[RunTask],
    workers: int,
    on_result: Callable[[RunOutput], None],
    runner: RunnerConfig | None = None,
) -> None:
    """Run ``tasks`` (in ``workers`` processes when > 1, or as Ray tasks with
    ``runner.kind == "ray"``), calling ``on_result`` in this process as each ends (in
    completion order); :class:`RunsFailed` at the end if any failed, listing them in the
    order of ``tasks``."""
    runner = runner or RunnerConfig()
    check_runner(runner)
    failures: list[tuple[str, int, str]] = []
    with tqdm(total=len(tasks), file=sys.stderr, unit="run", dynamic_ncols=True) as bar:

        def done(out: RunOutput) -> None:
            on_result(out)
            bar.set_postfix_str(_label(out), refresh=False)
            bar.update(1)

        def failed(task: RunTask, exc: BaseException) -> None:
            failures.append((task.scheduler, task.prepared.seed, _cause(exc)))
            bar.update(1)

        if runner.kind == "ray":
            _run_ray(tasks, runner, done, failed)
        elif workers <= 1 or len(tasks) <= 1:
            for task in tasks:
                try:
                    out = kinds.run_task(task)
                except Exception as exc:  # reported with the others at the end
                    failed(task, exc)
                    continue
                done(out)
        else:
            orphans: list[RunTask] = []  # runs lost with a broken pool: not necessarily theirs
            with _pool(min(workers, len(tasks))) as pool:
                of: dict[Future[RunOutput], RunTask] = {
                    pool.submit(kinds.run_task, t): t for t in tasks
                }
                pending = set(of)
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in finished:
                        error = fut.exception()
                        if isinstance(error, BrokenProcessPool):
                            orphans.append(of[fut])
                        elif error is not None:
                            failed(of[fut], error)
                        else:
                            done(fut.result())
            # a dead worker breaks the whole pool: run each lost run again in a process of its
            # own, so that only the run that kills its process fails
            for task in orphans:
                with _pool(1) as alone:
                    retry = alone.submit(kinds.run_task, task)
                    error = retry.exception()
                    if error is not None:
                        failed(task, error)
                    else:
                        done(retry.result())
    if failures:  # in plan order, whatever order they ended in: the same message every time
        order = {(t.scheduler, t.prepared.seed): i for i, t in reversed(list(enumerate(tasks)))}
        failures.sort(key=lambda f: order.get((f[0], f[1]), len(tasks)))
        raise RunsFailed(failures, len(tasks))


def _worker_init(parent: int) -> None:
    """A pool worker ignores Ctrl-C (the parent stops the pool and keeps what finished) and
    dies with its parent, even one killed with ``kill -9``."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(parent)


def _pool(workers: int) -> contextlib.AbstractContextManager[ProcessPoolExecutor]:
    """The runs' pool (:func:`killing_pool` of :func:`_worker_init` workers)."""
    return killing_pool(workers, _worker_init, (os.getpid(),))


@contextlib.contextmanager
def killing_pool(
    workers: int,
    initializer: Callable[..., object],
    initargs: tuple[Any, ...],
    mp_context: Any = None,
) -> Iterator[ProcessPoolExecutor]:
    """A process pool whose workers end with it: at the end of the block it shuts down as
    usual, but on Ctrl-C, SIGTERM or any error its workers are killed at once and its queued
    runs dropped (a plain ``with ProcessPoolExecutor`` would run the whole queue first)."""
    pool = ProcessPoolExecutor(
        max_workers=workers, mp_context=mp_context, initializer=initializer, initargs=initargs
    )
    try:
        yield pool
    except BaseException:
        procs = list((getattr(pool, "_processes", None) or {}).values())
        for p in procs:
            with contextlib.suppress(OSError, ValueError):
                p.kill()
        pool.shutdown(wait=False, cancel_futures=True)
        for p in procs:
            with contextlib.suppress(OSError, ValueError, AssertionError):
                p.join(timeout=2.0)
        raise
    pool.shutdown()


def check_runner(runner: RunnerConfig) -> None:
    """:class:`ConfigError` for an unknown runner kind or a negative ``max_retries``."""
    if runner.kind not in ("local", "ray"):
        raise ConfigError(f"runner.kind must be 'local' or 'ray', got {runner.kind!r}")
    if runner.max_retries < 0:
        raise ConfigError(f"runner.max_retries must be >= 0, got {runner.max_retries}")
    if runner.kind == "local" and runner.address:
        raise ConfigError("runner.address is for runner=ray (this is runner=local)")


def _on_ray(task: RunTask) -> tuple[RunOutput, str]:
    """One run in a Ray worker, and the node it ran on."""
    import ray

    node = f"{ray.util.get_node_ip_address()} ({ray.get_runtime_context().get_node_id()[:8]})"
    return kinds.run_task(task), node


def _run_ray(
    tasks: Sequence[RunTask],
    runner: RunnerConfig,
    done: Callable[[RunOutput], None],
    failed: Callable[[RunTask, BaseException], None],
) -> None:
    """Every task as a Ray task of one CPU; results as they end.  A Ray this call started is
    shut down at the end; on Ctrl-C it is left to its watchdog (it ends when this process does,
    :func:`agents.ray_setup.init_ray`), so that the caller can exit at once."""
    from agents.ray_setup import blas_threads, init_ray, watchdog_alive

    started = init_ray(runner.address)
    import ray

    try:
        remote = ray.remote(_on_ray).options(
            num_cpus=1,
            max_retries=runner.max_retries,
            retry_exceptions=False,  # a bad input fails the same way everywhere
            runtime_env={"env_vars": blas_threads()},
        )
        of = {remote.remote(t): t for t in tasks}
        pending = list(of)
        nodes: dict[str, int] = {}
        try:
            while pending:
                ready, pending = ray.wait(pending, num_returns=1)
                for ref in ready:
                    try:
                        out, node = ray.get(ref)
                    except Exception as exc:  # reported with the others at the end
                        failed(of[ref], exc)
                        continue
                    nodes[node] = nodes.get(node, 0) + 1
                    done(out)
        except KeyboardInterrupt:
            # cancelling the tasks one by one can crash the driver (a Ray check failure), and
            # ray.shutdown() takes a second or two: a Ray this process started is left to its
            # watchdog, which kills all of it the moment this process exits
            if started and watchdog_alive():
                started = False
            raise
        where = ", ".join(f"{n}: {k}" for n, k in sorted(nodes.items()))
        runs = sum(nodes.values())
        tqdm.write(f"ray: {runs} run(s) on {len(nodes)} node(s): {where}", file=sys.stderr)
    finally:
        if started:
            ray.shutdown()
