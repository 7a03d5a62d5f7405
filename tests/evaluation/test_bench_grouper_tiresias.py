"""dlsched-bench's Tiresias 2,400-job trace and Grouper's 40 cojobs (the ``grouper`` world):
the scenarios run through the pipeline, the board names Grouper's metric, schedulers of the
other worlds are n/a; the ``grouper:`` kind and the duration model's checks."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

import pytest

from envs.sim import ConfigError
from envs.sim.grouper import POLICIES, GrouperConfig, simulate_cojobs
from evaluation.bench import run as bench_run
from evaluation.bench.board import board_of, csv_text, markdown
from evaluation.bench.run import cell_dir, default_schedulers, run_suite, world_of
from evaluation.bench.scenarios import V1, WORLDS, Scenario
from evaluation.compose import compose
from evaluation.pipeline import Plan, make_plan
from evaluation.workloads import build_cojobs
from tests.evaluation.test_bench import _quiet

NEW = ("tiresias-2400", "grouper-40cojobs")


def _scenario(name: str) -> Scenario:
    return next(s for s in V1 if s.name == name)


def test_the_new_scenarios_are_in_v1_with_their_worlds() -> None:
    assert "grouper" in WORLDS
    assert {_scenario(n).world for n in NEW} == {"contention", "grouper"}
    assert all("synthesised" in _scenario(n).source or "Grouper" in _scenario(n).source
               for n in NEW)  # fmt: skip
    assert world_of("grouper:grouper") == "grouper" and world_of("psrsf:count_fs") == "contention"
    assert {f"grouper:{p}" for p in POLICIES} <= set(default_schedulers())


def test_both_scenarios_run_and_the_board_calls_the_sct_an_sct(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench_run, "code_version", lambda: "testcode")
    specs = ["psrsf:count_fs", "grouper:grouper"]
    got = run_suite("v1", schedulers=specs, out=tmp_path, only=list(NEW), log=_quiet)
    cells = got.cells
    assert got.ran == 2  # one seed each, one applicable scheduler each
    tiresias, grouper = cells[("tiresias-2400", specs[0])], cells[("grouper-40cojobs", specs[1])]
    assert tiresias.status == grouper.status == "ok"
    # a scheduler of another world is n/a, with the reason
    assert cells[("tiresias-2400", "grouper:grouper")].status == "n/a"
    assert cells[("tiresias-2400", "grouper:grouper")].reason == "acts in the grouper world"
    assert cells[("grouper-40cojobs", "psrsf:count_fs")].reason == "acts in the contention world"
    # the grouper cell's figure is the average stage completion time of Grouper's simulator
    w, cfg = build_cojobs(compose(_scenario("grouper-40cojobs").overrides, {})[0].workload.grouper)
    sct = simulate_cojobs(w, "grouper", cfg).avg_sct_ms() / 1000.0
    assert grouper.jct == {0: pytest.approx(sct, rel=1e-12)}
    for cell in (tiresias, grouper):  # each run's simulation CPU, for the overhead's split
        record = json.loads((cell_dir(got.root, cell.scenario, cell.scheduler) / "run.json")
                            .read_text())  # fmt: skip
        (run,) = record["runs"]
        assert math.isfinite(run["cpu_s"]) and run["cpu_s"] > 0.0
    board = board_of(got)
    rows = list(csv.DictReader(io.StringIO(csv_text(board))))
    metric = {(r["scenario"], r["scheduler"]): r["metric"] for r in rows}
    assert metric[("grouper-40cojobs", "grouper:grouper")] == "avg_sct_s"
    assert metric[("tiresias-2400", "psrsf:count_fs")] == "avg_jct_s"
    assert not any("jct" in k for k in rows[0])  # no column calls the figure a JCT
    text = markdown(board)
    grouper_part = text.split("## World: grouper")[1]
    assert "winner's avg SCT (s)" in grouper_part and "IQM normalised SCT" in grouper_part
    assert "JCT" not in grouper_part
    assert "average stage completion time (SCT)" in text
    # a rerun reads both cells from the cache
    again = run_suite("v1", schedulers=specs, out=tmp_path, only=list(NEW), log=_quiet)
    assert again.ran == 0 and csv_text(board_of(again)) == csv_text(board)


def _plan(overrides: list[str], stacks: list[str]) -> Plan:
    cfg, _ = compose(overrides, {"stacks": stacks, "seeds": [0]})
    return make_plan(cfg)


def test_grouper_schedulers_and_workloads_go_together() -> None:
    with pytest.raises(ConfigError, match=r"workload kind 'grouper' .* \['psrsf:count_fs'\]"):
        _plan(["workload=grouper"], ["grouper:fs", "psrsf:count_fs"])
    with pytest.raises(ConfigError, match=r"\['grouper:fs'\] run Grouper's cojobs only"):
        _plan(["workload=ada160"], ["grouper:fs"])
    with pytest.raises(ConfigError, match="unknown Grouper network policy 'nope'; known: "):
        _plan(["workload=grouper"], ["grouper:nope"])
    with pytest.raises(ConfigError, match=r"workload.grouper: cojobs must be in 1\.\.40"):
        _plan(["workload=grouper", "workload.grouper.cojobs=41"], ["grouper:fs"])
    with pytest.raises(ConfigError, match=r"workload\.grouper: .*not divisible by 7"):
        _plan(["workload=grouper", "workload.grouper.divisor=7"], ["grouper:fs"])
    with pytest.raises(
        ConfigError, match=r"workload\.copies is not used by workload kind 'grouper'"
    ):
        _plan(["workload=grouper", "workload.copies=2"], ["grouper:fs"])
    plan = _plan(["workload=grouper", "workload.grouper.num_queues=4",
                  "workload.grouper.barrier=false"], ["grouper:sincronia"])  # fmt: skip
    p = plan.prepared[0]
    assert p.cojob_config == GrouperConfig(num_queues=4, barrier=False)
    assert p.num_jobs == len(p.cojobs.jobs) == 320 and p.record["cojobs"] == 40


def test_a_grouper_run_has_one_row_per_cojob_stage() -> None:
    from evaluation.kinds import run_task

    plan = _plan(["workload=grouper", "workload.grouper.cojobs=2",
                  "workload.grouper.divisor=20"], ["grouper:grouper"])  # fmt: skip
    out = run_task(plan.tasks[0])
    p = plan.prepared[0]
    res = simulate_cojobs(p.cojobs, "grouper", p.cojob_config)
    assert len(out.name) == len(res.stages) == 8  # 2 cojobs x 4 stages
    assert list(out.jct_s * 1000.0) == pytest.approx([s.sct_ms for s in res.stages], rel=1e-12)
    assert float(out.jct_s.mean() * 1000.0) == pytest.approx(res.avg_sct_ms(), rel=1e-12)
    slow = out.jct_s / out.ideal_s
    assert float(slow.mean()) == pytest.approx(res.avg_stage_slowdown(), rel=1e-12)
    # stage k of a cojob is run by the jobs whose max_stage >= k (8, then halving)
    assert list(out.num_gpus[:4]) == [
        sum(j.max_stage >= k for j in p.cojobs.cojobs[0].jobs) for k in (1, 2, 3, 4)
    ]


def test_the_duration_model_refuses_a_placer_that_shares_gpus() -> None:
    with pytest.raises(ConfigError, match=r"fidelity=job .* placer 'lwf1' may share them"):
        _plan(["workload=tiresias", "fidelity=job"], ["lwf1_adasrsf"])
    assert _plan(["workload=tiresias", "fidelity=job"], ["dlas:skew_fs"]).kinds
    with pytest.raises(ConfigError, match=r"workload\.copies / workload\.shift_s: copies must be"):
        _plan(["workload=tiresias", "workload.copies=0"], ["dlas:count_fs"])
