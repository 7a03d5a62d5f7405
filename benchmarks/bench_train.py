"""Training throughput: decisions per wall second of *training* (rollouts + updates).

Usage::

    python benchmarks/bench_train.py                 # small setting, n_envs 1/16/64, mlp + per_job
    python benchmarks/bench_train.py --json          # the figures as one JSON object
    python benchmarks/bench_train.py --setting medium --n-envs 16 64 --archs mlp
    python benchmarks/bench_train.py --plan          # the plan recipe (train.py +agent=plan_pg)
    python benchmarks/bench_train.py --a2c           # DL²'s recipe (train.py +agent=a2c)
    python benchmarks/bench_train.py --a2c-increments  # DL2A2C (+agent=a2c_increments)

``--plan``: the slot-plan recipe (:class:`agents.episode_pg.EpisodePG` on
``dlsched/ClusterPlan-v0``, ``plan_pg``'s defaults: 4 workloads x 8 rollouts per iteration, the
DL² small setting with DL²'s bundle backlog as in ``make demo``), slot decisions per wall second
of ``learn`` (rollouts + updates, after one warm-up iteration): the rollouts in this process one
after the other, split over 2 worker processes (``plan_pg``'s default, the same numbers bit for
bit), side by side in this process (one forward per step over every live rollout; not
bit-identical), side by side in each of 2 workers (``agent.plan.lockstep=true``), and the env
alone in the same run (random plans, one call per slot).  ``--a2c``: the same cells for
``+agent=a2c``'s learner (``--plan``'s with a critic, experience replay and job-aware
exploration).

Each cell builds the group learner (:class:`agents.group.GroupPPO`, the ``gppo`` agent's
defaults: groups of 4 rollouts of one workload, a quarter of the decisions trained on, two PPO
epochs) on ``n_envs`` env copies (``n_envs = 1``: one rollout per iteration with the critic
baseline) and times ``learn`` over ``--iterations`` iterations, after one warm-up iteration
(the clock covers the batched rollouts and the updates; no validation, no pretraining).
``env_alone`` is the env's own rate in the same process: a uniform-random valid action per
step on one env, picked from uniforms drawn before the clock starts.  Torch runs on
``--threads`` threads (default 1: the rollouts are single-threaded and the network is small).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from typing import Any

import numpy as np
import torch as th

from agents.config import AgentConfig
from agents.group import GroupConfig, GroupPPO
from agents.policy import PolicyConfig, policy_kwargs
from agents.vec import make_training_vec_env
from envs.gym.factory import EnvConfig, make_env


def env_alone(config: EnvConfig, steps: int, seed: int = 0) -> float:
    """Env steps per wall second with a uniform-random valid action."""
    env = make_env(config, seed=seed)
    u = np.random.default_rng(seed).random(steps)
    env.reset(seed=seed)
    t0 = time.perf_counter()
    for i in range(steps):
        valid = np.flatnonzero(env.live_mask)
        _, _, term, trunc, _ = env.step(int(valid[int(u[i] * len(valid))]))
        if term or trunc:
            env.reset()
    return steps / (time.perf_counter() - t0)


def train_rate(config: EnvConfig, n_envs: int, arch: str, iterations: int) -> dict[str, Any]:
    """Decisions per wall second of ``learn`` (rollouts + updates) for one cell."""
    defaults = AgentConfig(algo="group_ppo")
    group = GroupConfig(
        groups=max(n_envs // 4, 1),
        group_size=4 if n_envs >= 4 else 1,
        baseline="group" if n_envs >= 4 else "critic",
    )
    env = make_training_vec_env([config] * n_envs, list(range(n_envs)))
    J = make_env(config).J
    model = GroupPPO(
        env=env,
        learning_rate=defaults.learning_rate,
        group=group,
        policy_kwargs=policy_kwargs(PolicyConfig(arch=arch), J),
        seed=0,
    )
    model.learn(1)  # warm-up: one iteration
    start = model.num_timesteps
    t0 = time.perf_counter()
    # one decision past the warm-up and the loop runs ``iterations`` iterations exactly
    for _ in range(iterations):
        model.learn(1, reset_num_timesteps=False)
    wall = time.perf_counter() - t0
    decisions = model.num_timesteps - start
    return {
        "n_envs": n_envs,
        "arch": arch,
        "decisions": int(decisions),
        "wall_s": round(wall, 2),
        "decisions_per_s": round(decisions / wall),
    }


def plan_rates(iterations: int, env_episodes: int, a2c: bool = False) -> dict[str, Any]:
    """The plan recipe's training rates (decisions = slots) and the env alone's; ``a2c``:
    ``+agent=a2c``'s learner with ``train.py +agent=a2c``'s composed config (its plans, PPO
    epochs and ``agent.a2c``: :class:`agents.plan_a2c.PlanA2C` with its critic, replay and
    job-aware exploration) instead of EpisodePG at ``plan_pg``'s defaults."""
    from agents.config import AgentConfig
    from agents.episode_pg import EpisodePG, EpisodePGConfig, MaskedMLP
    from agents.plan_a2c import build_plan_a2c
    from envs.gym.plan_env import PlanEnv

    config = {"setting": "small", "reward": "jct", "backlog": "bundle"}
    agent, plans, epochs, hidden = AgentConfig(), None, 4, 128
    if a2c:  # the agent as train.py +agent=a2c composes it
        agent = _composed_agent("a2c")
        plans, epochs = [str(x) for x in agent.plan.plans] or None, int(agent.plan.epochs)
        hidden = int(agent.plan.hidden)
    env = PlanEnv(config=config, plans=plans)
    picks = np.random.default_rng(0)
    env.reset(seed=0)
    slots = 0
    t0 = time.perf_counter()
    for ep in range(env_episodes):
        env.reset(seed=ep)
        while True:
            _, _, term, trunc, _ = env.step(int(picks.integers(env.K)))
            slots += 1
            if term or trunc:
                break
    out: dict[str, Any] = {"env_alone_slots_per_s": round(slots / (time.perf_counter() - t0))}
    for key, workers, lockstep in PLAN_CELLS:
        th.manual_seed(0)
        net = MaskedMLP(env.obs_size, env.K, hidden)
        cfg = EpisodePGConfig(seed=0, workers=workers, lockstep=lockstep, epochs=epochs)
        pg = build_plan_a2c(agent, env, net, cfg) if a2c else EpisodePG(env, net, cfg)
        decisions = 0

        def count(_i: int, st: dict[str, float]) -> None:
            nonlocal decisions
            decisions += int(st["decisions"])

        try:
            pg.learn(1)  # warm-up: workers started, tables built
            t0 = time.perf_counter()
            pg.learn(iterations, count)
            wall = time.perf_counter() - t0
        finally:
            pg.close()
        out[key] = {"decisions": decisions, "wall_s": round(wall, 2),
                    "decisions_per_s": round(decisions / wall)}  # fmt: skip
    return out


