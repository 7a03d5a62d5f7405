"""The indexed placement queue of non-preemptive stacks with a static-key job order.

A job order whose key does not change while a job waits, and a placer that can say whether a
job fits without placing it (:class:`~envs.sim.policies.base.FitIndexedPlacer`), let the
placement pass look only at the head of each fit class instead of asking every queued job
(:meth:`~envs.sim.engine.placement.Placement._allocate_indexed`).
"""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Iterator

from envs.sim.engine.state import Job
from envs.sim.policies.base import FitIndexedPlacer

#: a queued job's place in the placement order: (job-order key, rank of entry to the queue)
QKey = tuple[float, int]
_BEFORE_ALL: QKey = (-math.inf, -1)


class FitQueue:
    """The non-preemptive placement queue of a static-key order and a fit-indexed placer.

    Jobs sit in one list per fit class ``(per-GPU memory MB, GPU count)``, sorted by
    ``(key, entry rank)``: the order in which the generic pass (stable sort of the queue,
    which keeps earlier entries first on equal keys) would try them.  A placer's ``fits``
    answers alike for every job of a class, so a pass looks at class heads only."""

    __slots__ = ("classes", "effect", "effect_jobs", "entries", "fresh", "n", "refused_at")

    def __init__(self) -> None:
        # class -> (sorted keys, jobs in the same order)
        self.classes: dict[tuple[float, int], tuple[list[QKey], list[Job]]] = {}
        self.effect: dict[tuple[float, int], bool] = {}  # class -> refusal changes the placer
        self.effect_jobs = 0  # queued jobs whose refusal changes the placer
        self.entries = 0
        self.n = 0
        self.fresh = 0  # jobs added since the last pass
        # memory version at which every queued job was last refused (-1: unknown)
        self.refused_at = -1

    def __len__(self) -> int:
        return self.n

    def __iter__(self) -> Iterator[Job]:
        """Queued jobs in placement-order priority."""
        merged = heapq.merge(*(zip(k, j, strict=True) for k, j in self.classes.values()))
        return (job for _, job in merged)

    def add(self, job: Job, key: float, placer: FitIndexedPlacer) -> None:
        spec = job.spec
        cls = (spec.model.gpu_memory_mb, spec.num_gpus)
        entry = self.classes.get(cls)
        if entry is None:
            entry = self.classes[cls] = ([], [])
            if cls not in self.effect:
                self.effect[cls] = placer.refusal_changes_state(spec)
        keys, jobs = entry
        qk = (key, self.entries)
        self.entries += 1
        i = bisect.bisect_right(keys, qk)
        keys.insert(i, qk)
        jobs.insert(i, job)
        self.n += 1
        self.fresh += 1
        if self.effect[cls]:
            self.effect_jobs += 1

    def heads_after(self, pos: QKey) -> list[tuple[QKey, tuple[float, int], int]]:
        """Each class's first job after ``pos``: (its key, class, index), by key."""
        out: list[tuple[QKey, tuple[float, int], int]] = []
        for cls, (keys, _) in self.classes.items():
            i = bisect.bisect_right(keys, pos)
            if i < len(keys):
                out.append((keys[i], cls, i))
        out.sort()
        return out

    def pop(self, cls: tuple[float, int], i: int) -> Job:
        keys, jobs = self.classes[cls]
        job = jobs.pop(i)
        del keys[i]
        if not keys:
            del self.classes[cls]
        self.n -= 1
        if self.effect[cls]:
            self.effect_jobs -= 1
        return job
