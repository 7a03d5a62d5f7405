"""The simulator's state: what every part of the engine reads and writes, built once.

:class:`EngineCore` is the base of every part (:mod:`~envs.sim.engine.kernel`,
:mod:`~envs.sim.engine.compute`, :mod:`~envs.sim.engine.network`,
:mod:`~envs.sim.engine.admission`, :mod:`~envs.sim.engine.placement`) that
:class:`~envs.sim.engine.simulator.Simulator` composes.  The state is shared, plain
attributes of one object (the hot loop reads them directly), and named as the policies'
views (:class:`~envs.sim.policies.base.ClusterView`, ``NetView``) read them.  It also picks
the two strategies: preemption (:mod:`~envs.sim.engine.preemption`) and, in tick mode, the
reference simulator's clock and quirks (:mod:`~envs.sim.engine.reference`).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from envs.sim.config import Fidelity, SimConfig
from envs.sim.engine.fitqueue import FitQueue
from envs.sim.engine.preemption import NonPreemptive, Preemption, Preemptive
from envs.sim.engine.reference import ReferenceQuirks
from envs.sim.engine.state import EV_WAKE, CommTask, Job
from envs.sim.errors import ConfigError
from envs.sim.policies.base import (
    CommScheduler,
    CommTaskView,
    FitIndexedPlacer,
    JobOrder,
    Placer,
    PreemptiveOrder,
)
from envs.sim.policies.job_order import SRSF
from envs.sim.results import SimResult
from envs.sim.spec import ClusterSpec, CommArch, NetworkSpec, Workload
from envs.sim.stacks import SchedulerStack
from envs.sim.tictac.overlap import make_overlap

#: phase 5 walks a waiting list this short instead of using the per-server index, and
#: holds refused jobs (``BlockingCommScheduler``) only when the list is longer
_SCAN_UP_TO = 24


class EngineCore:
    """The state of one run (see the module); the parts add the behaviour."""

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
        self.rng = _make_rng(self.cfg.model.seed)
        # TicTac (cfg.model.ps_iteration): PS exchanges shortened to what compute does not hide
        m = self.cfg.model
        self.overlap = make_overlap(
            m.ps_iteration, cluster.network, workload, m.seed, m.tictac_upstream_ties
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
        self.scan_waiting = self.cfg.quirks.probe_side_effect
        self.scan_up_to = _SCAN_UP_TO  # tests set 0 to use the index (and holds) always
        self.comm_asks = 0
        self.waiting_visits = 0
        self.unreleased: list[Job] = []
        self.finished = 0
        self.heap: list[tuple[float, int, int, Any, int]] = []
        self.seq = 0
        self.now = 0.0
        self.events = 0
        self.tick = self.cfg.quirks.tick_ms
        # the reference simulator's discrete clock and quirks (None: the paper's model)
        self.quirks = ReferenceQuirks(self.cfg) if self.tick is not None else None
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
        self.windows = self.cfg.fidelity.compute_windows
        # preemptive job orders decide which jobs hold GPUs (see envs.sim.engine.preemption)
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
        self.resched = False  # a preemptive order's decision pass is due
        self.job_level = self.cfg.fidelity.level is Fidelity.JOB
        self.preemption: Preemption = (
            Preemptive(self.porder, self.tick) if self.preemptive else NonPreemptive()
        )
        self.chunk_max = self._iterations_per_step()
        # decision-point mode (envs.sim.decisions.DecisionSimulator): each event time with
        # queued jobs stops after phase 3 at ``paused_at``, for the caller to place jobs
        self.external_placement = False
        self.paused_at: float | None = None
        # a stop is in phase 4 (placement), or in phase 5 after a job's release
        self.paused_phase = 4
        self.arrived_now = False
        self.seen_version = -1  # memory version at the end of the last stop
        self.stops = 0  # stops made (and quiet ones passed over)
        # pass over quiet stops (nothing arrived, memory unchanged since the last stop) without
        # returning to the caller (DecisionSimulator.skip_quiet)
        self.skip_quiet = False

    def _iterations_per_step(self, cfg: SimConfig | None = None) -> int:
        """Iterations merged into one step at ``cfg``'s fidelity (this run's by default):
        ``K`` from the shortest of the run's jobs in FAST fidelity, 1 otherwise
        (:meth:`SimConfig.iterations_per_step`).  The run's jobs are the workload's, less any
        a search's copy forgot (:meth:`DecisionSimulator.forget_arrivals`): a copy's ``K``
        reads no job it has not seen."""
        return (cfg or self.cfg).iterations_per_step(min(j.spec.iterations for j in self.jobs))

    # ------------------------------------------------------------------ events
    def _push(self, t: float, kind: int, obj: Any, version: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, obj, version))

    def _wake_next_tick(self, t: float) -> None:
        assert self.tick is not None
        self._push(t + self.tick, EV_WAKE, None)

    if TYPE_CHECKING:  # what the parts provide one another (defined in their modules)
        # compute
        def _finish_task(self, g: int) -> None: ...
        def _sync(self, job: Job, t: float) -> None: ...
        def _begin_iteration(self, job: Job) -> None: ...
        def _make_ready(self, job: Job, w: int, g: int) -> None: ...
        def _set_chunk(self, job: Job) -> None: ...
        def _end_window(self, job: Job) -> None: ...
        def _settle_window_loads(self) -> None: ...
        def _start_tasks(self, t: float) -> None: ...
        def _bank(self, job: Job, t: float) -> None: ...
        def _hold_start(self, job: Job, t: float) -> None: ...
        def _job_level_end(self, job: Job, t: float) -> None: ...
        # network
        def _finish_comm(self, task: CommTask, t: float) -> None: ...
        def _ps_traffic(self, job: Job) -> None: ...
        def _speed(self, task: CommTask) -> float: ...
        def remaining_mb(self, view: CommTaskView) -> float: ...
        def _retime(self, t: float) -> None: ...
        # admission
        def _communicate(self, t: float) -> bool: ...
        def _waiting_touched(self) -> bool: ...
        def _admit_waiting(self, t: float) -> None: ...
        # placement
        def _release(self, t: float) -> None: ...
        def _enqueue(self, arrivals: list[Job]) -> None: ...
        def _allocate(self, t: float) -> None: ...
        def _place(self, job: Job, gpus: list[int], t: float) -> None: ...
        # simulator
        def check_invariants(self) -> None: ...
        def _result(self, wall: float) -> SimResult: ...


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


def _make_rng(seed: int) -> np.random.Generator:
    """The run's generator: MT19937 seeded like CPython's ``random.seed(seed)``
    (``init_by_array``), so RAND placement can follow the reference's draws."""
    bitgen = np.random.MT19937(0)
    bitgen._legacy_seeding([seed])  # init_by_array([seed]), CPython's seeding of an int
    return np.random.Generator(bitgen)
