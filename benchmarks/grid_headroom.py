"""How far below the best heuristic any scheduler could go, per scenario of a dlsched-bench run of
the elastic world (issue 39's held-out grid): each scenario's workloads rebuilt from its cells'
records, their lower bound on the mean JCT (``evaluation.heldout.lower_bound``: the window
bound, or the solo bound where the env gives the jobs beyond the window bundles; with
``--capacity``, the capacity programme on top), and its ratio to the best heuristic's avg JCT
on the same seed.  A policy's ratio to the best heuristic (``benchmarks/general_grid.py``)
cannot be below it.

```bash
.venv/bin/python -m evaluation.bench --world elastic ...            # the cells (cached)
.venv/bin/python benchmarks/grid_headroom.py runs/bench/v1-<suite>/<code> --capacity
```

Heuristics are as in ``general_grid.py``.  Prints one row per scenario (best heuristic, its avg
JCT and the bound, slots; the bound over the best, mean over seeds) and the mean over
scenarios: the lowest mean ratio to the best heuristic that any scheduler of these envs could
reach on this grid.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from general_grid import _cells, best_heuristic

from envs.gym.factory import EnvConfig, make_env
from evaluation.heldout import lower_bound


def _env_config(record: dict[str, Any]) -> EnvConfig:
    """The :class:`EnvConfig` a run recorded (``EnvConfig.as_dict``: the defaults left out;
    nested trace options rebuilt as the schema types them)."""
    from omegaconf import OmegaConf

    merged = OmegaConf.merge(OmegaConf.structured(EnvConfig), record)
    config = OmegaConf.to_object(merged)
    assert isinstance(config, EnvConfig)
    return config


def _bound(record: dict[str, Any], seed: int, capacity: bool) -> float:
    config = _env_config(record)
    env = make_env(config)
    env.reset(seed=seed)
    return lower_bound(env, config, capacity)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", type=Path, help="a bench run's directory (runs/bench/v1-*/<code>)")
    ap.add_argument("--capacity", action="store_true", help="the capacity programme on top")
    args = ap.parse_args(argv)
    cells = _cells(args.root)
    rows, ratios = [], []
    for scenario, by in sorted(cells.items()):
        got = best_heuristic(by)
        if got is None:
            continue
        seeds, best, name = got
        run = json.loads((args.root / scenario / name.replace(":", "-") / "run.json").read_text())
        envs = {int(r["seed"]): r["env"] for r in run["runs"]}
        slot_s = float(run["runs"][0]["slot_s"])
        bound = np.array([_bound(envs[k], k, args.capacity) for k in seeds]) * slot_s
        ratio = float(np.mean(bound / best))
        ratios.append(ratio)
        rows.append(
            f"| {scenario} | {name.removeprefix('elastic:')} | {np.mean(best) / slot_s:.2f} "
            f"| {np.mean(bound) / slot_s:.2f} | {ratio:.3f} |"
        )
        print(f"<!-- {scenario}: done -->", file=sys.stderr, flush=True)
    kind = "capacity bound" if args.capacity else "window (or solo) bound"
    print(f"| scenario | best heuristic | its avg JCT (slots) | {kind} | bound / best |")
    print("|---|---|---:|---:|---:|")
    print("\n".join(rows))
    print(
        f"\nmean over {len(ratios)} scenarios of the bound over the best heuristic: "
        f"{np.mean(ratios):.4f} (no scheduler's mean ratio to the best heuristic is lower); "
        f"scenarios where the bound is within 1% of the best: "
        f"{sum(r >= 0.99 for r in ratios)}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
