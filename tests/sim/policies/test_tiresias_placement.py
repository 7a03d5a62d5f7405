"""Tiresias placement: count-only and consolidate-if-skewed, on hand-built GPU layouts."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from envs.sim import ClusterSpec, JobSpec, ModelProfile
from envs.sim.errors import ConfigError
from envs.sim.models import TIRESIAS_MODELS
from envs.sim.policies.skew import CountPlacer, SkewPlacer, builtin_tensor_sizes, skew_of

CAP = 10_000.0
RNG = np.random.default_rng(0)


@dataclass
class View:
    """A ClusterView with chosen GPUs occupied (4 servers x 4 GPUs)."""

    busy: set[int]
    spec: ClusterSpec = field(default_factory=lambda: ClusterSpec(4, 4, gpu_memory_mb=CAP))

    @property
    def free_mem_mb(self) -> list[float]:
        # an occupied GPU still has room for another worker: placement must stay exclusive
        return [CAP - 5000.0 if g in self.busy else CAP for g in range(16)]

    @property
    def load_ms(self) -> list[float]:
        return [0.0] * 16


def job(model: str, gpus: int) -> JobSpec:
    return JobSpec(0, 0.0, TIRESIAS_MODELS[model], 100, gpus)


# server 0: GPUs 0-3, 2 free (2, 3); server 1: 4-7 all free; server 2: 8-11, 3 free (9-11);
# server 3: 12-15, 1 free (15)
LAYOUT = View(busy={0, 1, 8, 12, 13, 14})


def test_skew_values_match_the_upstream_tensor_table() -> None:
    """max tensor / total, as tabulated in the reference note §1.3."""
    t = builtin_tensor_sizes()
    got = {m: round(skew_of(t[m]), 2) for m in t}
    assert {k: got[k] for k in ("vgg19", "vgg16", "vgg11", "alexnet")} == {
        "vgg19": 0.72,
        "vgg16": 0.74,
        "vgg11": 0.77,
        "alexnet": 0.61,
    }
    assert {k: got[k] for k in ("resnet152", "resnet101", "resnet50", "inception4")} == {
        "resnet152": 0.06,
        "resnet101": 0.08,
        "resnet50": 0.11,
        "inception4": 0.04,
    }
    assert got["inception3"] == got["googlenet"] == 0.14
    assert [len(t[m]) for m in ("vgg19", "resnet152", "inception4")] == [15, 48, 81]
    assert round(sum(t["vgg16"]), 1) == 526.8 == TIRESIAS_MODELS["vgg16"].model_size_mb


def test_threshold_splits_vgg_alexnet_from_resnet_inception() -> None:
    p = SkewPlacer()
    skewed = {m for m in TIRESIAS_MODELS if p.is_skewed(job(m, 1))}
    assert skewed == {"vgg19", "vgg16", "vgg11", "alexnet"}
    assert {m for m in TIRESIAS_MODELS if SkewPlacer(0.7).is_skewed(job(m, 1))} == {
        "vgg19",
        "vgg16",
        "vgg11",
    }


def test_count_takes_the_first_free_gpus_exclusively() -> None:
    assert CountPlacer().place(job("vgg16", 4), LAYOUT, RNG) == [2, 3, 4, 5]
    assert CountPlacer().place(job("vgg16", 11), LAYOUT, RNG) is None  # 10 GPUs are free


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        (1, [15]),  # best fit: the server with the fewest free GPUs that suffice
        (2, [2, 3]),
        (3, [9, 10, 11]),
        (4, [4, 5, 6, 7]),
        (6, [4, 5, 6, 7, 9, 10]),  # no single server: most free first -> 2 servers
        (10, [4, 5, 6, 7, 9, 10, 11, 2, 3, 15]),
    ],
)
def test_skewed_model_is_consolidated(gpus: int, expected: list[int]) -> None:
    assert SkewPlacer().place(job("vgg16", gpus), LAYOUT, RNG) == expected


def test_unskewed_model_may_spread() -> None:
    """ResNet-50 is placed count-only: first free GPUs, here over two servers."""
    got = SkewPlacer().place(job("resnet50", 4), LAYOUT, RNG)
    assert got == [2, 3, 4, 5]
    assert len({g // 4 for g in got}) == 2


def test_unknown_model_is_a_clear_error() -> None:
    odd = JobSpec(3, 0.0, ModelProfile("bert", 1.0, 1.0, 1, 1.0, 1.0), 1, 1)
    with pytest.raises(ConfigError, match=r"no tensor sizes for model 'bert' \(job 3\)"):
        SkewPlacer().place(odd, LAYOUT, RNG)


def test_custom_tensor_lists_and_bad_values() -> None:
    p = SkewPlacer(0.5, {"bert": [1.0, 1.0, 3.0]})
    assert p.is_skewed(JobSpec(0, 0.0, ModelProfile("bert", 5.0, 1.0, 1, 1.0, 1.0), 1, 1))
    with pytest.raises(ConfigError, match="non-empty and positive"):
        SkewPlacer(0.5, {"bad": [1.0, 0.0]})
    with pytest.raises(ConfigError, match="non-empty and positive"):
        SkewPlacer(0.5, {"bad": []})
    with pytest.raises(ConfigError, match=r"skew threshold must be in \(0, 1\]"):
        SkewPlacer(0.0)


def test_every_model_of_every_model_table_can_be_skew_placed() -> None:
    """``lstm`` (in the Ada-SRSF tables, not in Tiresias's tensor list) used to fail every
    trace or generated workload that drew it; its tensors now come from its op graph, whose
    sizes add up to the model's size within 5%."""
    from envs.sim import models

    tables = [v for v in vars(models).values() if isinstance(v, dict)]
    profiles = {m.name: m for t in tables for m in t.values() if isinstance(m, ModelProfile)}
    placer = SkewPlacer()
    for profile in profiles.values():
        placer.is_skewed(JobSpec(0, 0.0, profile, 1, 1))  # raises for a model it lacks
    lstm = builtin_tensor_sizes()["lstm"]
    assert sum(lstm) == pytest.approx(profiles["lstm"].model_size_mb, rel=0.05)
    assert not placer.is_skewed(JobSpec(0, 0.0, profiles["lstm"], 1, 1))  # skew 0.23
