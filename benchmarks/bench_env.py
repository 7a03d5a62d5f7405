"""Environment speed benchmark: ``dlsched/Cluster-v0`` decisions (env steps) per second.

Usage::

    python benchmarks/bench_env.py                    # random valid + DRF driver, small + large
    python benchmarks/bench_env.py --steps 200000     # more steps per measurement
    python benchmarks/bench_env.py --fuzz-steps 1000000   # + the long fuzz run (0 crashes)

*Random valid*: uniform among the valid actions of ``env.action_masks()`` (void included),
from a seeded generator's uniforms drawn before the clock starts (the mask, its nonzero
entries and the choice are in the timed loop).  This is what a vectorised user does; a
per-step ``rng.choice(np.flatnonzero(mask))`` costs about 14x this pick (``rng.integers``
about 4x), more than an env step, and would mostly time numpy's ``Generator``.  *DRF driver*:
:class:`~envs.gym.heuristic.HeuristicDriver` with DRF decides every action (its per-slot
planning is in the timed loop).  Resets (episode ends) are inside the timed loop.  Rates are
env steps per CPU-second of this process (``time.process_time``; wall-clock in brackets),
the best of ``--repeats`` runs.  The issue's target is 10x DL²'s reference decision rate
(about 8.7k decisions per CPU-second), i.e. 87k steps per CPU-second.  The fuzz run:
:func:`fuzz`.
"""

from __future__ import annotations

import argparse
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from envs.gym.cluster_env import ClusterEnv
from envs.gym.heuristic import HeuristicDriver
from envs.sim.elastic.allocators import DRF
from envs.sim.elastic.workload import DL2_LARGE, DL2_SMALL, DL2Setting

FUZZ_SETTING = DL2Setting(
    num_nodes=3, num_jobs=5, max_arrivals_per_slot=2, J=3, max_epochs=30, max_workers=3, max_ps=3
)


@dataclass(frozen=True)
class Rate:
    """Env steps per CPU-second (``time.process_time``) and per wall-second."""

    cpu: float
    wall: float


def _timed(loop: Callable[[], None], steps: int) -> Rate:
    c0, w0 = time.process_time(), time.perf_counter()
    loop()
    cpu, wall = time.process_time() - c0, time.perf_counter() - w0
    return Rate(steps / max(cpu, 1e-9), steps / max(wall, 1e-9))


def random_valid(env: ClusterEnv, steps: int, seed: int) -> Rate:
    """Steps per second with random valid actions: uniform among the True entries of
    ``env.action_masks()`` (void included), from uniforms drawn before the clock starts."""
    uniforms = np.random.default_rng(seed).random(steps).tolist()
    env.reset(seed=seed)

    def loop() -> None:
        for u in uniforms:
            valid = env.action_masks().nonzero()[0]
            _, _, term, trunc, _ = env.step(valid[int(u * valid.size)])
            if term or trunc:
                env.reset()

    return _timed(loop, steps)


def driven(env: ClusterEnv, steps: int, seed: int) -> Rate:
    """Steps per second with the DRF heuristic driver deciding every action."""
    driver = HeuristicDriver(DRF(), env)
    env.reset(seed=seed)

    def loop() -> None:
        for _ in range(steps):
            _, _, term, trunc, _ = env.step(driver.act())
            if term or trunc:
                env.reset()

    return _timed(loop, steps)


def best(measure: Callable[[ClusterEnv, int, int], Rate], setting: DL2Setting, args: Any) -> Rate:
    """The best of ``args.repeats`` measurements on fresh envs (the least disturbed run)."""
    rates = [measure(ClusterEnv(setting), args.steps, args.seed) for _ in range(args.repeats)]
    return Rate(max(r.cpu for r in rates), max(r.wall for r in rates))


