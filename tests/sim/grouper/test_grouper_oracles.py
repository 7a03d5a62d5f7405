"""Grouper Fig. 3 as exact oracles: every policy's cojob-stage completion times, and PDA's trace.

Setting (paper Fig. 3; worked out in the shared Grouper note §2.6): one bottleneck of capacity 1;
cojob A = {J1: 1 then 2 units, J2: 1 unit, stage 1 only}, B = {J3: 2 then 4, J4: 2, stage 1
only}; all arrive at 0. Here: 2 hosts, each job one worker on host 0 and one server on host 1,
1 MB per iteration each way, ports of 1 MB/ms, so a unit is one iteration and one ms.
"""

from __future__ import annotations

import numpy as np
import pytest

from envs.sim.grouper import (
    Cojob,
    CojobSimulator,
    CojobWorkload,
    Grouper,
    GrouperConfig,
    PSJob,
    pda_order,
    simulate_cojobs,
)


def fig3() -> CojobWorkload:
    def job(jid: int, plan: tuple[int, ...], max_stage: int) -> PSJob:
        return PSJob(jid, "unit", 1.0, (0,), (1,), plan, max_stage)

    a = Cojob(0, 0.0, (job(1, (1, 3), 2), job(2, (1, 3), 1)))
    b = Cojob(1, 0.0, (job(3, (2, 6), 2), job(4, (2, 6), 1)))
    return CojobWorkload((a, b), num_hosts=2, link_mb_per_ms=1.0, name="fig3")


A1, A2, B1, B2 = (0, 1), (0, 2), (1, 1), (1, 2)

# (A1, A2, B1, B2) completion times and the average, from the note / grouper_fig3.json
EXPECTED = {
    "fs": ((4, 9, 7, 12), 8.0),
    "sptf": ((4, 6, 8, 12), 7.5),  # by job total size J2=1 < J4=2 < J1=3 < J3=6
    "sptf-stage": ((2, 8, 8, 12), 7.5),  # by current stage size, equal sizes share
    "grouper": ((2, 4, 8, 12), 6.5),  # the optimum, order A1 A2 B1 B2
    "grouper-offline": ((2, 4, 8, 12), 6.5),
    "baraat": ((2, 8, 6, 12), 7.0),  # stage FIFO: A2 waits behind B1
    "sincronia": ((10, 12, 4, 8), 8.5),  # upstream's value: all coflows tie, B goes first
}


@pytest.mark.parametrize("policy", sorted(EXPECTED))
def test_fig3_stage_completion_times(policy: str) -> None:
    res = simulate_cojobs(fig3(), policy, GrouperConfig(check_invariants=True))
    times, avg = EXPECTED[policy]
    got = res.stage_times()
    assert [got[s] for s in (A1, A2, B1, B2)] == pytest.approx(times, abs=1e-9)
    assert res.avg_sct_ms() == pytest.approx(avg, abs=1e-9)


def test_fig3_serial_orders_bound_the_policies() -> None:
    # Six serial orders respect the stage chains; PDA hits the best (6.5) and FS is 8.
    serial = [6.5, 7.0, 7.5, 7.5, 8.0, 8.5]
    assert min(serial) == EXPECTED["grouper"][1]
    for _, avg in EXPECTED.values():
        assert avg >= min(serial)


def test_fig3_sincronia_per_job_times_match_upstream() -> None:
    res = simulate_cojobs(fig3(), "sincronia")
    got = {r.job_id: r.stage_finish_ms for r in res.jobs}
    assert got == {1: (10.0, 12.0), 2: (9.0,), 3: (4.0, 8.0), 4: (2.0,)}


def test_fig3_without_barrier_same_cojob_times() -> None:
    # The upstream simulator has no cojob barrier; on Fig. 3 the cojob stages end alike.
    for policy, (times, _) in EXPECTED.items():
        res = simulate_cojobs(fig3(), policy, GrouperConfig(barrier=False))
        got = res.stage_times()
        assert [got[s] for s in (A1, A2, B1, B2)] == pytest.approx(times), policy


def test_fig3_slowdown_against_running_alone() -> None:
    # Alone (FS inside the cojob): A1 = 2, A2 = 4, B1 = 4, B2 = 8.
    res = simulate_cojobs(fig3(), "grouper")
    alone = {(s.cojob_id, s.stage): s.alone_sct_ms for s in res.stages}
    assert alone == {A1: 2.0, A2: 4.0, B1: 4.0, B2: 8.0}
    assert res.avg_stage_slowdown() == pytest.approx((2 / 2 + 4 / 4 + 8 / 4 + 12 / 8) / 4)


def _fig3_chains() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    loads = np.array([[[2.0], [2.0]], [[4.0], [4.0]]])  # A1, A2; B1, B2 on one port
    weights = np.array([[1.5, 1.25], [1.5, 1.25]])  # upstream 1 + 0.5**k
    return loads, np.array([2, 2]), weights


def test_pda_trace_on_fig3() -> None:
    res = pda_order(*_fig3_chains(), record=True)
    assert res.order == ((0, 0), (0, 1), (1, 0), (1, 1))  # A1, A2, B1, B2
    last, third, second, first = res.trace
    # position 4: A2 (1.25/2 = 0.625) vs B2 (1.25/4 = 0.3125) -> B2, rho = 0.3125
    assert last.candidates == ((0, 1, 1.25, 2.0), (1, 1, 1.25, 4.0))
    assert last.chosen == (1, 1) and last.rho == pytest.approx(0.3125)
    assert last.weights_after[0] == pytest.approx((0.875, 0.625))  # A dropped by 0.625
    assert last.weights_after[1] == pytest.approx((0.25,))  # B dropped by 1.25
    # position 3: A2 (0.625/2 = 0.3125) vs B1 (0.25/4 = 0.0625) -> B1
    assert [c[2] / c[3] for c in third.candidates] == pytest.approx([0.3125, 0.0625])
    assert third.chosen == (1, 0) and third.rho == pytest.approx(0.0625)
    assert second.chosen == (0, 1) and first.chosen == (0, 0)


class _Recording(Grouper):
    def __init__(self) -> None:
        super().__init__()
        self.orders: list[tuple[float, tuple[tuple[int, int], ...]]] = []

    def permutation(self, snap):  # type: ignore[no-untyped-def]
        rank = super().permutation(snap)
        assert self.last is not None
        self.orders.append((snap.now, self.last.order))
        return rank


def test_grouper_policy_recomputes_pda_at_each_stage_change() -> None:
    policy = _Recording()
    CojobSimulator(fig3(), policy, GrouperConfig(slowdown=False)).run()
    # chains are (cojob, stage offset from the cojob's current stage)
    assert policy.orders == [
        (0.0, ((0, 0), (0, 1), (1, 0), (1, 1))),  # A1 A2 B1 B2
        (2.0, ((0, 0), (1, 0), (1, 1))),  # A1 done: A2 B1 B2
        (4.0, ((0, 0), (0, 1))),  # only B is left: B1 B2
        (8.0, ((0, 0),)),  # B2
    ]
