"""Running the tasks: in this process or a process pool, with a tqdm progress bar on stderr.

A run that fails (a bad input its simulation meets, a worker process that dies) does not stop
the others: every other run still finishes and reaches ``on_result``, then :class:`RunsFailed`
names the failed runs and their causes, so that the caller can keep what finished.  A dead
worker breaks the whole pool; the runs lost with it run again one per process.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool

from tqdm import tqdm

from envs.sim.errors import DlschedError
from evaluation import kinds
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
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, DlschedError) else text


def run_all(tasks: Sequence[RunTask], workers: int, on_result: Callable[[RunOutput], None]) -> None:
    """Run ``tasks`` (in ``workers`` processes when > 1), calling ``on_result`` in this
    process as each ends (in completion order); :class:`RunsFailed` at the end if any failed."""
    failures: list[tuple[str, int, str]] = []
    with tqdm(total=len(tasks), file=sys.stderr, unit="run", dynamic_ncols=True) as bar:

        def done(out: RunOutput) -> None:
            on_result(out)
            bar.set_postfix_str(_label(out), refresh=False)
            bar.update(1)

        def failed(task: RunTask, exc: BaseException) -> None:
            failures.append((task.scheduler, task.prepared.seed, _cause(exc)))
            bar.update(1)

        if workers <= 1 or len(tasks) == 1:
            for task in tasks:
                try:
                    out = kinds.run_task(task)
                except Exception as exc:  # reported with the others at the end
                    failed(task, exc)
                    continue
                done(out)
        else:
            orphans: list[RunTask] = []  # runs lost with a broken pool: not necessarily theirs
            with ProcessPoolExecutor(max_workers=min(workers, len(tasks))) as pool:
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
                with ProcessPoolExecutor(max_workers=1) as alone:
                    retry = alone.submit(kinds.run_task, task)
                    error = retry.exception()
                    if error is not None:
                        failed(task, error)
                    else:
                        done(retry.result())
    if failures:
        raise RunsFailed(failures, len(tasks))
