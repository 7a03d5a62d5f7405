"""The held-out grid of a policy of any cluster (issue 39), read from a dlsched-bench run of the
elastic world: per scenario, each named policy's avg JCT over the best *heuristic*'s on the
same seed (paired; mean and 95% CI over seeds), and over the best released specialist's where
one acts there; then the share of scenarios at or below the best heuristic and the mean ratio.

```bash
.venv/bin/python -m evaluation.bench --world elastic --workers 2 --schedulers elastic:drf ... \\
    policy:policies/general ...                                         # the cells (cached)
.venv/bin/python benchmarks/general_grid.py runs/bench/v1-<suite>/<code> \\
    --policy general=policy:policies/general                            # this table
```

A heuristic is a scheduler ``elastic:<allocator>``, a contention-engine stack (``lwf1_srsf1``,
``dlas:skew_fs``) or a registered Contention-v0 rule (``contention:exclusive_overlap``), so the
same table reads a run of the contention world (``--world contention``); a specialist is a
``policy:`` or ``contention:<policy file>`` that is not one of ``--policy``; bounds are left
out.  Several ``--policy NAME=SPEC`` with the same name (training seeds) are
averaged per seed first, as ``experiments/heldout_eval.py`` does.
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy import stats


def _cells(root: Path) -> dict[str, dict[str, dict[int, float]]]:
    """scenario -> scheduler -> seed -> avg JCT (s), from every cell's ``summary.csv``."""
    out: dict[str, dict[str, dict[int, float]]] = defaultdict(dict)
    for summary in sorted(root.glob("*/*/summary.csv")):
        with open(summary, newline="") as f:
            rows = list(csv.DictReader(f))
        for r in rows:
            jct = float(r["avg_jct_s"])
            if not math.isfinite(jct):
                raise SystemExit(f"{summary}: a non-finite avg JCT for seed {r['seed']}")
            out[summary.parent.parent.name].setdefault(r["stack"], {})[int(r["seed"])] = jct
    if not out:
        raise SystemExit(f"{root}: no cell summaries (is it a bench run's code directory?)")
    return out


def _kind(spec: str) -> str:
    """``heuristic``, ``policy`` or ``bound`` (the module doc)."""
    from envs.gym.contention_env import CONTENTION_TEACHERS

    kind, _, arg = spec.partition(":")
    if kind == "bound":
        return "bound"
    if kind == "policy" or (kind == "contention" and arg not in CONTENTION_TEACHERS):
        return "policy"
    return "heuristic"  # elastic:<allocator>, a stack, contention:<rule>, grouper:<policy>


def best_heuristic(
    by: dict[str, dict[int, float]],
) -> tuple[list[int], np.ndarray, str] | None:
    """A scenario's seeds, the best heuristic's avg JCT on each (the least of every heuristic's
    on that seed) and the heuristic best on average; ``None`` when it has no heuristic."""
    heur = {s: v for s, v in by.items() if _kind(s) == "heuristic"}
    if not heur:
        return None
    seeds = sorted(next(iter(by.values())))
    best = np.array([min(v[k] for v in heur.values()) for k in seeds])
    return seeds, best, min(heur, key=lambda s: np.mean([heur[s][k] for k in seeds]))


def _ci(x: np.ndarray) -> tuple[float, float]:
    if len(x) < 2:
        return float(x.mean()), math.nan
    half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return float(x.mean()), float(half)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path, help="a bench run's directory (runs/bench/v1-*/<code>)")
    ap.add_argument("--policy", action="append", required=True, metavar="NAME=SPEC")
    args = ap.parse_args(argv)
    named: dict[str, list[str]] = defaultdict(list)
    for item in args.policy:
        name, sep, spec = item.partition("=")
        if not sep or not spec:
            ap.error(f"--policy takes NAME=SPEC, got {item!r}")
        named[name].append(spec)
    ours = {s for specs in named.values() for s in specs}
    cells = _cells(args.root)
    rows: list[list[str]] = []
    at_or_below: dict[str, int] = defaultdict(int)
    ratios: dict[str, list[float]] = defaultdict(list)
    for scenario, by in cells.items():
        got = best_heuristic(by)
        if got is None:
            raise SystemExit(f"{scenario}: no heuristic's cells to compare with")
        seeds, best_h, best_name = got
        spec_pol = {s: v for s, v in by.items() if _kind(s) == "policy" and s not in ours}
        line = [scenario, best_name.removeprefix("elastic:").removeprefix("contention:")]
        for name, specs in named.items():
            missing = [s for s in specs if s not in by]
            if missing:
                line += ["n/a", "n/a"]
                continue
            mine = np.array([np.mean([by[s][k] for s in specs]) for k in seeds])
            m, h = _ci(mine / best_h)
            ratios[name].append(m)
            at_or_below[name] += m <= 1.0 + 1e-12
            line.append(f"{m:.3f}" + ("" if math.isnan(h) else f" ± {h:.3f}"))
            if spec_pol:
                best_s = np.array([min(v[k] for v in spec_pol.values()) for k in seeds])
                line.append(f"{float(np.mean(mine / best_s)):.3f}")
            else:
                line.append("-")
        rows.append(line)
    heads = ["scenario", "best heuristic"]
    for name in named:
        heads += [f"{name} / best heuristic", f"{name} / best specialist"]
    print("| " + " | ".join(heads) + " |")
    print("|" + "---|" * len(heads))
    for line in rows:
        print("| " + " | ".join(line) + " |")
    print()
    for name in named:
        n = len(ratios[name])
        print(
            f"{name}: at or below the best heuristic in {at_or_below[name]}/{n} scenarios "
            f"({100 * at_or_below[name] / max(n, 1):.0f}%); mean ratio to the best heuristic "
            f"{np.mean(ratios[name]):.4f}; geometric mean "
            f"{math.exp(np.mean(np.log(ratios[name]))):.4f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
