"""TicTac iteration-model speed: evaluations per second (one worker's list schedule).

    python benchmarks/bench_tictac.py [--seconds 1.0]

For each shipped model graph and order policy it prints the graph size, evaluations per
second of ``IterationModel.worker`` (random: a fresh order and list schedule each call; TAC:
the cached answer at a fixed bandwidth, then uncached at a new bandwidth per call), and the
one-off cost of computing TIC and TAC.  Figures are printed as a Markdown table; nothing
here asserts on time.
"""

from __future__ import annotations

import argparse
import functools
import platform
import time
from collections.abc import Callable

import numpy as np
from tabulate import tabulate

from envs.sim.models import PAPER_MODELS
from envs.sim.tictac import (
    DepIndex,
    IterationModel,
    ListScheduler,
    graph_for,
    tac_order,
    tic_priorities,
)


def _rate(fn: Callable[[], object], seconds: float) -> float:
    """Calls of ``fn`` per second over at least ``seconds``."""
    n, t0 = 0, time.perf_counter()
    while True:
        for _ in range(20):
            fn()
        n += 20
        dt = time.perf_counter() - t0
        if dt >= seconds:
            return n / dt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=1.0, help="time per measurement")
    args = ap.parse_args()
    print(f"python {platform.python_version()}, numpy {np.__version__}, {platform.machine()}\n")
    rows = []
    for name, prof in PAPER_MODELS.items():
        g = graph_for(prof)
        rand = IterationModel(g, "random", np.random.default_rng(0))
        r_rate = _rate(functools.partial(rand.worker, 0.856), args.seconds)
        t0 = time.perf_counter()
        idx = DepIndex(g)
        tic_priorities(idx)
        t_tic = time.perf_counter() - t0
        t0 = time.perf_counter()
        order = tac_order(idx, np.asarray(g.recv_mb) * 0.856)
        t_tac = time.perf_counter() - t0
        sched = IterationModel(g, "tac").scheduler
        bws = iter(np.linspace(0.1, 5.0, 10**7).tolist())

        def uncached(s: ListScheduler = sched, o: np.ndarray = order) -> object:
            return s.run(o, next(bws))  # noqa: B023 (bws is read in this iteration only)

        u_rate = _rate(uncached, args.seconds)
        rows.append([
            name, str(g.num_recvs), str(g.num_ops), f"{r_rate:,.0f}", f"{u_rate:,.0f}",
            f"{t_tic:.3f} s", f"{t_tac:.3f} s",
        ])  # fmt: skip
    headers = ["model", "recvs", "ops", "random evals/s", "TAC uncached evals/s", "TIC build",
               "TAC build"]  # fmt: skip
    print(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True))


if __name__ == "__main__":
    main()
