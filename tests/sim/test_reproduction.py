"""Reference-compatible mode against the reference simulator's own per-job JCTs.

Oracle: ``load_reference_results(seed)``, the per-job JCTs printed by the original reference
simulator (HKBU-HPML/dl-scheduling ``d5398bd``, ``original:<algo>``) and by the same code with
a side-effect-free AdaDUAL probe (``fixed_probe:<algo>``), on the shipped workloads of seeds
0-2 (see the reference-code notes in docs/design.md).

Exact where the engine reproduces the reference exactly; within a stated tolerance on the
average JCT where a known gap remains (the probe side effect is not reproduced exactly in
some multi-server interleavings).  Each run takes about 0.3-0.6 s and is cached, so the file
runs in well under 25 s.
"""

from __future__ import annotations

from functools import cache

import pytest

from envs.sim import ClusterSpec, SimConfig, SimResult, simulate
from envs.sim.stacks import REFERENCE_ALGO
from envs.sim.workload import (
    REFERENCE_RESULT_SEEDS,
    builtin_ada_srsf,
    load_reference_results,
    load_reference_summary,
)

ALGO = REFERENCE_ALGO  # our stack name -> the reference's algorithm string
#: reference column prefix -> our SimConfig mode
VARIANT_MODE = {"original": "reference", "fixed_probe": "reference_fixed_probe"}


@cache
def reference(seed: int) -> dict[str, dict[int, float]]:
    return load_reference_results(seed)


@cache
def run(stack: str, seed: int, mode: str) -> SimResult:
    return simulate(ClusterSpec(), builtin_ada_srsf(seed), stack, SimConfig.named(mode))


def jcts(stack: str, seed: int, variant: str) -> tuple[dict[int, float], dict[int, float]]:
    """(ours, reference) per-job JCTs in ms."""
    ours = {r.job_id: r.jct_ms for r in run(stack, seed, VARIANT_MODE[variant]).records}
    return ours, reference(seed)[f"{variant}:{ALGO[stack]}"]


def avg(x: dict[int, float]) -> float:
    return sum(x.values()) / len(x)


def _fixed_probe_cases() -> list[tuple[str, int]]:
    cases = []
    for seed in REFERENCE_RESULT_SEEDS:
        cols = load_reference_results(seed)
        cases += [(s, seed) for s, a in ALGO.items() if f"fixed_probe:{a}" in cols]
    return cases


EXACT = (
    # SRSF(n) never probes: exact on every seed
    [("original", s, n) for s in ("lwf1_srsf1", "lwf1_srsf2", "lwf1_srsf3") for n in (0, 1, 2)]
    # a side-effect-free probe: every column the reference results have
    + [("fixed_probe", s, seed) for s, seed in _fixed_probe_cases()]
    # the probe side effect, where it is reproduced exactly today
    + [
        ("original", "ff_adasrsf", 0),
        ("original", "rand_adasrsf", 0),
        ("original", "lwf1_adasrsf", 1),
        ("original", "ls_adasrsf", 2),
    ]
)


def test_reference_results_have_the_columns_we_compare() -> None:
    assert len(_fixed_probe_cases()) >= 6  # 4 stacks on seed 0, LWF-1 on seeds 1 and 2
    for seed in REFERENCE_RESULT_SEEDS:
        cols = reference(seed)
        for algo in ALGO.values():
            assert len(cols[f"original:{algo}"]) == 160


@pytest.mark.parametrize(
    "variant, stack, seed", EXACT, ids=[f"{v}-{s}-seed{n}" for v, s, n in EXACT]
)
def test_per_job_jct_exact(variant: str, stack: str, seed: int) -> None:
    ours, ref = jcts(stack, seed, variant)
    assert ours.keys() == ref.keys()
    wrong = {j: (ours[j], ref[j]) for j in ref if ours[j] != ref[j]}
    assert not wrong, f"{len(wrong)} of {len(ref)} jobs differ (ours, reference): {wrong}"


@pytest.mark.parametrize(
    "variant, stack, seed", EXACT, ids=[f"{v}-{s}-seed{n}" for v, s, n in EXACT]
)
def test_summary_matches_reference_summary(variant: str, stack: str, seed: int) -> None:
    # summary.csv: JCTs in the paper's "seconds" (ms / 10, one decimal), utilisation in %
    # (two decimals); the reference's makespan counts its final tick, one more than ours.
    rows = [
        r
        for r in load_reference_summary()
        if (r["variant"], r["seed"], r["algo_string"]) == (variant, seed, ALGO[stack])
    ]
    if not rows:
        pytest.skip("no summary row for this run")
    (row,) = rows
    result = run(stack, seed, VARIANT_MODE[variant])
    s = result.summary()
    assert s["avg_jct_ms"] / 10 == pytest.approx(row["avg_jct_s"], abs=0.051)
    assert s["median_jct_ms"] / 10 == pytest.approx(row["median_jct_s"], abs=0.051)
    assert s["p95_jct_ms"] / 10 == pytest.approx(row["p95_jct_s"], abs=0.051)
    assert result.makespan_ms + 1 == row["makespan_sim_ms"]
    assert 100 * s["gpu_util"] == pytest.approx(row["gpu_util_pct"], abs=0.006)


@pytest.mark.parametrize(
    "stack, seed, tolerance",
    [
        ("lwf1_adasrsf", 0, 0.005),
        ("lwf1_adasrsf", 1, 0.005),
        ("lwf1_adasrsf", 2, 0.005),
        ("ff_adasrsf", 0, 0.015),
        ("ff_adasrsf", 1, 0.015),
        ("ff_adasrsf", 2, 0.015),
        # looser guards for the stacks with known gaps (measured: within 2.2%)
        ("ls_adasrsf", 0, 0.03),
        ("ls_adasrsf", 1, 0.03),
        ("rand_adasrsf", 1, 0.03),
    ],
)
def test_avg_jct_with_probe_side_effect_close(stack: str, seed: int, tolerance: float) -> None:
    ours, ref = jcts(stack, seed, "original")
    assert ours.keys() == ref.keys()
    assert avg(ours) == pytest.approx(avg(ref), rel=tolerance)


@pytest.mark.xfail(
    strict=True,
    reason="known gap: RAND + Ada-SRSF seed 2 with the probe side effect is ~+10% on avg JCT "
    "(the probe's extra progress is not reproduced exactly in some multi-server interleavings)",
)
def test_rand_adasrsf_seed2_avg_jct_within_3pct() -> None:
    ours, ref = jcts("rand_adasrsf", 2, "original")
    assert avg(ours) == pytest.approx(avg(ref), rel=0.03)


def test_probe_side_effect_is_what_the_reference_headline_rests_on() -> None:
    # ada-srsf.md: LWF-1 + Ada-SRSF on seed 0 is 1067.9 "s" as published and 1590.5 with a
    # side-effect-free probe, while LWF-1 + SRSF(1) (no probe) is 1477.6 either way.
    buggy = avg(jcts("lwf1_adasrsf", 0, "original")[0]) / 10
    fixed = avg(jcts("lwf1_adasrsf", 0, "fixed_probe")[0]) / 10
    srsf1 = avg(jcts("lwf1_srsf1", 0, "original")[0]) / 10
    assert buggy == pytest.approx(1067.9, rel=0.005)
    assert fixed == pytest.approx(1590.5, abs=0.05)
    assert srsf1 == pytest.approx(1477.6, abs=0.05)
    assert buggy < srsf1 < fixed
