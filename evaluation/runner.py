"""Running the tasks: in this process or a process pool, with a tqdm progress bar on stderr."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait

from tqdm import tqdm

from evaluation.kinds import run_task
from evaluation.runs import RunOutput, RunTask

__all__ = ["run_all"]


def _label(out: RunOutput) -> str:
    return f"{out.scheduler} seed {out.seed}: avg JCT {out.jct_s.mean():.4g} s"


def run_all(tasks: Sequence[RunTask], workers: int, on_result: Callable[[RunOutput], None]) -> None:
    """Run ``tasks`` (in ``workers`` processes when > 1), calling ``on_result`` in this
    process as each ends (in completion order)."""
    with tqdm(total=len(tasks), file=sys.stderr, unit="run", dynamic_ncols=True) as bar:

        def done(out: RunOutput) -> None:
            on_result(out)
            bar.set_postfix_str(_label(out), refresh=False)
            bar.update(1)

        if workers <= 1 or len(tasks) == 1:
            for task in tasks:
                done(run_task(task))
            return
        with ProcessPoolExecutor(max_workers=min(workers, len(tasks))) as pool:
            pending: set[Future[RunOutput]] = {pool.submit(run_task, t) for t in tasks}
            while pending:
                finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in finished:
                    done(fut.result())
