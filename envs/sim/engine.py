"""The event-driven, contention-aware simulator (Ada-SRSF model, paper §III).

One event heap ordered by ``(time, sequence)``; all events at one time are handled together
in a fixed phase order, which is also the reference simulator's per-tick order:

1. completions: forward/backward tasks, all-reduces (and their latency ``a``);
2. release of finished jobs' GPU memory;
3. arrivals join the placement queue;
4. placement: queued jobs in job-order priority, each placed if the placer finds GPUs;
5. communication: single-server jobs synchronise at once (free); multi-server jobs ready to
   all-reduce are offered to the communication scheduler in job-order priority;
6. NIC contention: every all-reduce whose servers' task count changed gets its new rate
   ``1 / (k b + (k-1) η)``, ``k`` = most tasks on any of its servers, and a new end event
   (older end events are invalidated by a version number);
7. every idle GPU whose state changed starts the ready forward/backward task of the
   highest-priority job placed on it (GPU time-sharing; one compute task per GPU at a time).

Time is continuous by default; with ``SimConfig.tick_ms`` it is the reference's discrete
clock (all-reduce ends rounded up to the next tick, AdaDUAL probe side effect, ...).
"""

from __future__ import annotations

import bisect
import heapq
import math
import sys
import time as _time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

import numpy as np

from envs.sim.config import Fidelity, SimConfig
from envs.sim.errors import ConfigError, SimulationError
from envs.sim.policies.base import (
    CommScheduler,
    CommTaskView,
    FitIndexedPlacer,
    JobOrder,
    Placer,
    PreemptiveOrder,
)
from envs.sim.policies.job_order import SRSF
from envs.sim.results import JobRecord, SimResult
from envs.sim.spec import ClusterSpec, CommArch, JobSpec, NetworkSpec, Workload
from envs.sim.stacks import SchedulerStack, make_stack
from envs.sim.tictac.overlap import make_overlap

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


#: phase 5 walks a waiting list this short instead of using the per-server index, and
#: holds refused jobs (``BlockingCommScheduler``) only when the list is longer
_SCAN_UP_TO = 24

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


