"""DL²'s job types, arrival patterns and workload generator."""

from __future__ import annotations

import collections
import re
from pathlib import Path

import numpy as np
import pytest

import envs.sim.elastic.types as types_module
from envs.sim.elastic.spec import ElasticCluster, ElasticJob
from envs.sim.elastic.types import dl2_job_types, job_type, load_job_types
from envs.sim.elastic.workload import (
    DL2_LARGE,
    DL2_SMALL,
    DL2Setting,
    generate_dl2_workload,
    load_arrival_patterns,
)
from envs.sim.errors import ConfigError, WorkloadError

MODELS = [
    "resnet-50",
    "vgg-16",
    "resnext-110",
    "inception-bn",
    "seq2seq",
    "cnn-text-classification",
    "dssm",
    "wlm",
]


def per_slot(jobs: tuple[ElasticJob, ...]) -> dict[int, int]:
    return dict(collections.Counter(j.arrival_slot for j in jobs))


# -- job types --------------------------------------------------------------------------------


def test_shipped_job_types() -> None:
    types = dl2_job_types()
    assert [t.model for t in types] == MODELS
    assert [t.index for t in types] == list(range(8))
    assert types is dl2_job_types()  # cached
    assert types_module.DL2_JOB_TYPES is types  # lazily loaded module attribute
    vgg = types[1]
    assert (vgg.worker_cpu, vgg.worker_gpu, vgg.ps_cpu, vgg.ps_gpu) == (2, 4, 2, 0)
    assert (vgg.epoch_fraction, vgg.iterations_per_epoch) == (0.96, 115)
    assert (vgg.local_comp_time_s, vgg.model_size_mb) == (0.535, 553.4)
    assert (vgg.inter_bw_mb_s, vgg.intra_bw_mb_s) == (233.0, 427.75)
    assert types[5].worker_gpu == 0 and types[6].worker_gpu == 0  # CPU-only workers


def test_job_type_lookup() -> None:
    assert job_type("dssm") is dl2_job_types()[6]
    assert job_type("VGG-16") is dl2_job_types()[1]
    assert job_type(7).model == "wlm"
    with pytest.raises(ConfigError, match=r"'bert'.*resnet-50.*wlm"):
        job_type("bert")
    with pytest.raises(ConfigError, match=r"index 8.*0\.\.7"):
        job_type(8)
    with pytest.raises(ConfigError, match="index -1"):
        job_type(-1)
    with pytest.raises(ConfigError, match="model name or an index"):
        job_type(True)


JOB_TYPES_HEADER = (
    "type_index,model,worker_cpu_slots,worker_gpu_slots,ps_cpu_slots,ps_gpu_slots,"
    "epoch_fraction_of_max,iterations_per_epoch,local_comp_time_s,model_size_mb,"
    "inter_node_bw_mb_s,intra_node_bw_mb_s\n"
)
GOOD_ROW = "0,resnet-50,2,4,2,0,0.3,115,0.449,102.2,91.875,306.5\n"


def test_custom_job_types(tmp_path: Path) -> None:
    f = tmp_path / "types.csv"
    f.write_text(JOB_TYPES_HEADER + GOOD_ROW + "1,tiny,1,0,1,0,0.01,10,0.1,1,10,10\n")
    types = load_job_types(f)
    assert [t.model for t in types] == ["resnet-50", "tiny"]
    assert types[0] == dl2_job_types()[0]


@pytest.mark.parametrize(
    "text, line, column",
    [
        (JOB_TYPES_HEADER.replace(",model_size_mb", "") + GOOD_ROW, 1, "model_size_mb"),
        (JOB_TYPES_HEADER + GOOD_ROW.replace("0.449", "slow"), 2, "local_comp_time_s"),
        (JOB_TYPES_HEADER + GOOD_ROW.replace(",115,", ",0,"), 2, "iterations_per_epoch"),
        (JOB_TYPES_HEADER + GOOD_ROW.replace(",115,", ",11.5,"), 2, "iterations_per_epoch"),
        (JOB_TYPES_HEADER + GOOD_ROW.replace(",2,4,", ",-2,4,"), 2, "worker_cpu_slots"),
        (JOB_TYPES_HEADER + GOOD_ROW + GOOD_ROW, 3, "type_index"),
        (JOB_TYPES_HEADER + GOOD_ROW + GOOD_ROW.replace("0,", "1,", 1), 3, "model"),
        (JOB_TYPES_HEADER + GOOD_ROW.replace("0.3", ""), 2, "epoch_fraction_of_max"),
    ],
)
def test_malformed_job_types(tmp_path: Path, text: str, line: int, column: str) -> None:
    f = tmp_path / "bad_types.csv"
    f.write_text(text)
    with pytest.raises(WorkloadError, match=rf"bad_types\.csv, line {line}, column '{column}'"):
        load_job_types(f)


# -- arrival patterns -------------------------------------------------------------------------


