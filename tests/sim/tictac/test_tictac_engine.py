"""The engine with TicTac's iteration model for PS jobs (``SimConfig.model.ps_iteration``)."""

from __future__ import annotations

import numpy as np
import pytest

from envs.sim import (
    ClusterSpec,
    CommArch,
    ConfigError,
    Fidelity,
    FidelityOptions,
    JobSpec,
    ModelOptions,
    ModelProfile,
    SimConfig,
    Workload,
    simulate,
)
from envs.sim.models import PAPER_MODELS
from envs.sim.tictac import IterationModel, graph_for
from envs.sim.tictac.overlap import PS_ITERATION_MODELS
from envs.sim.workload import builtin_ada_srsf

CLUSTER = ClusterSpec(4, 1)  # one GPU per server: every worker is on its own NIC
B = CLUSTER.network.b_ms_per_mb


def _ps_job(name: str, workers: int = 2, ps: int = 1, iters: int = 5, jid: int = 0) -> JobSpec:
    return JobSpec(jid, 0.0, PAPER_MODELS[name], iters, workers, CommArch.PS, num_ps=ps)


def _jct(w: Workload, mode: str, seed: int = 0, **kw: object) -> list[float]:
    cfg = SimConfig.from_flat(ps_iteration=mode, seed=seed, **kw)
    return [r.jct_ms for r in simulate(CLUSTER, w, "ff_fs", cfg).records]


def test_config_names_match_policies() -> None:
    assert PS_ITERATION_MODELS == ("sequential", "random", "tic", "tac")
    assert SimConfig().model.ps_iteration == "sequential"
    with pytest.raises(ConfigError, match="ps_iteration must be"):
        SimConfig(model=ModelOptions(ps_iteration="fifo"))
    with pytest.raises(ConfigError, match="not JOB fidelity"):
        SimConfig(
            fidelity=FidelityOptions(level=Fidelity.JOB), model=ModelOptions(ps_iteration="tac")
        )


@pytest.mark.parametrize("name", ["vgg16", "resnet50", "inception-v3"])
def test_single_ps_job_runs_at_the_model_iteration_time(name: str) -> None:
    """Alone on its NICs, W = 2 workers on two servers, P = 1 (on worker 0's server): the
    exchange moves M over the busiest NIC at 1/b, so N = M b and every iteration lasts the
    iteration model's T; sequential gives C + N."""
    prof = PAPER_MODELS[name]
    w = Workload((_ps_job(name, iters=5),))
    seq = _jct(w, "sequential")[0]
    assert seq == pytest.approx(5 * (prof.compute_ms + prof.model_size_mb * B))
    T = IterationModel(graph_for(prof), "tac", tac_ms_per_mb=B).iteration(B, workers=2).T
    assert _jct(w, "tac")[0] == pytest.approx(5 * T, rel=1e-12)
    assert _jct(w, "tac")[0] < seq
    rand = _jct(w, "random")[0]
    assert _jct(w, "tac")[0] <= rand <= seq


def test_random_mode_is_seeded() -> None:
    w = Workload((_ps_job("resnet50", workers=3, ps=2, iters=8),))
    assert _jct(w, "random", seed=1) == _jct(w, "random", seed=1)
    assert _jct(w, "random", seed=1) != _jct(w, "random", seed=2)


def test_allreduce_jobs_are_unaffected() -> None:
    w = builtin_ada_srsf(0)
    a = simulate(ClusterSpec(), w, "lwf1_adasrsf", SimConfig())
    b = simulate(
        ClusterSpec(), w, "lwf1_adasrsf", SimConfig(model=ModelOptions(ps_iteration="tac"))
    )
    assert np.array_equal(a.jcts_ms(), b.jcts_ms())


def test_contending_ps_jobs_keep_invariants() -> None:
    jobs = tuple(_ps_job(n, workers=2, ps=2, iters=4, jid=i) for i, n in enumerate(PAPER_MODELS))
    w = Workload(jobs)
    seq = _jct(w, "sequential", check_invariants=True)
    for mode in ("random", "tic", "tac"):
        got = _jct(w, mode, check_invariants=True)
        assert all(x > 0 for x in got)
        assert sum(got) < sum(seq)


def test_ps_model_without_graph_is_a_clear_error() -> None:
    odd = ModelProfile("mystery-net", 10.0, 1000.0, 8, 1.0, 2.0)
    w = Workload((JobSpec(0, 0.0, odd, 3, 2, CommArch.PS, num_ps=1),))
    assert _jct(w, "sequential")  # fine without TicTac
    with pytest.raises(ConfigError, match=r"op graph .* none for \['mystery-net'\]"):
        _jct(w, "tic")
