"""What the rule selector's searches cost (``agents/rule_search.py``).

Usage::

    python benchmarks/bench_search.py                       # paper scale, fast fidelity, seeds 0-1
    python benchmarks/bench_search.py --fidelity full --seeds 0
    python benchmarks/bench_search.py --policy runs/cem5/s0/checkpoints/best --json
    python benchmarks/bench_search.py --fidelity full --seeds 500 --searches drained --model fast

For the selector of ``--policy`` (default the released ``policies/contention_selector``),
acting alone and with each search (``drained``, ``known``, ``sampled``) in its env layout on
the paper-scale generator's workloads (160 jobs, 16 x 4 GPUs): CPU seconds per episode, the
rollouts the search made, the decisions, and the episode's avg JCT (the drained search's is
never above the selector's).  ``--model fast``: the searches' rollouts on the fast-fidelity
engine whatever the run's (``agents.rule_search.MODELS``).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from tabulate import tabulate

import agents.rule_search as search
from agents.episode_pg import load_episode_pg
from agents.policy_file import find
from agents.rule_selector import RuleSelector
from envs.gym.contention_env import ContentionEnv
from envs.gym.episode import run_episode

ROOT = Path(__file__).resolve().parents[1]
RELEASED = ROOT / "policies" / "contention_selector" / "policy.npz"


def _selector(path: Path, mode: str, model: str = "same") -> tuple[RuleSelector, dict[str, Any]]:
    net, meta = load_episode_pg(path)
    assert isinstance(net, RuleSelector), f"{path}: not a rule selector"
    return net.with_search(mode, model=model), meta["env"]


def run(
    path: Path,
    fidelity: str,
    seeds: list[int],
    modes: list[str] | None = None,
    model: str = "same",
) -> dict[str, dict[str, float]]:
    """Per search mode: mean CPU s, rollouts, decisions and avg JCT (s) per episode."""
    calls = [0]
    rollout = search._rollout

    def counted(*args: Any) -> Any:
        calls[0] += 1
        return rollout(*args)

    search._rollout = counted  # type: ignore[assignment]
    out: dict[str, dict[str, float]] = {}
    try:
        for mode in modes or list(search.SEARCHES):
            sel, lay = _selector(path, mode, model)
            env = ContentionEnv(scale="paper", fidelity=fidelity, comm=lay["comm"], J=lay["J"],
                                placements=lay["placements"])  # fmt: skip

            rows = []
            for seed in seeds:
                calls[0] = 0
                t0 = time.process_time()
                ep = run_episode(env, lambda _view, _obs: sel.act(env), seed)  # noqa: B023 (used at once)
                cpu = time.process_time() - t0
                rows.append((cpu, calls[0], ep.steps, ep.info["avg_jct_s"]))
            a = np.array(rows, dtype=float).mean(0)
            out[mode] = {"cpu_s": a[0], "rollouts": a[1], "decisions": a[2], "avg_jct_s": a[3]}
    finally:
        search._rollout = rollout
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policy", type=Path, default=RELEASED, help="a rule selector's file")
    ap.add_argument("--fidelity", default="fast", choices=["fast", "full"])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--searches", nargs="+", default=list(search.SEARCHES),
                    choices=search.SEARCHES, help="the searches to time")  # fmt: skip
    ap.add_argument("--model", default="same", choices=search.MODELS,
                    help="the rollouts' engine (fast: fast fidelity, any run)")  # fmt: skip
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    th.set_num_threads(1)
    res = run(find(args.policy), args.fidelity, args.seeds, args.searches, args.model)
    if args.json:
        print(json.dumps({"machine": platform.processor() or platform.machine(), **res}))
        return
    base = res["none"]["cpu_s"] if "none" in res else None  # not asked: no ratio
    rows = [
        [mode, f"{r['cpu_s']:.2f}s", f"{r['cpu_s'] / base:.1f}x" if base else "-",
         f"{r['rollouts']:.0f}", f"{r['decisions']:.0f}", f"{r['avg_jct_s']:.1f}"]
        for mode, r in res.items()
    ]  # fmt: skip
    print(f"paper scale, {args.fidelity} fidelity, {args.model} model, seeds {args.seeds}, "
          f"policy {args.policy}")  # fmt: skip
    print(tabulate(rows, headers=["search", "CPU per episode", "vs none", "rollouts",
                                  "decisions", "avg JCT (s)"], tablefmt="github",
                   disable_numparse=True))  # fmt: skip


if __name__ == "__main__":
    main()
