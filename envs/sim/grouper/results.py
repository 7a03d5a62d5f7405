"""Per-job and per-cojob-stage records of a cojob run, and the Grouper paper's metrics.

All times in ms and measured from the cojob's arrival: stage completion time (SCT) of a cojob
stage, cojob completion time (its last stage's SCT), job completion time (JCT: when the job ran
its last iteration). Stage slowdown = SCT / SCT of the same stage when the cojob has the
network to itself (per-flow fair share among its own jobs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class CojobJobRecord:
    """One job: ``stage_finish_ms[k]`` is when it finished stage ``k + 1`` (absolute ms)."""

    job_id: int
    cojob_id: int
    arrival_ms: float
    finish_ms: float
    max_stage: int
    stage_finish_ms: tuple[float, ...]

    @property
    def jct_ms(self) -> float:
        return self.finish_ms - self.arrival_ms


@dataclass(frozen=True)
class CojobStageRecord:
    """One cojob stage (1-based ``stage``); ``complete_ms`` absolute, ``sct_ms`` from arrival."""

    cojob_id: int
    stage: int
    arrival_ms: float
    complete_ms: float
    alone_sct_ms: float | None = None

    @property
    def sct_ms(self) -> float:
        return self.complete_ms - self.arrival_ms

    @property
    def slowdown(self) -> float | None:
        if self.alone_sct_ms is None:
            return None
        return self.sct_ms / self.alone_sct_ms if self.alone_sct_ms > 0 else 1.0


@dataclass(frozen=True)
class GrouperResult:
    """Outcome of one run: records plus the run's identity (policy, queues, barrier, events)."""

    policy: str
    workload: str
    num_queues: int | None
    barrier: bool
    jobs: tuple[CojobJobRecord, ...]
    stages: tuple[CojobStageRecord, ...]
    events: int

    def stage_times(self) -> dict[tuple[int, int], float]:
        """``{(cojob_id, stage): SCT ms}``."""
        return {(s.cojob_id, s.stage): s.sct_ms for s in self.stages}

    def avg_sct_ms(self, stage: int | None = None) -> float:
        """Mean SCT over all cojob stages (or over stage ``stage`` of every cojob)."""
        xs = [s.sct_ms for s in self.stages if stage is None or s.stage == stage]
        return float(np.mean(xs)) if xs else math.nan

    def cojob_completion_ms(self) -> dict[int, float]:
        out: dict[int, float] = {}
        for s in self.stages:
            out[s.cojob_id] = max(out.get(s.cojob_id, 0.0), s.sct_ms)
        return out

    def avg_cojob_ct_ms(self) -> float:
        return float(np.mean(list(self.cojob_completion_ms().values())))

    def avg_jct_ms(self) -> float:
        return float(np.mean([j.jct_ms for j in self.jobs]))

    def avg_stage_slowdown(self) -> float:
        xs = [s.slowdown for s in self.stages if s.slowdown is not None]
        return float(np.mean(xs)) if xs else math.nan

    def makespan_ms(self) -> float:
        return max(j.finish_ms for j in self.jobs)

    def summary(self) -> dict[str, float]:
        return {
            "avg_sct_ms": self.avg_sct_ms(),
            "avg_stage1_sct_ms": self.avg_sct_ms(1),
            "avg_cojob_ct_ms": self.avg_cojob_ct_ms(),
            "avg_jct_ms": self.avg_jct_ms(),
            "avg_stage_slowdown": self.avg_stage_slowdown(),
            "makespan_ms": self.makespan_ms(),
            "events": float(self.events),
        }
