"""``SimConfig``'s groups, its flat keys (:data:`FLAT_FIELDS`) and its two dict forms."""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import pytest

from envs.sim import ConfigError
from envs.sim.config import (
    FLAT_FIELDS,
    Fidelity,
    FidelityOptions,
    ModelOptions,
    QuirkOptions,
    RunOptions,
    SimConfig,
)

GROUPS = {
    "quirks": QuirkOptions,
    "fidelity": FidelityOptions,
    "model": ModelOptions,
    "run": RunOptions,
}

#: a valid non-default value for every flat key (with what it needs set beside it)
CHANGED: dict[str, tuple[Any, dict[str, Any]]] = {
    "tick_ms": (2.0, {}),
    "probe_side_effect": (True, {"tick_ms": 1.0}),
    "skip_after_place": (True, {}),
    "lagged_release": (True, {"tick_ms": 1.0}),
    "adadual_inclusive": (True, {}),
    "lwf_comm_ms_per_mb": (7.8125, {}),
    "fidelity": (Fidelity.FAST, {}),
    "fast_min_steps": (7, {}),
    "compute_windows": (False, {}),
    "seed": (5, {}),
    "preemption_cost_ms": (250.0, {}),
    "ps_iteration": ("tac", {}),
    "tictac_upstream_ties": (True, {}),
    "engine": ("python", {}),
    "max_wall_s": (30.0, {}),
    "progress_s": (1.5, {}),
    "check_invariants": (True, {}),
}


def test_flat_table_names_every_field_of_every_group_once() -> None:
    fields = {(g, f.name) for g, cls in GROUPS.items() for f in dataclasses.fields(cls)}
    assert sorted(FLAT_FIELDS.values()) == sorted(fields)
    assert {f.name for f in dataclasses.fields(SimConfig)} == set(GROUPS)
    assert set(CHANGED) == set(FLAT_FIELDS)


@pytest.mark.parametrize("key", sorted(FLAT_FIELDS))
def test_from_flat_sets_the_field_the_table_names(key: str) -> None:
    value, beside = CHANGED[key]
    cfg = SimConfig.from_flat(**{key: value}, **beside)
    group, name = FLAT_FIELDS[key]
    assert getattr(getattr(cfg, group), name) == value
    assert getattr(getattr(SimConfig(), group), name) != value  # a real change
    assert SimConfig.from_flat(**cfg.to_flat()) == cfg
    assert SimConfig.from_dict(cfg.to_dict()) == cfg
    assert SimConfig.from_dict(cfg.to_flat()) == cfg
    assert SimConfig().override(**{key: value}, **beside) == cfg


def test_defaults_and_named_modes() -> None:
    assert SimConfig.from_flat() == SimConfig() == SimConfig.named("correct")
    ref = SimConfig.reference()
    assert ref.quirks == QuirkOptions.reference()
    assert (ref.fidelity, ref.model, ref.run) == (FidelityOptions(), ModelOptions(), RunOptions())
    fixed = SimConfig.reference_fixed_probe(seed=2)
    assert fixed.quirks == dataclasses.replace(QuirkOptions.reference(), probe_side_effect=False)
    assert fixed.model.seed == 2
    assert SimConfig.named("reference", engine="python").run.engine == "python"
    assert SimConfig.named("correct", fidelity="fast").fidelity.level is Fidelity.FAST


def test_iterations_per_step() -> None:
    assert SimConfig().iterations_per_step(1000) == 1
    fast = SimConfig(fidelity=FidelityOptions(level=Fidelity.FAST, fast_min_steps=50))
    assert fast.iterations_per_step(1000) == 20
    assert fast.iterations_per_step(10) == 1


@pytest.mark.parametrize("make", [SimConfig.from_flat, SimConfig.reference, SimConfig().override])
def test_unknown_flat_key_is_named_with_the_known_ones(make: Any) -> None:
    with pytest.raises(ConfigError, match=r"unknown SimConfig key 'tick'; known: \[.*'tick_ms'"):
        make(tick=1.0)


def test_unknown_fidelity_string() -> None:
    with pytest.raises(ConfigError, match=r"unknown fidelity 'exact'; known: \['fast'"):
        SimConfig.from_flat(fidelity="exact")
    with pytest.raises(ConfigError, match="fidelity must be a Fidelity"):
        FidelityOptions(level="fast")  # type: ignore[arg-type]


def test_to_dict_is_nested_with_the_fidelity_as_its_value() -> None:
    d = SimConfig.reference(fidelity=Fidelity.FULL, seed=4).to_dict()
    assert set(d) == set(GROUPS)
    assert d["fidelity"] == {"level": "full", "fast_min_steps": 50, "compute_windows": True}
    assert d["quirks"]["tick_ms"] == 1.0 and d["model"]["seed"] == 4


