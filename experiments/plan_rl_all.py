"""The trained ClusterPlan-v0 policies of ``plan_rl.py`` against every registered allocator,
with p95 JCT: the check behind "beats every heuristic in the library, p95 no worse".

    python experiments/plan_rl_all.py --setting medium --runs runs/plan_rl/medium
    python experiments/plan_rl_all.py --setting small --backlog bundle \
        --runs runs/plan_rl/small_bundle

Loads ``--runs``/``seed*.pt`` (the kept checkpoints ``plan_rl.py --out`` writes), runs each
policy (argmax) and every allocator of ``ALLOCATORS`` (constant plan, i.e. the allocator
through ClusterEnv's HeuristicDriver) on the test seeds 300-319 through the same env, and
prints avg and p95 JCT (slots, per workload, then mean ± 95% CI over workloads) with paired
differences against EfficientSRTF.  An allocator whose episode reaches the env's horizon
with jobs unfinished is reported as such (it is worse than any finished schedule).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import plan_rl
import torch as th
from _common import markdown_table

from agents.episode_pg import MaskedMLP, run_episode
from envs.gym.plan_env import PlanEnv
from envs.sim.elastic.allocators import ALLOCATORS
from envs.sim.errors import SimulationError
from evaluation.heldout import paired
from evaluation.stats import mean_ci95


def job_jcts(env: PlanEnv, seed: int, net: MaskedMLP | None = None) -> np.ndarray:
    """Per-job JCTs (slots) of one episode: ``net``'s argmax, or constant plan 0."""
    if net is not None:
        run_episode(env, seed, net)
    else:
        run_episode(env, seed, act=lambda _e, _o: 0)
    return np.array([r.jct_slots for r in env.inner.sim.result().jobs])  # type: ignore[union-attr]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setting", default="medium")
    ap.add_argument("--backlog", default="none")
    ap.add_argument("--runs", type=Path, required=True, help="plan_rl.py --out directory")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--base", default="esrtf")
    args = ap.parse_args(argv)
    seeds = list(range(300, 320))
    files = sorted(args.runs.glob("seed*.pt"))
    if not files:
        ap.error(f"--runs {args.runs}: no seed*.pt checkpoints")
    out: dict[str, list[np.ndarray]] = {}
    env = plan_rl.make(args)
    for f in files:
        net = MaskedMLP(env.obs_size, env.K, args.hidden)
        net.load_state_dict(th.load(f)["best"])
        out[f"learned ({f.stem})"] = [job_jcts(env, s, net) for s in seeds]
    unfinished = []
    for name in ALLOCATORS:
        one = plan_rl.make(args, plans=[name])
        try:
            out[name] = [job_jcts(one, s) for s in seeds]
        except SimulationError:
            unfinished.append(name)
    if args.base not in out:
        ap.error(f"--base {args.base!r} did not finish its episodes")
    avg = {k: np.array([x.mean() for x in v]) for k, v in out.items()}
    p95 = {k: np.array([np.percentile(x, 95) for x in v]) for k, v in out.items()}
    print(f"{args.setting} (backlog {args.backlog}), test seeds 300-319, JCT in slots, "
          f"paired vs {args.base}")  # fmt: skip
    rows = []
    for k in sorted(out, key=lambda k: float(avg[k].mean())):
        (m, h), (pm, ph) = mean_ci95(list(avg[k])), mean_ci95(list(p95[k]))
        (da, ha), (dp, hp) = paired(avg[k], avg[args.base]), paired(p95[k], p95[args.base])
        rows.append([k, f"{m:.2f} ± {h:.2f}", f"{da:+.1f}% ± {ha:.1f}", f"{pm:.1f} ± {ph:.1f}",
                     f"{dp:+.1f}% ± {hp:.1f}"])  # fmt: skip
    print(markdown_table(rows, ["scheduler", "avg JCT", "vs base", "p95 JCT", "vs base"]))
    if unfinished:
        print(f"jobs left unfinished at the env's horizon: {', '.join(unfinished)}")


if __name__ == "__main__":
    main()
