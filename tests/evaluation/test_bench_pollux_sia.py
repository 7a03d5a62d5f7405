"""bench/v1's Pollux and Sia scenarios (evaluation/bench/scenarios.py ``_pollux_sia``) run
through the benchmark, in both worlds."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluation.bench import run as bench_run
from evaluation.bench.run import run_suite, select_scenarios
from evaluation.bench.scenarios import V1
from evaluation.compose import compose

NAMES = [
    "pollux-w6",
    "pollux-w1",
    "sia-philly-w1",
    "sia-saturn-w1",
    "sia-rate10-w1",
    "sia-rate30-w1",
    "pollux-w6-elastic",
    "sia-saturn-w1-elastic",
]


def _quiet(_: str) -> None:
    pass


def test_the_scenarios_are_in_v1_and_compose() -> None:
    ours = [s for s in V1 if s.name in NAMES]
    assert [s.name for s in ours] == NAMES
    for s in ours:
        cfg, _ = compose(s.overrides, {"seeds": list(s.seeds)})
        assert "synthesised" in s.source and "real arrivals" in s.source
        if s.world == "contention":
            assert cfg.workload.kind == "trace" and cfg.cluster.num_servers == 16  # 64 GPUs
            assert str(cfg.workload.path).startswith("envs/sim/data/")
        else:
            assert cfg.workload.kind == "env" and cfg.workload.trace.format == "pollux"
            assert dict(cfg.workload.env.overrides)["num_nodes"] == 32  # 2 GPU workers each
            assert s.seeds == (0,)  # the conversion draws nothing: more seeds would repeat it


@pytest.fixture
def v1_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench_run, "code_version", lambda: "testcode")


def test_a_contention_and_an_elastic_scenario_run_through_the_bench(
    v1_here: None, tmp_path: Path
) -> None:
    assert [s.name for s in select_scenarios("v1", only=["sia-rate10-w1"])] == ["sia-rate10-w1"]
    got = run_suite(
        "v1",
        schedulers=["lwf1_adasrsf", "dlas:count_fs", "elastic:esrtf", "elastic:drf"],
        only=["sia-rate10-w1", "pollux-w6-elastic"],
        out=tmp_path,
        log=_quiet,
    )
    cells = got.cells
    for spec in ("lwf1_adasrsf", "dlas:count_fs"):
        cell = cells[("sia-rate10-w1", spec)]
        assert cell.status == "ok" and sorted(cell.jct) == [0, 1, 2]
        # every model comes from the application table (nothing drawn per seed) and both stacks
        # are deterministic, so the three seeds are the same run
        assert len(set(cell.jct.values())) == 1 and all(v > 0 for v in cell.jct.values())
    for spec in ("elastic:esrtf", "elastic:drf"):
        cell = cells[("pollux-w6-elastic", spec)]
        assert cell.status == "ok" and list(cell.jct) == [0] and cell.jct[0] > 0
    # each world's schedulers act only in their own world
    assert cells[("sia-rate10-w1", "elastic:drf")].status == "n/a"
    assert cells[("pollux-w6-elastic", "lwf1_adasrsf")].status == "n/a"


def test_workload_pollux_is_the_pollux_w6_scenarios_workload() -> None:
    """``evaluate.py workload=pollux cluster=ada_srsf`` (conf/workload/pollux.yaml) runs what
    the ``pollux-w6`` scenario runs."""
    scenario = next(s for s in V1 if s.name == "pollux-w6")
    bench, _ = compose(scenario.overrides, {"seeds": [0]})
    conf, _ = compose(("workload=pollux", "cluster=ada_srsf"), {"seeds": [0]})
    assert conf.workload == bench.workload
    assert conf.workload.path == "envs/sim/data/pollux/workload-6.csv"
    assert conf.workload.trace.max_iterations == 200
    assert conf.cluster.num_servers == bench.cluster.num_servers == 16
    assert conf.cluster.gpus_per_server == bench.cluster.gpus_per_server == 4
