"""``envs.sim.elastic.window_check``: the measurement window's rate error against the whole
slot, computed on the same slot states (``experiments/dl2_speed_models.py --window-check``)."""

from __future__ import annotations

import numpy as np

from envs.sim.elastic.allocators import make_allocator
from envs.sim.elastic.engine_slots import ContentionSlotSimulator
from envs.sim.elastic.window_check import WindowShadow, window_errors
from envs.sim.elastic.workload import DL2Setting

SETTING = DL2Setting(num_nodes=4, num_jobs=6, max_arrivals_per_slot=3, J=6, max_epochs=200,
                     max_workers=4, max_ps=4)  # fmt: skip


def test_a_window_of_the_whole_slot_has_no_error() -> None:
    e = window_errors(SETTING.cluster(), SETTING.workload(0), make_allocator("drf"), 1.0, 5)
    assert e.size > 0 and np.all(e == 0.0)


def test_a_short_window_errs_and_the_run_is_the_whole_slots() -> None:
    """The shadow records the window's error but runs on the whole-slot rates: the same
    schedule as a plain run."""
    e = window_errors(SETTING.cluster(), SETTING.workload(0), make_allocator("drf"), 0.1, 5)
    assert e.size > 0 and e.max() > 0.0 and np.all(np.isfinite(e))
    shadow = WindowShadow(SETTING.cluster(), SETTING.workload(0), make_allocator("drf"), window=0.1)
    plain = ContentionSlotSimulator(SETTING.cluster(), SETTING.workload(0), make_allocator("drf"))
    a, b = shadow.run(), plain.run()
    assert a.avg_jct_slots == b.avg_jct_slots and a.makespan_slots == b.makespan_slots
    assert len(shadow.errors) > 0
