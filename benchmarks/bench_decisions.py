"""What the decision-point API and ``dlsched/Contention-v0`` cost.

Usage::

    python benchmarks/bench_decisions.py            # 160-job Ada-SRSF workloads, seeds 0-2
    python benchmarks/bench_decisions.py --json
    python benchmarks/bench_decisions.py --profile 25   # + cProfile of one trained-policy episode

Per scale and fidelity, CPU seconds per 160-job episode of:

- ``simulate``: the plain Python event loop (``engine="python"``) under LWF-1 + Ada-SRSF;
- ``native``: the native C loop (``engine="auto"``), for scale;
- ``api``: the same stack driven through :class:`envs.sim.decisions.DecisionSimulator`
  (:func:`~envs.sim.decisions.drive`; identical per-job results, tested);
- ``env_teacher``: ``Contention-v0`` with the SRSF teacher acting;
- ``env_policy``: ``Contention-v0`` with an MLP policy acting (two hidden layers of 64, masked
  argmax; a trained policy of that shape costs the same);
- ``env_trained``: ``Contention-v0`` in its own layout with the released trained policy acting
  (``policies/contention_exclusive_pg``: EpisodePG from the exclusive rule's clone, masked
  argmax, as ``evaluate.py contention:`` runs it),

with the decisions (steps) per episode and decisions per second of the policy runs; for the
trained policy also the jobs it started (the other steps are waits).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import platform
import pstats
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from tabulate import tabulate

from agents.episode_pg import load_episode_pg
from envs.gym.contention_env import ContentionEnv, srsf_teacher
from envs.sim import ClusterSpec, SimConfig, simulate
from envs.sim.config import Fidelity, FidelityOptions, RunOptions
from envs.sim.decisions import simulate_decisions
from envs.sim.workload import generate_ada_srsf, paper_scale_workload

RELEASED = Path(__file__).resolve().parents[1] / "policies/contention_exclusive_pg/policy.npz"


def _cpu(fn: Any) -> float:
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


def _episode(env: ContentionEnv, seed: int, act: Any) -> int:
    return _episode_info(env, seed, act)[0]


def _episode_info(env: ContentionEnv, seed: int, act: Any) -> tuple[int, dict[str, Any]]:
    obs, _ = env.reset(seed=seed)
    steps = 0
    while True:
        steps += 1
        obs, _, term, trunc, info = env.step(act(env, obs))
        if term or trunc:
            return steps, info


def _trained_env(scale: str, fidelity: str) -> tuple[ContentionEnv, Any]:
    """The released policy and an env in the layout it records."""
    net, meta = load_episode_pg(RELEASED)
    lay = meta["env"]
    env = ContentionEnv(scale=scale, fidelity=fidelity, comm=lay["comm"], J=lay["J"],
                        placements=lay["placements"], num_servers=lay["num_servers"],
                        gpus_per_server=lay["gpus_per_server"])  # fmt: skip
    return env, net.act


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
                                                    "env_policy", "steps", "env_trained",
                                                    "trained_steps", "trained_starts")}  # fmt: skip
    env = ContentionEnv(scale=scale, fidelity=fidelity)
    actor = _mlp_actor(env)
    trained_env, trained = _trained_env(scale, fidelity)
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
        t0 = time.process_time()
        steps, info = _episode_info(trained_env, seed, trained)
        out["env_trained"].append(time.process_time() - t0)
        out["trained_steps"].append(float(steps))
        out["trained_starts"].append(float(info["decisions"]))
    names = {"steps": "decisions", "trained_steps": "trained_decisions",
             "trained_starts": "trained_starts"}  # fmt: skip
    res = {names.get(k, f"{k}_cpu_s"): float(np.mean(v)) for k, v in out.items()}
    res["policy_decisions_per_s"] = res["decisions"] / res["env_policy_cpu_s"]
    res["trained_decisions_per_s"] = res["trained_decisions"] / res["env_trained_cpu_s"]
    res["api_overhead"] = res["api_cpu_s"] / res["simulate_cpu_s"] - 1.0
    return res


def profile(seed: int, top: int) -> str:
    """cProfile of one paper-scale, full-fidelity episode of the released policy: the
    ``top`` functions by own time, then by cumulative time."""
    env, act = _trained_env("paper", "full")
    prof = cProfile.Profile()
    prof.enable()
    steps, info = _episode_info(env, seed, act)
    prof.disable()
    buf = io.StringIO()
    buf.write(f"seed {seed}: {steps} decisions, {info['decisions']} starts\n")
    st = pstats.Stats(prof, stream=buf)
    st.sort_stats("tottime").print_stats(top)
    st.sort_stats("cumulative").print_stats(top)
    return buf.getvalue()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--profile", type=int, default=0, metavar="TOP",
                    help="only profile one paper/full episode of it (seeds[0])")  # fmt: skip
    args = ap.parse_args()
    th.set_num_threads(1)
    if args.profile:
        print(profile(args.seeds[0], args.profile))
        return
    cells = {
        f"{scale}/{fid}": cell(scale, fid, args.seeds)
        for scale, fid in (("small", "full"), ("paper", "fast"), ("paper", "full"))
    }
    if args.json:
        print(json.dumps({"machine": platform.processor() or platform.machine(), **cells}))
        return
    headers = ["cell", "simulate", "native", "api", "overhead", "env+teacher", "env+policy",
               "decisions", "dec/s", "env+trained", "decisions", "starts", "dec/s"]  # fmt: skip
    rows = [
        [name, f"{r['simulate_cpu_s']:.2f}s", f"{r['native_cpu_s']:.2f}s", f"{r['api_cpu_s']:.2f}s",
         f"{r['api_overhead']:+.1%}", f"{r['env_teacher_cpu_s']:.2f}s",
         f"{r['env_policy_cpu_s']:.2f}s", f"{r['decisions']:.0f}",
         f"{r['policy_decisions_per_s']:.0f}", f"{r['env_trained_cpu_s']:.2f}s",
         f"{r['trained_decisions']:.0f}", f"{r['trained_starts']:.0f}",
         f"{r['trained_decisions_per_s']:.0f}"]
        for name, r in cells.items()
    ]  # fmt: skip
    print(tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True))


if __name__ == "__main__":
    main()
