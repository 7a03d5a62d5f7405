"""The port rate allocator and the key -> per-port queue mapping: hand oracles and invariants."""

from __future__ import annotations

import numpy as np
import pytest

from envs.sim.grouper import allocate, check_allocation, port_queues


def test_one_port_fair_share_counts_flows() -> None:
    # three bundles on one port with 1, 1 and 2 flows: per-flow share 10/4
    w = np.array([[1.0], [1.0], [2.0]])
    lv = allocate(w, np.zeros((3, 1), dtype=np.int64), np.array([10.0]))
    assert lv == pytest.approx([2.5, 2.5, 2.5])


def test_textbook_max_min_two_ports() -> None:
    # a: port 0; b: ports 0 and 1; c: port 1; capacities 1 and 2 -> a = b = 0.5, c = 1.5
    w = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    lv = allocate(w, np.zeros((3, 2), dtype=np.int64), np.array([1.0, 2.0]))
    assert lv == pytest.approx([0.5, 0.5, 1.5])


def test_strict_priority_and_work_conservation() -> None:
    # a (queue 0) and b (queue 1) share port 0; b also uses port 1 with c (queue 0).
    w = np.array([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    q = np.array([[0, 0], [1, 1], [0, 0]])
    lv = allocate(w, q, np.array([1.0, 1.0]))
    assert lv == pytest.approx([1.0, 0.0, 1.0])
    # Global order a < b < c: b is behind a on port 0 but ahead of c on port 1. With a
    # capped at 0.25, b takes port 0's leftover and c what b leaves of port 1.
    q = np.array([[0, 0], [1, 0], [0, 1]])
    lv = allocate(w, q, np.array([1.0, 1.0]), cap=np.array([0.25, np.inf, np.inf]))
    assert lv == pytest.approx([0.25, 0.75, 0.25])


def test_one_queue_equals_fair_share() -> None:
    rng = np.random.default_rng(3)
    w = (rng.random((12, 6)) < 0.4) * rng.integers(1, 4, size=(12, 6)).astype(float)
    keys = rng.permutation(12).astype(float)
    fs = allocate(w, np.zeros_like(w, dtype=np.int64), np.ones(6))
    q1 = allocate(w, port_queues(keys, w > 0, 1), np.ones(6))
    assert q1 == pytest.approx(fs)


def test_bundle_without_ports_gets_its_cap() -> None:
    w = np.array([[0.0], [1.0]])
    lv = allocate(w, np.zeros((2, 1), dtype=np.int64), np.array([2.0]), np.array([np.inf, 5.0]))
    assert lv[0] == np.inf and lv[1] == pytest.approx(2.0)


def test_port_queues_dense_per_port_rank_as_paper_fig7() -> None:
    # Three stages S1 < S2 < S3 (keys 1, 2, 3) on machines A, B, C (one port each):
    # A hosts S1, S2; B hosts S1, S3; C hosts S2, S3 -> local ranks 0, 1 everywhere.
    uses = np.array([[1, 1, 0], [1, 0, 1], [0, 1, 1]], dtype=bool)
    q = port_queues(np.array([1.0, 2.0, 3.0]), uses, 8)
    assert q[uses[:, 0], 0].tolist() == [0, 1]
    assert q[uses[:, 1], 1].tolist() == [0, 1]
    assert q[uses[:, 2], 2].tolist() == [0, 1]


def test_port_queues_clamp_and_ties() -> None:
    uses = np.ones((5, 1), dtype=bool)
    keys = np.array([0.0, 7.0, 7.0, 9.0, 12.0])
    assert port_queues(keys, uses, 3)[:, 0].tolist() == [0, 1, 1, 2, 2]
    assert port_queues(keys, uses, None)[:, 0].tolist() == [0, 1, 1, 2, 3]


@pytest.mark.parametrize("seed", range(20))
def test_random_allocations_satisfy_invariants(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n, p = int(rng.integers(1, 30)), int(rng.integers(1, 8))
    w = (rng.random((n, p)) < 0.5) * rng.integers(1, 5, size=(n, p)).astype(float)
    keys = rng.integers(0, 6, size=n).astype(float)
    cap = np.where(rng.random(n) < 0.2, rng.random(n), np.inf)
    capacity = rng.uniform(0.5, 2.0, size=p)
    for q in (None, 1, 2, 3):
        queues = port_queues(keys, w > 0, q)
        lv = allocate(w, queues, capacity, cap)
        check_allocation(lv, w, queues, capacity, cap)


@pytest.mark.parametrize("seed", range(10))
def test_fair_share_is_max_min(seed: int) -> None:
    # Max-min bottleneck property: each bundle has a saturated port where no other bundle
    # has a higher per-flow level.
    rng = np.random.default_rng(100 + seed)
    n, p = 15, 6
    w = (rng.random((n, p)) < 0.4) * rng.integers(1, 4, size=(n, p)).astype(float)
    w[w.sum(axis=1) == 0, 0] = 1.0
    cap = np.ones(p)
    lv = allocate(w, np.zeros_like(w, dtype=np.int64), cap)
    load = (w * lv[:, None]).sum(axis=0)
    sat = load >= 1 - 1e-9
    for u in range(n):
        ports = np.flatnonzero((w[u] > 0) & sat)
        assert any(lv[u] >= lv[w[:, q] > 0].max() - 1e-12 for q in ports)
