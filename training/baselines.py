"""The heuristics a training run is measured against: each named allocator through the env on
the validation workloads (one module that both pipelines, :mod:`training.run` and
:mod:`training.plan`, import, so that neither imports the other)."""

from __future__ import annotations

import functools

from agents.episode_results import aggregate, evaluate_allocator
from envs.gym.factory import EnvConfig
from envs.sim.elastic.allocators import make_allocator, parse_allocator_label

__all__ = ["baseline_jcts"]


def baseline_jcts(names: list[str], env_config: EnvConfig, seeds: list[int]) -> dict[str, float]:
    """Average JCT (slots) of each named allocator through the env on the validation seeds
    (a name may carry options: ``"esrtf(backfill=True)"``)."""
    out: dict[str, float] = {}
    for name in names:
        key, options = parse_allocator_label(name, role="eval baseline")
        factory = functools.partial(make_allocator, key, options, role="eval baseline")
        out[name] = aggregate(evaluate_allocator(factory, env_config, seeds))["avg_jct"]
    return out
