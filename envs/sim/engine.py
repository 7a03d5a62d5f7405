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
import time as _time
from typing import Any, cast

import numpy as np

from envs.sim.config import Fidelity, SimConfig
from envs.sim.errors import ConfigError, DlschedError
from envs.sim.policies.base import CommScheduler, CommTaskView, JobOrder, Placer
from envs.sim.policies.job_order import SRSF
from envs.sim.results import JobRecord, SimResult
from envs.sim.spec import ClusterSpec, CommArch, JobSpec, NetworkSpec, Workload
from envs.sim.stacks import SchedulerStack, make_stack

# worker states
FW_READY, BW_READY, RUNNING, DONE = 0, 1, 2, 3
# event kinds (all phase-1 kinds sort before the others only by being handled first)
EV_TASK, EV_COMM, EV_SYNC, EV_ARRIVAL, EV_WAKE, EV_WINDOW = 0, 1, 2, 3, 4, 5
# gpu_task kind of a GPU that runs its part of a job's compute window
WINDOW = 9


class SimulationError(DlschedError):
    """The simulation reached an impossible state (an invariant failed or jobs are stuck)."""


class Job:
    """Run-time state of one job (satisfies :class:`envs.sim.policies.base.JobView`)."""

    __slots__ = (
        "bw",
        "chunk",
        "comm",
        "comm_est_once",
        "comm_mb",
        "factors",
        "finish_ms",
        "fresh",
        "fw",
        "gpus",
        "iterations_done",
        "multi",
        "pending",
        "placed_order",
        "prio",
        "probe_target",
        "remaining_compute_ms",
        "servers",
        "spec",
        "start_ms",
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
    ) -> None:
        workload.check_fits(cluster)
        self.cfg = config or SimConfig()
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
        g = cluster.num_gpus
        # ClusterView
        self.free_mem_mb = [cluster.gpu_memory_mb] * g
        self.load_ms = [0.0] * g
        # GPU state
        self.residents: list[list[tuple[Job, int]]] = [[] for _ in range(g)]
        # the job whose compute window holds each GPU (None: normal per-task simulation)
        self.gpu_window: list[Job | None] = [None] * g
        # (job, worker) pairs whose next forward/backward is ready on each GPU
        self.gpu_ready: list[list[tuple[Job, int]]] = [[] for _ in range(g)]
        self.gpu_task: list[tuple[Job, int, int] | None] = [None] * g
        # NetView
        self.nic_tasks: list[list[CommTask]] = [[] for _ in range(cluster.num_servers)]
        self.jobs = [Job(s) for s in workload.jobs]
        self.queue: list[Job] = []
        self.running: list[Job] = []  # placed, not yet released, in placement order
        # multi-server jobs waiting to start their all-reduce, sorted by (priority, placement);
        # a waiting job runs no task, so its key does not change while it waits
        self.waiting: list[Job] = []
        self.waiting_on = [0] * cluster.num_servers  # waiting jobs per server
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
        self.windows = self.cfg.compute_windows
        self.chunk_max = 1
        if self.cfg.fidelity is Fidelity.FAST:
            shortest = min(j.iterations for j in workload.jobs)
            self.chunk_max = max(1, shortest // self.cfg.fast_min_steps)

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
        for job in self.jobs:
            self._push(job.spec.submit_ms, EV_ARRIVAL, job)
        heap = self.heap
        pop = heapq.heappop
        while heap:
            t = heap[0][0]
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
            for job in windows:
                self._end_window(job)
            self._step(t, task_ends, comm_ends, syncs, arrivals)
            if self.cfg.check_invariants:
                self.check_invariants()
        if self.finished != len(self.jobs):
            stuck = [j.spec.job_id for j in self.jobs if math.isnan(j.finish_ms)]
            raise SimulationError(
                f"no events left but {len(stuck)} jobs never finished (first ids {stuck[:10]}); "
                f"queued={len(self.queue)} waiting-comm={len(self.waiting)}"
            )
        return self._result(_time.perf_counter() - wall)

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
        if arrivals:
            self.queue.extend(arrivals)
        if self.queue:
            self._allocate(t)
        # 5. communication
        if self.ready or self.force_pass or (self.nic_dirty and self._waiting_touched()):
            self._communicate(t)
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
        if job.comm_est_once:
            est = job.comm_est_once * job.chunk
            for g in job.gpus:
                self.load_ms[g] -= est
        if job.iterations_done >= job.spec.iterations:
            self._finish_job(job, t)
            return
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
            mem = job.spec.model.gpu_memory_mb
            for g in job.gpus:
                self.free_mem_mb[g] += mem
                self.residents[g] = [rw for rw in self.residents[g] if rw[0] is not job]

    # ------------------------------------------------------------------ phase 4
    def _allocate(self, t: float) -> None:
        order = self.order
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
            gpus = self.placer.place(job.spec, self, self.rng)
            if gpus is None:
                remaining.append(job)
                continue
            self._place(job, gpus, t)
            skip = self.cfg.skip_after_place
        self.queue = remaining
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
        load = m.compute_ms * spec.iterations + est * spec.iterations
        mem = m.gpu_memory_mb
        for w, g in enumerate(gpus):
            if self.free_mem_mb[g] < mem:
                raise SimulationError(
                    f"placer {self.placer.name} put job {spec.job_id} on GPU {g} without memory"
                )
            self.free_mem_mb[g] -= mem
            self.load_ms[g] += load
            self.residents[g].append((job, w))
            self._make_ready(job, w, g)
        job.wstate = [FW_READY] * len(gpus)
        job.pending = len(gpus)
        if self.chunk_max > 1:
            self._set_chunk(job)
        job.placed_order = self.placed_count
        self.placed_count += 1
        job.start_ms = t
        self.running.append(job)
        self.dirty_gpus.update(gpus)

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

    # ------------------------------------------------------------------ phase 5
    def _communicate(self, t: float) -> None:
        ready, self.ready = self.ready, []
        ready.sort(key=lambda j: j.placed_order)
        for job in ready:
            if job.multi:
                job.fresh = True
                bisect.insort(self.waiting, job, key=_waiting_key)
                for s in job.servers:
                    self.waiting_on[s] += 1
            else:
                self._sync(job, t)  # one server: the all-reduce is free
        if self.unreleased and not self.cfg.lagged_release:
            # a job just finished: its memory is free now, place again
            self._release(t)
            if self.queue:
                self._allocate(t)
        if not self.waiting:
            self.nic_dirty.clear()
            return
        probe_mode = self.cfg.probe_side_effect
        self.force_pass = False
        while True:
            # A waiting job's answer can change only when a task starts or ends on one of its
            # servers (the CommScheduler contract), so only those jobs are asked again.
            dirty, self.nic_dirty = self.nic_dirty, set()
            self._pass_dirty = dirty
            for task in self.probed:
                task.probes = 0
            admitted: list[Job] = []
            for job in self.waiting:
                if job.fresh or not dirty.isdisjoint(job.servers):
                    job.fresh = False
                    job.probe_target = None
                    self._asking = job
                    if self._try_start(job, t):
                        admitted.append(job)
                    self._asking = None
                elif probe_mode and job.probe_target is not None:
                    # same servers, same answer; the reference still probes every tick
                    target = job.probe_target
                    if target.job.comm is target:
                        self.remaining_mb(target)
            if admitted:
                ids = {id(j) for j in admitted}
                self.waiting = [j for j in self.waiting if id(j) not in ids]
                for job in admitted:
                    for s in job.servers:
                        self.waiting_on[s] -= 1
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

    def _try_start(self, job: Job, t: float) -> bool:
        if not self.commsched.admit(job, self):
            return False
        task = CommTask(job, t)
        job.comm = task
        for s in job.servers:
            self.nic_tasks[s].append(task)
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
        """
        task = cast(CommTask, view)
        t = self.now
        if self._asking is not None:
            self._asking.probe_target = task
        if task.start_t == t:
            return task.size_mb
        if self.tick is None:
            return task.size_mb - (task.trans + (t - task.bank_t) * task.speed)
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
            job.window_ver += 1
            self._push(t + job.fw + job.bw, EV_WINDOW, job, job.window_ver)

    def _window_forward_done(self, job: Job) -> None:
        for _ in job.gpus:
            job.remaining_compute_ms -= job.fw
        for g in job.gpus:
            self.load_ms[g] -= job.fw
        job.window_fw_done = True

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
        for job in {id(j): j for j in self.gpu_window if j is not None}.values():
            if not job.window_fw_done and now - job.window_t >= job.fw:
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
            JobRecord(
                job_id=j.spec.job_id,
                name=j.spec.name or f"j{j.spec.job_id}",
                model=j.spec.model.name,
                num_gpus=j.spec.num_gpus,
                iterations=j.spec.iterations,
                submit_ms=j.spec.submit_ms,
                start_ms=j.start_ms,
                finish_ms=j.finish_ms,
                gpu_ms=j.spec.total_compute_ms,
                servers=len(j.servers),
            )
            for j in self.jobs
        ]
        extra = {"iterations_per_step": self.chunk_max}
        return SimResult(
            records=records,
            makespan_ms=max(r.finish_ms for r in records),
            busy_gpu_ms=sum(r.gpu_ms for r in records),
            num_gpus=self.cluster.num_gpus,
            stack=self.stack.name,
            config=self.cfg.to_dict(),
            workload=self.workload.name,
            events=self.events,
            wall_s=wall,
            extra=extra,
        )


def _waiting_key(job: Job) -> tuple[float, int]:
    return (job.prio, job.placed_order)


def _make_rng(seed: int) -> np.random.Generator:
    """The run's generator: MT19937 seeded like CPython's ``random.seed(seed)``
    (``init_by_array``), so RAND placement can follow the reference's draws."""
    bitgen = np.random.MT19937(0)
    bitgen._legacy_seeding([seed])  # init_by_array([seed]), CPython's seeding of an int
    return np.random.Generator(bitgen)


def simulate(
    cluster: ClusterSpec,
    workload: Workload,
    stack: str | SchedulerStack,
    config: SimConfig | None = None,
) -> SimResult:
    """Run ``workload`` under a named (or given) stack; policies are built fresh."""
    cfg = config or SimConfig()
    if isinstance(stack, str):
        stack = make_stack(
            stack,
            lwf_comm_ms_per_mb=cfg.lwf_comm_ms_per_mb,
            adadual_inclusive=cfg.adadual_inclusive,
        )
    elif not isinstance(stack, SchedulerStack):
        raise ConfigError(f"stack must be a name or a SchedulerStack, got {type(stack).__name__}")
    return Simulator(cluster, workload, stack, cfg).run()
