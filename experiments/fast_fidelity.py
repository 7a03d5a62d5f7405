"""How sensitive FULL's avg JCT is to tiny timing changes, and where FAST lies against that.

Usage::

    python experiments/fast_fidelity.py run --seeds 0-2 --members 5 --procs 1
    python experiments/fast_fidelity.py report

``run`` simulates every Ada-SRSF stack on the shipped workloads at the paper's scale (x100)
in both fidelities, on the workload as shipped (member 0) and on ``members - 1`` copies whose
model forward/backward times are jittered by at most ``--rel`` (default 0.1%, see
:func:`envs.sim.workload.jitter_compute`). Rows go to ``--out`` (CSV) as they finish; a rerun
skips the rows already there, so an interrupted run resumes. ``report`` prints, per stack and
seed, FULL's spread over the ensemble, FAST's deviation from FULL on the shipped timings and
the deviation of the ensemble means, then the same per stack over all seeds.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from _common import markdown_table, seed_list

from envs.sim import ClusterSpec, Fidelity, FidelityOptions, SimConfig, simulate
from envs.sim.stacks import STACKS
from envs.sim.workload import builtin_ada_srsf, jitter_compute, scale_workload

FIELDS = ("stack", "seed", "member", "rel", "fidelity", "avg_jct_s", "events", "cpu_s")


def _label(steps: int | None) -> str:
    """The ``fidelity`` column: ``full`` (``steps`` None); for FAST ``fast`` at the default
    ``fast_min_steps``, ``fast<steps>`` otherwise."""
    if steps is None:
        return "full"
    return "fast" if steps == FidelityOptions().fast_min_steps else f"fast{steps}"


def _one(stack: str, seed: int, member: int, rel: float, steps: int | None) -> dict[str, object]:
    """One run; ``steps`` None is FULL, else FAST with that ``fast_min_steps``."""
    w = scale_workload(builtin_ada_srsf(seed), 100, 100)
    if member:
        w = jitter_compute(w, rel, seed=1000 * seed + member)
    if steps is None:
        cfg = SimConfig()
    else:
        cfg = SimConfig(fidelity=FidelityOptions(level=Fidelity.FAST, fast_min_steps=steps))
    t0 = time.process_time()
    res = simulate(ClusterSpec(), w, stack, cfg)
    return {
        "stack": stack,
        "seed": seed,
        "member": member,
        "rel": rel if member else 0.0,
        "fidelity": _label(steps),
        "avg_jct_s": round(res.summary()["avg_jct_ms"] / 1000, 3),
        "events": res.events,
        "cpu_s": round(time.process_time() - t0, 2),
    }


def _load(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def run(args: argparse.Namespace) -> None:
    out: Path = args.out
    done = {(r["stack"], int(r["seed"]), int(r["member"]), r["fidelity"]) for r in _load(out)}
    todo = [
        (stack, seed, m, args.rel, steps)
        for seed in args.seeds
        for m in range(args.members)
        for stack in args.stacks
        for steps in (args.steps, *(() if args.fast_only else (None,)))
        if (stack, seed, m, _label(steps)) not in done
    ]
    print(f"{len(todo)} runs to do, {len(done)} already in {out}", flush=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    new_file = not out.exists()
    with out.open("a", newline="") as f, ProcessPoolExecutor(args.procs) as pool:
        writer = csv.DictWriter(f, fieldnames=FIELDS)
        if new_file:
            writer.writeheader()
        for row in pool.map(_one, *zip(*todo, strict=True)) if todo else ():
            writer.writerow(row)
            f.flush()
            print(", ".join(f"{k}={row[k]}" for k in FIELDS), flush=True)


def _dev(a: float, b: float) -> str:
    return f"{100 * (a - b) / b:+.2f}%"


def report(args: argparse.Namespace) -> None:
    rows = _load(args.out)
    if not rows:
        raise SystemExit(f"no rows in {args.out}; run `run` first")
    fast_label = _label(args.steps)
    jct: dict[tuple[str, int, str], dict[int, float]] = defaultdict(dict)
    for r in rows:
        jct[(r["stack"], int(r["seed"]), r["fidelity"])][int(r["member"])] = float(r["avg_jct_s"])
    stacks = [s for s in STACKS if any(k[0] == s for k in jct)]
    seeds = sorted({k[1] for k in jct})
    print(f"FAST: fast_min_steps={args.steps} (K = 1000 // {args.steps})\n")
    headers = ["stack", "seed", "members", "FULL shipped", "FULL min-max over ensemble",
               "FULL spread", "FAST shipped", "FAST - FULL, shipped",
               "FAST - FULL, ensemble means"]  # fmt: skip
    table = []
    per_stack: dict[str, list[tuple[float, float]]] = defaultdict(list)
    cells = within_spread = within2_means = 0
    for stack in stacks:
        for seed in seeds:
            full = jct.get((stack, seed, "full"), {})
            fast = jct.get((stack, seed, fast_label), {})
            common = sorted(set(full) & set(fast))
            if 0 not in common:
                continue
            fv = [full[m] for m in common]
            av = [fast[m] for m in common]
            lo, hi, fm, am = min(fv), max(fv), statistics.fmean(fv), statistics.fmean(av)
            per_stack[stack].append((fm, am))
            cells += 1
            within_spread += lo <= fast[0] <= hi
            within2_means += abs(am - fm) <= 0.02 * fm
            table.append([
                stack, str(seed), str(len(common)), f"{full[0]:.1f}", f"{lo:.1f}-{hi:.1f}",
                f"{100 * (hi - lo) / fm:.1f}%", f"{fast[0]:.1f}", _dev(fast[0], full[0]),
                _dev(am, fm),
            ])  # fmt: skip
    print(markdown_table(table, headers))
    print(
        f"\n{cells} cells; FAST (shipped timings) inside FULL's ensemble range: {within_spread}; "
        f"ensemble means within 2%: {within2_means}\n"
    )
    means = []
    for stack, pairs in per_stack.items():
        fm = statistics.fmean(p[0] for p in pairs)
        am = statistics.fmean(p[1] for p in pairs)
        means.append([stack, str(len(pairs)), f"{fm:.1f}", f"{am:.1f}", _dev(am, fm)])
    print(markdown_table(means, ["stack", "seeds", "FULL mean", "FAST mean", "FAST - FULL"]))
    _distribution(jct, fast_label)


def _distribution(jct: dict[tuple[str, int, str], dict[int, float]], fast_label: str) -> None:
    """Two distributions of |relative difference| in avg JCT, over every cell and member:
    FULL on a jittered copy against FULL on the shipped timings (how far one run is from
    another equally valid one), and FAST against FULL on the same timings."""
    self_dev: list[float] = []
    fast_dev: list[float] = []
    for (stack, seed, fid), full in jct.items():
        if fid != "full":
            continue
        fast = jct.get((stack, seed, fast_label), {})
        if 0 in full:
            self_dev += [abs(v - full[0]) / full[0] for m, v in full.items() if m]
        fast_dev += [abs(fast[m] - v) / v for m, v in full.items() if m in fast]
    table = []
    for name, devs in (
        ("FULL (0.1% jitter) vs FULL (shipped)", self_dev),
        (f"{fast_label.upper()} vs FULL, same timings", fast_dev),
    ):
        if not devs:
            continue
        d = sorted(devs)
        p90 = d[min(len(d) - 1, int(0.9 * len(d)))]
        share = sum(x > 0.02 for x in d) / len(d)
        table.append([
            name, str(len(d)), f"{100 * statistics.fmean(d):.2f}%",
            f"{100 * statistics.median(d):.2f}%", f"{100 * p90:.2f}%", f"{100 * d[-1]:.2f}%",
            f"{100 * share:.0f}%",
        ])  # fmt: skip
    headers = ["pairs of runs", "n", "mean", "median", "p90", "max", "share > 2%"]
    print("\n" + markdown_table(table, headers))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("command", choices=("run", "report"))
    ap.add_argument("--seeds", type=seed_list, default=[0, 1, 2])
    ap.add_argument("--stacks", type=lambda s: s.split(","), default=list(STACKS))
    ap.add_argument("--members", type=int, default=5, help="ensemble size, shipped timings incl.")
    ap.add_argument("--rel", type=float, default=1e-3, help="max relative jitter of fw/bw times")
    ap.add_argument(
        "--steps", type=int, default=FidelityOptions().fast_min_steps, help="FAST's fast_min_steps"
    )
    ap.add_argument("--fast-only", action="store_true", help="run: FAST rows only")
    ap.add_argument("--procs", type=int, default=max(1, (os.cpu_count() or 2) - 1))
    ap.add_argument("--out", type=Path, default=Path("runs/fast_fidelity.csv"))
    args = ap.parse_args()
    for s in args.stacks:
        if s not in STACKS:
            raise SystemExit(f"unknown stack {s!r}; have {', '.join(STACKS)}")
    (run if args.command == "run" else report)(args)


if __name__ == "__main__":
    main()
