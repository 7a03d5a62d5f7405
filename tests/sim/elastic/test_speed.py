"""Speed models of the elastic world: DL²'s measured interpolant and its analytical model."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from envs.sim.elastic.spec import ElasticJob
from envs.sim.elastic.speed import (
    AnalyticalSpeed,
    MeasuredSpeed,
    _LinearRbf,
    epochs_per_slot,
    load_measured_speeds,
)
from envs.sim.elastic.types import dl2_job_types, job_type
from envs.sim.errors import ConfigError, WorkloadError

FAILED_RUNS = {
    "vgg-16": [(4, 8), (5, 6), (6, 10), (9, 11), (12, 6), (13, 6), (13, 7), (14, 7)],
    "inception-bn": [(1, 5)],
}


@pytest.fixture(scope="module")
def measured() -> MeasuredSpeed:
    return MeasuredSpeed()


@pytest.fixture(scope="module")
def kept_zeros() -> MeasuredSpeed:
    return MeasuredSpeed(keep_measured_zeros=True)


def test_shipped_file_has_every_job_type(measured: MeasuredSpeed) -> None:
    assert set(measured.models) == {t.model for t in dl2_job_types()}
    assert sum(len(measured.measured_points(m)) for m in measured.models) == 804
    zeros = {
        m: sorted(k for k, v in measured.measured_points(m).items() if v == 0)
        for m in measured.models
    }
    assert {m: z for m, z in zeros.items() if z} == {m: sorted(z) for m, z in FAILED_RUNS.items()}


def test_interpolant_reproduces_nonzero_measurements(measured: MeasuredSpeed) -> None:
    for model in measured.models:
        t = job_type(model)
        for (ps, w), value in measured.measured_points(model).items():
            if value > 0:
                assert measured.speed(t, ps, w) == pytest.approx(value, rel=1e-6), (model, ps, w)


def test_repaired_zeros_lie_between_their_neighbours(measured: MeasuredSpeed) -> None:
    for model, points in FAILED_RUNS.items():
        data = measured.measured_points(model)
        step = 1 if model == "vgg-16" else 2  # inception-bn is measured at odd counts only
        for ps, w in points:
            neighbours = [
                data[(ps + dp, w + dw)]
                for dp in (-step, 0, step)
                for dw in (-step, 0, step)
                if (dp, dw) != (0, 0) and data.get((ps + dp, w + dw), 0.0) > 0
            ]
            assert len(neighbours) >= 2
            value = measured.speed(job_type(model), ps, w)
            assert value > 0
            assert min(neighbours) <= value <= max(neighbours), (model, ps, w, value, neighbours)


def test_keep_measured_zeros_reproduces_the_reference(kept_zeros: MeasuredSpeed) -> None:
    for model, points in FAILED_RUNS.items():
        for ps, w in points:
            assert kept_zeros.speed(job_type(model), ps, w) == pytest.approx(0.0, abs=1e-9)
    # the other measured points are still reproduced
    vgg = job_type("vgg-16")
    assert kept_zeros.speed(vgg, 16, 1) == pytest.approx(27.507, rel=1e-6)


def test_no_worker_or_no_ps_means_no_progress(measured: MeasuredSpeed) -> None:
    analytical = AnalyticalSpeed()
    for t in dl2_job_types():
        for n in (0, 1, 5, 32, 40):
            for model in (measured, analytical):
                assert model.speed(t, 0, n) == 0.0
                assert model.speed(t, n, 0) == 0.0


def test_negative_counts_are_rejected(measured: MeasuredSpeed) -> None:
    with pytest.raises(ConfigError, match="must be >= 0"):
        measured.speed(job_type(0), -1, 2)
    with pytest.raises(ConfigError, match="must be >= 0"):
        AnalyticalSpeed().speed(job_type(0), 1, -2)


def test_clamped_beyond_the_measured_grid(measured: MeasuredSpeed) -> None:
    for model in measured.models:
        t = job_type(model)
        (_, max_p), (_, max_w) = measured.measured_range(model)
        table = measured.table(model)
        assert table.shape == (33, 33)
        for p in range(1, 33):
            for w in range(1, 33):
                edge = table[min(p, max_p), min(w, max_w)]
                assert table[p, w] == edge
        # beyond the table as well (evaluated directly, same rule)
        assert measured.speed(t, 40, 50) == table[max_p, max_w]
        assert measured.speed(t, 3, 100) == table[3, max_w]


def test_extrapolation_is_linear_but_never_negative() -> None:
    # The reference's unclamped value for vgg-16 at (16 PS, 16 W), with its zeros, is 12.9.
    ref = MeasuredSpeed(keep_measured_zeros=True, extrapolate=True)
    assert ref.speed(job_type("vgg-16"), 16, 16) == pytest.approx(12.9, abs=0.1)
    clamped = MeasuredSpeed(keep_measured_zeros=True)
    assert clamped.speed(job_type("vgg-16"), 16, 16) == clamped.speed(job_type("vgg-16"), 16, 12)
    for model in ref.models:
        assert (ref.table(model) >= 0).all()


@pytest.mark.parametrize("keep", [False, True])
@pytest.mark.parametrize("extrapolate", [False, True])
def test_never_negative(keep: bool, extrapolate: bool) -> None:
    m = MeasuredSpeed(keep_measured_zeros=keep, extrapolate=extrapolate)
    for model in m.models:
        table = m.table(model)
        assert np.isfinite(table).all()
        assert (table >= 0).all()
        assert (table[0, :] == 0).all() and (table[:, 0] == 0).all()
        assert not table.flags.writeable


def test_table_size_follows_the_constructor() -> None:
    m = MeasuredSpeed(max_ps=4, max_workers=6)
    assert m.table("resnet-50").shape == (5, 7)
    big = MeasuredSpeed()
    assert m.speed(job_type(0), 20, 20) == pytest.approx(big.speed(job_type(0), 20, 20))
    with pytest.raises(ConfigError, match="max_ps"):
        MeasuredSpeed(max_ps=0)


@pytest.mark.parametrize(
    "ps, w, expected",
    [(1, 1, 15.8), (1, 4, 12.3), (1, 8, 8.9), (8, 1, 53.4), (8, 8, 31.1)],
)
def test_reference_sample_values(measured: MeasuredSpeed, ps: int, w: int, expected: float) -> None:
    # dl2.md §2.3: resnet-50 sample values; all five are measured points (none repaired)
    assert (ps, w) in measured.measured_points("resnet-50")
    assert measured.speed(job_type("resnet-50"), ps, w) == pytest.approx(expected, abs=0.1)


def test_unknown_model_is_a_config_error(measured: MeasuredSpeed) -> None:
    alien = dataclasses.replace(job_type(0), model="bert-large")
    with pytest.raises(ConfigError, match=r"bert-large.*resnet-50.*wlm"):
        measured.speed(alien, 1, 1)
    with pytest.raises(ConfigError, match="bert-large"):
        measured.table("bert-large")


def test_queries_inside_the_table_never_evaluate_the_interpolant(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The constructor tabulates every (PS, workers) up to the caps: afterwards a query in
    range is a lookup (memoised), equal to the table, and the RBF is never evaluated."""
    speed = MeasuredSpeed(max_ps=6, max_workers=6)
    tables = {t.model: speed.table(t.model) for t in dl2_job_types()}

    def refuse(self: object, points: np.ndarray) -> np.ndarray:
        raise AssertionError("the interpolant was evaluated after construction")

    monkeypatch.setattr(_LinearRbf, "__call__", refuse)
    for t in dl2_job_types():
        for ps in range(7):
            for workers in range(7):
                for _ in range(2):  # the second query is the memoised value
                    assert speed.speed(t, ps, workers) == tables[t.model][ps, workers]


