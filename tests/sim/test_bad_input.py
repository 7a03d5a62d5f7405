"""Bad names and impossible specifications raise ConfigError / WorkloadError whose message
names the offending token or job."""

from __future__ import annotations

import math
import re

import pytest

from envs.sim import (
    ClusterSpec,
    ConfigError,
    DlschedError,
    JobSpec,
    ModelOptions,
    ModelProfile,
    NetworkSpec,
    QuirkOptions,
    RunOptions,
    SimConfig,
    Workload,
    WorkloadError,
    make_stack,
    simulate,
)

MODEL = ModelProfile("m", 10.0, 10.0, 1, 1.0, 1.0)
ONE_JOB = Workload((JobSpec(0, 0.0, MODEL, 1, 1),))


@pytest.mark.parametrize(
    "name, token",
    [
        ("ff_bogus", "bogus"),  # unknown communication scheduler
        ("ff_srsf", "srsf"),  # srsf needs its n
        ("ff_ada", "ada"),
        ("xyz_adasrsf", "xyz"),  # unknown placement
        ("lwf_adasrsf", "lwf"),  # lwf needs its κ
        ("random_adasrsf", "random"),  # the reference's spelling is not ours
        ("lifo:ff_fs", "lifo"),  # unknown job order
        ("nonsense", "nonsense"),  # malformed
        ("ff-adasrsf", "ff-adasrsf"),
        ("FF_ADASRSF", "FF_ADASRSF"),
        ("ff_adasrsf_extra", "ff_adasrsf_extra"),
        ("", "''"),
        ("ssf-lwf1-srsf-1-true", "ssf-lwf1-srsf-1-true"),
    ],
)
def test_bad_stack_name(name: str, token: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(token)):
        make_stack(name)
    with pytest.raises(ConfigError, match=re.escape(token)):
        simulate(ClusterSpec(num_servers=1, gpus_per_server=1), ONE_JOB, name)


@pytest.mark.parametrize("name", ["ff_srsf0", "lwf0_adasrsf"])
def test_zero_parameter_in_stack_name(name: str) -> None:
    with pytest.raises(ConfigError, match="got 0"):
        make_stack(name)


def test_stack_of_wrong_type() -> None:
    with pytest.raises(ConfigError, match="int"):
        simulate(ClusterSpec(num_servers=1, gpus_per_server=1), ONE_JOB, 42)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["fast", "Reference", "reference-fixed-probe", ""])
def test_unknown_named_mode(mode: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(repr(mode))):
        SimConfig.named(mode)


