"""Communication scheduling: SRSF(n) and AdaDUAL (Ada-SRSF §IV-B, Algorithm 2).

The engine offers ready all-reduces to the scheduler in job-order priority (SRSF for the
Ada-SRSF stacks) every time something changes; a rejected task waits and is asked again.
"""

from __future__ import annotations

from envs.sim.errors import ConfigError
from envs.sim.policies.base import CommTaskView, JobView, NetView


def busiest(job: JobView, net: NetView, stop_at: int = 1 << 30) -> tuple[int, CommTaskView | None]:
    """Max number of running tasks over the job's servers, and the task that Algorithm 2
    inspects: the one on the first server (in the job's server order) that raises the max.
    Stops early once the max reaches ``stop_at``."""
    k, first = 0, None
    nic = net.nic_tasks
    for s in job.servers:
        tasks = nic[s]
        n = len(tasks)
        if n > k:
            k, first = n, tasks[0]
            if k >= stop_at:
                break
    return k, first


def _busiest_at_least(job: JobView, net: NetView, k: int) -> tuple[int, int] | None:
    """``(s, k)`` for the first of the job's servers with the most running tasks, if that
    is at least ``k``; else ``None``."""
    nic = net.nic_tasks
    best, most = -1, k - 1
    for s in job.servers:
        c = len(nic[s])
        if c > most:
            best, most = s, c
    return (best, k) if best >= 0 else None


class SRSFn:
    """SRSF(n): start iff every server of the job has at most ``n - 1`` running tasks, so at
    most ``n`` all-reduces ever share a NIC.  SRSF(1) avoids contention entirely."""

    #: a task starting can only add contention: a rejected job is asked again only on ends
    reask_on_start = False

    def __init__(self, n: int) -> None:
        if n < 1:
            raise ConfigError(f"SRSF(n) needs n >= 1, got {n}")
        self.n = n
        self.name = f"srsf{n}"

    def admit(self, job: JobView, net: NetView) -> bool:
        limit = self.n - 1
        nic = net.nic_tasks
        for s in job.servers:  # noqa: SIM110 (hot path: a loop beats all() on a generator)
            if len(nic[s]) > limit:
                return False
        return True

    def blocker(self, job: JobView, net: NetView) -> tuple[int, int] | None:
        """The job's busiest server, which has ``n`` or more tasks: the job waits at least
        until it has fewer."""
        return _busiest_at_least(job, net, self.n)


class AdaDual:
    """AdaDUAL (Algorithm 2): accept with no running task; reject with two or more; with one
    running task of remaining size ``M_old``, accept iff ``M_new / M_old < b / (2 (b + η))``
    (Theorem 2: sharing beats waiting).  ``inclusive=True`` accepts at equality too, as the
    reference code does (it tests ``M_old / M_new >= 2 (b + η) / b``)."""

    name = "adadual"
    #: a start on an idle server ahead of the inspected one changes which task is inspected
    reask_on_start = True

    def __init__(self, inclusive: bool = False) -> None:
        self.inclusive = inclusive

    def admit(self, job: JobView, net: NetView) -> bool:
        k, old = busiest(job, net, stop_at=2)
        if k == 0:
            return True
        if k >= 2 or old is None:
            return False
        b, eta = net.network.b_ms_per_mb, net.network.eta_ms_per_mb
        m_old = net.remaining_mb(old)
        m_new = job.spec.model.model_size_mb
        if self.inclusive:
            return m_old * b >= 2.0 * (b + eta) * m_new
        return m_new * 2.0 * (b + eta) < b * m_old

    def blocker(self, job: JobView, net: NetView) -> tuple[int, int] | None:
        """The job's busiest server if it has two or more tasks: while it has, the answer is
        "wait" (and no task's remaining size is read).  ``None`` for a refusal on the size
        test, which may change on a start (the inspected task changes): asked again as usual."""
        return _busiest_at_least(job, net, 2)


class FairShare:
    """No admission control: every ready all-reduce starts at once and shares the NIC."""

    name = "fs"
    reask_on_start = False

    def admit(self, job: JobView, net: NetView) -> bool:
        return True
