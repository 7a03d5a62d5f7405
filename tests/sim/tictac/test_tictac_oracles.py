"""TicTac's exact oracles: the Fig.-1 DAG, TAC's comparator table, TIC's ties, the U identity.

Cases from the project's TicTac note (tiresias-grouper-tictac.md §3.4, checked there against
the upstream TIC/TAC code on TF 1.15 toy graphs); the times are small integers, so every
figure below is exact.
"""

from __future__ import annotations

import numpy as np
import pytest

from envs.sim.tictac import DepIndex, IterationModel, ListScheduler, OpGraph, tac_order
from envs.sim.tictac.order import before, tic_priorities
from envs.sim.tictac.schedule import IterationStats


def fig1() -> OpGraph:
    """recv1 -> op1; (op1, recv2) -> op2; every M and P is 1."""
    return OpGraph.build(
        "fig1",
        {"recv1": 1.0, "recv2": 1.0},
        [("op1", 1.0, ["recv1"]), ("op2", 1.0, ["op1", "recv2"])],
    )


@pytest.mark.parametrize(
    ("order", "T", "alpha", "U"),
    [([0, 1], 3.0, 0.5, 2 / 3), ([1, 0], 4.0, 0.0, 0.5)],
)
def test_fig1_good_and_bad_order(order: list[int], T: float, alpha: float, U: float) -> None:
    s = ListScheduler(fig1()).run(order, ms_per_mb=1.0)
    assert (s.T, s.N, s.C) == (T, 2.0, 2.0)
    assert s.alpha == alpha
    assert s.rho == 1.0
    assert pytest.approx(U, abs=1e-15) == s.U


def test_fig1_properties_as_algorithm_1() -> None:
    """The paper's worked values: recv1.P = Time(op1), recv2.P = 0,
    recv1.M+ = recv2.M+ = Cost(recv1) + Cost(recv2)."""
    idx = DepIndex(fig1())
    ones = np.ones(2)
    p = idx.properties(np.ones(2, dtype=bool), ones, idx.row_time(ones))
    assert p.P.tolist() == [1.0, 0.0]
    assert p.M_plus.tolist() == [2.0, 2.0]
    # with a sole dependency counting (our TIC default), recv1 gets M+ = M(recv1) = 1
    q = idx.properties(np.ones(2, dtype=bool), ones, idx.row_time(ones), sole_counts=True)
    assert q.M_plus.tolist() == [1.0, 2.0]


def test_fig1_tic_tac() -> None:
    idx = DepIndex(fig1())
    assert tic_priorities(idx).tolist() == [0, 1]  # good order
    assert tic_priorities(idx, upstream_ties=True).tolist() == [0, 0]  # upstream: a tie
    assert tac_order(idx, np.ones(2)).tolist() == [0, 1]  # TAC: recv1 first
    assert IterationModel(fig1(), "tac").iteration(1.0).T == 3.0
    assert IterationModel(fig1(), "tic").iteration(1.0).T == 3.0


def test_fig1_upstream_tic_tie_is_broken_at_random() -> None:
    """The tie is enforced as the paper says (random among equal priorities), so upstream
    TIC gives the good and the bad iteration about equally often."""
    m = IterationModel(fig1(), "tic", np.random.default_rng(7), upstream_tic_ties=True)
    Ts = [m.worker(1.0).T for _ in range(400)]
    assert set(Ts) == {3.0, 4.0}
    assert abs(np.mean(Ts) - 3.5) < 0.1
    # two workers: the iteration waits for the worse one (P(both good) = 1/4)
    m2 = IterationModel(fig1(), "tic", np.random.default_rng(7), upstream_tic_ties=True)
    T2 = [m2.iteration(1.0, workers=2).T for _ in range(400)]
    assert abs(np.mean(T2) - 3.75) < 0.1


# (M_A, P_A, M_B, P_B, T(A,B), T(B,A), pick); pick None = comparator tie
TWO_BRANCH = [
    (1, 3, 2, 1, 5, 6, "A"),
    (2, 1, 1, 3, 6, 5, "B"),
    (1, 1, 1, 1, 3, 3, None),
    (3, 1, 1, 1, 5, 5, None),
    (1, 4, 3, 2, 7, 9, "A"),
    (2, 2, 1, 5, 9, 8, "B"),
]


def two_branch(ma: float, pa: float, mb: float, pb: float) -> OpGraph:
    return OpGraph.build("two", {"A": ma, "B": mb}, [("opA", pa, ["A"]), ("opB", pb, ["B"])])