def test_shipped_arrival_patterns() -> None:
    patterns = load_arrival_patterns()
    assert sorted(patterns) == [1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50]
    assert all(len(p) == 75 for p in patterns.values())
    assert patterns[3][:6] == (2, 57, 3, 3, 3, 4)


@pytest.mark.parametrize(
    "text, line, column",
    [
        ("slot,cap_3\n0,2\n1,x\n", 3, "cap_3"),
        ("slot,cap_3\n0,2\n2,3\n", 3, "slot"),
        ("slot,cap_3\n0,2\n1,-1\n", 3, "cap_3"),
        ("cap_3\n2\n", 1, "slot"),
        ("slot,cap_x\n0,2\n", 1, "cap_x"),
    ],
)
def test_malformed_arrival_patterns(tmp_path: Path, text: str, line: int, column: str) -> None:
    f = tmp_path / "bad_arrivals.csv"
    f.write_text(text)
    with pytest.raises(WorkloadError, match=rf"bad_arrivals\.csv, line {line}, column '{column}'"):
        load_arrival_patterns(f)


# -- generator --------------------------------------------------------------------------------


@pytest.mark.parametrize("arrival", ["google", "poisson", "uniform"])
def test_deterministic_per_seed(arrival: str) -> None:
    a = generate_dl2_workload(3, arrival=arrival, fixed_length=False, speed_variation=0.2)  # type: ignore[arg-type]
    b = generate_dl2_workload(3, arrival=arrival, fixed_length=False, speed_variation=0.2)  # type: ignore[arg-type]
    c = generate_dl2_workload(4, arrival=arrival, fixed_length=False, speed_variation=0.2)  # type: ignore[arg-type]
    assert a == b
    assert a != c


