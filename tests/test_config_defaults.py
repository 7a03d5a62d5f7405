"""Every value has one source of truth: the YAML under ``conf/`` states only what differs from
the typed default of its schema (a restated default drifts: ``BCConfig.steps`` was 1000 in
Python and 3000 in every YAML, ``TrainConfig.total_timesteps`` 100,000 and 60,000).

Each YAML file is read as plain data (``defaults`` lists and the ``hydra`` section left out)
and walked against a default instance of the dataclass it fills in; a key whose value equals
the default there is reported.  Lists of dataclasses (``federated.clusters``) are checked
entry by entry against the entry type's default.  ``conf/cluster/`` is not checked: each file
there is a named hardware preset (the Ada-SRSF paper's cluster, DL²'s), complete on purpose.
"""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml

from agents.config import AgentConfig
from envs.gym.contention_env import ContentionConfig
from envs.gym.factory import EnvConfig
from envs.gym.workloads import MixtureConfig
from envs.sim.config import FLAT_FIELDS, Fidelity, SimConfig
from envs.sim.errors import ConfigError
from evaluation.config import (
    BenchConfig,
    ClusterConfig,
    EvaluateConfig,
    RunnerConfig,
    WorkloadConfig,
)
from evaluation.workloads import sim_config
from training.config import EvalConfig, FederatedConfig, PretrainRunConfig, TrainConfig
from training.pretraining import PretrainConfig

CONF = Path(__file__).resolve().parents[1] / "conf"

#: a config file (or a group directory, every file in it) -> the schema it fills in
SCHEMAS: dict[str, type] = {
    "train.yaml": TrainConfig,
    "pretrain_run.yaml": PretrainRunConfig,
    "evaluate.yaml": EvaluateConfig,
    "agent": AgentConfig,
    "env": EnvConfig,
    "pretrain": PretrainConfig,
    "eval": EvalConfig,
    "federated": FederatedConfig,
    "mixture": MixtureConfig,
    "runner": RunnerConfig,
    "bench": BenchConfig,
    "workload": WorkloadConfig,
    "contention": ContentionConfig,
}
#: groups not checked (see the module docstring)
UNCHECKED = {"cluster": ClusterConfig}


def _plain(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _same(value: Any, default: Any) -> bool:
    default = _plain(default)
    if isinstance(default, float | int) and not isinstance(default, bool):
        return isinstance(value, float | int) and not isinstance(value, bool) and value == default
    return bool(value == default and type(value) is type(default))


def _entry_type(cls: type, name: str) -> type | None:
    """The dataclass a list field of ``cls`` holds (``list[ClusterEntry]``), if any."""
    hint = typing.get_type_hints(cls).get(name)
    args = typing.get_args(hint)
    if typing.get_origin(hint) is list and args and dataclasses.is_dataclass(args[0]):
        return typing.cast(type, args[0])
    return None


def restated(data: dict[str, Any], default: Any, where: str = "") -> list[str]:
    """The keys of ``data`` whose values equal ``default``'s (a dataclass instance)."""
    found: list[str] = []
    names = {f.name for f in dataclasses.fields(default)}
    for key, value in data.items():
        if key not in names:
            continue  # not a field: the schema check (Hydra) reports it
        here = f"{where}{key}"
        sub = getattr(default, key)
        entry = _entry_type(type(default), key)
        if isinstance(value, dict) and dataclasses.is_dataclass(sub):
            found += restated(value, sub, here + ".")
        elif isinstance(value, list) and entry is not None:
            for i, item in enumerate(value):
                if isinstance(item, dict):
                    found += restated(item, entry(), f"{here}[{i}].")
        elif _same(value, sub):
            found.append(f"{here}: {value!r}")
    return found


def _files() -> list[tuple[str, type]]:
    out = []
    for name, schema in SCHEMAS.items():
        path = CONF / name
        files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
        out += [(str(f.relative_to(CONF)), schema) for f in files]
    return out


def _load(rel: str) -> dict[str, Any]:
    data = yaml.safe_load((CONF / rel).read_text()) or {}
    return {k: v for k, v in data.items() if k not in ("defaults", "hydra")}


def test_every_config_file_is_checked() -> None:
    covered = {rel for rel, _ in _files()}
    every = {str(p.relative_to(CONF)) for p in CONF.rglob("*.yaml")}
    unchecked = {r for r in every if r.split("/")[0] in UNCHECKED}
    assert every - unchecked == covered, "a new config file or group: add it to SCHEMAS"


@pytest.mark.parametrize(("rel", "schema"), _files(), ids=[r for r, _ in _files()])
def test_yaml_states_only_what_differs_from_the_typed_default(rel: str, schema: type) -> None:
    found = restated(_load(rel), schema())
    assert not found, (
        f"conf/{rel} restates typed defaults of {schema.__name__} (drop them from the YAML, "
        "or change the default in Python): " + "; ".join(found)
    )


def test_the_check_finds_a_restated_default() -> None:
    data = {
        "total_timesteps": 60_000,
        "seed": 0,
        "pretrain": {"bc": {"steps": 3000, "lr": 0.005, "eval_every": 200}},
        "federated": {"mode": "local", "clusters": [{"seed": 0, "env": {"setting": "small"}}]},
        "eval": {"seeds": [100, 101, 102], "deterministic": True},
    }
    assert restated(data, TrainConfig()) == [
        "total_timesteps: 60000",
        "seed: 0",
        "pretrain.bc.steps: 3000",
        "pretrain.bc.lr: 0.005",
        "federated.clusters[0].seed: 0",
        "federated.clusters[0].env.setting: 'small'",
        "eval.seeds: [100, 101, 102]",
    ]


def test_evaluate_sim_keys_are_simconfig_flat_keys() -> None:
    """``evaluate.py``'s simulation keys (``fidelity``, ``engine``, ...) are ``SimConfig``'s
    flat keys at its defaults (``progress_s`` aside): ``SimConfig`` is their source of truth."""
    sim_keys = {"fidelity", "engine", "max_wall_s", "progress_s", "check_invariants"}
    assert sim_keys <= set(FLAT_FIELDS)
    assert sim_keys <= {f.name for f in dataclasses.fields(EvaluateConfig)}
    cfg = sim_config(EvaluateConfig(), seed=3)
    assert cfg == SimConfig.from_flat(seed=3, progress_s=EvaluateConfig().progress_s)
    fast = sim_config(EvaluateConfig(fidelity="fast", engine="python"), seed=0)
    assert (fast.fidelity.level, fast.run.engine) == (Fidelity.FAST, "python")
    with pytest.raises(ConfigError, match="unknown fidelity 'exact'"):
        sim_config(EvaluateConfig(fidelity="exact"), seed=0)