def _composed_agent(name: str) -> Any:
    """``agent`` of ``train.py +agent=<name>``'s config (conf/, composed by Hydra)."""
    from pathlib import Path

    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from training.config import TrainConfig, register_configs

    register_configs()
    conf = Path(__file__).resolve().parents[1] / "conf"
    with initialize_config_dir(str(conf), version_base="1.3"):
        cfg = compose("train", overrides=[f"+agent={name}"])
    obj = OmegaConf.to_object(cfg)
    assert isinstance(obj, TrainConfig)
    return obj.agent


#: the plan recipe's cells: (label, rollout worker processes, side by side)
PLAN_CELLS = (
    ("one process", 1, False),
    ("2 workers", 2, False),
    ("lockstep", 1, True),
    ("2 x lockstep", 2, True),
)


def a2c_rate(config: EnvConfig, steps: int) -> dict[str, Any]:
    """DL²'s per-increment actor-critic (``+agent=a2c_increments``: one env,
    ``AgentConfig()``) training rate over ``steps`` decisions after a warm-up, and the env
    alone in the same run."""
    from agents.build import build_agent

    cfg = AgentConfig()
    env = make_training_vec_env([config], [0])
    model = build_agent(cfg, env, make_env(config).J, seed=0)
    model.learn(cfg.n_steps)  # warm-up: one update
    t0 = time.perf_counter()
    model.learn(steps, reset_num_timesteps=False)
    wall = time.perf_counter() - t0
    alone = env_alone(config, steps)
    return {"decisions_per_s": round(steps / wall), "env_alone_steps_per_s": round(alone)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--setting", default="small")
    ap.add_argument("--n-envs", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--archs", nargs="+", default=["mlp", "per_job"])
    ap.add_argument("--iterations", type=int, default=1)
    ap.add_argument("--env-steps", type=int, default=200_000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--plan", action="store_true", help="the plan recipe instead")
    ap.add_argument("--a2c", action="store_true", help="+agent=a2c's learner: --plan's cells")
    ap.add_argument("--a2c-increments", action="store_true", help="per-increment DL2A2C")
    ap.add_argument("--env-episodes", type=int, default=10, help="--plan: env-alone episodes")
    args = ap.parse_args()
    th.set_num_threads(args.threads)
    if args.a2c_increments:
        res = a2c_rate(EnvConfig(setting=args.setting, reward="jct"), args.env_steps)
        if args.json:
            print(json.dumps(res))
            return
        share = res["decisions_per_s"] / res["env_alone_steps_per_s"]
        print(f"+agent=a2c_increments ({args.setting}): {res['decisions_per_s']:,} decisions/s, "
              f"env alone {res['env_alone_steps_per_s']:,} steps/s: {share:.2f}")  # fmt: skip
        return
    if args.plan or args.a2c:
        res = plan_rates(args.iterations, args.env_episodes, a2c=args.a2c)
        if args.json:
            print(json.dumps(res))
            return
        alone = res["env_alone_slots_per_s"]
        what = "+agent=a2c" if args.a2c else "plan recipe"
        print(f"{what} (small + bundle backlog): env alone {alone:,} slots/s")
        for key, _, _ in PLAN_CELLS:
            row = res[key]
            share = row["decisions_per_s"] / alone
            print(f"{key:>12}: {row['decisions_per_s']:,} decisions/s ({row['decisions']:,} in "
                  f"{row['wall_s']} s), {share:.2f} of the env alone")  # fmt: skip
        return
    config = EnvConfig(setting=args.setting, reward="jct")
    out: dict[str, Any] = {
        "setting": args.setting,
        "machine": f"{platform.processor() or platform.machine()}, torch threads {args.threads}",
        "env_alone_steps_per_s": round(env_alone(config, args.env_steps)),
        "train": [],
    }
    if not args.json:
        print(f"env alone ({args.setting}): {out['env_alone_steps_per_s']:,} steps/s")
    for arch in args.archs:
        for n in args.n_envs:
            row = train_rate(config, n, arch, args.iterations)
            out["train"].append(row)
            if not args.json:
                print(
                    f"{arch:>8} n_envs {n:>3}: {row['decisions_per_s']:>8,} decisions/s "
                    f"({row['decisions']:,} decisions in {row['wall_s']} s)",
                    flush=True,
                )
    if args.json:
        print(json.dumps(out))


if __name__ == "__main__":
    main()