def test_custom_file(tmp_path: Path) -> None:
    f = tmp_path / "speeds.csv"
    f.write_text(
        "model,num_ps,num_workers,total_speed\n"
        "resnet-50,1,1,10\nresnet-50,1,2,12\nresnet-50,2,1,14\nresnet-50,2,2,20\n"
    )
    m = MeasuredSpeed(f)
    t = job_type("resnet-50")
    assert m.speed(t, 2, 2) == pytest.approx(20.0)
    assert m.speed(t, 5, 5) == pytest.approx(20.0)  # clamped to (2, 2)
    assert m.models == ("resnet-50",)
    with pytest.raises(ConfigError, match=r"'vgg-16'.*\['resnet-50'\]"):
        m.speed(job_type("vgg-16"), 1, 1)


@pytest.mark.parametrize(
    "text, line, column",
    [
        ("model,num_ps,total_speed\nresnet-50,1,3\n", 1, "num_workers"),
        ("model,num_ps,num_workers,total_speed\nresnet-50,1,1,fast\n", 2, "total_speed"),
        (
            "model,num_ps,num_workers,total_speed\nresnet-50,1,1,1\nresnet-50,1,x,1\n",
            3,
            "num_workers",
        ),
        ("model,num_ps,num_workers,total_speed\nresnet-50,0,1,1\n", 2, "num_ps"),
        ("model,num_ps,num_workers,total_speed\nresnet-50,1,1.5,1\n", 2, "num_workers"),
        ("model,num_ps,num_workers,total_speed\nresnet-50,1,1,-2\n", 2, "total_speed"),
        ("model,num_ps,num_workers,total_speed\n,1,1,2\n", 2, "model"),
    ],
)
def test_malformed_speed_file(tmp_path: Path, text: str, line: int, column: str) -> None:
    f = tmp_path / "bad_speed.csv"
    f.write_text(text)
    with pytest.raises(WorkloadError, match=rf"bad_speed\.csv, line {line}, column '{column}'"):
        MeasuredSpeed(f)


