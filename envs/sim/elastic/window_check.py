"""How far the contention world's measurement window (``ContentionConfig.measure_fraction``)
is from simulating the whole slot, on the same slot states
(``experiments/dl2_speed_models.py --window-check``).

:class:`WindowShadow` runs a :class:`~envs.sim.elastic.engine_slots.ContentionSlotSimulator`
on whole-slot rates (what the run uses) and computes every slot's rates a second time with
the window, each with its own slot-state cache; :func:`window_errors` drives it.  Standard
library + numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from envs.sim.elastic.allocators import Allocator
from envs.sim.elastic.engine_jobs import ContentionConfig
from envs.sim.elastic.engine_slots import ContentionSlotSimulator
from envs.sim.elastic.spec import ElasticCluster, ElasticJob

__all__ = ["WindowShadow", "window_errors"]


class WindowShadow(ContentionSlotSimulator):
    """Every slot's rates computed twice on the same state: whole slot (what the run uses)
    and with ``measure_fraction = window``; ``errors`` gets each job's relative rate
    difference ``|window - whole| / whole`` (jobs with a positive whole-slot rate)."""

    def __init__(self, *args: Any, window: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.full_cfg = self.config
        self.win_cfg = ContentionConfig(
            min_steps_per_slot=self.config.min_steps_per_slot, measure_fraction=window
        )
        self.errors: list[float] = []
        self._caches: tuple[dict[Any, Any], dict[Any, Any]] = ({}, {})

    def _slot_rates(self, t: int, allocation: Any) -> Any:
        self.config, self._cache = self.win_cfg, self._caches[1]
        approx = super()._slot_rates(t, allocation)
        self.config, self._cache = self.full_cfg, self._caches[0]
        rates = super()._slot_rates(t, allocation)
        assert rates is not None and approx is not None
        self.errors += [abs(approx[j] - r) / r for j, r in rates.items() if r > 0]
        return rates


def window_errors(
    cluster: ElasticCluster,
    jobs: Sequence[ElasticJob],
    allocator: Allocator,
    window: float,
    slots: int,
    slot_s: float = 1200.0,
) -> npt.NDArray[np.float64]:
    """The per-(slot, job) relative rate errors of the window ``window`` over the first
    ``slots`` slots of ``jobs`` under ``allocator`` (planning ``slot_s``-second slots)."""
    sim = WindowShadow(cluster, jobs, allocator, window=window)
    while not sim.done and sim.t < slots:
        views = sim.begin_slot()
        assert sim.allocator is not None
        sim.end_slot(sim.allocator.allocate(views, sim.cluster, sim.speed, slot_s))
    return np.array(sim.errors)