def fuzz_action(env: ClusterEnv, rng: np.random.Generator) -> Any:
    """A seeded mix: 60% valid, 20% masked (any in-range action), 10% out of range, 10% odd."""
    u = rng.random()
    n = env.void_action + 1
    if u < 0.6:
        valid = np.flatnonzero(env.action_masks())
        return valid[rng.integers(valid.size)]
    if u < 0.8:
        return int(rng.integers(n))
    if u < 0.9:
        return int(rng.choice([-1, n, n + 7, -100]))
    odd = [None, 1.5, "x", np.array([0, 1]), np.int8(0), True, -1]
    return odd[int(rng.integers(len(odd)))]


def check_invariants(env: ClusterEnv, obs: np.ndarray, info: dict[str, Any], prev: dict) -> None:
    """Raise ``AssertionError`` when a per-step invariant does not hold."""
    sim = env.sim
    assert sim is not None
    c = sim.cluster
    assert (c.used_cpu <= c.cpu_capacity).all() and (c.used_gpu <= c.gpu_capacity).all()
    assert (c.used_cpu >= 0).all() and (c.used_gpu >= 0).all()
    for job in env._window:
        w, p = env._alloc[job.job_id]
        assert 0 <= w <= job.spec.max_workers and 0 <= p <= job.spec.max_ps
    assert env.observation_space.contains(obs)
    mask = env.action_masks()
    assert mask.shape == (env.void_action + 1,) and bool(mask[-1])
    for key in ("invalid_actions", "jobs_finished", "empty_slots_total", "slot"):
        assert info[key] >= prev.get(key, 0), key
        prev[key] = info[key]


def fuzz(steps: int, seed: int = 0) -> tuple[int, int, int]:
    """``(steps run, crashes, invariant violations)`` of the fuzz loop.

    ``--fuzz-steps N`` drives a tiny setting with a seeded mix of valid, masked and out-of-range
    actions for ``N`` steps, checking the invariants after every step (no node over capacity,
    window jobs within caps, observation in its Box, void valid, info counters monotone), and
    reports the crashes and invariant violations (both must be 0).
    """
    rng = np.random.default_rng(seed)
    env = ClusterEnv(FUZZ_SETTING, max_slots=60)
    crashes = violations = 0
    episode = 0
    obs, info = env.reset(seed=episode)
    prev: dict[str, Any] = {}
    for _ in range(steps):
        try:
            obs, _, term, trunc, info = env.step(fuzz_action(env, rng))
        except Exception as exc:  # counting crashes is the point
            crashes += 1
            print(f"crash in episode {episode}: {type(exc).__name__}: {exc}")
            term = True
        else:
            try:
                check_invariants(env, obs, info, prev)
            except AssertionError as exc:
                violations += 1
                print(f"invariant violated in episode {episode}: {exc}")
        if term or trunc:
            episode += 1
            obs, info = env.reset(seed=episode)
            prev = {}
    return steps, crashes, violations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=50_000, help="steps per measurement")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=3, help="measurements (best is kept)")
    parser.add_argument("--fuzz-steps", type=int, default=0, help="fuzz-loop steps (0: none)")
    args = parser.parse_args()
    print(f"# env steps/s ({platform.python_implementation()} {platform.python_version()})\n")
    print(
        f"{args.steps} steps per measurement, best of {args.repeats}; target 87,000 steps/CPU-s\n"
    )
    print("| setting | random valid steps/CPU-s (wall) | DRF driver steps/CPU-s (wall) |")
    print("|---|---|---|")
    for name, setting in (("small", DL2_SMALL), ("large", DL2_LARGE)):
        rv = best(random_valid, setting, args)
        dr = best(driven, setting, args)
        print(f"| {name} | {rv.cpu:,.0f} ({rv.wall:,.0f}) | {dr.cpu:,.0f} ({dr.wall:,.0f}) |")
    if args.fuzz_steps > 0:
        t0 = time.perf_counter()
        n, crashes, violations = fuzz(args.fuzz_steps, args.seed)
        wall = time.perf_counter() - t0
        print(
            f"\nfuzz: {n} steps in {wall:.1f} s, {crashes} crashes, "
            f"{violations} invariant violations"
        )
        if crashes or violations:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
