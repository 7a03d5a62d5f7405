"""Stack names -> policy classes (:mod:`envs.sim.stacks`): one registry per part, each token
registered once; a token registered by a user is a stack name everywhere, through the same
engine as the built-in ones."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from envs.sim import ClusterSpec, SimConfig, simulate, stacks
from envs.sim.errors import ConfigError
from envs.sim.policies.comm import AdaDual, FairShare, SRSFn
from envs.sim.policies.placement import LWF, FirstFit, ListScheduling, RandomPlacer
from envs.sim.policies.skew import CountPlacer, SkewPlacer
from envs.sim.workload import generate_ada_srsf


@pytest.mark.parametrize(
    ("name", "placer", "comm"),
    [
        ("rand_adasrsf", RandomPlacer, AdaDual),
        ("ff_fs", FirstFit, FairShare),
        ("ls_srsf3", ListScheduling, SRSFn),
        ("lwf4_adasrsf", LWF, AdaDual),
        ("dlas:count_fs", CountPlacer, FairShare),
        ("dgittins:skew_fs", SkewPlacer, FairShare),
    ],
)
def test_each_token_builds_its_class(name: str, placer: type, comm: type) -> None:
    st = stacks.make_stack(name, lwf_comm_ms_per_mb=2.0)
    assert type(st.placer) is placer and type(st.comm) is comm
    assert stacks.make_stack(name).placer is not st.placer


def test_numbered_tokens_carry_their_number() -> None:
    st = stacks.make_stack("lwf7_srsf5")
    assert isinstance(st.placer, LWF) and isinstance(st.comm, SRSFn)
    assert st.placer.name == "lwf7" and st.comm.name == "srsf5"


def test_every_token_is_registered_once() -> None:
    for registry in (stacks.PLACEMENT_TOKENS, stacks.COMM_TOKENS):
        patterns = [p.pattern for p, _label, _f in registry]
        assert len(patterns) == len(set(patterns))


@pytest.fixture
def mine() -> Iterator[None]:
    """A user's placement token ``mine`` (first fit under another name), removed after."""
    before = list(stacks.PLACEMENT_TOKENS)

    @stacks.register_placement("mine")
    def _mine(m: re.Match[str], lwf_comm: float | None) -> FirstFit:
        return FirstFit()

    yield
    stacks.PLACEMENT_TOKENS[:] = before


def test_a_registered_token_is_a_stack_name_everywhere(mine: None) -> None:
    """Registered once, ``mine_adasrsf`` runs through ``simulate`` and gives first fit's
    results; before registration (and after removal) it is one clear error listing it not."""
    cluster = ClusterSpec(num_servers=4, gpus_per_server=4)
    w = generate_ada_srsf(1, num_jobs=12)
    got = simulate(cluster, w, "mine_adasrsf", SimConfig.named("correct"))
    want = simulate(cluster, w, "ff_adasrsf", SimConfig.named("correct"))
    assert [(j.job_id, j.finish_ms, j.servers) for j in got.records] == [
        (j.job_id, j.finish_ms, j.servers) for j in want.records
    ]
    with pytest.raises(ConfigError, match=r"unknown placement 'yours'; known: rand, ff, .*mine"):
        stacks.make_stack("yours_adasrsf")


def test_unknown_tokens_list_the_known_ones() -> None:
    with pytest.raises(
        ConfigError, match=r"known: rand, ff, ls, lwf<κ> \(e.g. lwf1\), ovl, count, skew$"
    ):
        stacks.make_stack("best_adasrsf")
    with pytest.raises(
        ConfigError, match=r"unknown communication scheduler 'qq'; known: adasrsf, fs, srsf<n>$"
    ):
        stacks.make_stack("ff_qq")
