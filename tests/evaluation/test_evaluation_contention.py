"""``contention:<policy>``, ``bound:solo`` and ``bound:capacity`` in ``evaluate.py``: policies
acting in ``dlsched/Contention-v0`` on the same prepared workloads as the engine's stacks, and
the bounds (each job alone; with the cluster's capacity).  Small scale (the shipped Ada-SRSF
workloads at 1/100), full fidelity."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
import torch as th

from agents.episode_pg import MaskedMLP, load_episode_pg, save_episode_pg
from envs.gym.contention_env import ContentionEnv
from envs.sim import ConfigError
from envs.sim.models import REFERENCE_MODELS
from envs.sim.spec import ClusterSpec, JobSpec, ModelProfile, Workload
from evaluation.config import ClusterConfig, EvaluateConfig
from evaluation.contention import ContentionKind
from evaluation.pipeline import evaluate, make_plan
from evaluation.workloads import prepare_workloads

ROOT = Path(__file__).resolve().parents[2]
RELEASED = ROOT / "policies" / "contention_exclusive_pg" / "policy.npz"


def _cfg(stacks: list[str], **kw: object) -> EvaluateConfig:
    return EvaluateConfig(stacks=stacks, seeds=[0], workers=1, plot=False, **kw)  # type: ignore[arg-type]


def _jobs(run_dir: Path, spec: str, seed: int = 0) -> list[dict[str, str]]:
    name = spec.replace(":", "-").replace("/", "-")
    with open(run_dir / f"jobs_{name}_seed{seed}.csv", newline="") as f:
        return list(csv.DictReader(f))


def _run(tmp_path: Path, stacks: list[str], name: str = "r") -> tuple[Path, dict[str, dict]]:
    run_dir = tmp_path / name
    rows = evaluate(_cfg(stacks), run_dir, {})
    return run_dir, {r["stack"]: r for r in rows if r["seed"] == "0"}


def test_the_srsf_teacher_gives_exactly_lwf1_srsf1s_jobs_and_the_bound_is_below_both(
    tmp_path: Path,
) -> None:
    # the teachers act in comm=srsf1: the SRSF rule with LWF-1 placement is LWF-1 + SRSF(1)
    run_dir, rows = _run(
        tmp_path, ["lwf1_srsf1", "contention:srsf", "bound:solo", "bound:capacity"]
    )
    stack, env = _jobs(run_dir, "lwf1_srsf1"), _jobs(run_dir, "contention:srsf")
    assert len(stack) == len(env) == 160
    for a, b in zip(stack, env, strict=True):
        for key in ("job_id", "num_gpus", "submit_s", "start_s", "finish_s", "ideal_s", "servers"):
            assert a[key] == b[key], key
    assert rows["contention:srsf"]["avg_jct_s"] == rows["lwf1_srsf1"]["avg_jct_s"]
    assert rows["contention:srsf"]["gpu_util_pct"] == rows["lwf1_srsf1"]["gpu_util_pct"]
    # each job alone: never slower than under a schedule, never faster than its compute
    bound = _jobs(run_dir, "bound:solo")
    for b, s in zip(bound, stack, strict=True):
        assert b["job_id"] == s["job_id"]
        assert float(b["ideal_s"]) - 1e-9 <= float(b["jct_s"]) <= float(s["jct_s"]) + 1e-9
    assert rows["bound:solo"]["avg_jct_s"] < rows["lwf1_srsf1"]["avg_jct_s"]
    # the cluster's capacity on top: no lower than each job alone, still below the schedule
    capacity = rows["bound:capacity"]["avg_jct_s"]
    assert rows["bound:solo"]["avg_jct_s"] <= capacity < rows["lwf1_srsf1"]["avg_jct_s"]
    record = json.loads((run_dir / "run.json").read_text())
    run = next(r for r in record["runs"] if r["stack"] == "contention:srsf")
    assert run["env"]["comm"] == "srsf1"
    assert run["episode"]["return"] == pytest.approx(-rows["contention:srsf"]["avg_jct_s"])


def test_the_exclusive_rule_is_deterministic_and_never_oversubscribes(tmp_path: Path) -> None:
    first, _ = _run(tmp_path, ["lwf1_srsf1", "contention:exclusive"], "a")
    again, _ = _run(tmp_path, ["contention:exclusive"], "b")
    a, b = _jobs(first, "contention:exclusive"), _jobs(again, "contention:exclusive")
    assert a == b
    # it waits instead of time-sharing: some job queues that LWF-1 + SRSF(1) starts at once
    stack = _jobs(first, "lwf1_srsf1")
    assert any(float(x["start_s"]) > float(s["start_s"]) for x, s in zip(a, stack, strict=True))
    # never more workers than GPUs at once
    events = sorted(
        [(float(j["start_s"]), int(j["num_gpus"])) for j in a]
        + [(float(j["finish_s"]), -int(j["num_gpus"])) for j in a]
    )
    assert max(np.cumsum([d for _, d in events])) <= 64


def test_the_released_policy_acts_through_evaluate_and_its_return_is_minus_avg_jct(
    tmp_path: Path,
) -> None:
    assert RELEASED.stat().st_size < 1_000_000
    assert "`contention_exclusive_pg`" in (ROOT / "policies" / "README.md").read_text()
    _, meta = load_episode_pg(RELEASED)
    assert meta["act"] == "argmax"
    assert meta["env"]["comm"] == "srsf1" and meta["env"]["num_servers"] == 16
    assert meta["training"]["seed"] == 0
    assert "--save-policy" in " ".join(meta["training"]["argv"])
    spec = f"contention:{RELEASED.parent}"  # the directory means its policy.npz
    run_dir, rows = _run(tmp_path, [spec])
    jobs = _jobs(run_dir, spec)
    assert len(jobs) == 160
    assert len({j["job_id"] for j in jobs}) == 160
    for j in jobs:
        sub, start, fin = float(j["submit_s"]), float(j["start_s"]), float(j["finish_s"])
        assert np.isfinite(fin) and sub <= start < fin
        assert float(j["jct_s"]) >= float(j["ideal_s"]) - 1e-9
    record = json.loads((run_dir / "run.json").read_text())
    episode = record["runs"][0]["episode"]
    assert rows[spec]["avg_jct_s"] == pytest.approx(-episode["return"], rel=1e-9)
    assert episode["avg_jct_s"] == pytest.approx(rows[spec]["avg_jct_s"], rel=1e-12)
    assert episode["decisions"] == 160  # every job started once, by the policy


def _saved(tmp_path: Path, **env_kw: object) -> Path:
    env = ContentionEnv(comm="srsf1", **env_kw)  # type: ignore[arg-type]
    th.manual_seed(0)
    net = MaskedMLP(env.obs_size, env.wait_action + 1, 8)
    return save_episode_pg(tmp_path / "p.npz", net, env, {"seed": 0})


def test_bad_policies_and_runs_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"neither a teacher .* not found"):
        make_plan(_cfg(["contention:nope"]))
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(ConfigError, match="corrupt"):
        make_plan(_cfg([f"contention:{bad}"]))
    foreign = tmp_path / "foreign.npz"
    np.savez(foreign, w=np.zeros(3))
    with pytest.raises(ConfigError, match="not a saved EpisodePG policy"):
        make_plan(_cfg([f"contention:{foreign}"]))
    # a policy for 16 servers on an 8-server cluster: the sizes are named
    path = _saved(tmp_path, J=5)
    cfg = _cfg([f"contention:{path}"], cluster=ClusterConfig(num_servers=8))
    with pytest.raises(ConfigError, match=r"takes 112 observations and 16 actions .* gives 80"):
        make_plan(cfg)
    with pytest.raises(ConfigError, match="mode=correct"):
        make_plan(_cfg(["contention:srsf"], mode="reference"))
    with pytest.raises(ConfigError, match="unknown bound 'best'"):
        make_plan(_cfg(["bound:best"]))


def test_a_workload_the_env_cannot_observe_is_refused_before_running(tmp_path: Path) -> None:
    ref = next(iter(REFERENCE_MODELS.values()))
    odd = ModelProfile("odd-net", ref.model_size_mb, ref.gpu_memory_mb, ref.batch_size,
                       ref.forward_ms, ref.backward_ms)  # fmt: skip
    w = Workload((JobSpec(0, 0.0, odd, 10, 1),), name="odd")
    prepared = prepare_workloads(_cfg(["contention:srsf"]), ClusterSpec(), False)
    prepared[0].workload = w
    with pytest.raises(ConfigError, match=r"contention:srsf: .*'odd-net'.* no observation column"):
        ContentionKind().check_workloads("srsf", prepared, ClusterSpec())


def test_a_saved_policy_round_trips_and_names_a_mismatch(tmp_path: Path) -> None:
    path = _saved(tmp_path, num_jobs=12)
    net, meta = load_episode_pg(path)
    env = ContentionEnv(comm="srsf1", num_jobs=12)
    assert meta["env"]["J"] == env.J and meta["obs_size"] == env.obs_size
    obs, _ = env.reset(seed=3)
    th.manual_seed(0)
    ref = MaskedMLP(env.obs_size, env.wait_action + 1, 8)
    assert net.act(env, obs) == ref.act(env, obs)
    for a, b in zip(net.state_dict().values(), ref.state_dict().values(), strict=True):
        assert th.equal(a, b)
    with pytest.raises(ConfigError, match="does not fit the env"):
        save_episode_pg(tmp_path / "q.npz", ref, ContentionEnv(comm="srsf1", J=4), {})
    with pytest.raises(ConfigError, match=r"\.npz file"):
        save_episode_pg(tmp_path / "q.pt", ref, env, {})
    with pytest.raises(ConfigError, match="not found"):
        load_episode_pg(tmp_path / "missing.npz")


def test_a_registered_contention_rule_is_an_evaluate_scheduler_and_a_teacher(
    tmp_path: Path,
) -> None:
    """A rule registered once (``contention_teacher``) runs as ``contention:<name>`` in
    ``evaluate.py`` and clones as a teacher, with no other file touched: here the SRSF rule
    with first-fit placement, which must give exactly the ``ff_srsf1`` stack's jobs."""
    from agents.episode_pg import teacher_data
    from envs.gym import contention_env as ce

    @ce.contention_teacher("srsf_ff_test")
    def srsf_ff(env: ContentionEnv) -> int:
        return ce.srsf_teacher(env, "ff")

    try:
        assert ce.teacher("srsf_ff_test") is srsf_ff
        run_dir, rows = _run(tmp_path, ["ff_srsf1", "contention:srsf_ff_test"])
        stack, env = _jobs(run_dir, "ff_srsf1"), _jobs(run_dir, "contention:srsf_ff_test")
        assert [(a["job_id"], a["finish_s"]) for a in stack] == [
            (b["job_id"], b["finish_s"]) for b in env
        ]
        assert rows["contention:srsf_ff_test"]["avg_jct_s"] == rows["ff_srsf1"]["avg_jct_s"]
        small = ContentionEnv(num_jobs=8)
        obs, masks, acts = teacher_data(small, srsf_ff, [1])
        assert len(obs) == len(masks) == len(acts)
        assert len(acts) > 0 and all(masks[i][a] for i, a in enumerate(acts))
        with pytest.raises(ConfigError, match="registered twice"):
            ce.contention_teacher("srsf_ff_test")(srsf_ff)
    finally:
        ce.CONTENTION_TEACHERS.pop("srsf_ff_test", None)
    with pytest.raises(ConfigError, match=r"unknown Contention-v0 teacher 'srsf_ff_test'; known: "):
        ce.teacher("srsf_ff_test")
