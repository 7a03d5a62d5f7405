"""Lower bounds on average JCT in the elastic world: how good can any scheduler be?

A researcher comparing schedulers wants to know how far the best of them is from the best
possible.  Two bounds, both computed from the workload and the speed model alone (no
scheduler is run), both in slots and directly comparable with
:attr:`~envs.sim.elastic.simulator.ElasticResult.avg_jct_slots`:

* :func:`solo_bounds` -- every job alone on the cluster, from its arrival, at its fastest
  allocation.  The fastest allocation is the best ``(workers, ps)`` within the job's caps
  whose total CPU/GPU demand fits the cluster's total capacity (a relaxation of what can
  really be placed, so the bound stays valid).  No scheduler of :class:`SlotSimulator`
  can finish a job earlier: a job trains at most at its fastest rate in every slot, and it
  starts no earlier than its arrival slot.
* :func:`window_bounds` -- the same jobs behind the Gymnasium environment's window
  (:class:`~envs.gym.cluster_env.ClusterEnv` with its default ``allocator_for_unused=None``):
  only the first ``J`` active jobs in arrival order can get tasks (why this is a bound for
  every policy of the env: :func:`window_bounds`).

Both ignore that jobs compete for the cluster's capacity, so real schedulers stay above them
(tests check every heuristic against them); on DL²'s small setting the window bound alone is
close to what the paper's "44% below DRF" would need (see EXPERIMENTS.md).

* :func:`capacity_bound` -- adds the competition: the mean-busy-time programme of
  :mod:`envs.sim.capacity_bound` over the cluster's GPUs and CPUs, each job progressing no
  faster than its fastest allocation and holding at least the GPUs and the CPUs that the
  lower convex envelope of its allocations gives at its rate, from its window entry on, never
  finishing before its window (or solo) bound.  A bound on the mean JCT only, not per job.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from envs.sim.capacity_bound import capacity_bound as _programme
from envs.sim.capacity_bound import lower_envelope
from envs.sim.elastic.spec import ElasticCluster, ElasticJob, SpeedModel
from envs.sim.errors import ConfigError

__all__ = [
    "JobBound",
    "capacity_bound",
    "fastest_rate",
    "holding_envelopes",
    "mean_jct",
    "solo_bounds",
    "window_bounds",
]


@dataclass(frozen=True)
class JobBound:
    """A job's lower bound: ``finish - arrival = jct_slots``; ``entry`` is when it can first
    get tasks (its arrival for :func:`solo_bounds`); ``workers``/``ps`` its fastest
    allocation."""

    job_id: int
    arrival: int
    entry: float
    finish: float
    workers: int
    ps: int

    @property
    def jct_slots(self) -> float:
        return self.finish - self.arrival


def _allocations(job: ElasticJob, cluster: ElasticCluster) -> Iterator[tuple[int, int, int, int]]:
    """``(workers, ps, GPUs, CPUs)`` of every allocation within ``job``'s caps whose total
    demand fits the cluster's total capacity, workers then PS ascending (demands only grow
    with either, so the first that does not fit ends its row)."""
    t = job.type
    total_cpu = cluster.num_nodes * cluster.cpu_slots
    total_gpu = cluster.num_nodes * cluster.gpu_slots
    for w in range(1, job.max_workers + 1):
        if w * t.worker_gpu > total_gpu or w * t.worker_cpu > total_cpu:
            break
        for p in range(job.max_ps + 1):
            cpu = w * t.worker_cpu + p * t.ps_cpu
            gpu = w * t.worker_gpu + p * t.ps_gpu
            if cpu > total_cpu or gpu > total_gpu:
                break
            yield w, p, gpu, cpu


def fastest_rate(
    job: ElasticJob, cluster: ElasticCluster, speed: SpeedModel
) -> tuple[float, int, int]:
    """``(epochs per slot, workers, ps)`` of ``job``'s fastest allocation within its caps and
    the cluster's total CPU/GPU capacity (ties: fewer tasks, then fewer workers)."""
    t = job.type
    best: tuple[float, int, int] = (0.0, 0, 0)
    for w, p, _, _ in _allocations(job, cluster):
        its = float(speed.speed(t, p, w))
        if its > best[0]:
            best = (its, w, p)
    its, w, p = best
    per_slot = its * job.speed_factor / t.iterations_per_epoch * cluster.slot_s
    return per_slot, w, p


