"""Bad Tiresias input gives clear errors naming what is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from envs.sim import ModelOptions, SimConfig
from envs.sim.config import TiresiasConfig
from envs.sim.errors import ConfigError, WorkloadError
from envs.sim.policies.gittins import GittinsIndex, load_distribution
from envs.sim.policies.preemptive import LAS2D, PreemptiveSRSF
from envs.sim.policies.tiresias import DiscretizedGittins
from envs.sim.stacks import make_stack


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "gput.csv"
    p.write_text(text, encoding="utf-8", newline="")
    return p


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", "empty file"),
        ("duration\r\n", "distribution is empty"),
        ("duration\r\n5\r\n3\r\n", "line 3: sizes must be sorted ascending (3 < 5)"),
        ("duration\n1\n0\n", "line 3: size '0' must be finite and > 0"),
        ("duration\n-4\n", "line 2: size '-4' must be finite and > 0"),
        ("duration\n1\nnan\n", "line 3: size 'nan' must be finite and > 0"),
        ("duration\n1\nabc\n", "line 3: not a number: 'abc'"),
    ],
)
def test_bad_distribution_file(tmp_path: Path, text: str, words: str) -> None:
    p = _write(tmp_path, text)
    with pytest.raises(WorkloadError, match=r"gput\.csv") as err:
        load_distribution(p)
    assert words in str(err.value)


def test_good_distribution_file_with_crlf(tmp_path: Path) -> None:
    assert load_distribution(_write(tmp_path, "duration\r\n2\r\n6\r\n8\r\n")) == [2.0, 6.0, 8.0]
    assert load_distribution(_write(tmp_path, "2\n2\n8\n")) == [2.0, 2.0, 8.0]  # no header


def test_missing_distribution_file(tmp_path: Path) -> None:
    with pytest.raises(WorkloadError, match="file not found"):
        load_distribution(tmp_path / "nope.csv")


@pytest.mark.parametrize(
    ("samples", "words"),
    [
        ([], "distribution is empty"),
        ([3.0, 2.0], "sorted ascending; sample 1 (2.0) < sample 0 (3.0)"),
        ([0.0, 2.0], "sample 0 is 0.0; sizes must be finite and > 0"),
        ([1.0, float("inf")], "sample 1 is inf"),
    ],
)
def test_bad_distribution_in_memory(samples: list[float], words: str) -> None:
    with pytest.raises(WorkloadError) as err:
        GittinsIndex(samples, 2.0)
    assert words in str(err.value)
    with pytest.raises(WorkloadError):
        DiscretizedGittins(TiresiasConfig.paper(), samples)


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"num_queues": 0, "thresholds_gpu_s": ()}, "K >= 1 queues, got K=0"),
        ({"num_queues": -2, "thresholds_gpu_s": ()}, "K >= 1 queues, got K=-2"),
        ({"num_queues": 3, "thresholds_gpu_s": (7200.0, 3250.0)}, "strictly increasing"),
        ({"num_queues": 3, "thresholds_gpu_s": (3600.0, 3600.0)}, "strictly increasing"),
        ({"num_queues": 3, "thresholds_gpu_s": (3600.0,)}, "K=3 queues need 2 thresholds, got 1"),
        ({"num_queues": 2, "thresholds_gpu_s": (0.0,)}, "finite and > 0"),
        ({"promote_knob": -1.0}, "promote_knob must be >= 0"),
        ({"gittins_delta_gpu_s": 0.0}, "gittins_delta_gpu_s must be > 0"),
        ({"gittins_formula": "sup"}, "'textbook' or 'upstream'"),
    ],
)
def test_bad_tiresias_config(kwargs: dict[str, object], words: str) -> None:
    with pytest.raises(ConfigError) as err:
        TiresiasConfig(**kwargs)  # type: ignore[arg-type]
    assert words in str(err.value)


def test_bad_quantum_delta_cost_and_names() -> None:
    with pytest.raises(ConfigError, match="quantum_ms must be a finite number > 0"):
        LAS2D(quantum_ms=0.0)
    with pytest.raises(ConfigError, match="quantum_ms"):
        PreemptiveSRSF(quantum_ms=-1.0)
    with pytest.raises(ConfigError, match="look-ahead"):
        GittinsIndex([1.0], 0.0)
    with pytest.raises(ConfigError, match="preemption_cost_ms must be a finite number >= 0"):
        SimConfig(model=ModelOptions(preemption_cost_ms=-1.0))
    with pytest.raises(ConfigError, match="'dlas-paper'"):
        make_stack("dlas-paper:skew_fs")
    with pytest.raises(ConfigError, match="'skw'"):
        make_stack("dlas:skw_fs")