def test_from_dict_reads_old_flat_records_and_the_nested_form() -> None:
    # a run record's sim_config as written before the groups (one of every key)
    old = {
        "tick_ms": 1.0,
        "probe_side_effect": True,
        "skip_after_place": True,
        "lagged_release": True,
        "adadual_inclusive": True,
        "lwf_comm_ms_per_mb": 7.8125,
        "fidelity": "full",
        "fast_min_steps": 50,
        "check_invariants": False,
        "compute_windows": True,
        "seed": 3,
        "preemption_cost_ms": 0.0,
        "ps_iteration": "sequential",
        "tictac_upstream_ties": False,
        "engine": "auto",
        "max_wall_s": None,
        "progress_s": 60.0,
    }
    cfg = SimConfig.from_dict(old)
    assert cfg == SimConfig.reference(seed=3, progress_s=60.0)
    assert SimConfig.from_dict(cfg.to_dict()) == cfg
    assert cfg.to_flat() == old
    # older records lack later keys: they keep their defaults
    assert SimConfig.from_dict({"seed": 1, "fidelity": "fast"}) == SimConfig.from_flat(
        seed=1, fidelity=Fidelity.FAST
    )
    assert SimConfig.from_dict({"model": {"seed": 1}}) == SimConfig(model=ModelOptions(seed=1))


def test_from_dict_names_unknown_keys() -> None:
    with pytest.raises(ConfigError, match=r"unknown SimConfig.run key 'engin'; known: \["):
        SimConfig.from_dict({"run": {"engin": "python"}})
    with pytest.raises(ConfigError, match="unknown SimConfig key 'tick'"):
        SimConfig.from_dict({"tick": 1.0})


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 0.0, -1.0])
@pytest.mark.parametrize(
    "make, key",
    [
        (lambda v: QuirkOptions(tick_ms=v), "tick_ms"),
        (lambda v: RunOptions(max_wall_s=v), "max_wall_s"),
        (lambda v: RunOptions(progress_s=v), "progress_s"),
    ],
)
def test_positive_numbers_are_checked_by_name(make: Any, key: str, value: float) -> None:
    with pytest.raises(ConfigError, match=re.escape(key)):
        make(value)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, -1.0])
@pytest.mark.parametrize(
    "make, key",
    [
        (lambda v: QuirkOptions(lwf_comm_ms_per_mb=v), "lwf_comm_ms_per_mb"),
        (lambda v: ModelOptions(preemption_cost_ms=v), "preemption_cost_ms"),
    ],
)
def test_non_negative_numbers_are_checked_by_name(make: Any, key: str, value: float) -> None:
    with pytest.raises(ConfigError, match=re.escape(key)):
        make(value)


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: QuirkOptions(probe_side_effect=True), "probe_side_effect needs tick_ms"),
        (lambda: QuirkOptions(lagged_release=True), "lagged_release needs tick_ms"),
        (lambda: FidelityOptions(fast_min_steps=0), "fast_min_steps must be >= 1"),
        (lambda: ModelOptions(ps_iteration="fifo"), "ps_iteration must be"),
        (lambda: RunOptions(engine="cuda"), "engine must be 'auto', 'python' or 'native'"),
    ],
)
def test_group_rules(make: Any, words: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        make()


@pytest.mark.parametrize(
    "flat, words",
    [
        ({"tick_ms": 1.0, "fidelity": Fidelity.FAST}, "FAST fidelity merges iterations"),
        ({"tick_ms": 1.0, "fidelity": Fidelity.JOB}, "JOB fidelity is a fluid model"),
        ({"ps_iteration": "tic", "fidelity": Fidelity.JOB}, "ps_iteration (TicTac)"),
    ],
)
def test_rules_across_groups(flat: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(words)):
        SimConfig.from_flat(**flat)
    quirks = QuirkOptions(tick_ms=flat.get("tick_ms"))
    model = ModelOptions(ps_iteration=flat.get("ps_iteration", "sequential"))
    with pytest.raises(ConfigError, match=re.escape(words)):
        SimConfig(quirks=quirks, fidelity=FidelityOptions(level=flat["fidelity"]), model=model)
    if "tick_ms" in flat:  # the reference's ticks
        with pytest.raises(ConfigError, match=re.escape(words)):
            SimConfig.reference(fidelity=flat["fidelity"])


def test_groups_must_have_their_type() -> None:
    with pytest.raises(ConfigError, match=r"SimConfig.fidelity must be a FidelityOptions"):
        SimConfig(fidelity=Fidelity.FAST)  # type: ignore[arg-type]
