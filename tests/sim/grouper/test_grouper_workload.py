"""Cojob workloads: the shipped trace, scaling, the seeded generator, and bad input."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from envs.sim.errors import ConfigError, WorkloadError
from envs.sim.grouper import (
    Cojob,
    CojobWorkload,
    GrouperConfig,
    PSJob,
    builtin_trace,
    generate_cojobs,
    load_cojob_trace,
    make_policy,
    scale_trace,
    successive_halving,
)

HEADER = (
    "arrival_s,groupID,JobId,modelName,modelSize,workerHosts,serverHosts,stageSizes,maxStage,"
    "ctime,weight\n"
)
ROW = "0,0,0,AlexNet,280.0-MB,0-1-2,3-4-5,20-40-80-480,4,0.0,1.0\n"


def test_trace_shape() -> None:
    w = builtin_trace()
    assert len(w.cojobs) == 40 and len(w.jobs) == 320
    assert w.num_hosts == 10 and w.link_mb_per_ms == pytest.approx(0.125)  # 1 Gbps
    for c in w.cojobs:
        assert sorted(j.max_stage for j in c.jobs) == [1, 1, 1, 1, 2, 2, 3, 4]
        assert {j.stage_plan for j in c.jobs} == {(20, 40, 80, 480)}
        assert len({j.model for j in c.jobs}) == 1
    arrivals = [c.arrival_ms for c in w.cojobs]
    assert arrivals == sorted(arrivals) and arrivals[0] == 0.0
    assert arrivals[-1] == pytest.approx(577_911.3, abs=0.1)
    assert Counter(j.model_mb for j in w.jobs).keys() == {160.0, 240.0, 280.0, 600.0}
    # JobId is not unique in the trace; our ids are
    assert len({j.job_id for j in w.jobs}) == 320
    assert len({j.trace_job_id for j in w.jobs}) < 320


def test_first_job_flows() -> None:
    job = builtin_trace().jobs[0]  # AlexNet, workers 0-1-2, servers 3-4-5
    assert job.flow_mb == pytest.approx(280.0 / 3)
    flows = job.port_flows(10)
    assert flows[:10].tolist() == [3, 3, 3, 3, 3, 3, 0, 0, 0, 0]  # egress: 3 pushes / pulls
    assert flows[10:].tolist() == [3, 3, 3, 3, 3, 3, 0, 0, 0, 0]


def test_same_host_flows_are_free() -> None:
    job = PSJob(0, "m", 100.0, (0, 1), (1, 2), (1,), 1)
    flows = job.port_flows(3)
    # pushes 0->1, 0->2, 1->2 and pulls back (1->1 stays on host 1)
    assert flows.tolist() == [2, 2, 2, 2, 2, 2]


def test_scale_trace_1_20() -> None:
    w = scale_trace(builtin_trace(), cojobs=20, divisor=20)
    assert len(w.cojobs) == 20 and {j.stage_plan for j in w.jobs} == {(1, 2, 4, 24)}
    with pytest.raises(WorkloadError, match="not divisible"):
        scale_trace(builtin_trace(), divisor=3)


def test_small_trace_loads() -> None:
    w = builtin_trace("small_2cojobs")
    assert len(w.cojobs) == 2 and w.link_mb_per_ms == pytest.approx(1.25)
    assert [j.stage_plan for j in w.cojobs[0].jobs] == [(1, 4, 16), (1, 4), (1,), (1,)]


def test_successive_halving_pattern() -> None:
    rng = np.random.default_rng(0)
    assert sorted(successive_halving(8, 4, rng)) == [1, 1, 1, 1, 2, 2, 3, 4]
    assert sorted(successive_halving(4, 3, rng)) == [1, 1, 2, 3]  # paper Fig. 2
    assert sorted(successive_halving(8, 2, rng)) == [1, 1, 1, 1, 2, 2, 2, 2]
    assert successive_halving(1, 4, rng) == (4,)


def test_generator_is_seeded_and_valid() -> None:
    a, b, c = generate_cojobs(10, 1), generate_cojobs(10, 1), generate_cojobs(10, 2)
    assert a == b and a != c
    for cj in a.cojobs:
        assert sorted(j.max_stage for j in cj.jobs) == [1, 1, 1, 1, 2, 2, 3, 4]
        for j in cj.jobs:
            assert len(j.workers) == len(j.servers) and 1 <= len(j.workers) <= 6
            assert not set(j.workers) & set(j.servers) or len(j.workers) > 5
    assert a.cojobs[0].arrival_ms == 0.0


# ---- bad input ---------------------------------------------------------------------------


@pytest.mark.parametrize("plan", [(), (20, 20), (40, 20), (0, 5), (-1, 3)])
def test_stage_plan_must_increase(plan: tuple[int, ...]) -> None:
    with pytest.raises(WorkloadError, match="stage plan"):
        PSJob(0, "m", 100.0, (0,), (1,), plan, 1)


def test_max_stage_beyond_plan() -> None:
    with pytest.raises(WorkloadError, match="max_stage"):
        PSJob(0, "m", 100.0, (0,), (1,), (1, 2), 3)


def test_cojob_with_no_jobs() -> None:
    with pytest.raises(WorkloadError, match="cojob 7: has no jobs"):
        Cojob(7, 0.0, ())


def test_flows_to_missing_hosts() -> None:
    job = PSJob(3, "m", 100.0, (0,), (12,), (1,), 1)
    with pytest.raises(WorkloadError, match=r"job 3 .*host\(s\) \[12\], which do not exist"):
        CojobWorkload((Cojob(0, 0.0, (job,)),), num_hosts=10)


def test_bad_job_fields() -> None:
    with pytest.raises(WorkloadError, match="worker"):
        PSJob(0, "m", 100.0, (), (1,), (1,), 1)
    with pytest.raises(WorkloadError, match="model_mb"):
        PSJob(0, "m", 0.0, (0,), (1,), (1,), 1)
    with pytest.raises(WorkloadError, match="host indices"):
        PSJob(0, "m", 1.0, (-1,), (1,), (1,), 1)


@pytest.mark.parametrize("q", [0, -2, True, 1.5])
def test_num_queues_must_be_positive_int(q: object) -> None:
    with pytest.raises(ConfigError, match="num_queues"):
        GrouperConfig(num_queues=q)  # type: ignore[arg-type]


def test_unknown_policy_and_bad_params() -> None:
    with pytest.raises(ConfigError, match="unknown cojob network policy 'pfabric'"):
        make_policy("pfabric")
    with pytest.raises(ConfigError, match="period_ms"):
        make_policy("grouper", period_ms=0)
    with pytest.raises(ConfigError, match="bad parameters"):
        make_policy("fs", q=3)


@pytest.mark.parametrize(
    ("row", "match"),
    [
        (ROW.replace("3-4-5", "3-4-11"), r"line 2, column 'serverHosts'.*\[11\] do not exist"),
        (ROW.replace("20-40-80-480", "20-40-40"), r"line 2, column 'stageSizes'.*increasing"),
        (ROW.replace("280.0-MB", "big"), r"line 2, column 'modelSize'"),
        (ROW.replace(",4,0.0", ",5,0.0"), r"line 2, column 'maxStage'"),
        (ROW.replace("0-1-2", "0-x"), r"line 2, column 'workerHosts'"),
    ],
)
def test_bad_trace_rows(tmp_path: Path, row: str, match: str) -> None:
    f = tmp_path / "t.csv"
    f.write_text(HEADER + row)
    with pytest.raises(WorkloadError, match=match):
        load_cojob_trace(f)


def test_trace_arrival_must_agree_within_cojob(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text(HEADER + ROW + ROW.replace("0,0,0,", "5,0,1,", 1))
    with pytest.raises(WorkloadError, match=r"line 3, column 'arrival_s'.*cojob 0 already"):
        load_cojob_trace(f)


def test_trace_missing_column(tmp_path: Path) -> None:
    f = tmp_path / "t.csv"
    f.write_text(HEADER.replace("maxStage,", "") + ROW.replace(",4,0.0", ",0.0"))
    with pytest.raises(WorkloadError, match="maxStage"):
        load_cojob_trace(f)
