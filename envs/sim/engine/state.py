"""Run-time state of jobs and all-reduces, and the engine's state and event codes.

:class:`Job` is one job's mutable state while it runs (placement, per-worker task states,
preemption and JOB-fidelity bookkeeping); :class:`CommTask` one running all-reduce or PS
exchange.  Both use ``__slots__``: the event loop touches them on every event.
"""

from __future__ import annotations

import math

from envs.sim.spec import JobSpec

# worker states
FW_READY, BW_READY, RUNNING, DONE = 0, 1, 2, 3
# event kinds (all phase-1 kinds sort before the others only by being handled first)
EV_TASK, EV_COMM, EV_SYNC, EV_ARRIVAL, EV_WAKE, EV_WINDOW = 0, 1, 2, 3, 4, 5
# preemptive stacks and JOB fidelity: a resumed job's restore ends, a job-level run ends, the
# job order's wake-up (each validated by a version number)
EV_RESTORE, EV_JOBEND, EV_RESCHED = 6, 7, 8
# gpu_task kind of a GPU that runs its part of a job's compute window
WINDOW = 9


class Job:
    """Run-time state of one job (satisfies :class:`envs.sim.policies.base.JobView`)."""

    __slots__ = (
        "aux_ver",
        "bw",
        "chunk",
        "comm",
        "comm_est_once",
        "comm_mb",
        "executed_ms",
        "factors",
        "finish_ms",
        "fresh",
        "fw",
        "gpus",
        "held",
        "hold",
        "iterations_done",
        "jl_iter",
        "jl_left",
        "jl_since",
        "last_sync_ms",
        "multi",
        "on_gpus",
        "pending",
        "placed_order",
        "planned",
        "preempt_pending",
        "preemptions",
        "prio",
        "probe_target",
        "remaining_compute_ms",
        "restoring",
        "run_since",
        "servers",
        "spec",
        "start_ms",
        "wait_key",
        "window_fw_done",
        "window_t",
        "window_ver",
        "wstate",
    )

    def __init__(self, spec: JobSpec) -> None:
        self.spec = spec
        self.fw = spec.model.forward_ms  # duration of the current step's forward, ms
        self.chunk = 1  # iterations in the current step (FAST fidelity merges iterations)
        self.bw = spec.model.backward_ms
        self.remaining_compute_ms = spec.total_compute_ms
        self.iterations_done = 0
        self.placed_order = -1
        self.servers: list[int] = []
        self.gpus: list[int] = []
        self.multi = False
        self.wstate: list[int] = []
        self.pending = 0
        self.prio = 0.0
        self.comm: CommTask | None = None
        self.fresh = False  # newly waiting for its all-reduce: must be asked
        self.probe_target: CommTask | None = None
        self.comm_est_once = 0.0
        self.comm_mb = spec.model.model_size_mb  # MB over the busiest NIC per iteration
        # PS jobs: per comm server, its NIC's MB per iteration / comm_mb (None: all 1)
        self.factors: dict[int, float] | None = None
        self.start_ms = math.nan
        self.finish_ms = math.nan
        self.window_t = math.nan  # start of the running compute window (see Simulator)
        self.window_ver = 0
        self.window_fw_done = False
        # preemption (preemptive job orders) and JOB fidelity
        self.on_gpus = False  # placed and not evicted or released
        self.executed_ms = 0.0  # computing time before run_since (JobView.executed_ms)
        self.run_since = math.nan  # executed time accrues from here (after any restore)
        self.preempt_pending = False  # evict at the next iteration boundary
        self.held = False  # stopped at an iteration boundary, waiting for the next pass
        self.restoring = False  # resumed, paying the restore cost
        self.preemptions = 0
        self.planned = 0  # number of the last scheduling pass that chose it
        self.aux_ver = 0  # version of the job's EV_RESTORE / EV_JOBEND event
        self.jl_iter = 0.0  # JOB fidelity: solo ms per iteration on the current placement
        self.jl_left = float(spec.iterations)  # JOB fidelity: iterations left (fractional)
        self.jl_since = math.nan  # JOB fidelity: progress accounted up to this time
        self.last_sync_ms = math.nan  # when the job last passed an iteration barrier
        self.wait_key = (0.0, -1)  # (priority, placement rank) while waiting to communicate
        # (server, k): refused while that server carries >= k tasks (None: asked again on any
        # change on its servers), see ``BlockingCommScheduler``
        self.hold: tuple[int, int] | None = None


class CommTask:
    """One running all-reduce.  ``trans`` MB moved as of time ``bank_t``; ``speed`` MB/ms
    is the model's rate; ``w`` counts reference-bug probes per tick (effective progress per
    tick is ``(1 + w) * speed * tick``)."""

    __slots__ = (
        "bank_t",
        "factors",
        "job",
        "probes",
        "servers",
        "size_mb",
        "speed",
        "start_t",
        "trans",
        "version",
        "w",
    )

    def __init__(self, job: Job, t: float) -> None:
        self.job = job
        self.size_mb = job.comm_mb * job.chunk
        self.servers = job.servers
        self.factors = job.factors
        self.trans = 0.0
        self.speed = 0.0
        self.bank_t = t
        self.start_t = t
        self.version = 0
        self.w = 0
        self.probes = 0