def test_named_modes_are_the_documented_ones() -> None:
    assert SimConfig.named("correct") == SimConfig()
    assert SimConfig.named("reference") == SimConfig.reference()
    assert SimConfig.named("reference_fixed_probe") == SimConfig.reference_fixed_probe()
    assert SimConfig.named("reference", seed=3).model.seed == 3


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"probe_side_effect": True}, "probe_side_effect needs tick_ms"),
        ({"lagged_release": True}, "lagged_release needs tick_ms"),
        ({"tick_ms": 0.0}, "tick_ms must be > 0"),
        ({"tick_ms": -1.0}, "tick_ms must be > 0"),
    ],
)
def test_inconsistent_sim_config(kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        SimConfig.from_flat(**kwargs)


def test_unknown_sim_config_override() -> None:
    with pytest.raises(ConfigError, match=r"unknown SimConfig key 'tick'.*'tick_ms'"):
        SimConfig.reference(tick=2.0)


@pytest.mark.parametrize(
    "kwargs", [{"num_servers": 0}, {"gpus_per_server": 0}, {"num_servers": -3}]
)
def test_cluster_needs_servers_and_gpus(kwargs: dict[str, int]) -> None:
    with pytest.raises(ConfigError, match="cluster needs >= 1 server"):
        ClusterSpec(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("mem", [0.0, -1.0])
def test_cluster_needs_gpu_memory(mem: float) -> None:
    with pytest.raises(ConfigError, match="gpu_memory_mb must be > 0"):
        ClusterSpec(gpu_memory_mb=mem)


@pytest.mark.parametrize("b", [0.0, -0.856])
def test_network_needs_positive_b(b: float) -> None:
    with pytest.raises(ConfigError, match=r"b_ms_per_mb must be > 0, got " + re.escape(str(b))):
        NetworkSpec(b_ms_per_mb=b)


@pytest.mark.parametrize("kwargs", [{"eta_ms_per_mb": -0.1}, {"a_ms": -1.0}])
def test_network_needs_non_negative_eta_and_a(kwargs: dict[str, float]) -> None:
    with pytest.raises(ConfigError):
        NetworkSpec(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"iterations": 0}, "iterations must be >= 1, got 0"),
        ({"iterations": -5}, "iterations must be >= 1"),
        ({"num_gpus": 0}, "num_gpus must be >= 1, got 0"),
        ({"submit_ms": -1.0}, "submit_ms must be >= 0, got -1.0"),
        ({"submit_ms": math.nan}, "submit_ms must be a finite number, got nan"),
        ({"submit_ms": math.inf}, "submit_ms must be a finite number, got inf"),
    ],
)
def test_bad_job_spec_names_the_job(kwargs: dict[str, float], words: str) -> None:
    base: dict[str, object] = {
        "job_id": 42,
        "submit_ms": 0.0,
        "model": MODEL,
        "iterations": 1,
        "num_gpus": 1,
    }
    base.update(kwargs)
    with pytest.raises(WorkloadError, match=re.escape(f"job 42: {words}")):
        JobSpec(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize(
    "make, key",
    [
        (lambda v: NetworkSpec(b_ms_per_mb=v), "network.b_ms_per_mb"),
        (lambda v: NetworkSpec(eta_ms_per_mb=v), "network.eta_ms_per_mb"),
        (lambda v: NetworkSpec(a_ms=v), "network.a_ms"),
        (lambda v: ClusterSpec(gpu_memory_mb=v), "cluster.gpu_memory_mb"),
        (lambda v: SimConfig(quirks=QuirkOptions(tick_ms=v)), "tick_ms"),
        (lambda v: SimConfig(model=ModelOptions(preemption_cost_ms=v)), "preemption_cost_ms"),
        (lambda v: SimConfig(run=RunOptions(max_wall_s=v)), "max_wall_s"),
    ],
)
def test_non_finite_numbers_are_refused_by_name(make: object, key: str, value: float) -> None:
    """NaN passes a bare ``x <= 0`` check (and used to hang the native engine); every numeric
    field refuses NaN and +-inf with its key in the message."""
    with pytest.raises(ConfigError, match=re.escape(key)):
        make(value)  # type: ignore[operator]


@pytest.mark.parametrize(
    "row, words",
    [
        ("b,1e308,100,2,vgg16", "submit time 1e+308 s x time_unit 1000 is not a finite number"),
        ("b,10,1e308,2,vgg16", "duration 1e+308 s x time_unit 1000 is not a finite number"),
    ],
)
def test_trace_overflow_after_unit_conversion_names_file_and_line(
    tmp_path: object, row: str, words: str
) -> None:
    from pathlib import Path

    from envs.sim.traces import convert_trace, read_trace

    path = Path(str(tmp_path)) / "t.csv"
    path.write_text(
        f"job_id,submit_time_s,duration_s,num_gpus,job_type\na,0,100,1,resnet50\n{row}\n"
    )
    with pytest.raises(WorkloadError, match=re.escape(f"t.csv, line 3 (job 'b'): {words}")):
        convert_trace(read_trace(path), seed=0)


@pytest.mark.parametrize("field", ["model_size_mb", "gpu_memory_mb", "forward_ms", "backward_ms"])
def test_bad_model_profile_names_the_model_and_field(field: str) -> None:
    args = {
        "name": "vggx",
        "model_size_mb": 1.0,
        "gpu_memory_mb": 1.0,
        "batch_size": 1,
        "forward_ms": 1.0,
        "backward_ms": 1.0,
    }
    args[field] = 0.0
    with pytest.raises(WorkloadError, match=rf"model 'vggx': {field} must be > 0"):
        ModelProfile(**args)  # type: ignore[arg-type]


def test_workload_empty_or_duplicate_ids() -> None:
    with pytest.raises(WorkloadError, match="has no jobs"):
        Workload((), name="empty")
    job = JobSpec(7, 0.0, MODEL, 1, 1)
    with pytest.raises(WorkloadError, match="duplicate job_id 7"):
        Workload((job, job), name="dup")


def test_errors_are_value_errors() -> None:
    # callers may catch DlschedError (or ValueError) for every bad-input error
    assert issubclass(ConfigError, DlschedError) and issubclass(WorkloadError, DlschedError)
    assert issubclass(DlschedError, ValueError)


def test_full_fidelity_refuses_a_job_it_could_never_finish() -> None:
    """A 1e12-s trace job is ~1e13 iterations: FULL fidelity would simulate each one (it used
    to run with no end and no warning).  It is refused up front, naming the job and the ways
    out."""
    from envs.sim.engine import MAX_FULL_ITERATIONS

    big = JobSpec(7, 0.0, MODEL, MAX_FULL_ITERATIONS + 1, 1, name="forever")
    w = Workload((JobSpec(0, 0.0, MODEL, 1, 1), big), name="w")
    with pytest.raises(
        ConfigError, match=r"job 7 \(forever\) runs 1e\+08 iterations.*max_iterations"
    ):
        simulate(ClusterSpec(), w, "lwf1_adasrsf")


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_elastic_and_env_numbers_are_finite(value: float) -> None:
    from dataclasses import replace

    from envs.gym.factory import EnvConfig, make_env
    from envs.sim.elastic.spec import ElasticCluster, ElasticJob
    from envs.sim.elastic.types import dl2_job_types

    with pytest.raises(ConfigError, match="slot_s must be a finite number"):
        ElasticCluster(slot_s=value)
    t = dl2_job_types()[0]
    with pytest.raises(WorkloadError, match="job 3: speed_factor must be a finite number"):
        ElasticJob(3, t, 0, 1.0, 1.0, speed_factor=value)
    with pytest.raises(WorkloadError, match="model_size_mb must be a finite number"):
        replace(t, model_size_mb=value)
    with pytest.raises(ConfigError, match="jct_scale must be a finite number"):
        make_env(EnvConfig(setting="tiny", jct_scale=value))
