"""The reference simulator's discrete clock and quirks, kept apart from the paper's model.

``SimConfig.reference()`` reproduces the public reference simulator (HKBU-HPML/dl-scheduling
``d5398bd``): time advances in ticks (``tick_ms``), an all-reduce ends at the first tick at or
after its exact end, AdaDUAL's remaining-size probe may advance the probed transfer
(``probe_side_effect``), finished jobs release memory a tick late (``lagged_release``), and
what is admitted in a tick is seen only at the next.  The engine holds one
:class:`ReferenceQuirks` (``Simulator.quirks``) exactly when ``tick_ms`` is set, and its
continuous-time code calls it at those few points only, so the correct model reads without
them.  (``skip_after_place``, valid in continuous time too, is a flag of the placement pass.)
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from envs.sim.config import SimConfig
from envs.sim.engine.state import EV_COMM, CommTask, Job

if TYPE_CHECKING:
    from envs.sim.engine.core import EngineCore


class ReferenceQuirks:
    """Tick-mode behaviour of the engine (see the module); state lives in the engine."""

    __slots__ = ("lagged_release", "probe_side_effect", "tick")

    def __init__(self, cfg: SimConfig) -> None:
        assert cfg.quirks.tick_ms is not None
        self.tick: float = cfg.quirks.tick_ms
        self.probe_side_effect = cfg.quirks.probe_side_effect
        self.lagged_release = cfg.quirks.lagged_release

    def ceil_tick(self, x: float) -> float:
        """The first tick at or after ``x``."""
        return math.ceil(x / self.tick - 1e-9) * self.tick

    # ------------------------------------------------------------------ release (phase 2)
    def job_finished(self, sim: EngineCore, t: float) -> None:
        if self.lagged_release:
            sim._wake_next_tick(t)

    def released(self, sim: EngineCore, t: float) -> list[Job]:
        """The finished jobs whose memory is released now (the rest stay in
        ``sim.unreleased``)."""
        if not self.lagged_release:
            out, sim.unreleased = sim.unreleased, []
            return out
        # The reference removes finished jobs from the running list while iterating it,
        # so a finished job right after a released one is seen only at the next tick.
        pos = {id(j): i for i, j in enumerate(sim.running)}
        done = sorted(sim.unreleased, key=lambda j: pos[id(j)])
        released: set[int] = set()
        keep: list[Job] = []
        out = []
        for job in done:
            p = pos[id(job)]
            if p - 1 in released:
                keep.append(job)
            else:
                released.add(p)
                out.append(job)
        sim.unreleased = keep
        if keep:
            sim._wake_next_tick(t)
        return out

    # ------------------------------------------------------------------ admission (phase 5)
    def start_round(self, sim: EngineCore) -> None:
        """A round of the admission pass starts: probes are counted afresh."""
        for task in sim.probed:
            task.probes = 0

    def end_round(self, sim: EngineCore) -> None:
        """Probes per tick changed for these tasks: they need a new end time."""
        if self.probe_side_effect:
            for task in list(sim.probed):
                if task.probes != task.w:
                    sim.touched.add(task)

    def admitted(self, sim: EngineCore, t: float) -> None:
        """Jobs were admitted and others still wait: the reference sees this tick's
        admissions only at the next tick, and the jobs admitted now stop probing then, so
        the next tick is a full pass."""
        sim._wake_next_tick(t)
        sim.force_pass = True

    # ------------------------------------------------------------------ transfers
    def remaining_mb(self, sim: EngineCore, task: CommTask, t: float) -> float:
        """The reference's probe: one tick of progress at the current rate counts (it is
        banked at the end of this tick); with ``probe_side_effect`` the probe also *adds*
        that tick to the task, once per call."""
        if task.start_t == t:
            return task.size_mb
        self.bank_to(task, t - self.tick)
        step = task.speed * self.tick
        if self.probe_side_effect:
            task.trans += step
            task.probes += 1
            sim.probed.add(task)
            sim.touched.add(task)
            return task.size_mb - task.trans
        return task.size_mb - (task.trans + step)

    def bank_to(self, task: CommTask, t: float) -> None:
        """Account the quiet ticks in ``(bank_t, t]``, each moving ``(1 + w) * speed * tick``
        MB."""
        if task.bank_t < t:
            n = round((t - task.bank_t) / self.tick)
            task.trans += n * (1 + task.w) * task.speed * self.tick
            task.bank_t = t

    def retime(self, sim: EngineCore, tasks: set[CommTask], t: float) -> None:
        """Phase 6 in ticks: this tick at the old rate, then a new rate and an end at the
        tick where the rest is moved (probes add ``w`` ticks of progress per tick)."""
        tick = self.tick
        probed = sim.probed
        for task in sorted(tasks, key=lambda x: x.job.placed_order):
            if task.start_t != t:
                self.bank_to(task, t - tick)
                task.trans += task.speed * tick  # this tick, at the old rate
            task.bank_t = t
            task.speed = sim._speed(task)
            task.w = task.probes
            task.probes = 0
            if task.w:
                probed.add(task)
            else:
                probed.discard(task)
            rest = task.size_mb - task.trans
            step = task.speed * tick
            n = 0 if rest <= step else math.ceil((rest - step) / ((1 + task.w) * step))
            end = t + tick * (1 + n)
            task.version += 1
            sim._push(end, EV_COMM, task, task.version)