def solo_bounds(
    jobs: Sequence[ElasticJob], cluster: ElasticCluster, speed: SpeedModel
) -> list[JobBound]:
    """Every job alone from its arrival at its fastest allocation (see the module doc)."""
    out: list[JobBound] = []
    for job in sorted(jobs, key=lambda j: (j.arrival_slot, j.job_id)):
        rate, w, p = fastest_rate(job, cluster, speed)
        if rate <= 0:
            raise ConfigError(
                f"job {job.job_id} ({job.type.model}) has speed 0 at every allocation within "
                f"its caps ({job.max_workers} workers, {job.max_ps} PS): it can never finish"
            )
        start = float(job.arrival_slot)
        out.append(
            JobBound(job.job_id, job.arrival_slot, start, start + job.real_num_epochs / rate, w, p)
        )
    return out


def window_bounds(
    jobs: Sequence[ElasticJob], cluster: ElasticCluster, speed: SpeedModel, J: int
) -> list[JobBound]:
    """:func:`solo_bounds` behind a first-come-first-served window of ``J`` jobs whose
    entries happen at slot starts (see the module doc).

    Why it is a bound: job ``n`` (in arrival order) can first get tasks at the first slot start
    ``t >= arrival`` at which fewer than ``J`` earlier jobs are unfinished, i.e. ``t >=`` the
    ``J``-th largest finish time of the earlier jobs, and it then needs at least its solo time.
    By induction over arrival order, if every earlier job finishes no earlier than its bound,
    the ``J``-th largest finish time is no earlier either, so job ``n`` enters and finishes no
    earlier than its bound: these completion times are lower bounds for every policy of the env.
    """
    if J < 1:
        raise ConfigError(f"window J must be >= 1, got {J}")
    ends: list[float] = []  # finish times of the J window positions (a min-heap)
    out: list[JobBound] = []
    for b in solo_bounds(jobs, cluster, speed):
        entry = float(b.arrival)
        if len(ends) >= J:
            # the position frees when its job finishes; the next job sees it at the next
            # slot start (a job finishing exactly at a slot start frees it for that slot)
            entry = max(entry, float(math.ceil(heapq.heappop(ends))))
        finish = entry + (b.finish - b.entry)
        heapq.heappush(ends, finish)
        out.append(JobBound(b.job_id, b.arrival, entry, finish, b.workers, b.ps))
    return out


def mean_jct(bounds: Sequence[JobBound]) -> float:
    """Average of the bounds' JCTs, in slots."""
    if not bounds:
        raise ConfigError("no jobs")
    return sum(b.jct_slots for b in bounds) / len(bounds)


def holding_envelopes(
    job: ElasticJob, cluster: ElasticCluster, speed: SpeedModel
) -> tuple[list[tuple[float, float]], list[tuple[float, float]]]:
    """The least GPUs and the least CPUs ``job`` holds at a progress rate (epochs per slot), as
    :func:`~envs.sim.capacity_bound.lower_envelope` pieces over its allocations within its caps
    and the cluster's totals (as :func:`fastest_rate`) and idling."""
    t = job.type
    per_its = job.speed_factor / t.iterations_per_epoch * cluster.slot_s
    gpus, cpus = [], []
    for w, p, g, c in _allocations(job, cluster):
        rate = float(speed.speed(t, p, w)) * per_its
        if rate > 0:
            gpus.append((rate, float(g)))
            cpus.append((rate, float(c)))
    return lower_envelope(gpus), lower_envelope(cpus)


def capacity_bound(
    jobs: Sequence[ElasticJob], cluster: ElasticCluster, speed: SpeedModel, J: int | None = None
) -> float:
    """A lower bound on the mean JCT (slots) of every scheduler that counts the cluster's
    capacity (see the module doc): behind the env's window ``J``, or with every job
    allocatable (``None``: the env's backlog modes, :func:`solo_bounds`)."""
    per_job = (
        solo_bounds(jobs, cluster, speed) if J is None else window_bounds(jobs, cluster, speed, J)
    )
    by_id = {j.job_id: j for j in jobs}
    work, cap, use = [], [], []
    for b in per_job:
        job = by_id[b.job_id]
        work.append(job.real_num_epochs)
        cap.append(fastest_rate(job, cluster, speed)[0])
        use.append(list(holding_envelopes(job, cluster, speed)))
    out = _programme(
        release=[float(b.arrival) for b in per_job],
        earliest=[b.entry for b in per_job],
        work=work,
        rate_cap=cap,
        use=use,
        capacity=[cluster.num_nodes * cluster.gpu_slots, cluster.num_nodes * cluster.cpu_slots],
        floor=[b.jct_slots for b in per_job],
    )
    return out.mean_response
