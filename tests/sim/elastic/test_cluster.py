"""SlotCluster's placement index against a brute-force statement of the least-loaded rule."""

from __future__ import annotations

import numpy as np
import pytest

from envs.sim.elastic.cluster import Placement, SlotCluster
from envs.sim.elastic.spec import ElasticCluster
from envs.sim.errors import ConfigError


def brute_force_node(c: SlotCluster, cpu: int, gpu: int) -> int | None:
    """The rule as the module docstring states it, scanning every node."""
    used = [(int(c.used_cpu[n]), int(c.used_gpu[n])) for n in range(c.num_nodes)]
    load = [uc + ug for uc, ug in used]
    if c.placement is Placement.FIRST_FIT:
        load = [0] * c.num_nodes  # by index only
    elif c.placement is Placement.PACKING:
        load = [-x for x in load]  # most loaded first
    if c.strict_reference:
        node = min(range(c.num_nodes), key=lambda n: (load[n], n))
        uc, ug = used[node]
        return node if uc + cpu <= c.cpu_capacity and ug + gpu <= c.gpu_capacity else None
    fitting = [
        n
        for n, (uc, ug) in enumerate(used)
        if uc + cpu <= c.cpu_capacity and ug + gpu <= c.gpu_capacity
    ]
    return min(fitting, key=lambda n: (load[n], n)) if fitting else None


@pytest.mark.parametrize("placement", list(Placement))
@pytest.mark.parametrize(("nodes", "cpu_slots", "gpu_slots"), [(1, 8, 8), (7, 8, 8), (40, 6, 3)])
def test_index_follows_the_placement_rule(
    placement: Placement, nodes: int, cpu_slots: int, gpu_slots: int
) -> None:
    """Random place / bundle / explicit place / release / clear sequences: every search picks
    the brute-force node, and the mirrors (used arrays, free lists) agree."""
    rng = np.random.default_rng(nodes * 10 + len(placement))
    c = SlotCluster(ElasticCluster(nodes, cpu_slots, gpu_slots), placement=placement)
    placed: list[tuple[int, int, int]] = []  # (cpu, gpu, node) of every task on the cluster
    for _ in range(3000):
        u = rng.random()
        cpu, gpu = int(rng.integers(0, cpu_slots + 2)), int(rng.integers(0, gpu_slots + 2))
        if u < 0.02:
            c.release_all()
            placed.clear()
            assert c.is_empty()
        elif u < 0.15 and placed:
            t_cpu, t_gpu, node = placed.pop(int(rng.integers(len(placed))))
            c.release(t_cpu, t_gpu, node)
        elif u < 0.3:
            node = int(rng.integers(nodes))
            if c.can_place(cpu, gpu, node):
                c.place(cpu, gpu, node)
                placed.append((cpu, gpu, node))
        elif u < 0.45:
            expected = brute_force_node(c, cpu, gpu)
            assert c.find_node(cpu, gpu) == expected
            got = c.take(cpu, gpu)
            assert got == (-1 if expected is None else expected)
            if got >= 0:
                placed.append((cpu, gpu, got))
        else:
            w, p = (cpu // 2, gpu // 2), (cpu - cpu // 2, gpu - gpu // 2)
            expected = brute_force_node(c, cpu, gpu)
            assert c.place_bundle(w, p) == expected
            if expected is not None:
                placed.append((cpu, gpu, expected))
        used_cpu = [0] * nodes
        used_gpu = [0] * nodes
        for t_cpu, t_gpu, node in placed:
            used_cpu[node] += t_cpu
            used_gpu[node] += t_gpu
        assert c.used_cpu.tolist() == used_cpu and c.used_gpu.tolist() == used_gpu
        assert c.free_cpu == [cpu_slots - u for u in used_cpu]
        assert c.free_gpu == [gpu_slots - u for u in used_gpu]
        assert c.is_empty() == (sum(used_cpu) + sum(used_gpu) == 0)
        # occupied & fit_positions: whether the demand fits on some node
        fits_somewhere = any(
            cpu <= cpu_slots - uc and gpu <= gpu_slots - ug
            for uc, ug in zip(used_cpu, used_gpu, strict=True)
        )
        assert bool(c.occupied & c.fit_positions(cpu, gpu)) == fits_somewhere


def test_placement_rules_on_a_worked_example() -> None:
    """Loads 6, 2, 0 with room everywhere: least-loaded -> node 2, reference -> node 2,
    first fit -> node 0, packing -> node 0 (most loaded); a task that fits only on nodes 1
    and 2 (6 GPU slots): least-loaded 2, first fit 1, packing 1, reference 2."""
    expected = {
        "least_loaded": (2, 2),
        "reference": (2, 2),
        "first_fit": (0, 1),
        "packing": (0, 1),
    }
    for name, (small, gpu_task) in expected.items():
        c = SlotCluster(ElasticCluster(3, 8, 8), placement=name)
        c.place(2, 4, 0)
        c.place(2, 0, 1)
        assert c.placement == name
        assert c.find_node(2, 0) == small
        assert c.find_node(2, 6) == gpu_task


def test_placement_names_are_checked() -> None:
    assert SlotCluster(ElasticCluster(2), strict_reference=True).placement is Placement.REFERENCE
    with pytest.raises(ConfigError, match="unknown placement 'worst_fit'"):
        SlotCluster(ElasticCluster(2), placement="worst_fit")
    with pytest.raises(ConfigError, match="contradicts"):
        SlotCluster(ElasticCluster(2), strict_reference=True, placement="first_fit")
    # the contention stacks' name of the same rule
    assert SlotCluster(ElasticCluster(2), placement="ff").placement is Placement.FIRST_FIT


def test_bundle_demand_is_checked_and_summed() -> None:
    c = SlotCluster(ElasticCluster(2))
    assert c.bundle_demand((2, 4), (2, 0)) == (4, 4)
    assert c.bundle_demand([2, 4], [2, 0]) == (4, 4)  # type: ignore[arg-type]  # lists too
    node = c.take(*c.bundle_demand((2, 4), (2, 0)))
    assert node == 0 and c.free(0) == (4, 4)
    with pytest.raises(ConfigError, match="non-negative integers"):
        c.bundle_demand((2, -1), (2, 0))
    with pytest.raises(ConfigError, match="non-negative integers"):
        c.fit_positions(1.5, 0)  # type: ignore[arg-type]
