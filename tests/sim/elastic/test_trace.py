"""A normalised trace in the elastic world."""

from __future__ import annotations

from pathlib import Path

import pytest

from envs.sim.elastic.allocators import FixedDemand
from envs.sim.elastic.simulator import SlotSimulator
from envs.sim.elastic.spec import ElasticCluster
from envs.sim.elastic.speed import MeasuredSpeed
from envs.sim.elastic.trace import elastic_jobs_from_trace
from envs.sim.errors import WorkloadError

PHILLY = (
    Path(__file__).parents[3] / "envs" / "sim" / "data" / "traces" / "philly_vc_6c71a0_public.csv"
)


def test_philly_slice_every_job_kept() -> None:
    jobs = elastic_jobs_from_trace(PHILLY, seed=0)
    assert len(jobs) == 200
    assert all(j.num_epochs > 0 and j.max_workers == j.max_ps >= 1 for j in jobs)
    assert elastic_jobs_from_trace(PHILLY, seed=0) == jobs  # seeded model rule


def test_alone_at_its_request_a_job_takes_its_traced_duration(tmp_path: Path) -> None:
    csv = tmp_path / "t.csv"
    csv.write_text(
        "job_id,submit_time_s,duration_s,num_gpus,job_type\n"
        "a,0,3000,2,resnet50\n"
        "b,2400,600,1,vgg16\n"
    )
    speed = MeasuredSpeed()
    jobs = elastic_jobs_from_trace(csv, seed=0, speed=speed)
    assert [j.arrival_slot for j in jobs] == [0, 2]
    assert [j.type.model for j in jobs] == ["resnet-50", "vgg-16"]
    res = SlotSimulator(ElasticCluster(num_nodes=4), jobs, FixedDemand(), speed).run()
    # durations recovered from whole iterations: within one iteration of the trace
    by_id = {r.job_id: r for r in res.jobs}
    assert by_id[0].jct_slots * 1200 == pytest.approx(3000, abs=0.2)
    assert by_id[1].jct_slots * 1200 == pytest.approx(600, abs=0.2)


def test_model_without_dl2_type_is_an_error(tmp_path: Path) -> None:
    from envs.sim.elastic import trace as tr

    csv = tmp_path / "t.csv"
    csv.write_text("job_id,submit_time_s,duration_s,num_gpus,job_type\na,0,10,1,lstm\n")
    saved = dict(tr.MODEL_TO_DL2_TYPE)
    try:
        del tr.MODEL_TO_DL2_TYPE["lstm"]
        with pytest.raises(WorkloadError, match="lstm"):
            elastic_jobs_from_trace(csv, seed=0)
    finally:
        tr.MODEL_TO_DL2_TYPE.clear()
        tr.MODEL_TO_DL2_TYPE.update(saved)
