"""dlsched-bench (evaluation/bench): the frozen suite, the cached cell runner, the board."""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest

from envs.gym.workloads import TEST_VCS, TRAIN_VCS
from evaluation.bench import run as bench_run
from evaluation.bench.__main__ import CPU_FILE, main
from evaluation.bench.board import board_of, iqm, make_board, markdown, write_board
from evaluation.bench.run import PHASES, BenchError, Cell, cell_dir, run_suite, select_scenarios
from evaluation.bench.scenarios import SUITES, V1, WORLDS, Scenario, suite_version
from evaluation.compose import compose

# ---------------------------------------------------------------- the suite


def test_the_version_is_a_digest_of_the_list() -> None:
    v = suite_version(V1)
    assert re.fullmatch(r"[0-9a-f]{12}", v)
    assert suite_version(tuple(V1)) == v  # the same list, the same version
    first = V1[0]
    changed = [
        (replace(first, seeds=(*first.seeds, 999)), *V1[1:]),  # a seed added
        (replace(first, overrides=(*first.overrides, "workload.jitter=0.01")), *V1[1:]),
        (replace(first, name=first.name + "-x"), *V1[1:]),  # renamed
        V1[1:],  # one removed
        (*V1[1:], first),  # reordered
    ]
    versions = {suite_version(s) for s in changed}
    assert v not in versions and len(versions) == len(changed)


def test_v1_has_40_named_scenarios_of_held_out_data_that_compose() -> None:
    assert len(V1) >= 40
    names = [s.name for s in V1]
    assert len(set(names)) == len(names)
    assert {s.world for s in V1} == set(WORLDS)
    vcs_seen = set()
    for s in V1:
        assert s.seeds and s.source
        cfg, _ = compose(s.overrides, {"seeds": list(s.seeds)})  # every override is a real key
        if cfg.workload.trace.vcs:
            vcs_seen.update(cfg.workload.trace.vcs)
            assert cfg.workload.trace.start_s == 90 * 86400  # the test days
        if s.world == "elastic":
            assert cfg.workload.kind == "env" and cfg.workload.env.backlog in ("none", "bundle")
        if cfg.workload.kind == "env" and cfg.workload.env.trace is None:
            assert min(s.seeds) >= 300  # the policies' held-out generator seeds
    assert vcs_seen and vcs_seen <= set(TEST_VCS) and not vcs_seen & set(TRAIN_VCS)
    # the grid: load x0.5/x1/x2 and scale x1/x4/x16 in both job worlds
    for world in ("elastic", "contention"):
        for load in ("0.5", "1", "2"):
            for scale in (1, 4, 16):
                assert f"philly-ee9e8c-load{load}-x{scale}-{world}" in names
    for setting in ("small", "medium", "large", "small-bundle"):
        for load in ("light", "normal", "heavy"):
            assert f"dl2-{setting}-{load}" in names


