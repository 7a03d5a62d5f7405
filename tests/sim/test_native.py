"""The native event loop (envs/sim/_native.c) against the Python engine, its specification.

Every number must be the same, bit for bit: per-job start and finish times and server
counts, on every Ada-SRSF stack and the other policy combinations the native loop covers,
on the shipped workloads, on non-integer (paper and jittered) timings, FAST fidelity, other
cluster shapes and network constants.  Anything it does not cover must fall back to Python
(``engine="auto"``) or be refused with the reason (``engine="native"``).

Without a C compiler the extension is not built and these tests skip, unless
``DLSCHED_REQUIRE_NATIVE=1`` (set by ``.ci/run``), which makes a missing build a failure.
"""

from __future__ import annotations

import os
from dataclasses import replace

import pytest

from envs.sim import (
    ClusterSpec,
    ConfigError,
    Fidelity,
    FidelityOptions,
    JobSpec,
    ModelOptions,
    NetworkSpec,
    QuirkOptions,
    RunOptions,
    SimConfig,
    SimResult,
    Workload,
    simulate,
)
from envs.sim import native as native_mod
from envs.sim.models import PAPER_MODELS
from envs.sim.stacks import STACKS, make_stack
from envs.sim.workload import builtin_ada_srsf, jitter_compute, scale_workload

if not native_mod.available():
    if os.environ.get("DLSCHED_REQUIRE_NATIVE") == "1":
        raise RuntimeError(
            "DLSCHED_REQUIRE_NATIVE=1 but envs.sim._native is not built or stale: "
            f"{native_mod.unsupported(builtin_ada_srsf(0), make_stack('ff_fs'), SimConfig())}"
        )
    pytest.skip("native extension not built (no C compiler at install)", allow_module_level=True)

CLUSTER = ClusterSpec()
#: the paper's stacks and the other combinations the native loop implements
EXTRA = ("fifo:lwf2_srsf2", "ff_fs", "ls_srsf2", "fifo:rand_adasrsf", "lwf2_adasrsf")


def _pair(cluster: ClusterSpec, w: Workload, stack: str, cfg: SimConfig) -> SimResult:
    """Run on both engines, require identical per-job numbers, return the native result."""
    nat = simulate(cluster, w, stack, cfg.override(engine="native"))
    py = simulate(cluster, w, stack, cfg.override(engine="python"))
    assert nat.extra["engine"] == "native" and "engine" not in py.extra
    key = [(r.job_id, r.start_ms, r.finish_ms, r.servers) for r in nat.records]
    assert key == [(r.job_id, r.start_ms, r.finish_ms, r.servers) for r in py.records], stack
    assert nat.makespan_ms == py.makespan_ms
    assert nat.summary() == py.summary()
    assert nat.extra["iterations_per_step"] == py.extra["iterations_per_step"]
    return nat


#: each stack on two of the three shipped workloads, the pair turning with the stack (every
#: workload meets two thirds of the stacks)
SHIPPED = [(stack, (i + k) % 3) for i, stack in enumerate([*STACKS, *EXTRA]) for k in (0, 1)]


@pytest.mark.parametrize(("stack", "seed"), SHIPPED)
def test_same_as_python_on_shipped_workloads(stack: str, seed: int) -> None:
    res = _pair(CLUSTER, builtin_ada_srsf(seed), stack, SimConfig())
    assert len(res.records) == 160 and res.events > 0


@pytest.mark.parametrize("stack", [*STACKS, "fifo:lwf2_srsf2"])
def test_same_as_python_fast_fidelity(stack: str) -> None:
    w = scale_workload(builtin_ada_srsf(1), 5, 5)
    res = _pair(
        CLUSTER,
        w,
        stack,
        SimConfig(fidelity=FidelityOptions(level=Fidelity.FAST, fast_min_steps=10)),
    )
    assert res.extra["iterations_per_step"] > 1


