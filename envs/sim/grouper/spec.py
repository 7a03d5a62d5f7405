"""Cojob workloads for the Grouper network model: immutable, validated specs.

Units: time in **ms**, sizes in **MB** (10^6 bytes), port capacity in **MB/ms**
(1 Gbps = 0.125 MB/ms), as everywhere in :mod:`envs.sim`.

A *cojob* is a hyperparameter search: ``N`` parameter-server training jobs that arrive together
and run in stages. ``stage_plan`` holds cumulative iteration counts (``(20, 40, 80, 480)``:
stage 1 ends after iteration 20, stage 2 after 40, ...). Successive halving stops a job after
stage ``max_stage``. A cojob stage completes when every job that runs that stage has finished it.

Every iteration of a job is one *coflow*: a push flow of ``model_mb / S`` MB from each of its
``W`` workers to each of its ``S`` parameter servers and a pull flow of the same size back.
The cluster is a big switch (Grouper §III-A): host ``h`` has an egress port (index ``h``) and an
ingress port (index ``H + h``), each of capacity ``link_mb_per_ms``; a flow between two tasks
on the same host never enters the network.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from envs.sim.errors import WorkloadError

#: 1 Gbps in MB/ms (1e9 bit/s / 8 / 1e6 B per MB / 1e3 ms per s).
GBPS = 0.125


@dataclass(frozen=True)
class PSJob:
    """One parameter-server training job of a cojob.

    ``job_id`` is unique in the workload (the trace's ``JobId`` is not; it is kept as
    ``trace_job_id``). ``workers`` and ``servers`` are host indices (a host may appear in both;
    a worker and a server on the same host exchange data for free). ``compute_ms`` is the
    compute time per iteration (0 in the shipped trace).
    """

    job_id: int
    model: str
    model_mb: float
    workers: tuple[int, ...]
    servers: tuple[int, ...]
    stage_plan: tuple[int, ...]
    max_stage: int
    compute_ms: float = 0.0
    trace_job_id: int | None = None

    def __post_init__(self) -> None:
        who = f"job {self.job_id}"
        if not (isinstance(self.model_mb, int | float) and math.isfinite(self.model_mb)):
            raise WorkloadError(f"{who}: model_mb must be a finite number, got {self.model_mb!r}")
        if self.model_mb <= 0:
            raise WorkloadError(f"{who}: model_mb must be > 0, got {self.model_mb}")
        if not self.workers:
            raise WorkloadError(f"{who}: needs at least one worker host")
        if not self.servers:
            raise WorkloadError(f"{who}: needs at least one parameter-server host")
        for h in (*self.workers, *self.servers):
            if not isinstance(h, int | np.integer) or h < 0:
                raise WorkloadError(f"{who}: host indices must be integers >= 0, got {h!r}")
        check_stage_plan(self.stage_plan, who)
        if not 1 <= self.max_stage <= len(self.stage_plan):
            raise WorkloadError(
                f"{who}: max_stage must be in 1..{len(self.stage_plan)} (the stages of its plan "
                f"{self.stage_plan}), got {self.max_stage}"
            )
        if not (math.isfinite(self.compute_ms) and self.compute_ms >= 0):
            raise WorkloadError(f"{who}: compute_ms must be finite and >= 0, got {self.compute_ms}")

    @property
    def flow_mb(self) -> float:
        """Size of one push (or pull) flow between one worker and one server, MB."""
        return self.model_mb / len(self.servers)

    @property
    def iterations(self) -> int:
        """Iterations this job runs before it stops (end of stage ``max_stage``)."""
        return self.stage_plan[self.max_stage - 1]

    def port_flows(self, num_hosts: int) -> np.ndarray:
        """Network flows of one iteration per port, shape ``(2 * num_hosts,)``.

        Entry ``h`` counts flows leaving host ``h`` (egress), entry ``num_hosts + h`` flows
        entering it (ingress). Every flow carries :attr:`flow_mb` MB per iteration.
        """
        n = np.zeros(2 * num_hosts)
        for w in self.workers:
            for s in self.servers:
                if w == s:
                    continue  # same host: no network
                n[w] += 1  # push w -> s
                n[num_hosts + s] += 1
                n[s] += 1  # pull s -> w
                n[num_hosts + w] += 1
        return n


def check_stage_plan(plan: tuple[int, ...], who: str) -> None:
    """Raise :class:`WorkloadError` unless ``plan`` is a non-empty, strictly increasing tuple of
    positive integers (cumulative iterations at the end of each stage)."""
    if not plan:
        raise WorkloadError(f"{who}: stage plan is empty")
    prev = 0
    for k, c in enumerate(plan, start=1):
        if not isinstance(c, int | np.integer) or isinstance(c, bool):
            raise WorkloadError(f"{who}: stage plan entries must be integers, got {plan!r}")
        if c <= prev:
            raise WorkloadError(
                f"{who}: stage plan must be strictly increasing cumulative iterations > 0, "
                f"got {plan!r} (stage {k} ends at {c}, not after {prev})"
            )
        prev = c


@dataclass(frozen=True)
class Cojob:
    """A group of jobs that arrive together at ``arrival_ms`` and share stages."""

    cojob_id: int
    arrival_ms: float
    jobs: tuple[PSJob, ...]

    def __post_init__(self) -> None:
        if not self.jobs:
            raise WorkloadError(f"cojob {self.cojob_id}: has no jobs")
        if not (math.isfinite(self.arrival_ms) and self.arrival_ms >= 0):
            raise WorkloadError(
                f"cojob {self.cojob_id}: arrival_ms must be finite and >= 0, got {self.arrival_ms}"
            )

    @property
    def num_stages(self) -> int:
        """Stages the cojob actually runs: the largest ``max_stage`` of its jobs."""
        return max(j.max_stage for j in self.jobs)


@dataclass(frozen=True)
class CojobWorkload:
    """Cojobs on a big-switch cluster of ``num_hosts`` hosts with ports of equal capacity."""

    cojobs: tuple[Cojob, ...]
    num_hosts: int
    link_mb_per_ms: float = GBPS
    name: str = "cojobs"

    def __post_init__(self) -> None:
        if not self.cojobs:
            raise WorkloadError(f"workload {self.name!r}: has no cojobs")
        if not isinstance(self.num_hosts, int) or self.num_hosts < 1:
            raise WorkloadError(f"workload {self.name!r}: num_hosts must be >= 1")
        if not (math.isfinite(self.link_mb_per_ms) and self.link_mb_per_ms > 0):
            raise WorkloadError(
                f"workload {self.name!r}: link_mb_per_ms must be > 0, got {self.link_mb_per_ms}"
            )
        seen_cojobs: set[int] = set()
        seen_jobs: set[int] = set()
        for c in self.cojobs:
            if c.cojob_id in seen_cojobs:
                raise WorkloadError(f"workload {self.name!r}: cojob id {c.cojob_id} appears twice")
            seen_cojobs.add(c.cojob_id)
            for j in c.jobs:
                if j.job_id in seen_jobs:
                    raise WorkloadError(f"workload {self.name!r}: job id {j.job_id} appears twice")
                seen_jobs.add(j.job_id)
                bad = [h for h in (*j.workers, *j.servers) if h >= self.num_hosts]
                if bad:
                    raise WorkloadError(
                        f"workload {self.name!r}: job {j.job_id} of cojob {c.cojob_id} has "
                        f"flows to host(s) {sorted(set(bad))}, which do not exist "
                        f"(hosts are 0..{self.num_hosts - 1})"
                    )

    @property
    def num_ports(self) -> int:
        return 2 * self.num_hosts

    @property
    def jobs(self) -> tuple[PSJob, ...]:
        """All jobs, cojob by cojob, in workload order."""
        return tuple(j for c in self.cojobs for j in c.jobs)

    def subset(self, cojob_ids: tuple[int, ...] | list[int]) -> CojobWorkload:
        """The same cluster with only the named cojobs (order kept)."""
        want = set(cojob_ids)
        missing = want - {c.cojob_id for c in self.cojobs}
        if missing:
            raise WorkloadError(f"workload {self.name!r}: no cojob(s) {sorted(missing)}")
        kept = tuple(c for c in self.cojobs if c.cojob_id in want)
        return CojobWorkload(kept, self.num_hosts, self.link_mb_per_ms, self.name)
