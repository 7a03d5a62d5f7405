"""Op graphs: bad input gives clear errors; the shipped model graphs match their profiles."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from envs.sim import ModelProfile
from envs.sim.models import PAPER_MODELS, REFERENCE_MODELS
from envs.sim.tictac import ListScheduler, OpGraph, OpGraphError, available_graphs, graph_for
from envs.sim.tictac.graph import graph_from_data, load_raw

REPO = Path(__file__).resolve().parents[3]


def test_cycle_is_an_error() -> None:
    with pytest.raises(OpGraphError, match=r"cycle through ops \['a', 'b'\]"):
        OpGraph.build("cyc", {"r": 1.0}, [("a", 1.0, ["r", "b"]), ("b", 1.0, ["a"])])


def test_self_loop_is_an_error() -> None:
    with pytest.raises(OpGraphError, match="bad dep"):
        OpGraph("s", ("r",), (1.0,), ("a",), (1.0,), ((0, 1),))


def test_recv_without_consumer_is_an_error() -> None:
    with pytest.raises(OpGraphError, match=r"recv ops with no consumer: \['lonely'\]"):
        OpGraph.build("x", {"r": 1.0, "lonely": 2.0}, [("a", 1.0, ["r"])])


def test_missing_op_time_is_an_error() -> None:
    with pytest.raises(OpGraphError, match="op 'a' has no valid time"):
        OpGraph.build("x", {"r": 1.0}, [("a", None, ["r"])])
    data = {"model": "m", "recvs": [["w", 10]], "ops": [["a", "f", None, [0]]]}
    with pytest.raises(OpGraphError, match="op 'a' has no time"):
        graph_from_data(data)


def test_other_bad_input() -> None:
    with pytest.raises(OpGraphError, match="unknown 'nope'"):
        OpGraph.build("x", {"r": 1.0}, [("a", 1.0, ["r", "nope"])])
    with pytest.raises(OpGraphError, match="size"):
        OpGraph.build("x", {"r": 0.0}, [("a", 1.0, ["r"])])
    with pytest.raises(OpGraphError, match="duplicate node name"):
        OpGraph.build("x", {"r": 1.0}, [("r", 1.0, ["r"])])
    with pytest.raises(OpGraphError, match="malformed"):
        graph_from_data({"model": "m", "recvs": [["w", 10]]})
    with pytest.raises(OpGraphError, match="no op graph for model 'mystery'"):
        load_raw("mystery")
    g = OpGraph.build("x", {"r": 1.0, "q": 1.0}, [("a", 1.0, ["r", "q"])])
    with pytest.raises(OpGraphError, match="permutation"):
        ListScheduler(g).run([0, 0], 1.0)


# parameter counts of the published architectures (torchvision's counts for the CNNs;
# Inception-v3 with its auxiliary classifier; PTB large LSTM: 15M + 2 x 2 x 9.006M + 15.01M)
PARAMS = {
    "vgg16": (138_357_544, 32),  # 13 conv + 3 fc, weight and bias each
    "resnet50": (25_557_032, 161),  # 53 conv + 53 BN x (gamma, beta) + fc (w, b)
    "inception-v3": (27_161_264, 292),  # 96 conv x (w, gamma, beta) + 2 fc x (w, b)
    "lstm": (66_034_000, 11),
}


def test_shipped_graphs() -> None:
    assert available_graphs() == sorted(PARAMS)
    for name, (count, recvs) in PARAMS.items():
        raw = load_raw(name)
        assert raw["param_count"] == count == sum(n for _, n in raw["recvs"])
        assert len(raw["recvs"]) == recvs


@pytest.mark.parametrize("table", [PAPER_MODELS, REFERENCE_MODELS], ids=["paper", "reference"])
def test_graphs_scaled_to_profiles(table: dict[str, ModelProfile]) -> None:
    for prof in table.values():
        g = graph_for(prof)
        assert g.total_mb == pytest.approx(prof.model_size_mb, rel=1e-12)
        assert g.phase_ms("f") == pytest.approx(prof.forward_ms, rel=1e-12)
        assert g.phase_ms("b") == pytest.approx(prof.backward_ms, rel=1e-12)
        assert g.compute_ms == pytest.approx(prof.compute_ms, rel=1e-12)
        # with_batch scales the op times with the profile
        half = graph_for(prof.with_batch(prof.batch_size / 2))
        assert half.compute_ms == pytest.approx(prof.compute_ms / 2, rel=1e-12)


def test_vgg16_layer_order_and_sizes() -> None:
    """VGG-16's first recv is conv1's weight (3x3x3x64 = 1728 params); fc6's weight
    (25088 x 4096) is 74% of the model."""
    raw = load_raw("vgg16")
    assert raw["recvs"][0] == ["0.weight", 1728]
    g = graph_for(PAPER_MODELS["vgg16"])
    assert max(g.recv_mb) / g.total_mb == pytest.approx(102_760_448 / 138_357_544)
    # with every transfer free the iteration is the compute alone
    order = np.arange(g.num_recvs)
    assert pytest.approx(g.compute_ms) == ListScheduler(g).run(order, 0.0).T


@pytest.mark.slow  # ~20 s: imports torch and traces two models
@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_shipped_graphs_regenerate_identically() -> None:
    """The golden files are exactly what tools/build_op_graphs.py produces (two models)."""
    proc = subprocess.run(
        [sys.executable, "tools/build_op_graphs.py", "--check", "vgg16", "resnet50"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