@pytest.mark.parametrize("stack", list(STACKS))
def test_same_as_python_on_float_timings(stack: str) -> None:
    """Table III's non-integer times (jittered too): every rounding must match."""
    base = scale_workload(builtin_ada_srsf(2), 3, 3)
    jobs = tuple(replace(j, model=PAPER_MODELS[j.model.name]) for j in base.jobs)
    w = Workload(jobs, name="paper-times")
    _pair(CLUSTER, w, stack, SimConfig())
    _pair(CLUSTER, jitter_compute(w, 0.01, seed=3), stack, SimConfig())


@pytest.mark.parametrize("stack", ["lwf1_adasrsf", "rand_adasrsf", "lwf2_srsf2", "ls_adasrsf"])
def test_same_as_python_on_other_clusters(stack: str) -> None:
    """Another cluster shape, less memory (more queueing), latency ``a`` > 0 (sync events),
    other contention constants, the inclusive AdaDUAL test and another RAND seed."""
    cluster = ClusterSpec(
        num_servers=6,
        gpus_per_server=2,
        gpu_memory_mb=16384.0,
        network=NetworkSpec(a_ms=3.5, b_ms_per_mb=0.5, eta_ms_per_mb=0.4),
    )
    w = builtin_ada_srsf(0)
    jobs = tuple(replace(j, num_gpus=min(j.num_gpus, 4)) for j in w.jobs[:80])
    w = Workload(jobs, name="small")
    _pair(cluster, w, stack, SimConfig(model=ModelOptions(seed=7)))
    _pair(
        cluster,
        w,
        stack,
        SimConfig(quirks=QuirkOptions(adadual_inclusive=True, lwf_comm_ms_per_mb=7.8125)),
    )


def test_rand_uses_the_run_seed() -> None:
    w = builtin_ada_srsf(0)
    a = _pair(CLUSTER, w, "rand_adasrsf", SimConfig(model=ModelOptions(seed=1)))
    b = _pair(CLUSTER, w, "rand_adasrsf", SimConfig(model=ModelOptions(seed=2)))
    assert [r.finish_ms for r in a.records] != [r.finish_ms for r in b.records]


def test_auto_picks_native_where_it_can_and_python_elsewhere() -> None:
    w = builtin_ada_srsf(0)
    assert simulate(CLUSTER, w, "lwf1_srsf1", SimConfig()).extra["engine"] == "native"
    for cfg in (
        SimConfig.reference(),  # ticks and the reference's quirks
        SimConfig(run=RunOptions(check_invariants=True)),  # debug invariants are Python's
    ):
        assert "engine" not in simulate(CLUSTER, w, "ff_adasrsf", cfg).extra
    # JOB fidelity, preemptive orders, Tiresias placers
    job_level = SimConfig(fidelity=FidelityOptions(level=Fidelity.JOB))
    assert "engine" not in simulate(CLUSTER, w, "srsf:count_fs", job_level).extra
    assert "engine" not in simulate(CLUSTER, w, "psrsf:count_fs", SimConfig()).extra


@pytest.mark.parametrize(
    ("cfg", "stack", "why"),
    [
        (SimConfig.reference(engine="native"), "ff_adasrsf", "tick_ms"),
        (
            SimConfig(
                fidelity=FidelityOptions(level=Fidelity.JOB), run=RunOptions(engine="native")
            ),
            "ff_adasrsf",
            "fidelity",
        ),
        (SimConfig(run=RunOptions(engine="native")), "dlas:skew_fs", "job order"),
        (SimConfig(run=RunOptions(engine="native")), "srsf:count_fs", "placer"),
    ],
)
def test_native_refuses_what_it_does_not_cover(cfg: SimConfig, stack: str, why: str) -> None:
    with pytest.raises(ConfigError, match=f"engine='native' cannot run this: .*{why}"):
        simulate(CLUSTER, builtin_ada_srsf(0), stack, cfg)


def test_native_refuses_parameter_server_jobs() -> None:
    from envs.sim import CommArch

    w = builtin_ada_srsf(0)
    j0 = w.jobs[0]
    ps = JobSpec(j0.job_id, j0.submit_ms, j0.model, j0.iterations, 2, CommArch.PS, num_ps=1)
    w = Workload((ps, *w.jobs[1:]), name="with-ps")
    with pytest.raises(ConfigError, match="parameter-server"):
        simulate(CLUSTER, w, "ff_adasrsf", SimConfig(run=RunOptions(engine="native")))
    assert "engine" not in simulate(CLUSTER, w, "ff_adasrsf", SimConfig()).extra


