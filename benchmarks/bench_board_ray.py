"""dlsched-bench on a local two-node Ray cluster: the board's cost there, and its numbers
against a local board's.

Starts a Ray head and a Ray worker node on 127.0.0.1 (one CPU each, ``tools/ray_loopback.py``,
Ray's token authentication on, telemetry off), runs ``python -m evaluation.bench --runner ray
--address <head>`` with the given arguments, stops the two nodes (only the processes it
started, by their process groups) and prints:

* the wall time, the driver's CPU (the bench command and its children) and the two nodes' CPU
  (the ``ray start`` processes and all their descendants in ``/proc``, with what they reaped,
  read just before they are stopped: raylets, GCS, the Ray workers running the cells' runs),
  in CPU-minutes, and the runs' own CPU as they recorded it (``cpu.json``'s ``runs``);
* with ``--compare DIR``: whether the Ray board's ``board.csv`` and every cell's per-job CSVs
  equal, byte for byte, those of a local board of the same suite and code version under
  ``DIR`` (e.g. ``python -m evaluation.bench --workers 2 --out DIR``).

Usage::

    python benchmarks/bench_board_ray.py --out runs/bench-ray [--compare runs/bench] \\
        [-- <more python -m evaluation.bench arguments, e.g. --only tiresias-60>]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
LOOPBACK = ROOT / "tools" / "ray_loopback.py"
TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu_s(roots: list[int]) -> float:
    """CPU seconds (user + system, with reaped children's) of the live processes ``roots``
    and all their descendants (``/proc``): a node's raylet, GCS and Ray workers, and what
    they reaped."""
    stats: dict[int, tuple[int, float]] = {}  # pid -> (parent, CPU s)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
        cpu = sum(int(v) for v in fields[11:15]) / TICK  # utime stime cutime cstime
        stats[int(entry.name)] = (int(fields[1]), cpu)
    keep = set(roots)
    grew = True
    while grew:  # descendants, level by level
        more = {pid for pid, (ppid, _) in stats.items() if ppid in keep and pid not in keep}
        keep |= more
        grew = bool(more)
    return sum(stats[pid][1] for pid in keep if pid in stats)


def _cells(out: Path) -> tuple[Path, dict[str, bytes]]:
    roots = [p for p in out.glob("*/*") if (p / "board.csv").is_file()]
    if len(roots) != 1:
        sys.exit(f"{out}: expected one board (<suite>-<version>/<code>/board.csv), found {roots}")
    root = roots[0]
    keep = [*root.glob("*/*/jobs_*.csv"), root / "board.csv"]
    return root, {str(p.relative_to(root)): p.read_bytes() for p in sorted(keep)}


def _load_loopback() -> ModuleType:
    """``tools/ray_loopback.py`` (a script of the checkout, not an installed module)."""
    spec = importlib.util.spec_from_file_location("ray_loopback", LOOPBACK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ray_loopback"] = module  # (its dataclass looks itself up there)
    spec.loader.exec_module(module)
    return module


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="the Ray board's output directory")
    p.add_argument("--compare", type=Path, default=None, help="a local board's output directory")
    p.add_argument("bench_args", nargs="*", help="more arguments of python -m evaluation.bench")
    args = p.parse_args()
    ray_loopback = _load_loopback()
    logs = args.out / "ray-nodes"  # the two nodes' logs
    logs.mkdir(parents=True, exist_ok=True)
    with ray_loopback.two_nodes(logs, start_timeout_s=120) as cluster:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic()
        cmd = [sys.executable, "-m", "evaluation.bench", "--runner", "ray", "--address",
               cluster.address, "--out", str(args.out), *args.bench_args]  # fmt: skip
        done = subprocess.run(cmd, cwd=ROOT, env=cluster.env)
        wall = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        nodes_cpu = tree_cpu_s([n.pid for n in cluster.nodes])  # before they stop
    driver = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    runs = sum(json.loads(p.read_text()).get("runs") or 0.0 for p in args.out.glob("*/*/cpu.json"))
    print(
        f"ray board: exit {done.returncode}; wall {wall / 60:.1f} min; CPU: driver "
        f"{driver / 60:.1f} min + two nodes {nodes_cpu / 60:.1f} min = "
        f"{(driver + nodes_cpu) / 60:.1f} CPU-minutes (the runs' own cpu_s: {runs / 60:.1f} min)"
    )
    if done.returncode != 0:
        return done.returncode
    if args.compare is not None:
        ray_root, ray_files = _cells(args.out)
        local_root, local_files = _cells(args.compare)
        if ray_root.relative_to(args.out) != local_root.relative_to(args.compare):
            print(f"not comparable: {ray_root} and {local_root} are other suites or code")
            return 1
        differ = sorted(k for k in ray_files.keys() | local_files.keys()
                        if ray_files.get(k) != local_files.get(k))  # fmt: skip
        print(
            f"against {local_root}: {len(ray_files)} files (board.csv and per-job CSVs), "
            + ("all byte-identical" if not differ else f"{len(differ)} differ: {differ[:5]}")
        )
        return 1 if differ else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