@pytest.mark.parametrize(("ma", "pa", "mb", "pb", "t_ab", "t_ba", "pick"), TWO_BRANCH)
def test_comparator_table(
    ma: float, pa: float, mb: float, pb: float, t_ab: float, t_ba: float, pick: str | None
) -> None:
    g = two_branch(ma, pa, mb, pb)
    ls = ListScheduler(g)
    assert t_ab == ls.run([0, 1], 1.0).T
    assert t_ba == ls.run([1, 0], 1.0).T
    # Johnson's two-stage flow shop: T(X, Y) = M_X + max(P_X, M_Y) + P_Y
    assert t_ab == ma + max(pa, mb) + pb
    idx = DepIndex(g)
    m = np.array([ma, mb], dtype=float)
    props = idx.properties(np.ones(2, dtype=bool), m, idx.row_time(np.array([pa, pb], float)))
    assert props.P.tolist() == [pa, pb]
    assert props.M_plus.tolist() == [np.inf, np.inf]  # no op needs both
    order = tac_order(idx, m).tolist()
    if pick is None:
        assert not before(0, 1, props) and not before(1, 0, props)
        assert order == [0, 1]  # full tie: graph order
    else:
        first = 0 if pick == "A" else 1
        assert before(first, 1 - first, props) and not before(1 - first, first, props)
        assert order == [first, 1 - first]
        assert min(t_ab, t_ba) == ls.run(order, 1.0).T


def test_comparator_tie_goes_to_smaller_m_plus() -> None:
    """Case 2 of §4.3: all P are 0 and the comparator ties; M+ decides.  recvA, recvB feed
    op1 (M+ = 2); recvC, recvD feed op2 with recvA, recvB as well (M+ = 4)."""
    g = OpGraph.build(
        "case2",
        {"C": 1.0, "D": 1.0, "A": 1.0, "B": 1.0},
        [("op1", 1.0, ["A", "B"]), ("op2", 1.0, ["op1", "C", "D"])],
    )
    order = tac_order(DepIndex(g), np.ones(4)).tolist()
    assert sorted(order[:2]) == [2, 3]  # A and B first
    assert ListScheduler(g).run(order, 1.0).T == 5.0  # A, B, (op1 || C, D), op2


def chain3() -> OpGraph:
    return OpGraph.build(
        "chain3",
        {"w1": 1.0, "w2": 1.0, "w3": 1.0},
        [("op1", 1.0, ["w1"]), ("op2", 1.0, ["op1", "w2"]), ("op3", 1.0, ["op2", "w3"])],
    )


def test_chain3_priorities() -> None:
    idx = DepIndex(chain3())
    assert tic_priorities(idx, upstream_ties=True).tolist() == [0, 0, 2]  # upstream TIC
    assert tic_priorities(idx).tolist() == [0, 1, 2]  # M+ = 1, 2, 3
    assert tac_order(idx, np.ones(3)).tolist() == [0, 1, 2]  # upstream TAC: 0, 1, 2
    assert ListScheduler(chain3()).run([0, 1, 2], 1.0).T == 4.0
    assert ListScheduler(chain3()).run([2, 1, 0], 1.0).T == 6.0


def test_utilisation_identity_sanity_case() -> None:
    """N = 4, C = 6, T = 7: alpha = 0.75, rho = 2/3, U = 6/7."""
    s = IterationStats(T=7.0, N=4.0, C=6.0)
    assert s.alpha == 0.75
    assert s.rho == pytest.approx(2 / 3)
    assert pytest.approx(6 / 7) == s.U
    assert 1 / (1 + s.rho - s.alpha * min(s.rho, 1)) == pytest.approx(6 / 7)


@pytest.mark.parametrize("seed", range(5))
def test_utilisation_identity_on_schedules(seed: int) -> None:
    """U = 1 / (1 + rho - alpha min(rho, 1)) = C / T for any schedule and any rho."""
    from envs.sim.models import PAPER_MODELS
    from envs.sim.tictac import graph_for

    rng = np.random.default_rng(seed)
    g = graph_for(PAPER_MODELS["resnet50"])
    m = IterationModel(g, "random", rng)
    for ms_per_mb in (0.05, 0.5, 0.856, 3.0):
        s = m.worker(ms_per_mb)
        assert 0.0 <= s.alpha <= 1.0 + 1e-12
        assert 1 / (1 + s.rho - s.alpha * min(s.rho, 1)) == pytest.approx(s.C / s.T, rel=1e-12)
