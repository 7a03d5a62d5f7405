"""``python -m evaluation.bench [--suite v1] [--only NAME ...] [--exclude NAME ...] [--world W]
[--schedulers SPEC ...] [--import MODULE ...] [--out DIR] [--workers N]
[--runner local|ray --address HOST:PORT] [--no-plot]``: run the suite's cells (cached; a
rerun resumes) and write and print its leaderboard (``docs/bench.md``) and where the command's
CPU went (``cpu.json`` beside it: :func:`~evaluation.bench.run.cpu_record`)."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from evaluation.bench.scenarios import WORLDS

#: Where the command's CPU went, in the board's directory
#: (:func:`~evaluation.bench.run.cpu_record`).
CPU_FILE = "cpu.json"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m evaluation.bench",
        description="Run dlsched-bench's scenarios and write the leaderboard (docs/bench.md).",
    )
    p.add_argument("--suite", default="v1", help="suite name (default: v1)")
    p.add_argument("--only", nargs="+", default=[], metavar="NAME", help="only these scenarios")
    p.add_argument("--exclude", nargs="+", default=[], metavar="NAME", help="skip these scenarios")
    p.add_argument(
        "--world",
        default=None,
        choices=list(WORLDS),
        help="only this world's scenarios (default: all)",
    )
    p.add_argument(
        "--schedulers",
        nargs="+",
        default=None,
        metavar="SPEC",
        help="evaluate.py scheduler specs, bare allocator names or policy paths (default: every "
        "registered heuristic and released policy)",
    )
    p.add_argument(
        "--import",
        dest="imports",
        nargs="+",
        default=[],
        metavar="MODULE",
        help="import these modules first (they may register allocators, stacks or kinds)",
    )
    p.add_argument("--out", default="runs/bench", help="output directory (default runs/bench)")
    p.add_argument("--workers", type=int, default=1, help="worker processes per cell (default 1)")
    p.add_argument("--runner", default="local", choices=["local", "ray"])
    p.add_argument("--address", default=None, help="Ray head HOST:PORT (with --runner ray)")
    p.add_argument("--no-plot", action="store_true", help="do not draw heatmap.png")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    before = os.environ.get("TQDM_DISABLE")
    os.environ["TQDM_DISABLE"] = "1"  # one line per scenario, not a bar per cell
    try:
        return _main(args)
    finally:
        if before is None:
            del os.environ["TQDM_DISABLE"]
        else:
            os.environ["TQDM_DISABLE"] = before


def _main(args: argparse.Namespace) -> int:
    import json

    from envs.files import write_text
    from envs.numerics import use_portable
    from envs.sim.errors import DlschedError
    from evaluation.bench.board import board_of, write_board
    from evaluation.bench.run import BenchError, cpu_now, cpu_record, run_suite
    from evaluation.pipeline import Interrupted

    use_portable()  # the same bits on every x86-64 machine, as evaluate.py
    start_s = cpu_now()
    try:
        result = run_suite(
            args.suite,
            schedulers=args.schedulers,
            out=Path(args.out),
            workers=args.workers,
            runner=args.runner,
            address=args.address,
            only=args.only,
            exclude=args.exclude,
            imports=args.imports,
            world=args.world,
        )
    except (BenchError, DlschedError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (Interrupted, KeyboardInterrupt) as exc:
        print(
            f"interrupted ({str(exc) or 'SIGINT'}): the finished runs are kept; rerun the same "
            "command to resume",
            file=sys.stderr,
        )
        return 130
    c0 = cpu_now()
    paths = write_board(board_of(result), result.root, plot=not args.no_plot)
    cpu = cpu_record(result, start_s, cpu_now() - c0, cpu_now(), on_ray=args.runner == "ray")
    write_text(result.root / CPU_FILE, json.dumps(cpu, indent=2) + "\n")
    print(paths["text"])
    print(
        f"{result.ran} run(s) made, CPU {result.cpu_s / 60:.1f} min, wall "
        f"{result.wall_s / 60:.1f} min; board: {paths['md']}"
    )
    if cpu["overhead"] is None:  # runner=ray
        print(
            f"command CPU {cpu['total']:.1f} s; the runs made {cpu['runs']:.1f} CPU s on the "
            f"Ray cluster (their cpu_s) ({result.root / CPU_FILE})"
        )
    else:
        print(
            f"command CPU {cpu['total']:.1f} s, {cpu['runs']:.1f} s of it in the simulations: "
            f"overhead {100 * cpu['overhead']:.1f}% ({result.root / CPU_FILE})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
