"""Tests for envs.sim.workload: Ada-SRSF files, the seeded generator, scaling, trace CSVs."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from envs.sim.errors import ConfigError, WorkloadError
from envs.sim.models import REFERENCE_MODELS
from envs.sim.spec import ClusterSpec
from envs.sim.workload import (
    builtin_ada_srsf,
    builtin_philly_trace,
    generate_ada_srsf,
    gpu_count_layout,
    jitter_compute,
    load_ada_srsf_csv,
    load_reference_results,
    load_reference_summary,
    load_trace_csv,
    paper_scale_workload,
    scale_workload,
)

EXPECTED_GPUS = {1: 80, 2: 14, 4: 26, 8: 30, 16: 8, 32: 2}
ADA_HEADER = (
    "job_id,job_name,dnn,dataset,nworkers,iters,start_time,model_size,train_mem,fw_time,"
    "bw_time,batch_size,lr,nsteps_update,cuda_enabled"
)
ADA_ROW0 = "0,j0,lstm,ptb,1,48,6585,251.8,2751,32,47,64,0.1,1,1"
ADA_ROW1 = "1,j1,resnet50,imagenet,2,23,8582,99.2,3213,25,37,16,0.1,1,1"
TRACE_HEADER = "job_id,submit_time_s,duration_s,num_gpus,job_type,status,vc,gpu_milli"
TRACE_ROW0 = "a,0,900,1,,,vc1,1000"
TRACE_ROW1 = "b,60,90,8,resnet50,COMPLETED,,500"


def _layout_ok(workload, counts=EXPECTED_GPUS) -> None:
    assert Counter(j.num_gpus for j in workload.jobs) == counts
    # ids 0-79 one GPU, 80-93 two, ... and GPU counts non-decreasing with id
    ids = [j.job_id for j in workload.jobs]
    assert ids == list(range(len(workload)))
    gpus = [j.num_gpus for j in workload.jobs]
    assert gpus == sorted(gpus)


def _write(tmp_path: Path, name: str, lines: list[str]) -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


# ---------------------------------------------------------------------------------- Ada-SRSF


@pytest.mark.parametrize("seed", range(10))
def test_builtin_seed_files(seed: int) -> None:
    w = builtin_ada_srsf(seed)
    assert len(w) == 160
    _layout_ok(w)
    assert all(10 <= j.iterations <= 60 for j in w.jobs)
    assert all(0 <= j.submit_ms < 12000 for j in w.jobs)
    assert {j.model.name for j in w.jobs} <= set(REFERENCE_MODELS)
    for j in w.jobs:  # per-row profiles equal the integer-ms reference profiles
        assert j.model == REFERENCE_MODELS[j.model.name]
        assert j.name == f"j{j.job_id}"
    w.check_fits(ClusterSpec())


def test_seed0_first_row_and_file_order() -> None:
    w = builtin_ada_srsf(0)
    j0 = w.jobs[0]
    assert (j0.job_id, j0.submit_ms, j0.iterations, j0.num_gpus) == (0, 6585.0, 48, 1)
    assert j0.model.name == "lstm" and j0.model.compute_ms == 79.0
    assert j0.model.model_size_mb == 251.8 and j0.model.gpu_memory_mb == 2751.0


def test_file_order_kept(tmp_path: Path) -> None:
    p = _write(tmp_path, "order.csv", [ADA_HEADER, ADA_ROW1, ADA_ROW0])
    w = load_ada_srsf_csv(p)
    assert [j.job_id for j in w.jobs] == [1, 0]
    assert w.jobs[0].num_gpus == 2


def test_builtin_unknown_seed() -> None:
    with pytest.raises(ConfigError):
        builtin_ada_srsf(10)


def test_reference_results_and_summary() -> None:
    for seed in (0, 1, 2):
        res = load_reference_results(seed)
        col = res["original:ssf-lwf1-srsf-1-true"]
        assert sorted(col) == list(range(160))
        assert all(v > 0 for v in col.values())
    assert load_reference_results(0)["original:ssf-lwf1-srsf-1-true"][0] == 3836.0
    summary = load_reference_summary()
    assert len(summary) == 27
    row = next(
        r
        for r in summary
        if r["variant"] == "original"
        and r["seed"] == 0
        and r["algo_string"] == "ssf-lwf1-srsf-1-true"
    )
    assert row["avg_jct_s"] == pytest.approx(1067.9)
    assert row["makespan_sim_ms"] == 59940
    # avg JCT in summary matches per-job JCTs (paper seconds = sim ms / 10)
    jcts = load_reference_results(0)["original:ssf-lwf1-srsf-1-true"].values()
    assert float(np.mean(list(jcts))) / 10 == pytest.approx(row["avg_jct_s"], abs=0.06)


@pytest.mark.parametrize(
    ("lines", "line_no", "column"),
    [
        ([ADA_HEADER.replace(",iters", ""), ADA_ROW0.replace(",48", "")], 1, "iters"),
        ([ADA_HEADER, ADA_ROW0, ADA_ROW1.replace(",23,", ",x1,")], 3, "iters"),
        ([ADA_HEADER, ADA_ROW0.replace(",6585,", ",-5,")], 2, "start_time"),
        ([ADA_HEADER, ADA_ROW0, ADA_ROW1.replace(",2,23,", ",0,23,")], 3, "nworkers"),
        ([ADA_HEADER, ADA_ROW0.replace(",32,47,", ",32,0,")], 2, "bw_time"),
        ([ADA_HEADER, ADA_ROW0.replace(",lstm,", ",,")], 2, "dnn"),
        ([ADA_HEADER, ADA_ROW0, ADA_ROW0], 3, "job_id"),
        ([ADA_HEADER, ADA_ROW0, ADA_ROW1 + ",extra"], 3, None),
    ],
)
def test_ada_bad_input(tmp_path: Path, lines: list[str], line_no: int, column: str | None) -> None:
    p = _write(tmp_path, "bad_ada.csv", lines)
    with pytest.raises(WorkloadError) as info:
        load_ada_srsf_csv(p)
    msg = str(info.value)
    assert "bad_ada.csv" in msg and f"line {line_no}" in msg
    if column:
        assert repr(column) in msg


def test_ada_empty_and_missing_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty_ada.csv"
    empty.write_text("")
    with pytest.raises(WorkloadError, match=r"empty_ada\.csv, line 1"):
        load_ada_srsf_csv(empty)
    header_only = _write(tmp_path, "header_only.csv", [ADA_HEADER])
    with pytest.raises(WorkloadError, match=r"header_only\.csv, line 2.*no job rows"):
        load_ada_srsf_csv(header_only)
    with pytest.raises(WorkloadError, match=r"nope_ada\.csv.*not found"):
        load_ada_srsf_csv(tmp_path / "nope_ada.csv")


# -------------------------------------------------------------------------------- generator


def test_generator_deterministic_and_seed_dependent() -> None:
    a, b = generate_ada_srsf(3), generate_ada_srsf(3)
    assert a.jobs == b.jobs
    assert generate_ada_srsf(4).jobs != a.jobs


def test_generator_does_not_touch_global_rng() -> None:
    np.random.seed(123)
    before = np.random.random()
    np.random.seed(123)
    generate_ada_srsf(0)
    assert np.random.random() == before


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_generator_distribution(seed: int) -> None:
    w = generate_ada_srsf(seed)
    assert len(w) == 160
    _layout_ok(w)
    assert all(10 <= j.iterations <= 60 for j in w.jobs)
    assert all(0 <= j.submit_ms < 12000 and j.submit_ms == int(j.submit_ms) for j in w.jobs)
    assert {j.model for j in w.jobs} <= set(REFERENCE_MODELS.values())


def test_generator_distribution_pooled() -> None:
    jobs = [j for s in range(20) for j in generate_ada_srsf(s).jobs]
    models = Counter(j.model.name for j in jobs)
    assert set(models) == set(REFERENCE_MODELS)
    assert all(abs(c / len(jobs) - 0.25) < 0.04 for c in models.values())
    iters = Counter(j.iterations for j in jobs)
    assert min(iters) == 10 and max(iters) == 60 and len(iters) == 51
    arrivals = np.array([j.submit_ms for j in jobs])
    assert abs(arrivals.mean() - 6000) < 300


def test_generator_paper_scale() -> None:
    w = generate_ada_srsf(5, iterations_scale=100, arrival_window_ms=1_200_000)
    assert all(1000 <= j.iterations <= 6000 and j.iterations % 100 == 0 for j in w.jobs)
    assert all(0 <= j.submit_ms < 1_200_000 for j in w.jobs)
    assert max(j.submit_ms for j in w.jobs) > 12000
    p = paper_scale_workload(5)
    assert p.jobs == w.jobs
    assert [j.iterations for j in p.jobs] == [100 * j.iterations for j in generate_ada_srsf(5).jobs]


@pytest.mark.parametrize("n", [1, 7, 50, 100, 159, 161, 320, 1000])
def test_generator_other_sizes(n: int) -> None:
    layout = gpu_count_layout(n)
    assert sum(c for _, c in layout) == n
    for (g, c), (g2, c_ref) in zip(layout, EXPECTED_GPUS.items(), strict=True):
        assert g == g2
        assert abs(c - n * c_ref / 160) < 1
    w = generate_ada_srsf(0, num_jobs=n)
    assert len(w) == n
    _layout_ok(w, {g: c for g, c in layout if c})


def test_generator_custom_models_and_bad_args() -> None:
    only = {"resnet50": REFERENCE_MODELS["resnet50"]}
    assert {j.model.name for j in generate_ada_srsf(0, models=only).jobs} == {"resnet50"}
    with pytest.raises(ConfigError):
        generate_ada_srsf(0, num_jobs=0)
    with pytest.raises(ConfigError):
        generate_ada_srsf(0, iterations_scale=0)
    with pytest.raises(ConfigError):
        generate_ada_srsf(0, arrival_window_ms=-1)


def test_scale_workload() -> None:
    w = builtin_ada_srsf(1)
    s = scale_workload(w, 100, 100)
    assert len(s) == len(w)
    for a, b in zip(w.jobs, s.jobs, strict=True):
        assert b.iterations == 100 * a.iterations and b.submit_ms == 100 * a.submit_ms
        assert (b.job_id, b.model, b.num_gpus, b.name) == (a.job_id, a.model, a.num_gpus, a.name)
    assert all(1000 <= j.iterations <= 6000 for j in s.jobs)
    tiny = scale_workload(w, 0.001, 0.5)
    assert all(j.iterations == 1 for j in tiny.jobs)  # min 1
    assert [j.submit_ms for j in tiny.jobs] == [j.submit_ms / 2 for j in w.jobs]
    half = scale_workload(w, 0.5, 1)  # rounding half up: 25 * 0.5 = 12.5 -> 13
    assert [j.iterations for j in half.jobs] == [(j.iterations + 1) // 2 for j in w.jobs]
    with pytest.raises(ConfigError):
        scale_workload(w, 0, 1)


def test_check_fits_rejects_too_many_gpus() -> None:
    w = builtin_ada_srsf(0)  # has 32-GPU jobs
    w.check_fits(ClusterSpec(num_servers=8, gpus_per_server=4))
    with pytest.raises(WorkloadError, match="32 GPUs"):
        w.check_fits(ClusterSpec(num_servers=4, gpus_per_server=4))


# ------------------------------------------------------------------------------------ traces


def test_philly_slice_loads_every_job() -> None:
    w = builtin_philly_trace(seed=0)
    assert len(w) == 200
    assert Counter(j.num_gpus for j in w.jobs) == {1: 166, 8: 34}
    assert [j.job_id for j in w.jobs] == list(range(200))
    assert len({j.name for j in w.jobs}) == 200 and w.jobs[0].name == "philly-6c71a0-37385"
    assert w.jobs[0].submit_ms == 0.0
    subs = [j.submit_ms for j in w.jobs]
    assert subs == sorted(subs)
    assert {j.model.name for j in w.jobs} == set(REFERENCE_MODELS)
    # iterations derived from duration: 8469 s -> 8469000 ms / compute_ms
    j0 = w.jobs[0]
    assert j0.iterations == round(8469 * 1000 / j0.model.compute_ms)
    w.check_fits(ClusterSpec())
    with pytest.raises(WorkloadError):
        w.check_fits(ClusterSpec(num_servers=1, gpus_per_server=4))


def test_philly_slice_model_rule_seeded() -> None:
    a, b, c = (builtin_philly_trace(seed=s) for s in (1, 1, 2))
    assert a.jobs == b.jobs
    assert [j.model.name for j in a.jobs] != [j.model.name for j in c.jobs]
    # submit times and GPU counts do not depend on the seed
    assert [(j.submit_ms, j.num_gpus) for j in a.jobs] == [
        (j.submit_ms, j.num_gpus) for j in c.jobs
    ]
    names = list(REFERENCE_MODELS)
    draws = np.random.default_rng(1).integers(4, size=200)
    assert [j.model.name for j in a.jobs] == [names[i] for i in draws]


def test_trace_time_unit_and_job_type(tmp_path: Path) -> None:
    p = _write(tmp_path, "t.csv", [TRACE_HEADER, TRACE_ROW0, TRACE_ROW1])
    w = load_trace_csv(p, seed=0, time_unit=10.0)
    a, b = w.jobs
    assert (a.name, a.submit_ms, a.num_gpus) == ("a", 0.0, 1)
    assert (b.name, b.submit_ms, b.num_gpus, b.model.name) == ("b", 600.0, 8, "resnet50")
    assert b.iterations == round(900 / 62)
    assert a.iterations == round(9000 / a.model.compute_ms)


def test_trace_minimal_columns_and_iterations(tmp_path: Path) -> None:
    p = _write(tmp_path, "min.csv", ["job_id,submit_time_s,num_gpus,iterations", "x,5,2,17"])
    (j,) = load_trace_csv(p, seed=0).jobs
    assert (j.iterations, j.submit_ms, j.num_gpus) == (17, 5000.0, 2)
    p2 = _write(tmp_path, "min2.csv", ["job_id,submit_time_s,duration_s,num_gpus", "x,0,0.001,1"])
    assert load_trace_csv(p2, seed=0).jobs[0].iterations == 1


@pytest.mark.parametrize(
    ("lines", "line_no", "column"),
    [
        ([TRACE_HEADER.replace("num_gpus,", ""), "a,0,900,,,vc1,1000"], 1, "num_gpus"),
        (["job_id,submit_time_s,num_gpus", "a,0,1"], 1, "duration_s"),
        ([TRACE_HEADER, TRACE_ROW0, TRACE_ROW1.replace(",90,", ",ninety,")], 3, "duration_s"),
        ([TRACE_HEADER, TRACE_ROW0.replace("a,0,", "a,-3,")], 2, "submit_time_s"),
        ([TRACE_HEADER, TRACE_ROW0, TRACE_ROW1.replace(",8,", ",-8,")], 3, "num_gpus"),
        ([TRACE_HEADER, TRACE_ROW0, TRACE_ROW1.replace(",8,", ",0,")], 3, "num_gpus"),
        ([TRACE_HEADER, TRACE_ROW0, TRACE_ROW1.replace(",8,", ",1.5,")], 3, "num_gpus"),
        ([TRACE_HEADER, TRACE_ROW0.replace(",900,", ",0,")], 2, "duration_s"),
        ([TRACE_HEADER, TRACE_ROW0.replace(",900,", ",,")], 2, "duration_s"),
        ([TRACE_HEADER, TRACE_ROW0, TRACE_ROW1.replace(",500", ",1500")], 3, "gpu_milli"),
        ([TRACE_HEADER, TRACE_ROW0, TRACE_ROW1.replace("resnet50", "bert")], 3, "job_type"),
        ([TRACE_HEADER, TRACE_ROW0, TRACE_ROW0], 3, "job_id"),
        ([TRACE_HEADER, "", TRACE_ROW0, TRACE_ROW1.replace(",60,", ",nan,")], 4, "submit_time_s"),
    ],
)
def test_trace_bad_input(tmp_path: Path, lines: list[str], line_no: int, column: str) -> None:
    p = _write(tmp_path, "bad_trace.csv", lines)
    with pytest.raises(WorkloadError) as info:
        load_trace_csv(p, seed=0)
    msg = str(info.value)
    assert "bad_trace.csv" in msg and f"line {line_no}" in msg and repr(column) in msg


def test_trace_empty_and_missing_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty_trace.csv"
    empty.write_text("")
    with pytest.raises(WorkloadError) as info:
        load_trace_csv(empty, seed=0)
    assert "empty_trace.csv" in str(info.value) and "line 1" in str(info.value)
    with pytest.raises(WorkloadError) as info:
        load_trace_csv(tmp_path / "missing_trace.csv", seed=0)
    assert "missing_trace.csv" in str(info.value)
    with pytest.raises(ConfigError):
        load_trace_csv(empty, seed=0, time_unit=0)


def test_trace_blank_lines_are_not_rows(tmp_path: Path) -> None:
    p = _write(tmp_path, "blank.csv", [TRACE_HEADER, TRACE_ROW0, "", TRACE_ROW1, ""])
    assert [j.name for j in load_trace_csv(p, seed=0).jobs] == ["a", "b"]


def test_jitter_compute_is_seeded_bounded_and_per_model() -> None:
    w = builtin_ada_srsf(0)
    a, b = jitter_compute(w, 1e-3, seed=7), jitter_compute(w, 1e-3, seed=7)
    assert a == b  # same seed, same workload
    assert a != jitter_compute(w, 1e-3, seed=8)
    by_model: dict[str, tuple[float, float]] = {}
    for old, new in zip(w.jobs, a.jobs, strict=True):
        assert (new.job_id, new.submit_ms, new.iterations, new.num_gpus) == (
            old.job_id,
            old.submit_ms,
            old.iterations,
            old.num_gpus,
        )
        assert new.model.model_size_mb == old.model.model_size_mb
        for attr in ("forward_ms", "backward_ms"):
            assert type(getattr(new.model, attr)) is float  # not numpy scalars in the engine
            f = getattr(new.model, attr) / getattr(old.model, attr)
            assert 1 - 1e-3 <= f <= 1 + 1e-3 and f != 1.0
        # every job of one model keeps one profile
        times = (new.model.forward_ms, new.model.backward_ms)
        assert by_model.setdefault(old.model.name, times) == times
    assert len(by_model) == 4
    assert jitter_compute(w, 0.0, seed=1).jobs == w.jobs


@pytest.mark.parametrize("rel", [-0.1, 1.0, float("nan")])
def test_jitter_compute_rejects_bad_rel(rel: float) -> None:
    with pytest.raises(ConfigError, match="jitter rel"):
        jitter_compute(builtin_ada_srsf(0), rel, seed=0)
