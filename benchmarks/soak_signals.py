"""Soak test of ``evaluate.py`` under signals: nothing lost, nothing left running.

Each round starts an evaluation (a random runner: in-process, a 2-worker pool, or Ray with
``--ray``), sends it a random signal at a random instant (Ctrl-C to its process group as a
terminal does, SIGINT or SIGTERM to the driver alone, ``kill -9``, or none), then checks:

* **nothing left running**: every process the run had started (its descendants in ``/proc``,
  and for Ray every process of the Ray it started) is gone within 15 s;
* **stopped promptly**: the wall time from the signal to the driver's exit (printed: the
  median and the worst);
* **a clear end**: exit status 130 with a one-line ``interrupted`` message and no traceback
  after SIGINT / SIGTERM, 137 after ``kill -9``, 0 without a signal;
* **nothing lost or mixed**: ``resume=true`` into the same directory finishes the missing
  runs, and the final table (``summary.csv`` without its wall-clock columns) and every per-job
  CSV equal those of one uninterrupted reference run, byte for byte; no temporary file is left.

Usage::

    python benchmarks/soak_signals.py                 # 100 rounds, local runners
    python benchmarks/soak_signals.py --rounds 20 --ray
"""

from __future__ import annotations

import argparse
import csv
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agents.procwatch import descendants, left_running, marked

ROOT = Path(__file__).resolve().parents[1]
#: 2 allocators x 3 seeds of DL²'s small setting (~0.3-1 s a run), slowed by invariant checks
ARGS = [
    "workload=dl2",
    "cluster=dl2_small",
    "stacks=[elastic:drf,elastic:srtf,elastic:optimus]",
    "seeds=[0,1,2]",
    "plot=false",
]
SIGNALS = ("ctrl-c", "SIGINT", "SIGTERM", "SIGKILL", "none")


def _table(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "summary.csv").open() as f:
        return [
            {k: v for k, v in r.items() if not k.startswith("wall_s")} for r in csv.DictReader(f)
        ]


def _jobs(run_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(run_dir.glob("jobs_*.csv"))}


def _evaluate(out: Path, *extra: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "evaluate.py", *ARGS, f"out_dir={out}", *extra],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"},
    )  # fmt: skip


def one_round(rng: random.Random, tmp: Path, k: int, runners: list[str], ref: Path) -> dict:
    out = tmp / f"round{k}"
    runner = rng.choice(runners)
    sig = rng.choice(SIGNALS)
    delay = rng.uniform(0.3, 6.0 if runner == "runner=ray" else 3.0)
    proc = subprocess.Popen(
        [sys.executable, "evaluate.py", *ARGS, f"out_dir={out}", runner],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}, start_new_session=True,
    )  # fmt: skip
    time.sleep(delay)
    seen = descendants(proc.pid) | marked(proc.pid)
    t0 = time.monotonic()
    if proc.poll() is None and sig != "none":
        if sig == "ctrl-c":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            os.kill(proc.pid, getattr(signal, sig))
    _, err = proc.communicate(timeout=600)
    stop_s = time.monotonic() - t0
    problems = []
    left = left_running(seen | marked(proc.pid), 15.0)
    if left:
        problems.append(f"processes left running: {sorted(left)}")
    rc = proc.returncode
    want = {0, 130} if sig in ("ctrl-c", "SIGINT", "SIGTERM") else {0, -9, 137}
    if sig == "none":
        want = {0}
    if rc not in want:
        problems.append(f"exit status {rc} after {sig}: {err[-500:]}")
    if "Traceback" in err:
        problems.append(f"traceback after {sig}")
    if rc == 130 and "interrupted" not in err:
        problems.append("no 'interrupted' line")
    if rc != 0:  # finish it
        again = _evaluate(out, runner, "resume=true")
        if again.returncode != 0:
            problems.append(f"resume failed ({again.returncode}): {again.stderr[-500:]}")
    if not problems:
        if _table(out) != _table(ref):
            problems.append("final table differs from the uninterrupted run's")
        if _jobs(out) != _jobs(ref):
            problems.append("per-job CSVs differ from the uninterrupted run's")
        temps = [p.name for p in out.rglob("*.tmp")]
        if temps:
            problems.append(f"temporary files left: {temps}")
    return {"runner": runner, "signal": sig, "rc": rc, "stop_s": stop_s, "problems": problems,
            "signalled": sig != "none" and rc != 0}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ray", action="store_true", help="also the Ray runner")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    runners = ["workers=1", "workers=2"] + (["runner=ray"] if args.ray else [])
    results = []
    with tempfile.TemporaryDirectory(prefix="dlsched_soak_") as d:
        tmp = Path(d)
        ref = tmp / "reference"
        first = _evaluate(ref, "workers=2")
        if first.returncode != 0:
            sys.exit(f"the reference run failed: {first.stderr[-2000:]}")
        try:
            for k in range(args.rounds):
                r = one_round(rng, tmp, k, runners, ref)
                results.append(r)
                status = "ok" if not r["problems"] else "; ".join(r["problems"])
                print(f"[{k + 1}/{args.rounds}] {r['runner']:<10} {r['signal']:<8} "
                      f"exit {r['rc']:>4}  stopped in {r['stop_s']:.2f} s  {status}",
                      flush=True)  # fmt: skip
        except KeyboardInterrupt:
            print("soak: interrupted; the rounds so far are summarised below", file=sys.stderr)
    bad = [r for r in results if r["problems"]]
    stops = [r["stop_s"] for r in results if r["signalled"]]
    print(f"\n{len(results)} rounds: {len(results) - len(bad)} clean, {len(bad)} with problems")
    if stops:
        print(f"signal to exit (signalled runs that were still running, n={len(stops)}): "
              f"median {statistics.median(stops):.2f} s, worst {max(stops):.2f} s")  # fmt: skip
    by: dict[tuple[str, str], list[dict]] = {}
    for r in results:
        by.setdefault((r["runner"], r["signal"]), []).append(r)
    for (runner, sig), rs in sorted(by.items()):
        print(
            f"  {runner:<10} {sig:<8} {len(rs):>3} rounds, "
            f"{sum(bool(r['problems']) for r in rs)} bad"
        )
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
