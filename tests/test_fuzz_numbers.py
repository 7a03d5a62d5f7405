"""Every numeric input, fuzzed with NaN, +-inf, huge, tiny, zero and negative values, through
every trace reader (and the conversion to simulator jobs), every config dataclass and a few
end-to-end runs: each case ends in a clear error (a :class:`DlschedError` whose message names
the file/row or the key) or in a run whose every figure is finite.  Nothing may hang: the
suite runs under pytest-timeout (``pyproject.toml``), and the end-to-end runs carry a
wall-clock budget as well.

The counts per outcome are printed by ``python tests/test_fuzz_numbers.py``
(docs/experiments/reliability.md quotes them).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from envs.sim import (
    ClusterSpec,
    DlschedError,
    ModelOptions,
    NetworkSpec,
    QuirkOptions,
    RunOptions,
    SimConfig,
    simulate,
)
from envs.sim.config import TiresiasConfig
from envs.sim.traces import ConvertOptions, convert_trace, read_trace

BAD = ["nan", "inf", "-inf", "1e308", "1e400", "1e-308", "0", "-1", "-0.0"]

#: layout -> (header, one valid row, the numeric columns to fuzz)
LAYOUTS: dict[str, tuple[str, str, list[str]]] = {
    "normalised": (
        "job_id,submit_time_s,duration_s,num_gpus,job_type,gpu_milli",
        "a,10,3600,2,resnet50,1000",
        ["submit_time_s", "duration_s", "num_gpus", "gpu_milli"],
    ),
    "philly_digest": (
        "timestamp,duration,num_gpus,gpu_time,cluster",
        "1506816000,3600,2,7200,6214e9",
        ["timestamp", "duration", "num_gpus", "gpu_time"],
    ),
    "alibaba_gpu": (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
        "creation_time,deletion_time,scheduled_time",
        "pod-a,8000,1024,1,1000,,BE,Succeeded,100,3700,200",
        ["num_gpu", "gpu_milli", "creation_time", "deletion_time", "scheduled_time"],
    ),
    "helios": (
        "job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,"
        "duration,queue",
        "j1,u1,vc1,n,8,16,1,COMPLETED,2020-04-01 00:00:10,2020-04-01 00:00:20,"
        "2020-04-01 01:00:20,3600,10",
        ["gpu_num", "duration"],
    ),
    "tiresias": (
        "job_id,num_gpu,submit_time,duration,model_name",
        "1,4,100,3600,vgg16",
        ["num_gpu", "submit_time", "duration"],
    ),
    "pollux": (
        "name,time,application,num_replicas,batch_size",
        "bert-0,107,bert,4,96",
        ["time", "num_replicas", "batch_size"],
    ),
}


def _cases() -> list[tuple[str, str, str]]:
    return [(lay, col, v) for lay, (_, _, cols) in LAYOUTS.items() for col in cols for v in BAD]


def _finite_workload(path: Path) -> str:
    """``"error"`` (a clear one) or ``"ok"`` (every job time finite); anything else fails."""
    try:
        trace = read_trace(path)
        workload, _ = convert_trace(trace, seed=0, options=ConvertOptions(max_iterations=1000))
    except DlschedError as exc:
        assert path.name in str(exc) or "trace" in str(exc) or "job" in str(exc), exc
        return "error"
    for job in workload.jobs:
        assert math.isfinite(job.submit_ms) and job.submit_ms >= 0
        assert job.iterations >= 1 and job.num_gpus >= 1
    return "ok"


def _write_case(directory: Path, layout: str, column: str, value: str) -> Path:
    """A one-job trace of ``layout`` whose ``column`` holds ``value``."""
    header, row, _ = LAYOUTS[layout]
    cells = row.split(",")
    cells[header.split(",").index(column)] = value
    path = directory / "t.csv"
    path.write_text(f"{header}\n{','.join(cells)}\n")
    return path


@pytest.mark.parametrize(("layout", "column", "value"), _cases())
def test_trace_readers_refuse_or_convert_finitely(
    tmp_path: Path, layout: str, column: str, value: str
) -> None:
    _finite_workload(_write_case(tmp_path, layout, column, value))


def _sim_configs() -> list[tuple[str, Callable[[float], Any]]]:
    return [
        ("network.a_ms", lambda v: NetworkSpec(a_ms=v)),
        ("network.b_ms_per_mb", lambda v: NetworkSpec(b_ms_per_mb=v)),
        ("network.eta_ms_per_mb", lambda v: NetworkSpec(eta_ms_per_mb=v)),
        ("cluster.gpu_memory_mb", lambda v: ClusterSpec(gpu_memory_mb=v)),
        ("cluster.host_memory_gb_per_server", lambda v: ClusterSpec(host_memory_gb_per_server=v)),
        ("tick_ms", lambda v: SimConfig(quirks=QuirkOptions(tick_ms=v))),
        ("preemption_cost_ms", lambda v: SimConfig(model=ModelOptions(preemption_cost_ms=v))),
        ("max_wall_s", lambda v: SimConfig(run=RunOptions(max_wall_s=v))),
        ("progress_s", lambda v: SimConfig(run=RunOptions(progress_s=v))),
        ("promote_knob", lambda v: TiresiasConfig(promote_knob=v)),
        ("gittins_delta_gpu_s", lambda v: TiresiasConfig(gittins_delta_gpu_s=v)),
        ("time_unit", lambda v: ConvertOptions(time_unit=v)),
    ]


@pytest.mark.parametrize("value", [float(v) for v in BAD])
@pytest.mark.parametrize(("key", "make"), _sim_configs(), ids=[k for k, _ in _sim_configs()])
def test_config_numbers_refuse_non_finite(
    key: str, make: Callable[[float], Any], value: float
) -> None:
    """Non-finite values are refused naming the key; finite ones build or are refused."""
    try:
        make(value)
    except DlschedError as exc:
        assert key.split(".")[-1] in str(exc), exc
        return
    assert math.isfinite(value), f"{key}={value} was accepted"


@pytest.mark.parametrize("value", [1e-9, 1e9, 1e-300])
@pytest.mark.parametrize("key", ["a_ms", "b_ms_per_mb", "eta_ms_per_mb"])
def test_extreme_but_finite_network_runs_finish_finitely(key: str, value: float) -> None:
    """Extreme finite constants either run to a finite result or stop with a clear error
    (here, within a wall-clock budget); never a NaN or inf figure."""
    from envs.sim.workload import builtin_ada_srsf

    try:
        net = NetworkSpec(**{key: value})
        res = simulate(
            ClusterSpec(network=net),
            builtin_ada_srsf(0),
            "lwf1_adasrsf",
            SimConfig(run=RunOptions(max_wall_s=60.0)),
        )
    except DlschedError:
        return
    summary = res.summary()
    assert all(math.isfinite(float(v)) for v in summary.values() if isinstance(v, float))


def _counts() -> Counter[str]:  # pragma: no cover - the report command
    import tempfile

    out: Counter[str] = Counter()
    with tempfile.TemporaryDirectory() as d:
        for layout, column, value in _cases():
            out[f"trace {_finite_workload(_write_case(Path(d), layout, column, value))}"] += 1
    for _key, make in _sim_configs():
        for v in BAD:
            try:
                make(float(v))
                out["config accepted (finite)"] += 1
            except DlschedError:
                out["config error"] += 1
    return out


if __name__ == "__main__":  # pragma: no cover
    for k, n in sorted(_counts().items()):
        print(f"{k}: {n}")


@pytest.mark.parametrize(
    "override",
    [
        "cluster.network.b_ms_per_mb=nan",
        "cluster.network.a_ms=inf",
        "cluster.gpu_memory_mb=nan",
        "max_wall_s=nan",
        "workload=generated workload.iterations_scale=1e400",
        "workload=env stacks=[elastic:drf] workload.env.max_slots=-1",
    ],
)
def test_evaluate_py_bad_numbers_exit_2_with_one_line(tmp_path: Path, override: str) -> None:
    from tests.cli import run_script

    proc = run_script(
        "evaluate.py", *override.split(), "workers=1", "plot=false", f"out_dir={tmp_path / 'r'}"
    )
    assert proc.returncode == 2, proc.stdout[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "Traceback" not in proc.stderr
