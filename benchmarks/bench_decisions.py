"""What the decision-point API and ``dlsched/Contention-v0`` cost.

Usage::

    python benchmarks/bench_decisions.py            # 160-job Ada-SRSF workloads, seeds 0-2
    python benchmarks/bench_decisions.py --json

Per scale and fidelity, CPU seconds per 160-job episode of:

- ``simulate``: the plain Python event loop (``engine="python"``) under LWF-1 + Ada-SRSF;
- ``native``: the native C loop (``engine="auto"``), for scale;
- ``api``: the same stack driven through :class:`envs.sim.decisions.DecisionSimulator`
  (:func:`~envs.sim.decisions.drive`; identical per-job results, tested);
- ``env_teacher``: ``Contention-v0`` with the SRSF teacher acting;
- ``env_policy``: ``Contention-v0`` with an MLP policy acting (two hidden layers of 64, masked
  argmax; a trained policy of that shape costs the same),

with the decisions (steps) per episode and decisions per second of the policy run.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from functools import partial
from typing import Any

import numpy as np
import torch as th

from envs.gym.contention_env import ContentionEnv, srsf_teacher
from envs.sim import ClusterSpec, SimConfig, simulate
from envs.sim.config import Fidelity, FidelityOptions, RunOptions
from envs.sim.decisions import simulate_decisions
from envs.sim.workload import generate_ada_srsf, paper_scale_workload


def _cpu(fn: Any) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def _episode(env: ContentionEnv, seed: int, act: Any) -> int:
    obs, _ = env.reset(seed=seed)
    steps = 0
    while True:
        steps += 1
        obs, _, term, trunc, _ = env.step(act(env, obs))
        if term or trunc:
            return steps


def _mlp_actor(env: ContentionEnv) -> Any:
    th.manual_seed(0)
    n_in, n_out = env.obs_size, env.J * env.C + 1
    net = th.nn.Sequential(
        th.nn.Linear(n_in, 64), th.nn.Tanh(), th.nn.Linear(64, 64), th.nn.Tanh(),
        th.nn.Linear(64, n_out),
    )  # fmt: skip

    def act(e: ContentionEnv, obs: np.ndarray) -> int:
        with th.no_grad():
            logits = net(th.as_tensor(obs)).numpy()
        logits[~e.action_masks()] = -np.inf
        return int(np.argmax(logits))

    return act


def cell(scale: str, fidelity: str, seeds: list[int]) -> dict[str, float]:
    make = paper_scale_workload if scale == "paper" else generate_ada_srsf
    level = FidelityOptions(level=Fidelity(fidelity))
    cluster, cfg = ClusterSpec(), SimConfig(fidelity=level, run=RunOptions(engine="python"))
    out: dict[str, list[float]] = {k: [] for k in ("simulate", "native", "api", "env_teacher",
                                                    "env_policy", "steps")}  # fmt: skip
    env = ContentionEnv(scale=scale, fidelity=fidelity)
    actor = _mlp_actor(env)
    auto = SimConfig(fidelity=level)
    for seed in seeds:
        w = make(seed)
        out["simulate"].append(_cpu(partial(simulate, cluster, w, "lwf1_adasrsf", cfg)))
        out["native"].append(_cpu(partial(simulate, cluster, w, "lwf1_adasrsf", auto)))
        out["api"].append(_cpu(partial(simulate_decisions, cluster, w, "lwf1_adasrsf", cfg)))
        out["env_teacher"].append(_cpu(partial(_episode, env, seed, lambda e, _: srsf_teacher(e))))
        t0 = time.process_time()
        out["steps"].append(float(_episode(env, seed, actor)))
        out["env_policy"].append(time.process_time() - t0)
    res = {f"{k}_cpu_s" if k != "steps" else "decisions": float(np.mean(v)) for k, v in out.items()}
    res["policy_decisions_per_s"] = res["decisions"] / res["env_policy_cpu_s"]
    res["api_overhead"] = res["api_cpu_s"] / res["simulate_cpu_s"] - 1.0
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    th.set_num_threads(1)
    cells = {
        f"{scale}/{fid}": cell(scale, fid, args.seeds)
        for scale, fid in (("small", "full"), ("paper", "fast"), ("paper", "full"))
    }
    if args.json:
        print(json.dumps({"machine": platform.processor() or platform.machine(), **cells}))
        return
    print(f"{'cell':<12} {'simulate':>9} {'native':>8} {'api':>8} {'overhead':>9} "
          f"{'env+teacher':>12} {'env+policy':>11} {'decisions':>10} {'dec/s':>8}")  # fmt: skip
    for name, r in cells.items():
        print(
            f"{name:<12} {r['simulate_cpu_s']:>8.2f}s {r['native_cpu_s']:>7.2f}s "
            f"{r['api_cpu_s']:>7.2f}s {r['api_overhead']:>+8.1%} {r['env_teacher_cpu_s']:>11.2f}s "
            f"{r['env_policy_cpu_s']:>10.2f}s {r['decisions']:>10.0f} "
            f"{r['policy_decisions_per_s']:>8.0f}"
        )


if __name__ == "__main__":
    main()