def test_unknown_scenario_and_scheduler_names_give_one_clear_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    with pytest.raises(BenchError, match=r"--only: unknown scenario\(s\) nope .*choices: dl2-"):
        select_scenarios("v1", only=["nope"])
    with pytest.raises(BenchError, match="--exclude: unknown scenario"):
        select_scenarios("v1", exclude=["tiresias-60", "nope"])
    with pytest.raises(BenchError, match="unknown suite 'v9'"):
        select_scenarios("v9")
    with pytest.raises(BenchError, match="--world: 'moon' is not one of elastic, contention"):
        select_scenarios("v1", world="moon")
    elastic = select_scenarios("v1", world="elastic")
    assert len(elastic) == 26 and {s.world for s in elastic} == {"elastic"}
    assert [s.name for s in select_scenarios("v1", only=["tiresias-60"], world="contention")] == [
        "tiresias-60"
    ]
    with pytest.raises(BenchError, match="--world leave none"):
        select_scenarios("v1", only=["tiresias-60"], world="elastic")
    assert main(["--only", "nope", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "nope" in err and "tiresias-60" in err
    code = main(["--only", "tiresias-60", "--schedulers", "no_such_sched", "--out", str(tmp_path)])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'no_such_sched'" in err
    assert not any(tmp_path.iterdir())  # nothing ran, nothing written


# ---------------------------------------------------------------- runs and the cache

TINY = (
    Scenario(
        "tiny-elastic",
        "elastic",
        ("workload=env", "workload.env.setting=tiny", "workload.env.backlog=none"),
        (300, 301),
        "DL² tiny",
    ),
    Scenario(
        "tiny-contention",
        "contention",
        ("workload.kind=generator", "workload.num_jobs=8", "cluster.num_servers=2"),
        (0, 1),
        "Ada-SRSF generator, 8 jobs",
    ),
)


@pytest.fixture
def tiny(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setitem(SUITES, "tiny", TINY)
    monkeypatch.setattr(bench_run, "code_version", lambda: "testcode")
    return "tiny"


def _quiet(_: str) -> None:
    pass


def test_cache_resume_and_a_scheduler_that_cannot_act(
    tiny: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    specs = ["elastic:drf", "lwf1_adasrsf", "policy:policies/medium_plan_pg"]
    first = run_suite(tiny, schedulers=specs, out=tmp_path, log=_quiet)
    cells = first.cells
    assert first.ran == 4  # drf on 2 seeds, lwf1_adasrsf on 2 seeds
    assert cells[("tiny-elastic", "elastic:drf")].status == "ok"
    assert sorted(cells[("tiny-contention", "lwf1_adasrsf")].jct) == [0, 1]
    # medium_plan_pg was trained with a window J=12; the tiny env has J=8: n/a, not a crash
    na = cells[("tiny-elastic", "policy:policies/medium_plan_pg")]
    assert na.status == "n/a" and "J=12" in na.reason
    assert cells[("tiny-contention", "elastic:drf")].status == "n/a"  # the other world
    board = write_board(board_of(first), first.root, plot=False)
    assert "n/a" in board["text"] and "J=12" in board["text"]

    # the cached rerun: the same figures, nothing run
    again = run_suite(tiny, schedulers=specs, out=tmp_path, log=_quiet)
    assert again.ran == 0
    assert {k: (c.status, c.jct) for k, c in again.cells.items()} == {
        k: (c.status, c.jct) for k, c in cells.items()
    }
    csv1 = board["csv"].read_text()
    write_board(board_of(again), again.root, plot=False)
    assert board["csv"].read_text() == csv1

    # a scheduler added: only its cells run
    summary = cell_dir(first.root, "tiny-elastic", "elastic:drf") / "summary.csv"
    stamp = summary.stat().st_mtime_ns
    more = run_suite(tiny, schedulers=[*specs, "elastic:optimus"], out=tmp_path, log=_quiet)
    assert more.ran == 2 and more.cells[("tiny-elastic", "elastic:optimus")].status == "ok"
    assert summary.stat().st_mtime_ns == stamp

    # a run killed before its summary was written resumes from its finished runs
    d = cell_dir(first.root, "tiny-contention", "lwf1_adasrsf")
    for name in ("summary.md", "summary.csv", "run.json"):
        (d / name).unlink()
    resumed = run_suite(tiny, schedulers=specs, out=tmp_path, log=_quiet)
    assert resumed.ran == 0
    assert resumed.cells[("tiny-contention", "lwf1_adasrsf")].jct == (
        cells[("tiny-contention", "lwf1_adasrsf")].jct
    )

    # a corrupt cache entry is recomputed, never used
    (d / "summary.csv").write_text("stack,seed,avg_jct_s\nlwf1_adasrsf,0,garbage\n")
    said: list[str] = []
    fixed = run_suite(tiny, schedulers=specs, out=tmp_path, log=said.append)
    assert [line for line in said if "cache entry" in line] == [
        f"  cache entry {d} incomplete or unreadable: recomputing it, not using it"
    ]
    assert fixed.cells[("tiny-contention", "lwf1_adasrsf")].jct == (
        cells[("tiny-contention", "lwf1_adasrsf")].jct
    )

    # another code version has its own cells, and says so in one line
    assert first.root.name == "testcode" and first.root.parent.name.startswith("tiny-")
    monkeypatch.setattr(bench_run, "code_version", lambda: "othercode")
    lines: list[str] = []
    other = run_suite(tiny, schedulers=specs, out=tmp_path, log=lines.append)
    assert other.ran == 4 and other.root.name == "othercode"
    assert any(line.startswith("note: 1 other code version(s)") for line in lines)


# ---------------------------------------------------------------- the board's figures

T975_2 = 4.302652729911275  # Student t, 0.975 quantile, 2 degrees of freedom


def _cells(values: dict[tuple[str, str], list[float] | str]) -> dict[tuple[str, str], Cell]:
    out = {}
    for (sc, s), v in values.items():
        if isinstance(v, str):
            out[(sc, s)] = Cell(sc, s, "n/a", v)
        else:
            out[(sc, s)] = Cell(sc, s, "ok", jct=dict(enumerate(v)))
    return out


def test_the_board_against_a_hand_computed_oracle() -> None:
    a = Scenario("A", "contention", (), (0, 1, 2), "synthetic")
    b = Scenario("B", "contention", (), (0, 1, 2), "synthetic")
    x, y, z = "lwf1_adasrsf", "ff_adasrsf", "ls_adasrsf"
    cells = _cells({
        ("A", x): [10, 20, 30], ("A", y): [20, 20, 30], ("A", z): "cannot act here",
        ("B", x): [40, 40, 40], ("B", y): [20, 20, 20], ("B", z): [20, 20, 20],
    })  # fmt: skip
    board = make_board("syn", "v", "c", [a, b], [x, y, z], cells)
    ra, rb = board.rows
    assert ra.winner == x and rb.winner == y  # B: y and z tie; the first listed wins
    assert ra.ratio[x][0] == 1.0
    # y/x per seed: 2, 1, 1 -> mean 4/3, sd sqrt(1/3), half-width t * sd / sqrt(3)
    assert ra.ratio[y][0] == pytest.approx(4 / 3)
    assert ra.ratio[y][1] == pytest.approx(T975_2 * math.sqrt(1 / 3) / math.sqrt(3))
    assert rb.ratio[x][0] == pytest.approx(2.0)
    assert ra.rank == {x: 1.0, y: 2.0} and rb.rank == {y: 1.5, z: 1.5, x: 3.0}
    overall = {o.scheduler: o for o in board.overall}
    assert [o.scheduler for o in board.overall] == [z, y, x]  # by mean rank
    assert (overall[x].mean_rank, overall[x].wins, overall[x].iqm) == (2.0, 1, 1.5)
    assert (overall[y].mean_rank, overall[y].wins, overall[y].iqm) == (1.75, 1, 1.0)
    assert (overall[z].mean_rank, overall[z].wins, overall[z].scenarios) == (1.5, 0, 1)
    assert board.per_world["contention"] == board.overall and board.per_world["elastic"] == []
    text = markdown(board)
    assert "| A | `lwf1_adasrsf` | 20 | 1.000" in text
    assert "`ls_adasrsf` n/a: cannot act here (1 scenario(s): A)" in text


def test_iqm_drops_a_quarter_at_each_end() -> None:
    assert iqm([1, 2, 3, 4, 100, -50, 5, 6]) == pytest.approx((2 + 3 + 4 + 5) / 4)
    assert iqm([3.0]) == 3.0
    assert math.isnan(iqm([]))


def test_a_users_registered_allocator_gets_its_row(
    tiny: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from envs.sim.elastic.allocators import ALLOCATORS, DRF

    class Mine(DRF):
        name = "mine_drf"

    monkeypatch.setitem(ALLOCATORS, "mine_drf", Mine)
    assert bench_run.resolve_schedulers(["mine_drf", "drf"]) == ["elastic:mine_drf", "elastic:drf"]
    got = run_suite(
        tiny, schedulers=["mine_drf", "drf"], out=tmp_path, only=["tiny-elastic"], log=_quiet
    )
    mine, drf = (got.cells[("tiny-elastic", s)] for s in ("elastic:mine_drf", "elastic:drf"))
    assert mine.status == "ok" and mine.jct == drf.jct  # DRF under another name: same runs
    with pytest.raises(BenchError, match="--import no_such_module_xyz: ModuleNotFoundError"):
        run_suite(tiny, out=tmp_path, imports=["no_such_module_xyz"], log=_quiet)


def test_a_ray_address_that_does_not_answer_is_one_line(tiny: str, tmp_path: Path) -> None:
    with pytest.raises(BenchError, match=r"--address 127\.0\.0\.1:1: no Ray head answers there"):
        run_suite(tiny, out=tmp_path, runner="ray", address="127.0.0.1:1", log=_quiet)
    assert not any(tmp_path.iterdir())


def test_the_command_writes_and_prints_the_board(
    tiny: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--suite", tiny, "--only", "tiny-contention", "--out", str(tmp_path)]
    assert main([*argv, "--schedulers", "lwf1_adasrsf", "ff_adasrsf"]) == 0
    out = capsys.readouterr().out
    root = tmp_path / f"tiny-{suite_version(TINY)}" / "testcode"
    assert {p.name for p in root.iterdir()} >= {"board.md", "board.csv", "heatmap.png"}
    assert (root / "board.md").read_text() in out
    assert "[1/1] tiny-contention: 2 ok, 0 n/a, 0 failed; runs 4/4 (4 run now)" in out
    assert (root / "heatmap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_policy_path_is_a_scheduler_of_its_kind() -> None:
    assert bench_run.resolve_schedulers(
        ["policies/medium_plan_pg", "policies/contention_exclusive_pg", "drf"]
    ) == ["policy:policies/medium_plan_pg", "contention:policies/contention_exclusive_pg",
          "elastic:drf"]  # fmt: skip
    assert "policy:policies/small_esrtf_gppo" in bench_run.default_schedulers()
    with pytest.raises(BenchError, match="'policies/no_such_policy'"):
        bench_run.resolve_schedulers(["policies/no_such_policy"])


def test_every_run_records_its_cpu_and_the_command_where_its_cpu_went(
    tiny: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    specs = ["elastic:drf", "policy:policies/medium_plan_pg", "lwf1_adasrsf", "bound:solo"]
    argv = ["--suite", tiny, "--out", str(tmp_path), "--no-plot", "--schedulers", *specs]
    assert main(argv) == 0
    out = capsys.readouterr().out
    root = tmp_path / f"tiny-{suite_version(TINY)}" / "testcode"
    cpus = []
    for record in sorted(root.glob("*/*/run.json")):
        for run in json.loads(record.read_text())["runs"]:
            assert isinstance(run["cpu_s"], float) and math.isfinite(run["cpu_s"])
            assert run["cpu_s"] >= 0.0
            cpus.append(run["cpu_s"])
    assert len(cpus) == 6  # drf, lwf1_adasrsf and bound:solo on 2 seeds (the policy is n/a)
    split = json.loads((root / CPU_FILE).read_text())
    assert set(split) == {"total", "start", *PHASES, "board", "other", "overhead"}
    assert split["runs"] == pytest.approx(sum(cpus))
    assert all(split[k] >= 0.0 for k in split)
    assert 0.0 < split["start"] < split["total"] and split["plan"] > 0.0
    assert split["overhead"] == pytest.approx(1 - split["runs"] / split["total"])
    assert f"overhead {100 * split['overhead']:.1f}%" in out
