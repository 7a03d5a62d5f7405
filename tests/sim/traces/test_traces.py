"""Trace readers, repairs, windowing and conversion (envs.sim.traces) on small files."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from envs.sim.errors import ConfigError, WorkloadError
from envs.sim.models import REFERENCE_MODELS
from envs.sim.traces import (
    ConvertOptions,
    Repairs,
    TraceWindow,
    cap_durations,
    convert_trace,
    detect_format,
    fit_to_cluster,
    offered_load_gpus,
    prepare,
    read_trace,
    scale_arrivals,
    scale_to_load,
    select,
)

DATA = Path(__file__).resolve().parents[3] / "envs" / "sim" / "data" / "traces"


def _w(tmp_path: Path, name: str, lines: list[str]) -> Path:
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


def _key(trace):  # type: ignore[no-untyped-def]
    return [(j.job_id, j.submit_s, j.duration_s, j.num_gpus) for j in trace.jobs]


# ------------------------------------------------------------------------------ each layout

PHILLY_DIGEST = [
    "timestamp,duration,num_gpus,gpu_time,cluster",
    "2017-11-25 01:00:00,100.0,8,800.0,vcA",
    "2017-11-25 00:59:00,66.0,1,66.0,vcB",
    "2017-11-26 01:00:00,10.0,2,20.0,vcA",
    "",
]


def test_philly_digest_sorts_rebases_and_names_by_row(tmp_path: Path) -> None:
    t = read_trace(_w(tmp_path, "philly.csv", PHILLY_DIGEST))
    assert t.report.format == "philly_digest"
    # row 2 (00:59) is first; times relative to it; ids encode the data-row number
    assert _key(t) == [
        ("philly-vcB-2", 0.0, 66.0, 1),
        ("philly-vcA-1", 60.0, 100.0, 8),
        ("philly-vcA-3", 86460.0, 10.0, 2),
    ]
    assert [j.vc for j in t.jobs] == ["vcB", "vcA", "vcA"]
    assert any("rows moved" in n for n in t.report.notes)


def test_shipped_philly_source_layout_matches_the_normalised_slice() -> None:
    src = read_trace(DATA / "philly_vc_6c71a0_public.source_layout.csv")
    norm = read_trace(DATA / "philly_vc_6c71a0_public.csv")
    assert (src.report.format, norm.report.format) == ("philly_digest", "normalised")
    assert len(src) == len(norm) == 200

    def multiset(t):  # type: ignore[no-untyped-def]
        return Counter((j.submit_s, j.duration_s, j.num_gpus, j.vc) for j in t.jobs)

    assert multiset(src) == multiset(norm)


def test_philly_json_attempts_none_times_and_no_attempts(tmp_path: Path) -> None:
    def attempt(start: str, end: str, gpus: int) -> dict[str, object]:
        return {"start_time": start, "end_time": end,
                "detail": [{"ip": "m1", "gpus": [f"gpu{i}" for i in range(gpus)]}]}  # fmt: skip

    log = [
        {"jobid": "app_1", "vc": "v1", "status": "Pass", "submitted_time": "2017-10-03 00:00:10",
         "attempts": [attempt("2017-10-03 00:00:20", "2017-10-03 00:01:00", 4),
                      attempt("2017-10-03 00:02:00", "2017-10-03 00:03:00", 2)]},
        {"jobid": "app_2", "vc": "v1", "status": "Killed", "submitted_time": "2017-10-03 00:00:00",
         "attempts": []},
        {"jobid": "app_3", "vc": "v2", "status": "Running",
         "submitted_time": "2017-10-03 00:00:05",
         "attempts": [attempt("2017-10-03 00:00:06", "None", 1)]},
        {"jobid": "app_4", "vc": "v2", "status": "Failed", "submitted_time": "2017-10-03 00:00:30",
         "attempts": [attempt("None", "None", 1)]},
        {"jobid": "app_5", "vc": "v2", "status": "Pass", "submitted_time": "2017-10-03 00:01:10",
         "attempts": [attempt("2017-10-03 00:01:10", "2017-10-03 00:01:40", 1)]},
    ]  # fmt: skip
    p = tmp_path / "cluster_job_log"
    p.write_text(json.dumps(log))
    assert detect_format(p) == "philly_json"
    t = read_trace(p)
    # run time = last end - first start (retries included); GPUs of the first attempt
    assert _key(t) == [("app_1", 0.0, 160.0, 4), ("app_5", 60.0, 30.0, 1)]
    assert [j.status for j in t.jobs] == ["Pass", "Pass"]
    assert t.report.rows == 5 and t.report.jobs == 2
    assert t.report.skipped == {
        "never started (no attempts)": 1,
        "never started (first attempt has no start_time)": 1,
        "unfinished (last attempt has no end_time)": 1,
    }


def test_philly_json_bad_time_names_record(tmp_path: Path) -> None:
    p = tmp_path / "log.json"
    p.write_text(json.dumps([{"jobid": "a", "submitted_time": "yesterday", "attempts": []}]))
    with pytest.raises(WorkloadError, match=r"log.json, record 1 \(jobid 'a'\).*yesterday"):
        read_trace(p)


@pytest.mark.parametrize(
    ("detail", "field"),
    [([{"ip": "m1", "gpus": 5}], "attempts[].detail[].gpus"), ("m1", "attempts[].detail")],
)
def test_philly_json_malformed_gpu_list_names_record(
    tmp_path: Path, detail: object, field: str
) -> None:
    """A GPU count where a list of GPU ids belongs used to raise a bare TypeError."""
    p = tmp_path / "log.json"
    attempt = {"start_time": "2017-10-01 00:00:10", "end_time": "2017-10-01 00:01:10"}
    rec = {"jobid": "a", "submitted_time": "2017-10-01 00:00:00", "attempts": [attempt]}
    attempt["detail"] = detail  # type: ignore[assignment]
    p.write_text(json.dumps([rec]))
    with pytest.raises(WorkloadError, match=re.escape(f"record 1 (jobid 'a'), field '{field}'")):
        read_trace(p)


ALIBABA_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)


def test_alibaba_pods_fractional_share_and_unscheduled(tmp_path: Path) -> None:
    p = _w(tmp_path, "openb_pod_list.csv", [
        ALIBABA_HEADER,
        "pod-a,8000,1024,1,250,,BE,Succeeded,100,1100,200",
        "pod-b,8000,1024,2,1000,V100,LS,Running,150,,160",
        "pod-c,8000,1024,1,1000,,LS,Pending,170,,",
        "pod-d,8000,1024,8,1000,,LS,Succeeded,300,900,400",
    ])  # fmt: skip
    t = read_trace(p)
    assert t.report.format == "alibaba_gpu"
    # submit = creation (rebased), duration = deletion - scheduled
    assert _key(t) == [("pod-a", 0.0, 900.0, 1), ("pod-d", 200.0, 500.0, 8)]
    assert [j.gpu_milli for j in t.jobs] == [250, 1000]
    assert t.report.skipped == {
        "unfinished (no deletion_time)": 1,
        "never scheduled (no scheduled_time)": 1,
    }
    whole, rec_w = convert_trace(t, seed=0, options=ConvertOptions(time_unit=1.0))
    scaled, rec_s = convert_trace(
        t, seed=0, options=ConvertOptions(time_unit=1.0, fractional_gpus="scale")
    )
    assert rec_w["fractional_whole_gpu"] == 1 and rec_s["fractional_scaled"] == 1
    a_whole, a_scaled = whole.jobs[0], scaled.jobs[0]
    assert a_whole.num_gpus == a_scaled.num_gpus == 1
    # a quarter GPU for 900 s is 225 s of a whole GPU
    assert a_scaled.iterations == round(225 / a_scaled.model.compute_ms)
    assert a_whole.iterations == round(900 / a_whole.model.compute_ms)


HELIOS_HEADER = (
    "job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,"
    "duration,queue"
)


def test_helios_cpu_jobs_need_a_flag_and_are_counted(tmp_path: Path) -> None:
    p = _w(tmp_path, "cluster_log.csv", [
        HELIOS_HEADER,
        "j1,u1,vc1,n,8,16,1,COMPLETED,2020-04-01 00:00:10,2020-04-01 00:00:20,"
        "2020-04-01 01:00:20,3600,10",
        "j2,u2,vc2,n,0,4,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:01,"
        "2020-04-01 00:00:31,30,1",
        "j3,u1,vc1,n,1,4,1,FAILED,2020-04-01 00:01:10,2020-04-01 00:01:10,"
        "2020-04-01 00:01:15,5,0",
    ])  # fmt: skip
    with pytest.raises(
        WorkloadError, match=r"cluster_log.csv, line 3, column 'gpu_num'.*zero_gpus"
    ):
        read_trace(p)
    t = read_trace(p, repairs=Repairs(zero_gpus="skip"))
    assert t.report.format == "helios"
    assert _key(t) == [("j1", 0.0, 3600.0, 8), ("j3", 60.0, 5.0, 1)]
    assert [j.status for j in t.jobs] == ["COMPLETED", "FAILED"]
    assert t.report.skipped == {"gpu_num: zero (CPU-only job)": 1}
    assert "1 gpu_num: zero (CPU-only job)" in t.report.describe()


def test_tiresias_model_families(tmp_path: Path) -> None:
    p = _w(tmp_path, "60_job.csv", [
        "job_id,num_gpu,submit_time,iterations,model_name,duration,interval",
        "0,1,0,606,vgg19,164,30",
        "1,8,30,133,resnet152,147,23",
        "2,2,53,157,alexnet,127,26",
    ])  # fmt: skip
    t = read_trace(p)
    assert t.report.format == "tiresias"
    assert [j.job_type for j in t.jobs] == ["vgg19", "resnet152", "alexnet"]
    with pytest.raises(WorkloadError, match=r"60_job.csv, line 2, column 'job_type'.*vgg19"):
        convert_trace(t, seed=0)
    w, rec = convert_trace(t, seed=3, options=ConvertOptions(unknown_models="family"))
    draws = np.random.default_rng(3).integers(4, size=3)
    assert [j.model.name for j in w.jobs[:2]] == ["vgg16", "resnet50"]
    assert w.jobs[2].model.name == list(REFERENCE_MODELS)[draws[2]]  # no family: seeded draw
    assert (rec["model_by_family"], rec["model_drawn"]) == (2, 1)


# ------------------------------------------------------------------------------- bad input

NORM = "job_id,submit_time_s,duration_s,num_gpus"


@pytest.mark.parametrize(
    ("name", "lines", "match"),
    [
        ("missing.csv", ["job_id,submit_time_s,duration_s", "a,0,1"], r"line 1, column 'num_gpus'"),
        ("neg.csv", [NORM, "a,0,10,1", "b,5,-3,1"], r"line 3, column 'duration_s'.*negative"),
        ("zero.csv", [NORM, "a,0,10,0"], r"line 2, column 'num_gpus'.*no GPU"),
        ("unsorted.csv", [NORM, "a,10,10,1", "b,5,10,1"], r"line 3.*not sorted"),
        ("dup.csv", [NORM, "a,0,10,1", "a,5,10,1"], r"line 3, column 'job_id'.*duplicate"),
        ("time.csv", [PHILLY_DIGEST[0], "2017-13-45 00:00:00,1,1,1,v"],
         r"line 2, column 'timestamp'.*unparsable time"),
    ],
)  # fmt: skip
def test_bad_input_names_file_and_row(
    tmp_path: Path, name: str, lines: list[str], match: str
) -> None:
    with pytest.raises(WorkloadError, match=match) as info:
        read_trace(_w(tmp_path, name, lines))
    assert name in str(info.value)


def test_repairs_skip_sort_rename_are_counted(tmp_path: Path) -> None:
    p = _w(tmp_path, "messy.csv", [
        NORM, "a,10,10,1", "b,5,xx,1", "c,2,10,0", "a,3,7,2", "d,4,-1,1", "e,1,3,1",
    ])  # fmt: skip
    t = read_trace(
        p,
        repairs=Repairs(bad_rows="skip", zero_gpus="skip", unsorted="sort", duplicate_ids="rename"),
    )
    assert [(j.job_id, j.submit_s) for j in t.jobs] == [("e", 1.0), ("a#2", 3.0), ("a", 10.0)]
    r = t.report
    assert (r.rows, r.jobs) == (6, 3)
    assert r.skipped == {
        "duration_s: not a number": 1,
        "num_gpus: zero (CPU-only job)": 1,
        "duration_s: negative": 1,
    }
    assert r.repaired["duplicate id renamed"] == 1
    assert r.repaired["row out of submission order (sorted)"] >= 1
    t2 = read_trace(p, repairs=Repairs(bad_rows="skip", zero_gpus="skip", unsorted="sort",
                                       duplicate_ids="skip"))  # fmt: skip
    assert [j.job_id for j in t2.jobs] == ["e", "a"] and t2.report.skipped["duplicate id"] == 1


def test_every_row_skipped_is_an_error(tmp_path: Path) -> None:
    p = _w(tmp_path, "none.csv", [NORM, "a,0,10,0"])
    with pytest.raises(WorkloadError, match=r"none\.csv: no job left: 1 rows read"):
        read_trace(p, repairs=Repairs(zero_gpus="skip"))


def test_unknown_layout_and_repair_values(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="unknown trace layout"):
        read_trace(_w(tmp_path, "x.csv", ["a,b", "1,2"]))
    with pytest.raises(ConfigError, match="bad_rows"):
        Repairs(bad_rows="ignore")  # type: ignore[arg-type]


# ------------------------------------------------------------------- windowing and scaling


@pytest.fixture
def trace(tmp_path: Path):  # type: ignore[no-untyped-def]
    lines = [NORM + ",vc"] + [
        f"j{i},{100 * i},{1000 * (i + 1)},{1 if i % 2 else 4},{'x' if i < 3 else 'y'}"
        for i in range(6)
    ]
    return read_trace(_w(tmp_path, "t.csv", lines))


def test_select_window_vc_and_max_jobs(trace) -> None:  # type: ignore[no-untyped-def]
    w = select(trace, start_s=100, end_s=450)
    assert [j.job_id for j in w.jobs] == ["j1", "j2", "j3", "j4"]
    assert w.jobs[0].submit_s == 0.0  # rebased
    assert w.steps[-1]["excluded"] == {"before window": 1, "after window": 1}
    v = select(trace, vcs=["y"], max_jobs=2)
    assert [j.job_id for j in v.jobs] == ["j3", "j4"] and v.steps[-1]["beyond_max_jobs"] == 1
    with pytest.raises(WorkloadError, match=r"t.csv: empty window"):
        select(trace, start_s=10_000)
    # a VC no job has is named, with the trace's VCs, even beside one that has jobs (never
    # a silent drop); one that reads as a number (Hydra's 6214e9) gets the quoting hint
    with pytest.raises(
        WorkloadError, match=r"t.csv: no job of VC \['z'\] in the trace \(its VCs: x, y\)$"
    ):
        select(trace, vcs=["y", "z"])
    with pytest.raises(WorkloadError, match=r"\['6214000000000.0'\] .* quote it"):
        select(trace, vcs=["6214000000000.0"])


def test_cap_scale_and_fit(trace) -> None:  # type: ignore[no-untyped-def]
    c = cap_durations(trace, 2500)
    assert [j.duration_s for j in c.jobs] == [1000, 2000, 2500, 2500, 2500, 2500]
    assert c.steps[-1]["capped"] == 4
    s = scale_arrivals(trace, 2.0)
    assert [j.submit_s for j in s.jobs] == [0, 50, 100, 150, 200, 250]
    # offered load: GPU-seconds / span
    gpu_s = sum(1000 * (i + 1) * (1 if i % 2 else 4) for i in range(6))
    assert offered_load_gpus(trace) == pytest.approx(gpu_s / 500)
    target = scale_to_load(trace, 8, 0.5)
    assert offered_load_gpus(target) == pytest.approx(4.0)
    with pytest.raises(WorkloadError, match=r"t.csv, line 2: job 'j0' asks for 4 GPUs"):
        fit_to_cluster(trace, 2)
    assert {j.num_gpus for j in fit_to_cluster(trace, 2, "clip").jobs} == {1, 2}
    assert len(fit_to_cluster(trace, 2, "skip")) == 3


def test_prepare_records_every_step_in_order(trace) -> None:  # type: ignore[no-untyped-def]
    t = prepare(trace, TraceWindow(max_jobs=5, duration_cap_s=3000, target_load=0.5), 8)
    assert [s["op"] for s in t.steps] == [
        "select", "cap_durations", "scale_to_load", "fit_to_cluster",
    ]  # fmt: skip
    assert t.steps[2]["factor"] == pytest.approx(0.5 * 8 / t.steps[2]["offered_load_gpus_before"])
    json.dumps(t.record())  # JSON-ready
    with pytest.raises(ConfigError, match="not both"):
        prepare(trace, TraceWindow(arrival_scale=2.0, target_load=0.5), 8)


def test_macro_iterations_conserve_compute(trace) -> None:  # type: ignore[no-untyped-def]
    plain = convert_trace(trace, seed=1)[0]
    merged, rec = convert_trace(trace, seed=1, options=ConvertOptions(max_iterations=10))
    assert all(j.iterations <= 10 for j in merged.jobs)
    assert rec["merged_jobs"] == 6
    for a, b in zip(plain.jobs, merged.jobs, strict=True):
        assert a.model.name == b.model.name
        assert b.total_compute_ms == pytest.approx(a.total_compute_ms, rel=0.06)
        k = b.model.forward_ms / a.model.forward_ms
        assert b.model.model_size_mb == pytest.approx(a.model.model_size_mb * k)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"", "e.csv: empty file (no header line)"),
        (b"\n  \n\n", "e.csv: empty file (no header line)"),
        (
            b'job_id,submit_time_s,duration_s,num_gpus\na,0,"100,1\nb,1,100,1\nc,2,100,1\n',
            "e.csv, line 2: a quoted field opened on this line is not closed",
        ),
        (
            "job_id,submit_time_s,duration_s,num_gpus\na,0,100,1\n".encode("utf-16"),
            "e.csv: not UTF-8 text (NUL bytes or a UTF-16 byte-order mark)",
        ),
        (
            b"timestamp,duration,num_gpus,gpu_time\n1,10,1,10\n",
            "e.csv, line 1, column 'cluster': missing required column(s) ['cluster']",
        ),
    ],
)
def test_malformed_files_get_the_real_cause(tmp_path: Path, content: bytes, words: str) -> None:
    """Each used to be reported as something else: an unknown layout with header [''] or a
    NUL header, or a field-count error two lines after the unterminated quote."""
    p = tmp_path / "e.csv"
    p.write_bytes(content)
    with pytest.raises(WorkloadError, match=re.escape(words)):
        read_trace(p)


def test_a_directory_is_not_reported_as_missing(tmp_path: Path) -> None:
    d = tmp_path / "traces.csv"
    d.mkdir()
    with pytest.raises(WorkloadError, match=re.escape("traces.csv: a directory, not a trace file")):
        read_trace(d)
    with pytest.raises(WorkloadError, match="file not found"):
        read_trace(tmp_path / "nope.csv")
