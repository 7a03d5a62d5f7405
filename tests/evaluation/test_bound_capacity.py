"""``bound:capacity`` (evaluation/contention.py): no schedule of the contention engine, the
stacks (non-preemptive and preemptive) and the Contention-v0 rules, has a lower mean JCT, on
loaded clusters of two sizes; it is never below ``bound:solo``."""

from __future__ import annotations

import pytest

from envs.gym.actors import RuleActor
from envs.gym.contention_env import CONTENTION_TEACHERS, ContentionEnv, teacher
from envs.gym.episode import run_episode
from envs.sim import ClusterSpec, SimConfig, simulate
from envs.sim.spec import Workload
from envs.sim.workload import generate_ada_srsf
from evaluation.contention import capacity_jcts_ms, solo_jcts_ms

#: the engine's stacks, the non-preemptive and the preemptive ones, that the bound must hold for
STACKS = ("lwf1_srsf1", "lwf1_adasrsf", "ff_adasrsf", "fifo:lwf1_srsf2", "psrsf:count_fs")


@pytest.mark.parametrize(("servers", "seed"), [(4, 0), (8, 1)])
def test_no_stack_beats_the_capacity_bound(servers: int, seed: int) -> None:
    # a loaded cluster: 40 jobs arriving within 3 s on 16 or 32 GPUs
    cluster = ClusterSpec(num_servers=servers, gpus_per_server=4)
    w = generate_ada_srsf(seed, num_jobs=40, iterations_scale=1.0, arrival_window_ms=3_000)
    w = Workload(tuple(j for j in w.jobs if j.num_gpus <= cluster.num_gpus), name=w.name)
    cfg = SimConfig()
    solo = solo_jcts_ms(cluster, w, cfg).mean()
    bound = capacity_jcts_ms(cluster, w, cfg).mean()
    assert bound > 1.01 * solo  # the capacity binds: the jobs cannot all run at once
    for stack in STACKS:
        got = simulate(cluster, w, stack, cfg).summary()["avg_jct_ms"]
        assert got >= bound, stack
    for name in CONTENTION_TEACHERS:
        env = ContentionEnv(
            workloads=[w], num_servers=servers, fidelity="full", placements=("lwf1", "ovl")
        )
        run = run_episode(env, RuleActor(teacher(name)), seed=0)
        assert run.terminated and run.info["avg_jct_s"] * 1000.0 >= bound, name
