"""Pollux's and Sia's workloads (envs/sim/data/pollux, envs/sim/data/sia) and their reader
(envs.sim.traces.pollux): every shipped file parses with its columns checked, bad rows are one
clear error naming the file and the line, and the synthesised durations obey the documented
rule (a hand-computed oracle)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from envs.sim.errors import WorkloadError
from envs.sim.models import REFERENCE_MODELS
from envs.sim.traces import ConvertOptions, convert_trace, detect_format, read_pollux, read_trace
from envs.sim.traces.pollux import APPLICATION_MODELS, GPU_TIME_BANDS_S, derived_duration_s

DATA = Path(__file__).resolve().parents[3] / "envs" / "sim" / "data"
HEADER = ["name", "time", "application", "num_replicas", "batch_size"]
#: file -> (jobs, largest GPU request); counted from the upstream files
FILES = {
    "pollux/workload-1.csv": (160, 32),
    "pollux/workload-2.csv": (160, 48),
    "pollux/workload-3.csv": (160, 16),
    "pollux/workload-4.csv": (160, 48),
    "pollux/workload-5.csv": (160, 48),
    "pollux/workload-6.csv": (160, 48),
    "pollux/workload-7.csv": (160, 48),
    "pollux/workload-8.csv": (160, 48),
    "sia/philly-workload-1.csv": (160, 16),
    "sia/saturn-workload-1.csv": (160, 16),
    "sia/rate_10-workload-1.csv": (80, 14),
    "sia/rate_30-workload-1.csv": (240, 14),
    "sia/rate_50-workload-1.csv": (400, 14),
}


def test_the_shipped_files_are_exactly_these() -> None:
    shipped = {f"{d}/{p.name}" for d in ("pollux", "sia") for p in (DATA / d).glob("*.csv")}
    assert shipped == set(FILES)


@pytest.mark.parametrize("name", sorted(FILES))
def test_each_shipped_file_parses_with_its_columns_checked(name: str) -> None:
    path = DATA / name
    with path.open(newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == HEADER
    raw = [dict(zip(HEADER, r, strict=True)) for r in rows[1:]]
    n_jobs, max_gpus = FILES[name]
    assert detect_format(path) == "pollux"
    trace = read_trace(path)
    assert len(trace.jobs) == len(raw) == n_jobs
    assert trace.report.jobs == trace.report.rows == n_jobs and not trace.report.skipped
    assert max(j.num_gpus for j in trace.jobs) == max_gpus <= 64  # fits the 64-GPU cluster
    t0 = float(raw[0]["time"])
    for job, row in zip(trace.jobs, raw, strict=True):
        assert job.job_id == row["name"]
        assert job.submit_s == float(row["time"]) - t0  # rebased, otherwise the file's
        assert job.num_gpus == int(row["num_replicas"])
        assert job.job_type == APPLICATION_MODELS[row["application"]] in REFERENCE_MODELS
        assert job.duration_s == derived_duration_s(row["application"], job.num_gpus)
        assert int(row["batch_size"]) >= 1
    times = [j.submit_s for j in trace.jobs]
    assert times == sorted(times) and times[0] == 0.0


def test_the_derived_duration_against_a_hand_computed_oracle() -> None:
    # Pollux's workload 6, first row: cifar10-0,53,cifar10,6,2048.  cifar10's band is 60 s to
    # 1 GPU-hour: sqrt(60 x 3600) = sqrt(216000) = 464.758001544890 GPU-s, over 6 GPUs.
    trace = read_pollux(DATA / "pollux" / "workload-6.csv")
    first = trace.jobs[0]
    assert (first.job_id, first.num_gpus, first.job_type) == ("cifar10-0", 6, "resnet50")
    assert first.duration_s == pytest.approx(77.459666924148, rel=1e-12)
    # the other bands by hand: bert 1-10 h on 6 GPUs, yolov3 10-100 h on 4, imagenet 100-1000 h
    # on 16 (sqrt(3600 x 36000) = 11384.199576606 s; x10 and x100 for the next bands)
    assert derived_duration_s("bert", 6) == pytest.approx(1897.366596101, rel=1e-12)
    assert derived_duration_s("yolov3", 4) == pytest.approx(28460.498941515, rel=1e-12)
    assert derived_duration_s("imagenet", 16) == pytest.approx(71151.247353789, rel=1e-12)
    assert GPU_TIME_BANDS_S["ncf"] == GPU_TIME_BANDS_S["cifar10"] == (60.0, 3600.0)
    # converted: iterations = round_half_up(duration_s x 1000 / (fw + bw)), resnet50 25 + 37 ms
    workload, _ = convert_trace(trace, seed=0, options=ConvertOptions())
    assert workload.jobs[0].model.name == "resnet50"
    assert workload.jobs[0].iterations == 1249  # 77459.667 / 62 = 1249.35


def test_the_models_do_not_depend_on_the_seed() -> None:
    trace = read_pollux(DATA / "sia" / "rate_10-workload-1.csv")
    a, _ = convert_trace(trace, seed=0)
    b, _ = convert_trace(trace, seed=7)
    assert [j.model.name for j in a.jobs] == [j.model.name for j in b.jobs]


def _w(tmp_path: Path, lines: list[str]) -> Path:
    p = tmp_path / "w.csv"
    p.write_text("\n".join([",".join(HEADER), *lines]) + "\n")
    return p


@pytest.mark.parametrize(
    ("row", "match"),
    [
        (
            "b-1,20,gpt3,4,64",
            r"line 3, column 'application': unknown application 'gpt3'; known: "
            r"\['bert', 'cifar10', 'deepspeech2', 'imagenet', 'ncf', 'yolov3'\]",
        ),
        ("b-1,20,bert,four,64", r"line 3, column 'num_replicas': not a number: 'four'"),
        ("b-1,20,bert,0,64", r"line 3, column 'num_replicas': asks for no GPU"),
        ("b-1,-5,bert,4,64", r"line 3, column 'time': must not be negative"),
        ("b-1,20,bert,4,1.5", r"line 3, column 'batch_size': must be an integer"),
        ("b-1,20,bert,4", r"line 3: expected 5 comma-separated fields, got 4"),
        ("a-0,30,bert,4,64", r"line 3, column 'name': duplicate job id 'a-0'"),
        ("b-1,5,bert,4,64", r"line 3: rows are not sorted by submit time"),
    ],
)
def test_a_malformed_row_is_one_clear_error_naming_the_file_and_the_line(
    tmp_path: Path, row: str, match: str
) -> None:
    p = _w(tmp_path, ["a-0,10,cifar10,2,256", row])
    with pytest.raises(WorkloadError, match=r"^w\.csv, " + match) as err:
        read_trace(p)
    assert str(p) in str(err.value)  # names the file's full path too


def test_a_missing_column_is_named(tmp_path: Path) -> None:
    p = tmp_path / "w.csv"
    p.write_text("name,time,application,num_replicas\na-0,10,cifar10,2\n")
    with pytest.raises(WorkloadError, match=r"column 'batch_size': missing required column"):
        read_pollux(p)