class Simulator:
    """Simulate ``workload`` on ``cluster`` under ``stack``; ``run()`` returns a SimResult.

    The simulator owns the only event loop; policies are consulted at decision points.
    A Simulator runs once; build a new one (with fresh policies) for another run.
    """

    def __init__(
        self,
        cluster: ClusterSpec,
        workload: Workload,
        stack: SchedulerStack,
        config: SimConfig | None = None,
        *,
        ps_servers: Mapping[int, Sequence[int]] | None = None,
    ) -> None:
        workload.check_fits(cluster)
        self.cfg = config or SimConfig()
        # parameter-server jobs whose PSs sit on given servers (job id -> one server per PS,
        # e.g. where an elastic allocator put them); others use ``_ps_traffic``'s rule
        self.ps_servers = _check_ps_servers(ps_servers, workload, cluster)
        self.cluster = cluster
        self.spec = cluster  # ClusterView.spec
        self.network: NetworkSpec = cluster.network
        self.workload = workload
        self.stack = stack
        self.order: JobOrder = stack.order
        self.placer_reads_load: bool = getattr(stack.placer, "reads_load", True)
        self.reask_on_start: bool = getattr(stack.comm, "reask_on_start", True)
        # SRSF's key is the remaining compute itself: skip a call per task end
        self.prio_is_remaining = type(stack.order) is SRSF
        self.placer: Placer = stack.placer
        self.commsched: CommScheduler = stack.comm
        self.rng = _make_rng(self.cfg.seed)
        # TicTac (cfg.ps_iteration): PS exchanges shortened to what compute does not hide
        c = self.cfg
        self.overlap = make_overlap(
            c.ps_iteration, cluster.network, workload, c.seed, c.tictac_upstream_ties
        )
        g = cluster.num_gpus
        # ClusterView
        self.free_mem_mb = [cluster.gpu_memory_mb] * g
        self.load_ms = [0.0] * g
        # GPU state
        self.residents: list[list[tuple[Job, int]]] = [[] for _ in range(g)]
        # the job whose compute window holds each GPU (None: normal per-task simulation)
        self.gpu_window: list[Job | None] = [None] * g
        self.unsettled: dict[Job, None] = {}  # open windows whose forward is not counted yet
        # (job, worker) pairs whose next forward/backward is ready on each GPU
        self.gpu_ready: list[list[tuple[Job, int]]] = [[] for _ in range(g)]
        self.gpu_task: list[tuple[Job, int, int] | None] = [None] * g
        # NetView
        self.nic_tasks: list[list[CommTask]] = [[] for _ in range(cluster.num_servers)]
        self.jobs = [Job(s) for s in workload.jobs]
        # placement queue: the indexed FitQueue for a static-key order and a placer that can
        # say whether a job fits (every built-in non-preemptive stack), else a plain list
        # sorted afresh at every pass (custom orders and placers)
        self.fitq: FitQueue | None = None
        self.queue: list[Job] | FitQueue = []
        self.mem_version = 0  # bumped whenever free_mem_mb changes
        # admission-pass cost (tests): place() calls, fits() calls, indexed passes, passes
        # answered without looking at any queued job
        self.place_calls = 0
        self.fit_checks = 0
        self.alloc_passes = 0
        self.quick_passes = 0
        self.running: list[Job] = []  # placed, not yet released, in placement order
        # multi-server jobs waiting to start their all-reduce, sorted by (priority, placement);
        # a waiting job runs no task, so its key does not change while it waits
        self.waiting: list[Job] = []
        self.waiting_on = [0] * cluster.num_servers  # waiting jobs per server
        # waiting jobs by server: asked again on any change there (``waiting_by``), or, held
        # by the scheduler's ``blocker`` (server, k), only once a task end leaves fewer than
        # k tasks there (``held_by[server][k]``)
        self.waiting_by: list[set[Job]] = [set() for _ in range(cluster.num_servers)]
        self.held_by: list[dict[int, set[Job]]] = [{} for _ in range(cluster.num_servers)]
        self.nic_ended: set[int] = set()  # servers where a task ended since last asked
        self.blocker = getattr(stack.comm, "blocker", None)
        self._fresh: list[Job] = []  # jobs that joined ``waiting`` in this phase 5
        # phase 5 walks the whole waiting list only where the reference's probes need it
        # (tests set it to cross-check ``_ask_touched``); questions asked, jobs walked past
        self.scan_waiting = self.cfg.probe_side_effect
        self.scan_up_to = _SCAN_UP_TO  # tests set 0 to use the index (and holds) always
        self.comm_asks = 0
        self.waiting_visits = 0
        self.unreleased: list[Job] = []
        self.finished = 0
        self.heap: list[tuple[float, int, int, Any, int]] = []
        self.seq = 0
        self.now = 0.0
        self.events = 0
        self.tick = self.cfg.tick_ms
        self.comm_est = (
            self.placer.comm_estimate_ms_per_mb
            if self.placer.comm_estimate_ms_per_mb is not None
            else self.network.b_ms_per_mb
        )
        # per-step scratch
        self.dirty_gpus: set[int] = set()
        self.changed_servers: set[int] = set()
        self.touched: set[CommTask] = set()
        self.probed: set[CommTask] = set()  # tasks with w > 0
        self.ready: list[Job] = []
        self.nic_dirty: set[int] = set()  # servers whose task list changed since last asked
        self._pass_dirty: set[int] = set()
        self._asking: Job | None = None
        self.force_pass = False
        self.placed_count = 0
        self._ran = False
        self._started = False
        self._wall = 0.0  # seconds spent in run()/run_until()
        self.windows = self.cfg.compute_windows
        # preemptive job orders decide which jobs hold GPUs (see _reschedule)
        self.preemptive: bool = getattr(stack.order, "preemptive", False)
        self.porder = cast(PreemptiveOrder, stack.order)
        if (
            not self.preemptive
            and getattr(stack.order, "static_queue_key", False)
            and all(
                callable(getattr(stack.placer, a, None))
                for a in ("fits", "refusal_changes_state", "refuse")
            )
        ):
            self.fitq = FitQueue()
            self.queue = self.fitq
        self.fplacer = cast(FitIndexedPlacer, stack.placer)
        # JOB fidelity: bring remaining work up to date before each pass only if it is read
        self.order_reads_remaining: bool = getattr(stack.order, "reads_remaining", True)
        self.resched = False
        self.wake_at = math.inf
        self.wake_ver = 0
        self.wake_repeats = 0
        self.resumes = 0
        self.passes = 0
        self.spans: dict[int, list[list[float]]] = {}  # job id -> [start, end] on GPUs, ms
        self.job_level = self.cfg.fidelity is Fidelity.JOB
        if self.preemptive and self.tick is not None:
            raise ConfigError(
                f"preemptive job order {self.porder.name!r} needs continuous time (tick_ms=None)"
            )
        self.chunk_max = self.cfg.iterations_per_step(min(j.iterations for j in workload.jobs))
        # decision-point mode (envs.sim.decisions.DecisionSimulator): each event time with
        # queued jobs stops after phase 3 at ``paused_at``, for the caller to place jobs
        self.external_placement = False
        self.paused_at: float | None = None
        # a stop is in phase 4 (placement), or in phase 5 after a job's release
        self.paused_phase = 4
        self.arrived_now = False

    # ------------------------------------------------------------------ events
    def _push(self, t: float, kind: int, obj: Any, version: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, obj, version))

    def _wake_next_tick(self, t: float) -> None:
        assert self.tick is not None
        self._push(t + self.tick, EV_WAKE, None)

    # ------------------------------------------------------------------ main loop
    def run(self) -> SimResult:
        if self._ran:
            raise SimulationError("a Simulator runs once; build a new one for another run")
        self._ran = True
        wall = _time.perf_counter()
        self._start()
        self._loop(math.inf)
        self._wall += _time.perf_counter() - wall
        if self.finished != len(self.jobs):
            stuck = [j.spec.job_id for j in self.jobs if math.isnan(j.finish_ms)]
            raise SimulationError(
                f"no events left but {len(stuck)} jobs never finished (first ids {stuck[:10]}); "
                f"queued={len(self.queue)} waiting-comm={len(self.waiting)}"
            )
        return self._result(self._wall)

    def run_until(self, until_ms: float) -> None:
        """Handle every event at times ``<= until_ms``, then stop with ``now = until_ms``.

        Resumable: later ``run_until`` calls with larger times, and finally ``run()``, give
        exactly what one ``run()`` gives (the loop only pauses between event times).  Jobs not
        finished by then keep their state (``iterations_done``, ``last_sync_ms``); nothing is
        reported stuck.  Used by the elastic slot loop to simulate one time slot."""
        if self._ran:
            raise SimulationError("run_until() after run(): the simulation is over")
        if not until_ms >= self.now:
            raise SimulationError(f"run_until({until_ms}) is before now={self.now}")
        wall = _time.perf_counter()
        self._start()
        self._loop(until_ms)
        self.now = until_ms
        self._wall += _time.perf_counter() - wall

    def _start(self) -> None:
        """Queue the arrivals, once."""
        if self._started:
            return
        self._started = True
        for job in self.jobs:
            self._push(job.spec.submit_ms, EV_ARRIVAL, job)

    def _loop(self, until_ms: float) -> None:
        heap = self.heap
        pop = heapq.heappop
        budget, every = self.cfg.max_wall_s, self.cfg.progress_s
        watch = budget is not None or every is not None
        entered = _time.perf_counter()
        next_report = self._wall + (every or 0.0)
        steps = 0
        while heap and heap[0][0] <= until_ms:
            t = heap[0][0]
            if watch:
                steps += 1
                if not steps & 0xFFF:
                    spent = self._wall + _time.perf_counter() - entered
                    done = f"{self.finished} of {len(self.jobs)} jobs finished"
                    if every is not None and spent >= next_report:
                        print(
                            f"{self.workload.name} under {self.stack.name}: {spent:.0f} s, "
                            f"simulated time {t:.6g} ms, {done}",
                            file=sys.stderr,
                            flush=True,
                        )
                        next_report = spent + every
                    if budget is not None and spent > budget:
                        raise SimulationError(
                            f"wall-clock budget of {budget:g} s spent at simulated time "
                            f"{t:.6g} ms, {done}"
                        )
            if t < self.now:
                raise SimulationError(f"time went backwards: {t} < {self.now}")
            self.now = t
            windows: list[Job] = []
            task_ends: list[int] = []
            comm_ends: list[CommTask] = []
            syncs: list[Job] = []
            arrivals: list[Job] = []
            while heap and heap[0][0] == t:
                _, _, kind, obj, version = pop(heap)
                self.events += 1
                if kind == EV_TASK:
                    task_ends.append(obj)
                elif kind == EV_WINDOW:
                    if obj.window_ver == version:
                        windows.append(obj)
                elif kind == EV_COMM:
                    if obj.version == version and obj.job.comm is obj:
                        comm_ends.append(obj)
                elif kind == EV_SYNC:
                    syncs.append(obj)
                elif kind == EV_ARRIVAL:
                    arrivals.append(obj)
                elif kind == EV_RESTORE:
                    if obj.aux_ver == version:
                        obj.restoring = False
                        self._begin_iteration(obj)
                elif kind == EV_JOBEND:
                    if obj.aux_ver == version:
                        self._job_level_end(obj, t)
                elif kind == EV_RESCHED and version == self.wake_ver:
                    self.wake_at = math.inf
                    self.resched = True
            for job in windows:
                self._end_window(job)
            self._step(t, task_ends, comm_ends, syncs, arrivals)
            if self.paused_at is not None:  # a decision is due (envs.sim.decisions)
                return
            if self.cfg.check_invariants:
                self.check_invariants()

    def _step(
        self,
        t: float,
        task_ends: list[int],
        comm_ends: list[CommTask],
        syncs: list[Job],
        arrivals: list[Job],
    ) -> None:
        # 1. completions
        for g in task_ends:
            self._finish_task(g)
        for task in comm_ends:
            self._finish_comm(task, t)
        for job in syncs:
            self._sync(job, t)
        # 2. release finished jobs' memory
        if self.unreleased:
            self._release(t)
        # 3. arrivals, 4. placement
        if self.preemptive:
            for job in arrivals:
                self.porder.add(job, t)
                self.resched = True
            if self.resched:
                self._reschedule(t)
        else:
            if arrivals:
                self._enqueue(arrivals)
            if self.queue:
                if self.external_placement:  # the caller decides (envs.sim.decisions)
                    self.paused_at = t
                    self.arrived_now = bool(arrivals)
                    self.paused_phase = 4
                    return
                self._allocate(t)
        self._after_placement(t)

    def _after_placement(self, t: float) -> None:
        """Phases 5-7 of an event time."""
        # 5. communication
        busy = self.ready or self.force_pass or (self.nic_dirty and self._waiting_touched())
        if busy and self._communicate(t):
            return  # stopped for the caller's placement pass (envs.sim.decisions)
        self._after_communication(t)

    def _after_communication(self, t: float) -> None:
        """Phases 6-7 of an event time."""
        # 6. rates of affected all-reduces
        if self.changed_servers or self.touched:
            self._retime(t)
        # 7. start compute tasks
        if self.dirty_gpus:
            self._start_tasks(t)

    def _waiting_touched(self) -> bool:
        on = self.waiting_on
        if any(on[s] for s in self.nic_dirty):
            return True
        self.nic_dirty.clear()
        self.nic_ended.clear()
        return False

    # ------------------------------------------------------------------ phase 1
    def _finish_task(self, g: int) -> None:
        job, w, kind = self.gpu_task[g]  # type: ignore[misc]
        self.gpu_task[g] = None
        self.dirty_gpus.add(g)
        dur = job.fw if kind == FW_READY else job.bw
        job.remaining_compute_ms -= dur
        self.load_ms[g] -= dur
        job.prio = job.remaining_compute_ms if self.prio_is_remaining else self.order.priority(job)
        if kind == FW_READY:
            job.wstate[w] = BW_READY
            self.gpu_ready[g].append((job, w))
        else:
            job.wstate[w] = DONE
            job.pending -= 1
            if job.pending == 0:
                self.ready.append(job)

    def _finish_comm(self, task: CommTask, t: float) -> None:
        job = task.job
        job.comm = None
        for s in task.servers:
            self.nic_tasks[s].remove(task)
        self.changed_servers.update(task.servers)
        self.probed.discard(task)
        self.touched.discard(task)
        self.nic_dirty.update(task.servers)
        self.nic_ended.update(task.servers)
        a = self.network.a_ms
        if a > 0:
            end = t + a * job.chunk
            if self.tick is not None:
                end = self._ceil_tick(end)
            self._push(end, EV_SYNC, job)
        else:
            self._sync(job, t)

    def _sync(self, job: Job, t: float) -> None:
        """The all-reduce of the current iteration is done (barrier passed)."""
        job.iterations_done += job.chunk
        job.last_sync_ms = t
        if job.comm_est_once:
            est = job.comm_est_once * job.chunk
            for g in job.gpus:
                self.load_ms[g] -= est
        if job.iterations_done >= job.spec.iterations:
            self._finish_job(job, t)
            return
        if job.preempt_pending:
            # preempted: it stops at this iteration boundary and the next pass evicts it
            job.held = True
            self.resched = True
            return
        self._begin_iteration(job)

    def _begin_iteration(self, job: Job) -> None:
        """Every worker of ``job`` has its next forward ready."""
        if job.chunk > 1:
            self._set_chunk(job)
        n = len(job.gpus)
        job.wstate = [FW_READY] * n
        job.pending = n
        for w, g in enumerate(job.gpus):
            self._make_ready(job, w, g)
        self.dirty_gpus.update(job.gpus)

    def _make_ready(self, job: Job, w: int, g: int) -> None:
        """Worker ``w`` of ``job`` has its next forward ready on GPU ``g``; a compute window
        holding ``g`` is split first, since another job now competes for the GPU."""
        other = self.gpu_window[g]
        if other is not None:
            self._materialise(other)
        self.gpu_ready[g].append((job, w))

    def _set_chunk(self, job: Job) -> None:
        """FAST fidelity: the next ``chunk`` iterations run as one step whose forward,
        backward and all-reduce are ``chunk`` times as long (identical iterations merged)."""
        c = min(self.chunk_max, job.spec.iterations - job.iterations_done)
        m = job.spec.model
        job.chunk = c
        job.fw = m.forward_ms * c
        job.bw = m.backward_ms * c

    def _finish_job(self, job: Job, t: float) -> None:
        if not math.isnan(job.finish_ms):
            raise SimulationError(f"job {job.spec.job_id} finished twice (t={t})")
        job.finish_ms = t
        self.finished += 1
        self.unreleased.append(job)
        if self.preemptive:
            self._bank(job, t)
            self.spans[job.spec.job_id][-1][1] = t
            self.porder.remove(job, t)
            self.resched = True
        if self.cfg.lagged_release:
            self._wake_next_tick(t)

    # ------------------------------------------------------------------ phase 2
    def _release(self, t: float) -> None:
        if self.cfg.lagged_release:
            # The reference removes finished jobs from the running list while iterating it,
            # so a finished job right after a released one is seen only at the next tick.
            pos = {id(j): i for i, j in enumerate(self.running)}
            done = sorted(self.unreleased, key=lambda j: pos[id(j)])
            released: set[int] = set()
            keep: list[Job] = []
            out: list[Job] = []
            for job in done:
                p = pos[id(job)]
                if p - 1 in released:
                    keep.append(job)
                else:
                    released.add(p)
                    out.append(job)
            self.unreleased = keep
            if keep:
                self._wake_next_tick(t)
        else:
            out, self.unreleased = self.unreleased, []
        gone = {id(j) for j in out}
        self.running = [j for j in self.running if id(j) not in gone]
        for job in out:
            job.on_gpus = False
            mem = job.spec.model.gpu_memory_mb
            for g in job.gpus:
                self.free_mem_mb[g] += mem
                self.residents[g] = [rw for rw in self.residents[g] if rw[0] is not job]
        if out:
            self.mem_version += 1

    # ------------------------------------------------------------------ phase 4
    def _enqueue(self, arrivals: list[Job]) -> None:
        fitq = self.fitq
        if fitq is None:
            cast(list[Job], self.queue).extend(arrivals)
            return
        order, placer = self.order, self.fplacer
        for job in arrivals:
            job.prio = order.priority(job)  # static while it waits
            fitq.add(job, job.prio, placer)

    def _allocate(self, t: float) -> None:
        if self.fitq is not None:
            self._allocate_indexed(self.fitq, t)
            return
        order = self.order
        assert isinstance(self.queue, list)
        for job in self.queue:
            job.prio = order.priority(job)
        queue = sorted(self.queue, key=lambda j: j.prio)  # stable: arrival order on ties
        remaining: list[Job] = []
        skip = False
        skipped = False
        if self.placer_reads_load:
            self._settle_window_loads()  # nothing else changes loads during this loop
        for job in queue:
            if skip:
                skip = False
                skipped = True
                remaining.append(job)
                continue
            self.place_calls += 1
            gpus = self.placer.place(job.spec, self, self.rng)
            if gpus is None:
                remaining.append(job)
                continue
            self._place(job, gpus, t)
            skip = self.cfg.skip_after_place
        self.queue = remaining
        if skipped and self.tick is not None:
            self._wake_next_tick(t)

    def _allocate_indexed(self, q: FitQueue, t: float) -> None:
        """The generic pass (``_allocate``: every queued job in key order asked to ``place``,
        the one after a placed job skipped with ``skip_after_place``) with the same outcome,
        asking ``place`` only of jobs that fit (:class:`FitIndexedPlacer` contract).

        A pass walks positions in key order.  From the current position, the classes are
        taken by their next job's key, and ``fits`` is asked of each until one fits: the
        jobs of the classes before it would be refused there (their refusals, if they change
        the placer, are replayed by one ``refuse``), and the fitting job is placed.  Free
        memory changes only at placements, so ``fits`` is asked once per class per stretch
        between placements.  If free memory has not changed and no job has arrived since a
        pass that refused every queued job, this pass refuses them all again without looking.
        """
        if self.placer_reads_load:
            self._settle_window_loads()  # nothing else changes loads during this pass
        placer = self.fplacer
        if q.fresh == 0 and q.refused_at == self.mem_version:
            self.quick_passes += 1
            if q.effect_jobs:
                placer.refuse(self)
            return
        self.alloc_passes += 1
        q.fresh = 0
        skip = self.cfg.skip_after_place
        skipped = False
        pos = _BEFORE_ALL
        while True:
            best: tuple[QKey, tuple[float, int], int] | None = None
            refused_effect = False
            for head in q.heads_after(pos):
                cls, i = head[1], head[2]
                self.fit_checks += 1
                if placer.fits(q.classes[cls][1][i].spec, self):
                    best = head
                    break
                refused_effect = refused_effect or q.effect[cls]
            if refused_effect:
                placer.refuse(self)
            if best is None:
                break
            key, cls, i = best
            job = q.classes[cls][1][i]
            self.place_calls += 1
            gpus = placer.place(job.spec, self, self.rng)
            if gpus is None:
                raise SimulationError(
                    f"placer {placer.name} refused job {job.spec.job_id} although its fits() "
                    "said it fits (FitIndexedPlacer contract)"
                )
            q.pop(cls, i)
            self._place(job, gpus, t)
            pos = key
            if skip:
                heads = q.heads_after(pos)
                if heads:  # the next job in order is not tried at this tick
                    skipped = True
                    pos = heads[0][0]
        q.refused_at = -1 if skipped else self.mem_version
        if skipped and self.tick is not None:
            self._wake_next_tick(t)

    def _place(self, job: Job, gpus: list[int], t: float) -> None:
        spec = job.spec
        if len(set(gpus)) != spec.num_gpus:
            raise SimulationError(
                f"placer {self.placer.name} gave job {spec.job_id} GPUs {gpus}; "
                f"needs {spec.num_gpus} distinct GPUs"
            )
        per = self.cluster.gpus_per_server
        servers: list[int] = []
        for g in gpus:
            s = g // per
            if s not in servers:
                servers.append(s)
        job.gpus = list(gpus)
        job.servers = servers
        job.multi = len(servers) > 1
        if spec.comm is CommArch.PS:
            self._ps_traffic(job)
        m = spec.model
        est = job.comm_mb * self.comm_est if job.multi else 0.0
        job.comm_est_once = est
        left = spec.iterations - job.iterations_done  # all of them unless resumed
        load = m.compute_ms * left + est * left
        mem = m.gpu_memory_mb
        # JOB fidelity and restoring resumptions compute nothing per task yet
        hold = self.job_level or (job.preemptions > 0 and self.cfg.preemption_cost_ms > 0)
        for w, g in enumerate(gpus):
            if self.free_mem_mb[g] < mem:
                raise SimulationError(
                    f"placer {self.placer.name} put job {spec.job_id} on GPU {g} without memory"
                )
            if self.job_level and self.residents[g]:
                raise SimulationError(
                    f"JOB fidelity needs exclusive GPUs, but placer {self.placer.name} put job "
                    f"{spec.job_id} on GPU {g} next to job {self.residents[g][0][0].spec.job_id}"
                )
            self.free_mem_mb[g] -= mem
            self.load_ms[g] += load
            self.residents[g].append((job, w))
            if not hold:
                self._make_ready(job, w, g)
        self.mem_version += 1
        if hold:
            job.wstate = [DONE] * len(gpus)
            job.pending = 0
        else:
            job.wstate = [FW_READY] * len(gpus)
            job.pending = len(gpus)
        if self.chunk_max > 1:
            self._set_chunk(job)
        job.placed_order = self.placed_count
        self.placed_count += 1
        if math.isnan(job.start_ms):
            job.start_ms = t
        job.on_gpus = True
        job.run_since = t
        if self.preemptive:
            self.spans.setdefault(spec.job_id, []).append([t, math.nan])
        self.running.append(job)
        self.dirty_gpus.update(gpus)
        if hold:
            self._hold_start(job, t)

    def _ps_traffic(self, job: Job) -> None:
        """Where a parameter-server job's PSs sit and what crosses each server's NIC.

        PS ``k`` sits on the server of worker ``k mod W`` (PSs spread over the job's worker
        servers, DL²-style bundles).  Each iteration every worker pushes ``M / P`` MB to every
        PS and pulls as much back; traffic between a worker and a PS on the same server is
        free.  NICs are full duplex: server ``s`` carries ``v_s = max(in_s, out_s)`` MB.  The
        exchange is one communication task over the servers with ``v_s > 0``, moving
        ``max_s v_s`` MB at the rate its busiest NIC allows (``_speed``).
        """
        spec = job.spec
        per = self.cluster.gpus_per_server
        worker_srv = [g // per for g in job.gpus]
        given = self.ps_servers.get(spec.job_id)
        if given is not None:
            ps_srv = list(given)
        else:
            ps_srv = [worker_srv[k % len(worker_srv)] for k in range(spec.num_ps)]
        share = spec.model.model_size_mb / spec.num_ps
        inn: dict[int, float] = {}
        out: dict[int, float] = {}
        for sw in worker_srv:
            for sp in ps_srv:
                if sw != sp:  # push sw -> sp, pull sp -> sw
                    out[sw] = out.get(sw, 0.0) + share
                    inn[sp] = inn.get(sp, 0.0) + share
                    out[sp] = out.get(sp, 0.0) + share
                    inn[sw] = inn.get(sw, 0.0) + share
        vol = {s: max(inn.get(s, 0.0), out.get(s, 0.0)) for s in set(inn) | set(out)}
        job.servers = [s for s in dict.fromkeys(worker_srv + ps_srv) if vol.get(s, 0.0) > 0]
        job.multi = bool(job.servers)
        job.comm_mb = max(vol.values()) if vol else 0.0
        job.factors = {s: vol[s] / job.comm_mb for s in job.servers} if vol else None

    def _speed(self, task: CommTask) -> float:
        """MB/ms over the task's busiest NIC: all-reduce ``1/(k b + (k-1) η)`` with ``k`` the
        most tasks on any of its servers; a PS exchange ``1 / max_s f_s (k_s b + (k_s-1) η)``
        where ``f_s`` is server ``s``'s share of the busiest NIC's bytes."""
        nic = self.nic_tasks
        if task.factors is None:
            return self.network.rate(max(len(nic[s]) for s in task.servers))
        b, eta = self.network.b_ms_per_mb, self.network.eta_ms_per_mb
        worst = 0.0
        for s, f in task.factors.items():
            k = len(nic[s])
            worst = max(worst, f * (k * b + (k - 1) * eta))
        return 1.0 / worst

    # ------------------------------------------------------------------ preemption
    # A preemptive job order (``PreemptiveOrder``) decides at each decision point which jobs
    # hold GPUs.  A running job it leaves out is evicted at once if nothing of its current
    # iteration has run (or it is restoring, or in JOB fidelity); otherwise it is marked and
    # stops at its next iteration boundary (``_sync`` holds it there and asks for a new pass),
    # so no partial iteration is ever lost or double-counted.  Eviction frees its GPUs; on
    # resumption it pays ``SimConfig.preemption_cost_ms`` with its GPUs held (``_hold_start``).

    def _reschedule(self, t: float) -> None:
        self.resched = False
        for job in self.running:  # executed time up to now (what the order reads)
            if t > job.run_since:  # not while restoring
                job.executed_ms += t - job.run_since
                job.run_since = t
        if self.job_level and self.order_reads_remaining:
            for job in self.running:
                self._bank(job, t)
        plan = cast(list[Job], self.porder.plan(t, self.cluster.num_gpus))  # our own Jobs
        self.passes += 1
        mark = self.passes
        for job in plan:
            job.planned = mark
        for job in list(self.running):
            if job.planned == mark:
                if job.preempt_pending:  # reprieved before it reached its boundary
                    job.preempt_pending = False
                    if job.held:
                        job.held = False
                        self._begin_iteration(job)
            elif (
                self.job_level
                or job.held
                or job.restoring
                or all(s == FW_READY for s in job.wstate)
            ):
                self._evict(job, t)
            else:
                job.preempt_pending = True
        if self.placer_reads_load:
            self._settle_window_loads()
        for job in plan:
            if job.on_gpus:
                continue
            gpus = self.placer.place(job.spec, self, self.rng)
            if gpus is None:
                continue  # stays pending; asked again at the next decision point
            if job.preemptions:
                self.resumes += 1
            self._place(job, gpus, t)
            self.porder.on_start(job, t)
        wake = self.porder.next_wakeup(t)
        if wake <= t:
            self.wake_repeats += 1
            if self.wake_repeats > 1000:
                raise SimulationError(
                    f"job order {self.porder.name} keeps asking for a pass at t={t} ms"
                )
        else:
            self.wake_repeats = 0
        if wake < math.inf and wake != self.wake_at:
            self.wake_at = wake
            self.wake_ver += 1
            self._push(max(wake, t), EV_RESCHED, None, self.wake_ver)

    def _bank(self, job: Job, t: float) -> None:
        """Bring ``job``'s executed time (and, in JOB fidelity, its progress) up to ``t``."""
        if not job.on_gpus:
            return
        if t > job.run_since:  # not while restoring
            job.executed_ms += t - job.run_since
            job.run_since = t
        if self.job_level and t > job.jl_since:
            job.jl_left = max(0.0, job.jl_left - (t - job.jl_since) / job.jl_iter)
            job.jl_since = t
            job.remaining_compute_ms = job.jl_left * job.spec.model.compute_ms * len(job.gpus)

    def _evict(self, job: Job, t: float) -> None:
        """Take ``job`` off its GPUs (it has nothing of an iteration in flight)."""
        self._bank(job, t)
        job.aux_ver += 1  # its restore or job-level end event is void
        self.spans[job.spec.job_id][-1][1] = t
        job.restoring = job.held = job.preempt_pending = job.on_gpus = False
        job.run_since = math.nan
        spec = job.spec
        left = spec.iterations - job.iterations_done
        load = spec.model.compute_ms * left + job.comm_est_once * left
        mem = spec.model.gpu_memory_mb
        self.mem_version += 1
        for g in job.gpus:
            self.free_mem_mb[g] += mem
            self.load_ms[g] -= load
            self.residents[g] = [rw for rw in self.residents[g] if rw[0] is not job]
            self.gpu_ready[g] = [rw for rw in self.gpu_ready[g] if rw[0] is not job]
        job.wstate = [DONE] * len(job.gpus)
        job.pending = 0
        self.running.remove(job)
        self.dirty_gpus.update(job.gpus)
        job.preemptions += 1
        self.porder.on_stop(job, t)

    def _hold_start(self, job: Job, t: float) -> None:
        """A job placed in JOB fidelity, or resumed with a restore cost: schedule the end of
        its run (JOB) or of its restore."""
        cost = self.cfg.preemption_cost_ms if job.preemptions else 0.0
        job.aux_ver += 1
        job.run_since = t + cost  # a restore is not service: orders see no progress
        if not self.job_level:
            job.restoring = True
            self._push(t + cost, EV_RESTORE, job, job.aux_ver)
            return
        m = job.spec.model
        comm = self.network.a_ms + job.comm_mb * self.network.b_ms_per_mb if job.multi else 0.0
        job.jl_iter = m.compute_ms + comm
        job.jl_since = t + cost
        self._push(job.jl_since + job.jl_left * job.jl_iter, EV_JOBEND, job, job.aux_ver)

    def _job_level_end(self, job: Job, t: float) -> None:
        job.jl_left = 0.0
        job.iterations_done = job.spec.iterations
        job.remaining_compute_ms = 0.0
        self._finish_job(job, t)

    # ------------------------------------------------------------------ phase 5
    def _communicate(self, t: float) -> bool:
        """Phase 5: all-reduces become ready, finished jobs release their memory (and the
        queue gets a placement pass), waiting all-reduces are admitted.  True when it stopped
        before admitting, for the caller's placement pass (decision-point mode)."""
        ready, self.ready = self.ready, []
        ready.sort(key=lambda j: j.placed_order)
        for job in ready:
            if job.multi:
                job.fresh = True
                job.wait_key = (job.prio, job.placed_order)
                bisect.insort(self.waiting, job, key=_waiting_key)
                self._fresh.append(job)
                for s in job.servers:
                    self.waiting_on[s] += 1
                    self.waiting_by[s].add(job)
            else:
                self._sync(job, t)  # one server: the all-reduce is free
        if self.preemptive:
            # a job finished or reached the boundary where it is preempted: decide again
            if self.unreleased:
                self._release(t)
            if self.resched:
                self._reschedule(t)
        elif self.unreleased and not self.cfg.lagged_release:
            # a job just finished: its memory is free now, place again
            self._release(t)
            if self.queue:
                if self.external_placement:  # the caller decides (envs.sim.decisions)
                    self.paused_at = t
                    self.arrived_now = False
                    self.paused_phase = 5
                    return True
                self._allocate(t)
        self._admit_waiting(t)
        return False

    def _admit_waiting(self, t: float) -> None:
        """Phase 5's admission of waiting all-reduces (the communication scheduler's pass)."""
        if not self.waiting:
            self.nic_dirty.clear()
            self.nic_ended.clear()
            return
        probe_mode = self.cfg.probe_side_effect
        self.force_pass = False
        while True:
            # A waiting job's answer can change only when a task starts or ends on one of its
            # servers (the CommScheduler contract), so only those jobs are asked again.
            dirty, self.nic_dirty = self.nic_dirty, set()
            ended, self.nic_ended = self.nic_ended, set()
            self._pass_dirty = dirty
            for task in self.probed:
                task.probes = 0
            admitted: list[Job] = []
            if self.scan_waiting:
                self.waiting_visits += len(self.waiting)
                for job in self.waiting:
                    if job.fresh or not dirty.isdisjoint(job.servers):
                        if self._ask(job, t):
                            admitted.append(job)
                    elif probe_mode and job.probe_target is not None:
                        # same servers, same answer; the reference still probes every tick
                        target = job.probe_target
                        if target.job.comm is target:
                            self.remaining_mb(target)
            else:
                self._ask_touched(dirty, ended, admitted, t)
            self._fresh.clear()
            if admitted:
                waiting = self.waiting
                for job in admitted:
                    del waiting[bisect.bisect_left(waiting, job.wait_key, key=_waiting_key)]
                    for s in job.servers:
                        self.waiting_on[s] -= 1
                        self.waiting_by[s].discard(job)
                    if job.hold is not None:
                        self.held_by[job.hold[0]][job.hold[1]].discard(job)
                        job.hold = None
            if probe_mode:
                # probes per tick changed for these tasks: they need a new end time
                for task in list(self.probed):
                    if task.probes != task.w:
                        self.touched.add(task)
            if not admitted or not self.waiting:
                break
            if self.tick is not None:
                # the reference sees this tick's admissions only at the next tick, and
                # the jobs admitted now stop probing then: the next tick is a full pass
                self._wake_next_tick(t)
                self.force_pass = True
                break

    def _ask(self, job: Job, t: float) -> bool:
        """Ask the communication scheduler whether ``job`` may start its transfer now
        (counted; the job is no longer fresh and forgets its probe target)."""
        self.comm_asks += 1
        job.fresh = False
        job.probe_target = None
        self._asking = job
        started = self._try_start(job, t)
        self._asking = None
        return started

    def _ask_touched(self, dirty: set[int], ended: set[int], admitted: list[Job], t: float) -> None:
        """One round of the admission pass without probes: the waiting jobs that are fresh
        or have a server in ``dirty`` are asked, in waiting order.  ``dirty`` grows when an
        admission starts a task and the scheduler re-asks on starts; jobs after the admitted
        one on its servers are then asked too.  The same jobs, in the same order, as walking
        the whole waiting list and testing each, at the cost of the jobs asked, except that a
        job the scheduler holds (``blocker`` (s, k)) is asked only once a task end (``ended``)
        has left fewer than k tasks on s: until then it would be refused, with no side
        effect.  A list of at most ``_SCAN_UP_TO`` jobs is walked instead."""
        waiting_by, held_by = self.waiting_by, self.held_by
        nic = self.nic_tasks
        freed: set[Job] = set()  # held jobs whose blocking server has fewer tasks now
        for s in ended:
            c = len(nic[s])
            for k, held in held_by[s].items():
                if c < k:
                    freed.update(held)
        if len(self.waiting) <= self.scan_up_to:
            # a short list: walk it (cheaper than the index); no new holds
            for job in self.waiting:
                if job.hold is not None:
                    if job not in freed:
                        continue
                    self._hold(job, None)  # asked on every change again
                elif not (job.fresh or not dirty.isdisjoint(job.servers)):
                    continue
                if self._ask(job, t):
                    admitted.append(job)
            return
        cand: list[tuple[tuple[float, int], Job]] = [(j.wait_key, j) for j in self._fresh]
        seen = set(self._fresh)
        for s in dirty:
            for job in waiting_by[s]:
                if job not in seen:
                    seen.add(job)
                    cand.append((job.wait_key, job))
        for job in freed:
            if job not in seen:
                seen.add(job)
                cand.append((job.wait_key, job))
        heapq.heapify(cand)
        reask = self.reask_on_start
        blocker = self.blocker
        while cand:
            key, job = heapq.heappop(cand)
            started = self._ask(job, t)
            if not started:
                if blocker is not None:
                    self._hold(job, blocker(job, self))
                continue
            admitted.append(job)
            if reask:  # its servers are dirty now: later jobs on them are asked too
                for s in job.servers:
                    for other in waiting_by[s]:
                        if other not in seen and other.wait_key > key:
                            seen.add(other)
                            heapq.heappush(cand, (other.wait_key, other))

    def _hold(self, job: Job, hold: tuple[int, int] | None) -> None:
        """File a waiting job under its blocker ``(server, k)``, or (``None``) under all of
        its servers, to be asked again on any change there."""
        old = job.hold
        if old == hold:
            return
        if old is None:
            for s in job.servers:
                self.waiting_by[s].discard(job)
        else:
            self.held_by[old[0]][old[1]].discard(job)
        job.hold = hold
        if hold is None:
            for s in job.servers:
                self.waiting_by[s].add(job)
        else:
            self.held_by[hold[0]].setdefault(hold[1], set()).add(job)

    def _try_start(self, job: Job, t: float) -> bool:
        if not self.commsched.admit(job, self):
            return False
        task = CommTask(job, t)
        job.comm = task
        for s in job.servers:
            self.nic_tasks[s].append(task)
        if self.overlap is not None and job.factors is not None:
            task.size_mb *= self.overlap.fraction(job.spec, job.comm_mb, self._speed(task))
        self.changed_servers.update(job.servers)
        if self.reask_on_start:
            self.nic_dirty.update(job.servers)
            self._pass_dirty.update(job.servers)
        self.touched.add(task)
        return True

    # NetView
    def remaining_mb(self, view: CommTaskView) -> float:
        """MB the running all-reduce still has to move at the current time.

        In tick mode this is the reference's probe: one tick of progress at the current rate
        counts (it is banked at the end of this tick); with ``probe_side_effect`` the probe
        also *adds* that tick to the task, once per call.

        FAST fidelity: a job asking to start a merged all-reduce of ``chunk`` iterations is
        told the remainder divided by its ``chunk``, so that a scheduler comparing it with
        one iteration's size (AdaDUAL's ratio test) compares the two steps' sizes.
        """
        task = cast(CommTask, view)
        t = self.now
        asking = self._asking
        if asking is not None:
            asking.probe_target = task
        if self.tick is None:
            rem = task.size_mb
            if task.start_t != t:
                rem -= task.trans + (t - task.bank_t) * task.speed
            if asking is not None and asking.chunk > 1:
                rem /= asking.chunk
            return rem
        if task.start_t == t:
            return task.size_mb
        self._bank_to(task, t - self.tick)
        step = task.speed * self.tick
        if self.cfg.probe_side_effect:
            task.trans += step
            task.probes += 1
            self.probed.add(task)
            self.touched.add(task)
            return task.size_mb - task.trans
        return task.size_mb - (task.trans + step)

    def _bank_to(self, task: CommTask, t: float) -> None:
        """Tick mode: account the quiet ticks in ``(bank_t, t]``, each moving
        ``(1 + w) * speed * tick`` MB."""
        if task.bank_t < t:
            assert self.tick is not None
            n = round((t - task.bank_t) / self.tick)
            task.trans += n * (1 + task.w) * task.speed * self.tick
            task.bank_t = t

    # ------------------------------------------------------------------ phase 6
    def _retime(self, t: float) -> None:
        tasks = set(self.touched)
        nic = self.nic_tasks
        for s in self.changed_servers:
            tasks.update(nic[s])
        self.changed_servers.clear()
        self.touched.clear()
        tick = self.tick
        for task in sorted(tasks, key=lambda x: x.job.placed_order):
            if tick is None:
                if task.start_t != t:
                    task.trans += (t - task.bank_t) * task.speed
                task.bank_t = t
                task.speed = self._speed(task)
                rest = max(task.size_mb - task.trans, 0.0)
                end = t + rest / task.speed
            else:
                if task.start_t != t:
                    self._bank_to(task, t - tick)
                    task.trans += task.speed * tick  # this tick, at the old rate
                task.bank_t = t
                task.speed = self._speed(task)
                task.w = task.probes
                task.probes = 0
                if task.w:
                    self.probed.add(task)
                else:
                    self.probed.discard(task)
                rest = task.size_mb - task.trans
                step = task.speed * tick
                n = 0 if rest <= step else math.ceil((rest - step) / ((1 + task.w) * step))
                end = t + tick * (1 + n)
            task.version += 1
            self._push(end, EV_COMM, task, task.version)

    def _ceil_tick(self, x: float) -> float:
        assert self.tick is not None
        return math.ceil(x / self.tick - 1e-9) * self.tick

    # ------------------------------------------------------------------ compute windows
    # A job whose iteration starts while every one of its GPUs is idle with nothing else ready
    # runs forward then backward on all workers undisturbed unless another job becomes ready
    # on one of those GPUs.  Such an iteration's 2n task events are replaced by one window
    # event; if another job does become ready there (its sync or placement), the window is
    # turned back into the exact per-task state at that moment (``_materialise``).  Nothing
    # else reads a windowed job's per-task state: its GPUs are busy, it is not waiting for
    # communication, and LWF's loads are brought up to date before every placement.

    def _open_windows(self, t: float) -> None:
        gpu_task, gpu_ready = self.gpu_task, self.gpu_ready
        for g in self.dirty_gpus:
            ready = gpu_ready[g]
            if gpu_task[g] is not None or len(ready) != 1:
                continue
            job = ready[0][0]
            n = len(job.gpus)
            if job.pending != n or not math.isnan(job.window_t):
                continue
            if any(
                gpu_task[h] is not None or len(gpu_ready[h]) != 1 or gpu_ready[h][0][0] is not job
                for h in job.gpus
            ):
                continue
            if any(st != FW_READY for st in job.wstate):
                continue
            for w, h in enumerate(job.gpus):
                gpu_ready[h].clear()
                gpu_task[h] = (job, w, WINDOW)
                self.gpu_window[h] = job
            job.wstate = [RUNNING] * n
            job.window_t = t
            job.window_fw_done = False
            self.unsettled[job] = None
            job.window_ver += 1
            self._push(t + job.fw + job.bw, EV_WINDOW, job, job.window_ver)

    def _window_forward_done(self, job: Job) -> None:
        for _ in job.gpus:
            job.remaining_compute_ms -= job.fw
        for g in job.gpus:
            self.load_ms[g] -= job.fw
        job.window_fw_done = True
        del self.unsettled[job]

    def _end_window(self, job: Job) -> None:
        n = len(job.gpus)
        if not job.window_fw_done:
            self._window_forward_done(job)
        for _ in range(n):
            job.remaining_compute_ms -= job.bw
        for g in job.gpus:
            self.load_ms[g] -= job.bw
            self.gpu_task[g] = None
            self.gpu_window[g] = None
        self.dirty_gpus.update(job.gpus)
        job.prio = job.remaining_compute_ms if self.prio_is_remaining else self.order.priority(job)
        job.wstate = [DONE] * n
        job.pending = 0
        job.window_t = math.nan
        self.ready.append(job)

    def _materialise(self, job: Job) -> None:
        """Turn ``job``'s compute window into the per-task state it stands for at ``now``."""
        t0, fw, bw = job.window_t, job.fw, job.bw
        elapsed = self.now - t0
        job.window_ver += 1  # the window's end event is void
        job.window_t = math.nan
        fw_done = elapsed >= fw
        if fw_done and not job.window_fw_done:
            self._window_forward_done(job)
        self.unsettled.pop(job, None)
        for w, g in enumerate(job.gpus):
            self.gpu_window[g] = None
            if not fw_done:
                self.gpu_task[g] = (job, w, FW_READY)
                self._push(t0 + fw, EV_TASK, g)
            elif elapsed == fw:  # forward just ended: the GPU chooses again now
                self.gpu_task[g] = None
                job.wstate[w] = BW_READY
                self.gpu_ready[g].append((job, w))
                self.dirty_gpus.add(g)
            else:
                self.gpu_task[g] = (job, w, BW_READY)
                self._push(t0 + fw + bw, EV_TASK, g)
        job.prio = job.remaining_compute_ms if self.prio_is_remaining else self.order.priority(job)

    def _settle_window_loads(self) -> None:
        """Before a load-reading placement: count the forward part of open windows that ran."""
        now = self.now
        # open windows whose forward is not counted yet (windows hold disjoint GPUs, so the
        # order does not matter)
        for job in [j for j in self.unsettled if now - j.window_t >= j.fw]:
            self._window_forward_done(job)

    # ------------------------------------------------------------------ phase 7
    def _start_tasks(self, t: float) -> None:
        gpu_task = self.gpu_task
        gpu_ready = self.gpu_ready
        heap = self.heap
        if self.windows:
            self._open_windows(t)
        for g in self.dirty_gpus:
            if gpu_task[g] is not None:
                continue
            ready = gpu_ready[g]
            if not ready:
                continue
            # highest priority first; ties: earlier placement
            k = 0
            if len(ready) > 1:
                bp = math.inf
                bo = 0
                for i, (job, _) in enumerate(ready):
                    p = job.prio
                    if p < bp or (p == bp and job.placed_order < bo):
                        k, bp, bo = i, p, job.placed_order
            best, bw = ready.pop(k)
            kind = best.wstate[bw]
            dur = best.fw if kind == FW_READY else best.bw
            best.wstate[bw] = RUNNING
            gpu_task[g] = (best, bw, kind)
            self.seq += 1
            heapq.heappush(heap, (t + dur, self.seq, EV_TASK, g, 0))
        self.dirty_gpus.clear()

    # ------------------------------------------------------------------ checks & results
    def check_invariants(self) -> None:
        """Raise SimulationError if any model invariant fails (called after every event time
        when ``SimConfig.check_invariants``)."""
        cap = self.cluster.gpu_memory_mb
        for g in range(self.cluster.num_gpus):
            used = sum(j.spec.model.gpu_memory_mb for j, _ in self.residents[g])
            if used > cap + 1e-6 or abs(cap - used - self.free_mem_mb[g]) > 1e-6:
                raise SimulationError(
                    f"GPU {g} memory over-committed or inconsistent at t={self.now}"
                )
            ready = {(id(j), w) for j, w in self.residents[g] if j.wstate[w] < RUNNING}
            if ready != {(id(j), w) for j, w in self.gpu_ready[g]}:
                raise SimulationError(f"GPU {g}: ready-task list out of date at t={self.now}")
            running = sum(1 for j, w in self.residents[g] if j.wstate[w] == RUNNING)
            if running != (self.gpu_task[g] is not None) or running > 1:
                raise SimulationError(f"GPU {g} runs {running} compute tasks at t={self.now}")
        inv_b = 1.0 / self.network.b_ms_per_mb
        for s, tasks in enumerate(self.nic_tasks):
            if len(set(map(id, tasks))) != len(tasks):
                raise SimulationError(f"NIC {s} lists a task twice at t={self.now}")
            for task in tasks:
                f = 1.0 if task.factors is None else task.factors[s]
                if task.speed * f > self.network.rate(len(tasks)) * (1 + 1e-9):
                    raise SimulationError(f"NIC {s}: task of job {task.job.spec.job_id} too fast")
            load = sum(x.speed * (1.0 if x.factors is None else x.factors[s]) for x in tasks)
            if load > inv_b * (1 + 1e-9):
                raise SimulationError(f"NIC {s} carries more than its capacity at t={self.now}")

    def _result(self, wall: float) -> SimResult:
        records = [
            JobRecord.from_spec(j.spec, j.start_ms, j.finish_ms, len(j.servers)) for j in self.jobs
        ]
        extra: dict[str, Any] = {"iterations_per_step": self.chunk_max}
        if self.preemptive:
            extra["preemptions"] = sum(j.preemptions for j in self.jobs)
            extra["resumes"] = self.resumes
            extra["preemptions_by_job"] = {j.spec.job_id: j.preemptions for j in self.jobs}
            extra["run_spans_ms"] = {k: [tuple(s) for s in v] for k, v in self.spans.items()}
            stats = getattr(self.porder, "stats", None)
            if stats:
                extra["order_stats"] = dict(stats)
        return SimResult.from_records(
            records,
            num_gpus=self.cluster.num_gpus,
            stack=self.stack.name,
            config=self.cfg.to_dict(),
            workload=self.workload.name,
            events=self.events,
            wall_s=wall,
            extra=extra,
        )


def _check_ps_servers(
    ps_servers: Mapping[int, Sequence[int]] | None, workload: Workload, cluster: ClusterSpec
) -> dict[int, list[int]]:
    """Validated copy of ``Simulator(ps_servers=...)``: only PS jobs of the workload, one
    server per PS, every server in the cluster."""
    if not ps_servers:
        return {}
    specs = {j.job_id: j for j in workload.jobs}
    out: dict[int, list[int]] = {}
    for jid, servers in ps_servers.items():
        spec = specs.get(jid)
        if spec is None or spec.comm is not CommArch.PS:
            raise ConfigError(f"ps_servers names job {jid}, which is not a PS job of the workload")
        srv = [int(s) for s in servers]
        if len(srv) != spec.num_ps:
            raise ConfigError(
                f"ps_servers gives job {jid} {len(srv)} servers for {spec.num_ps} PSs"
            )
        bad = [s for s in srv if not 0 <= s < cluster.num_servers]
        if bad:
            raise ConfigError(
                f"ps_servers puts job {jid}'s PSs on servers {bad}; the cluster has "
                f"{cluster.num_servers}"
            )
        out[jid] = srv
    return out


def _waiting_key(job: Job) -> tuple[float, int]:
    return job.wait_key


def _make_rng(seed: int) -> np.random.Generator:
    """The run's generator: MT19937 seeded like CPython's ``random.seed(seed)``
    (``init_by_array``), so RAND placement can follow the reference's draws."""
    bitgen = np.random.MT19937(0)
    bitgen._legacy_seeding([seed])  # init_by_array([seed]), CPython's seeding of an int
    return np.random.Generator(bitgen)


#: Most iterations one job may have in FULL fidelity (each is several events): beyond this a
#: run takes hours to forever, which is a trace's unit mistake more often than a wish.
MAX_FULL_ITERATIONS = 10**8


def resolve_stack(stack: str | SchedulerStack, cfg: SimConfig) -> SchedulerStack:
    """A stack by name (built fresh, with ``cfg``'s LWF and AdaDUAL options) or as given;
    :class:`ConfigError` for anything else."""
    if isinstance(stack, str):
        return make_stack(
            stack,
            lwf_comm_ms_per_mb=cfg.lwf_comm_ms_per_mb,
            adadual_inclusive=cfg.adadual_inclusive,
        )
    if not isinstance(stack, SchedulerStack):
        raise ConfigError(f"stack must be a name or a SchedulerStack, got {type(stack).__name__}")
    return stack


def simulate(
    cluster: ClusterSpec,
    workload: Workload,
    stack: str | SchedulerStack,
    config: SimConfig | None = None,
) -> SimResult:
    """Run ``workload`` under a named (or given) stack; policies are built fresh.

    On the native event loop when ``config.engine`` allows and :mod:`envs.sim.native` covers
    the run (same results, bit for bit), else on :class:`Simulator`."""
    cfg = config or SimConfig()
    stack = resolve_stack(stack, cfg)
    if cfg.fidelity is Fidelity.FULL:
        big = max(workload.jobs, key=lambda j: j.iterations)
        if big.iterations > MAX_FULL_ITERATIONS:
            raise ConfigError(
                f"workload {workload.name!r}: job {big.job_id} ({big.name or big.model.name}) "
                f"runs {big.iterations:.3g} iterations, and FULL fidelity simulates every one "
                f"(> {MAX_FULL_ITERATIONS:.0e}: hours to forever); merge them with "
                "workload.trace.max_iterations, cap durations (workload.trace.duration_cap_s), "
                "or use fidelity=fast / job"
            )
    if cfg.engine != "python":
        from envs.sim import native

        why = native.unsupported(workload, stack, cfg)
        if why is None:
            return native.run(cluster, workload, stack, cfg, _make_rng(cfg.seed))
        if cfg.engine == "native":
            raise ConfigError(f"engine='native' cannot run this: {why}")
    return Simulator(cluster, workload, stack, cfg).run()