def test_used_lwf_placer_is_not_taken_native() -> None:
    w = builtin_ada_srsf(0)
    stack = make_stack("lwf1_adasrsf")
    stack.placer.server_order(  # type: ignore[attr-defined]
        type("V", (), {"spec": CLUSTER, "load_ms": [0.0] * CLUSTER.num_gpus})()
    )
    assert native_mod.unsupported(w, stack, SimConfig()) is not None


def test_unknown_engine_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="engine must be"):
        SimConfig(run=RunOptions(engine="cuda"))


def test_missing_build_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(native_mod, "_native", None)
    w = builtin_ada_srsf(0)
    assert "engine" not in simulate(CLUSTER, w, "lwf1_srsf1", SimConfig()).extra
    with pytest.raises(ConfigError, match="not built"):
        simulate(CLUSTER, w, "lwf1_srsf1", SimConfig(run=RunOptions(engine="native")))


def test_stale_build_is_not_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """A module built from an older ``_native.c`` would shadow the edit: it is not used."""
    assert native_mod._native.SOURCE_SHA256 != "unknown"  # setup.py records the source hash
    monkeypatch.setattr(native_mod, "_STALE", True)
    assert not native_mod.available()
    with pytest.raises(ConfigError, match="stale build"):
        simulate(CLUSTER, builtin_ada_srsf(0), "ff_fs", SimConfig(run=RunOptions(engine="native")))


def test_impossible_job_is_refused_before_the_native_loop() -> None:
    w = builtin_ada_srsf(0)
    big = replace(w.jobs[0], num_gpus=CLUSTER.num_gpus + 1)
    with pytest.raises(Exception, match=str(big.job_id)):
        simulate(
            CLUSTER,
            Workload((big,), name="big"),
            "ff_adasrsf",
            SimConfig(run=RunOptions(engine="native")),
        )


def test_ctrl_c_stops_a_native_run() -> None:
    """SIGINT reaches a run inside the C loop (it checks Python's signal handlers every few
    thousand time steps): the process ends with KeyboardInterrupt instead of finishing a run
    that would take hours.  A loop that ignored it would hit the communicate() limit."""
    import signal
    import subprocess
    import sys
    import time

    child = (
        "from envs.sim import ClusterSpec, SimConfig, simulate\n"
        "from envs.sim.workload import generate_ada_srsf\n"
        "w = generate_ada_srsf(0, iterations_scale=1e6)\n"  # ~hours natively
        "print('started', flush=True)\n"
        "cfg = SimConfig.from_flat(engine='native')\n"
        "simulate(ClusterSpec(16, 4), w, 'lwf1_adasrsf', cfg)\n"
        "print('finished', flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", child],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # a shell that backgrounds the tests makes children ignore SIGINT: restore it
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
        time.sleep(1.0)  # inside the native loop by now
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "finished" not in out
    assert "KeyboardInterrupt" in err
    assert proc.returncode != 0


@pytest.mark.parametrize("engine", ["native", "python"])
def test_wall_clock_budget_stops_a_run_with_a_clear_error(
    engine: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``SimConfig.run.max_wall_s``: a run that would take hours stops with a SimulationError that
    says how far it got, on both engines; ``progress_s`` prints heartbeats meanwhile."""
    from envs.sim import simulate
    from envs.sim.errors import SimulationError
    from envs.sim.workload import generate_ada_srsf

    w = generate_ada_srsf(0, iterations_scale=1e5)
    cfg = SimConfig(run=RunOptions(engine=engine, max_wall_s=0.5, progress_s=0.1))
    with pytest.raises(SimulationError, match=r"wall-clock budget of 0.5 s spent at simulated"):
        simulate(ClusterSpec(16, 4), w, "lwf1_adasrsf", cfg)
    beats = [ln for ln in capsys.readouterr().err.splitlines() if "jobs finished" in ln]
    assert beats and all(ln.startswith("ada-srsf-gen-seed0 under lwf1_adasrsf: ") for ln in beats)