@pytest.mark.parametrize("arrival", ["google", "poisson", "uniform"])
@pytest.mark.parametrize("cap", [1, 3, 10])
def test_arrivals_respect_the_cap(arrival: str, cap: int) -> None:
    for seed in range(5):
        jobs = generate_dl2_workload(
            seed,
            num_jobs=100,
            max_arrivals_per_slot=cap,
            arrival=arrival,  # type: ignore[arg-type]
        )
        assert len(jobs) == 100
        assert [j.job_id for j in jobs] == list(range(100))
        slots = [j.arrival_slot for j in jobs]
        assert slots == sorted(slots)
        assert slots[0] >= 0
        assert max(per_slot(jobs).values()) <= cap
        if arrival == "uniform":
            assert per_slot(jobs) == {s: min(cap, 100 - s * cap) for s in range(-(-100 // cap))}


def test_google_pattern_and_offset() -> None:
    pattern = load_arrival_patterns()[3]
    offsets = set()
    for seed in range(30):
        jobs = generate_dl2_workload(seed, num_jobs=60, max_arrivals_per_slot=3)
        counts = per_slot(jobs)
        last = max(counts)
        observed = [counts.get(s, 0) for s in range(last)]  # every slot but the last is full
        offset = int(np.random.default_rng(seed).integers(5))  # the first draw (documented)
        assert 0 <= offset <= 4
        offsets.add(offset)
        assert observed == [min(3, pattern[(s + offset) % 75]) for s in range(last)]
        assert 0 < counts[last] <= min(3, pattern[(last + offset) % 75])
    assert offsets == {0, 1, 2, 3, 4}


def test_google_pattern_cycles() -> None:
    # cap 1 has 45 arrivals in 75 slots: 200 jobs need several passes
    jobs = generate_dl2_workload(0, num_jobs=200, max_arrivals_per_slot=1)
    pattern = load_arrival_patterns()[1]
    offset = int(np.random.default_rng(0).integers(5))
    counts = per_slot(jobs)
    assert max(counts) > 75
    assert all(counts.get(s, 0) == min(1, pattern[(s + offset) % 75]) for s in range(max(counts)))


def test_google_needs_a_pattern_column() -> None:
    with pytest.raises(ConfigError, match=r"max_arrivals_per_slot=7.*\[1, 2, 3, 4, 5, 10"):
        generate_dl2_workload(0, max_arrivals_per_slot=7)
    assert len(generate_dl2_workload(0, max_arrivals_per_slot=7, arrival="poisson")) == 60


def test_type_mix_covers_all_types() -> None:
    seen: collections.Counter[str] = collections.Counter()
    for seed in range(3):
        seen.update(j.type.model for j in generate_dl2_workload(seed))
    assert set(seen) == set(MODELS)
    assert sum(seen.values()) == 180


def test_fixed_length_epochs_are_exact() -> None:
    for setting in (DL2_SMALL, DL2_LARGE):
        for j in setting.workload(1):
            expected = int(j.type.epoch_fraction * setting.max_epochs)
            assert j.num_epochs == expected == j.real_num_epochs
            assert j.speed_factor == 1.0
    vgg = [j for j in DL2_SMALL.workload(0) if j.type.model == "vgg-16"]
    assert vgg and all(j.num_epochs == 76800 for j in vgg)


def test_variable_length_epochs() -> None:
    factors = set()
    for seed in range(5):
        for j in generate_dl2_workload(seed, fixed_length=False):
            base = int(j.type.epoch_fraction * 80000)
            factor = round(j.num_epochs / base, 6)
            assert 0.90 <= factor <= 1.09
            assert round(factor * 100, 6).is_integer()
            factors.add(factor)
    assert len(factors) > 10


def test_estimation_error_and_speed_variation_bounds() -> None:
    jobs = generate_dl2_workload(2, num_jobs=200, epoch_estimation_error=0.3, speed_variation=0.25)
    ratios = [j.real_num_epochs / j.num_epochs for j in jobs]
    assert all(0.7 <= r <= 1.3 for r in ratios)
    assert min(ratios) < 0.85 and max(ratios) > 1.15  # the whole range is used
    speeds = [j.speed_factor for j in jobs]
    assert all(0.75 <= s <= 1.25 for s in speeds)
    assert len(set(speeds)) == 200
    # the error magnitude does not change the rest of the draw
    plain = generate_dl2_workload(2, num_jobs=200)
    assert [(j.type, j.arrival_slot, j.num_epochs) for j in jobs] == [
        (j.type, j.arrival_slot, j.num_epochs) for j in plain
    ]


@pytest.mark.parametrize(
    "kwargs, token",
    [
        ({"num_jobs": 0}, "num_jobs"),
        ({"max_arrivals_per_slot": 0}, "max_arrivals_per_slot"),
        ({"arrival": "ali"}, "'ali'"),
        ({"max_epochs": 0}, "max_epochs"),
        ({"max_epochs": 10}, "resnext-110"),  # int(0.05 x 10) = 0 epochs
        ({"epoch_estimation_error": 1.0}, "epoch_estimation_error"),
        ({"speed_variation": -0.1}, "speed_variation"),
        ({"max_workers": 0}, "max_workers"),
        ({"types": ()}, "types"),
    ],
)
def test_bad_generator_arguments(kwargs: dict[str, object], token: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(token)):
        generate_dl2_workload(0, **kwargs)  # type: ignore[arg-type]


def test_custom_types() -> None:
    two = dl2_job_types()[:2]
    jobs = generate_dl2_workload(0, types=two)
    assert {j.type.model for j in jobs} == {"resnet-50", "vgg-16"}


# -- presets ----------------------------------------------------------------------------------


def test_presets() -> None:
    assert isinstance(DL2_SMALL, DL2Setting)
    assert (DL2_SMALL.num_nodes, DL2_SMALL.num_jobs, DL2_SMALL.J) == (48, 60, 20)
    assert (DL2_LARGE.num_nodes, DL2_LARGE.num_jobs, DL2_LARGE.J) == (500, 200, 40)
    for setting in (DL2_SMALL, DL2_LARGE):
        jobs = setting.workload(0)
        assert len(jobs) == setting.num_jobs
        assert max(per_slot(jobs).values()) <= setting.max_arrivals_per_slot
        assert all((j.max_workers, j.max_ps) == (setting.max_workers, setting.max_ps) for j in jobs)
        assert setting.cluster() == ElasticCluster(num_nodes=setting.num_nodes)
        assert jobs == generate_dl2_workload(
            0,
            num_jobs=setting.num_jobs,
            max_arrivals_per_slot=setting.max_arrivals_per_slot,
            max_epochs=setting.max_epochs,
            max_workers=setting.max_workers,
            max_ps=setting.max_ps,
        )
    assert len(DL2_LARGE.workload(1, arrival="poisson")) == 200
    # dl2.md §2.5: with cap 3, 60 jobs arrive over about 23 slots; with cap 10, 200 over ~30
    assert 20 <= max(j.arrival_slot for j in DL2_SMALL.workload(0)) + 1 <= 26
    assert 27 <= max(j.arrival_slot for j in DL2_LARGE.workload(0)) + 1 <= 33
    with pytest.raises(AttributeError):
        DL2_SMALL.num_jobs = 3  # type: ignore[misc]


def test_uniform_draws_are_numpys_uniform() -> None:
    """The generator draws ``e`` and ``v`` as ``-1.0 + 2.0 * rng.random()``: the doubles
    ``rng.uniform(-1.0, 1.0)`` gives, from the same stream (interleaved with integer draws, as
    in the generator), so workloads are those of the uniform draws."""
    for seed in range(3):
        a, b = np.random.default_rng(seed), np.random.default_rng(seed)
        for i in range(20000):
            if i % 3 == 0:
                assert int(a.integers(8)) == int(b.integers(8))
            x = float(a.uniform(-1.0, 1.0))
            y = -1.0 + 2.0 * b.random()
            assert x.hex() == y.hex()
        assert a.bit_generator.state == b.bit_generator.state
