"""What the benchmark builds once per process instead of once per cell (evaluation's memos)
gives what a fresh build gives; every run records its CPU, the command where its CPU went."""

from __future__ import annotations

import functools
import json
import os
import shutil
from collections import OrderedDict
from pathlib import Path

import pytest

from envs.gym.episode import run_episode
from envs.gym.factory import EnvConfig, make_env
from envs.sim.elastic.allocators import allocator_from_label
from envs.sim.traces import options as trace_options
from envs.sim.traces.model import Repairs
from envs.sim.traces.options import TraceConfig, trace_window
from envs.sim.traces.readers import read_trace
from envs.sim.traces.transform import prepare
from evaluation import env_runs, policy, workloads
from evaluation.bench import run as bench_run
from evaluation.bench.scenarios import SUITES
from evaluation.compose import compose
from evaluation.pipeline import make_plan

ROOT = Path(__file__).resolve().parents[2]
PHILLY = ROOT / "envs" / "sim" / "data" / "traces" / "philly_vc_6c71a0_public.csv"


@pytest.fixture(autouse=True)
def empty_memos(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts with this process's memos empty (and leaves the others' alone)."""
    monkeypatch.setattr(trace_options, "_TRACES", OrderedDict())
    monkeypatch.setattr(workloads, "_PREPARED", OrderedDict())
    monkeypatch.setattr(env_runs, "_TRACE_JOBS", OrderedDict())
    monkeypatch.setattr(policy, "_METAS", OrderedDict())


def _episode(env: object) -> tuple[float, int]:
    actor = env_runs.allocator_actor(functools.partial(allocator_from_label, "drf"))
    run = run_episode(env, actor(env, 0), 0)  # type: ignore[arg-type]
    return run.ret, run.steps


def test_a_trace_env_from_the_memoised_jobs_is_the_env_a_fresh_build_gives() -> None:
    options = TraceConfig(max_jobs=40)
    first = EnvConfig(setting="tiny", trace=str(PHILLY), trace_options=options)
    other = EnvConfig(setting="tiny", trace=str(PHILLY), trace_options=options, reward="jct")
    env_runs.fresh_env(first)  # reads the trace
    assert len(env_runs._TRACE_JOBS) == 1
    memoised = env_runs.fresh_env(other)  # another reward, the same jobs: not read again
    assert len(env_runs._TRACE_JOBS) == 1
    fresh = make_env(other)
    assert type(memoised) is type(fresh) and memoised.reward_mode == fresh.reward_mode == "jct"
    assert memoised.fixed_jobs == fresh.fixed_jobs and len(fresh.fixed_jobs or ()) == 40
    assert _episode(memoised) == _episode(fresh)
    # another window of the same file is another set of jobs
    env_runs.fresh_env(EnvConfig(setting="tiny", trace=str(PHILLY),
                                 trace_options=TraceConfig(max_jobs=20)))  # fmt: skip
    assert len(env_runs._TRACE_JOBS) == 2


def _cfg(overrides: list[str], seeds: list[int]) -> object:
    cfg, _ = compose(overrides, {"seeds": seeds, "stacks": ["lwf1_adasrsf"]})
    return cfg


def test_memoised_workloads_equal_a_fresh_build_and_each_plan_has_its_own_records() -> None:
    tiresias = next(s for s in SUITES["v1"] if s.name == "tiresias-60")
    cfg = _cfg(list(tiresias.overrides), [0, 1])
    a, b = make_plan(cfg), make_plan(cfg)  # type: ignore[arg-type]
    assert len(workloads._PREPARED) == 1 and len(trace_options._TRACES) == 1
    fresh = workloads._prepare(cfg, a.cluster, need_elastic=False)  # type: ignore[arg-type]
    for got in (a.prepared, b.prepared):
        assert [p.workload for p in got] == [p.workload for p in fresh]
        assert [p.record for p in got] == [p.record for p in fresh]
    assert all(p.record is not q.record for p, q in zip(a.prepared, b.prepared, strict=True))
    a.prepared[0].record["mine"] = 1
    assert "mine" not in make_plan(cfg).prepared[0].record  # type: ignore[arg-type]
    # other seeds are other workloads
    make_plan(_cfg(list(tiresias.overrides), [2]))  # type: ignore[arg-type]
    assert len(workloads._PREPARED) == 2 and len(trace_options._TRACES) == 1


def test_windows_of_a_memoised_read_are_the_windows_of_a_fresh_read() -> None:
    gpus = 64
    for window in ("workload.trace.max_jobs=30", "workload.trace.target_load=2.0"):
        cfg = _cfg(["workload.kind=trace", f"workload.path={PHILLY}", window], [0])
        w = cfg.workload  # type: ignore[attr-defined]
        unread = read_trace(PHILLY, format=w.trace.format, repairs=Repairs())
        assert workloads.load_trace(w, gpus) == prepare(unread, trace_window(w.trace), gpus)
    assert len(trace_options._TRACES) == 1  # one read for both windows


def test_the_env_and_the_contention_world_share_one_read_of_a_trace() -> None:
    cfg = _cfg(["workload.kind=trace", f"workload.path={PHILLY}", "workload.trace.max_jobs=30"],
               [0])  # fmt: skip
    workloads.load_trace(cfg.workload, 64)  # type: ignore[attr-defined]
    assert len(trace_options._TRACES) == 1
    env = make_env(EnvConfig(setting="tiny", trace=str(PHILLY),
                             trace_options=TraceConfig(max_jobs=20)))  # fmt: skip
    assert len(trace_options._TRACES) == 1 and len(env.fixed_jobs or ()) == 20


def test_an_edited_trace_file_is_read_again(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    shutil.copy(PHILLY, path)
    overrides = ["workload.kind=trace", f"workload.path={path}", "workload.trace.max_jobs=30"]
    cfg = _cfg(overrides, [0])
    assert make_plan(cfg).prepared[0].num_jobs == 30  # type: ignore[arg-type]
    lines = PHILLY.read_text().splitlines()
    path.write_text("\n".join(lines[:11]) + "\n")  # 10 jobs now
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert make_plan(cfg).prepared[0].num_jobs == 10  # type: ignore[arg-type]


def test_a_policy_files_metadata_is_read_once_and_handed_out_as_copies() -> None:
    path = ROOT / "policies" / "medium_plan_pg"
    first = policy.checkpoint_meta(path)
    assert len(policy._METAS) == 1
    first["env"] = "changed"
    again = policy.checkpoint_meta(path)
    assert again["env"] != "changed" and len(policy._METAS) == 1


def test_a_cells_config_is_what_composing_its_own_values_gives(tmp_path: Path) -> None:
    sc = next(s for s in SUITES["v1"] if s.name == "philly-e13805-load1-x1-elastic")
    d = tmp_path / "cell"
    runner = {"kind": "local", "address": None}
    for spec in ("elastic:drf", "policy:policies/medium_plan_pg"):
        cfg, resolved = bench_run._cell_config(sc, spec, d, 1, runner)
        values = {"stacks": [spec], "seeds": list(sc.seeds), "workers": 1, "runner": runner,
                  "plot": False, "progress_s": None, "out_dir": str(d), "resume": True}  # fmt: skip
        want_cfg, want = compose(sc.overrides, values)
        assert cfg == want_cfg and resolved == want
        assert json.dumps(resolved) == json.dumps(want)  # the same keys in the same order
