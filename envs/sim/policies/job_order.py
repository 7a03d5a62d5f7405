"""Job ordering policies: SRSF (shortest remaining service first) and FIFO."""

from __future__ import annotations

from envs.sim.policies.base import JobView


class SRSF:
    """Shortest remaining service first.

    The service is the job's remaining GPU compute, ``workers x remaining fw/bw ms``, excluding
    communication (the Ada-SRSF definition).  A queued job's key is its total service, so the
    placement queue is "smallest service first" (the reference's ``ssf``).
    """

    name = "srsf"
    #: a queued job has run nothing, so its key does not change while it waits (the engine
    #: keys it once, on arrival; see ``Simulator._allocate_indexed``)
    static_queue_key = True

    def priority(self, job: JobView) -> float:
        return job.remaining_compute_ms


class FIFO:
    """First come, first served, by submit time (ties: workload order)."""

    name = "fifo"
    static_queue_key = True

    def priority(self, job: JobView) -> float:
        return job.spec.submit_ms
