"""Per-job records and summary statistics of one simulation."""

from __future__ import annotations

import csv
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from envs.sim.spec import JobSpec


@dataclass(frozen=True)
class JobRecord:
    """What happened to one job.  Times in ms from the start of the simulation."""

    job_id: int
    name: str
    model: str
    num_gpus: int
    iterations: int
    submit_ms: float
    start_ms: float  # placed on GPUs
    finish_ms: float
    gpu_ms: float  # compute service: workers x iterations x (fw + bw)
    servers: int  # servers the job spanned

    @classmethod
    def from_spec(cls, spec: JobSpec, start_ms: float, finish_ms: float, servers: int) -> JobRecord:
        """The record of ``spec``'s run (what every engine reports)."""
        return cls(
            job_id=spec.job_id,
            name=spec.name or f"j{spec.job_id}",
            model=spec.model.name,
            num_gpus=spec.num_gpus,
            iterations=spec.iterations,
            submit_ms=spec.submit_ms,
            start_ms=start_ms,
            finish_ms=finish_ms,
            gpu_ms=spec.total_compute_ms,
            servers=servers,
        )

    @property
    def jct_ms(self) -> float:
        """Job completion time: finish - submit (queueing included)."""
        return self.finish_ms - self.submit_ms

    @property
    def queue_ms(self) -> float:
        """Queueing delay: placement - submit."""
        return self.start_ms - self.submit_ms


@dataclass
class SimResult:
    """Outcome of a run: per-job records and cluster totals, with what produced them."""

    records: list[JobRecord]
    makespan_ms: float
    busy_gpu_ms: float
    num_gpus: int
    stack: str
    config: dict[str, Any]
    workload: str
    events: int = 0
    wall_s: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_records(
        cls,
        records: list[JobRecord],
        *,
        num_gpus: int,
        stack: str,
        config: dict[str, Any],
        workload: str,
        events: int,
        wall_s: float,
        extra: dict[str, Any],
    ) -> SimResult:
        """A result whose makespan and busy GPU time are derived from ``records``."""
        return cls(
            records=records,
            makespan_ms=max(r.finish_ms for r in records),
            busy_gpu_ms=sum(r.gpu_ms for r in records),
            num_gpus=num_gpus,
            stack=stack,
            config=config,
            workload=workload,
            events=events,
            wall_s=wall_s,
            extra=extra,
        )

    def jcts_ms(self) -> np.ndarray:
        return np.array([r.jct_ms for r in self.records], dtype=float)

    @property
    def gpu_utilisation(self) -> float:
        """Busy GPU time / (GPUs x makespan), the Ada-SRSF paper's definition."""
        return self.busy_gpu_ms / (self.num_gpus * self.makespan_ms) if self.makespan_ms else 0.0

    def summary(self) -> dict[str, float]:
        """avg / median / p95 / p99 JCT, mean queueing delay and makespan (ms), utilisation."""
        j = self.jcts_ms()
        q = np.array([r.queue_ms for r in self.records], dtype=float)
        return {
            "jobs": float(len(j)),
            "avg_jct_ms": float(j.mean()),
            "median_jct_ms": float(np.percentile(j, 50)),
            "p95_jct_ms": float(np.percentile(j, 95)),
            "p99_jct_ms": float(np.percentile(j, 99)),
            "avg_queue_ms": float(q.mean()),
            "makespan_ms": float(self.makespan_ms),
            "gpu_util": float(self.gpu_utilisation),
        }

    def write_jobs_csv(self, path: str | Path) -> None:
        """One row per job, with ``jct_ms`` and ``queue_ms`` columns."""
        with open(path, "w", newline="") as f:
            fields = [*JobRecord.__dataclass_fields__, "jct_ms", "queue_ms"]
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            for r in self.records:
                w.writerow({**asdict(r), "jct_ms": r.jct_ms, "queue_ms": r.queue_ms})