def test_duplicate_and_missing_speed_file(tmp_path: Path) -> None:
    f = tmp_path / "dup.csv"
    f.write_text("model,num_ps,num_workers,total_speed\nwlm,1,1,1\nwlm,2,1,1\nwlm,1,1,3\n")
    with pytest.raises(WorkloadError, match=re.escape("dup.csv, line 4: duplicate") + ".*line 2"):
        load_measured_speeds(f)
    with pytest.raises(WorkloadError, match=re.escape("nope.csv: file not found")):
        MeasuredSpeed(tmp_path / "nope.csv")


def test_analytical_speed_by_hand() -> None:
    # resnet-50 with 2 PS and 4 workers on 6 distinct nodes:
    # share = 102.2 / 2 = 51.1 MB; inter bw per flow = 91.875 / max(2, 4) = 22.96875 MB/s
    # t_inter = 2 * 51.1 / 22.96875 = 4.449524 s; t_intra = 2 * 51.1 / 306.5 = 0.333442 s
    # iteration = 0.449 + 4.449524 = 4.898524 s; speed = 4 / 4.898524 = 0.816573 it/s
    t = job_type("resnet-50")
    assert AnalyticalSpeed().speed(t, 2, 4) == pytest.approx(0.816573, rel=1e-5)
    # dssm: intra (65.625) < inter (92.125), so with 1 PS and 1 worker the intra term binds:
    # iteration = 0.567 + 2 * 6 / 65.625 = 0.749857 s
    assert AnalyticalSpeed().speed(job_type("dssm"), 1, 1) == pytest.approx(1 / 0.749857, rel=1e-5)
    assert AnalyticalSpeed.name == "analytical" and MeasuredSpeed.name == "measured"


def test_epochs_per_slot(measured: MeasuredSpeed) -> None:
    t = job_type("resnet-50")
    job = ElasticJob(0, t, 0, 100.0, 100.0, speed_factor=1.1)
    # resnet-50 at (1 PS, 1 W) measured 15.783 it/s; 115 iterations per epoch
    assert epochs_per_slot(measured, job, 1, 1, 1200.0) == pytest.approx(
        15.783 * 1.1 * 1200.0 / 115, rel=1e-9
    )
    assert epochs_per_slot(measured, job, 0, 4, 1200.0) == 0.0
    with pytest.raises(ConfigError, match="slot_s"):
        epochs_per_slot(measured, job, 1, 1, 0.0)
