"""DL²'s slot loop driving the contention-aware event engine (speed model ``"contention"``).

:class:`ContentionSlotSimulator` has :class:`~envs.sim.elastic.simulator.SlotSimulator`'s
interface (``reset``/``begin_slot``/``end_slot``/``result``/``run``) and slot semantics
(arrivals, allocator, scaling overhead, fractional finish, every slot check); only the
epochs a job trains in a slot differ: instead of a table lookup, every slot is *simulated* by
:class:`envs.sim.engine.Simulator`:

1. the allocator decides ``(workers, ps)`` per job and places every task on a node through
   the :class:`~envs.sim.elastic.cluster.SlotCluster` (capacity checked as usual);
2. each allocated job with at least one worker and one PS becomes a parameter-server
   :class:`~envs.sim.spec.JobSpec` of the engine (:func:`engine_job`); node ``n`` is engine
   server ``n`` with ``devices_per_node`` exclusive devices (one worker each).  Placement:

   * ``placer=None`` (default, ``"slot"``): workers and PSs sit exactly where the allocator
     put them (:class:`FixedPlacer` and the engine's ``ps_servers`` hook);
   * ``placer="ff" | "ls" | "lwf<κ>" | "rand"``: a core placer of
     :mod:`envs.sim.policies.placement` chooses the workers' devices (the allocator's node
     choice is ignored; only its counts are used) and PS ``k`` sits with worker ``k mod W``
     (the engine's rule).  The DL² per-node GPU-slot limit is then not enforced per node (a
     node may get ``devices_per_node`` GPU workers); the allocator still bounds the totals.

3. the engine runs ``slot_s`` seconds (``Simulator.run_until``): per iteration every worker
   computes, then pushes ``M/P`` to each PS and pulls it back; traffic between servers goes
   through their NICs under the engine's contention model (``k`` tasks on a NIC each move at
   ``1 / (k b + (k-1) η)`` MB/ms, a PS exchange at its busiest NIC's share), traffic inside a
   node is free;  a job whose allocation changed starts ``scaling_overhead_s`` late;
4. each job's epochs follow from the iterations it completed (below); partial progress is
   carried to the next slot, which places every job again from scratch (DL² has no migration
   state, a changed allocation pays the scaling overhead).

**Units of work.**  One DL² *batch* is a reference per-worker batch: ``iterations_per_epoch``
of them make an epoch and one takes ``local_comp_time_s`` to compute.  The job keeps its
**global batch** fixed at ``G = global_batch_workers`` reference batches (DL² §3.1): with
``W`` workers each worker computes ``G / W`` batches per iteration (``ModelProfile.with_batch``
scales compute linearly), and every iteration advances the job by ``G`` batches, i.e.
``G * speed_factor / iterations_per_epoch`` epochs, whatever ``W`` is.

**Network.**  The engine has one ``b`` (ms/MB) for every NIC; each job type's own measured
inter-node bandwidth (``inter_bw_mb_s``) is kept by scaling its exchanged volume: the engine
moves ``model_size_mb * (1000 / inter_bw_mb_s) / b`` "equivalent MB" (x 2 with
``half_duplex``, DL²'s accounting where a push and a pull share one link's bandwidth), so a job
alone with every task on its own node iterates in ``G/W * local_comp_time_s + t_inter`` with
exactly the analytical model's ``t_inter = 2 (M/P) max(P, W) / inter_bw``.  So at ``W = G``
and without co-location, the contention model equals :class:`AnalyticalSpeed` for a job alone
(tested); it differs by co-location (bundles put a PS next to a worker: less traffic), by other
jobs' traffic on shared NICs, by DL²'s intra-node term (not modelled: free here) and by the
global batch (the analytical model keeps the per-worker batch).

**Slot accounting.**  A job that finishes in the engine at ``f`` ms, after its ``n``-th
iteration while it needed ``r <= n`` iterations (the last one fractional), finishes at
``s + (f - s) r / n`` (``s`` its start in the slot).  A job that has not finished is credited
``n (T - s) / (L - s)`` iterations, ``L`` its last iteration end and ``T`` the slot end (its
mean iteration rate carried to the boundary: exact for identical iterations; a job whose
first iteration in the slot has not ended is credited ``(T - s) / τ`` of an iteration, ``τ``
its compute plus its busiest NIC's volume at the uncontended rate, capped below 1).

**Time compression** (``min_steps_per_slot``; ``None`` = exact).  Simulating every iteration
of a 1,200-s slot costs ~10^5 events per slot on DL²'s workloads.  With
``min_steps_per_slot = m`` a job whose uncontended iteration takes ``τ`` runs as merged steps
of ``K = max(1, floor(slot_s / (τ m)))`` iterations (compute and exchanged volume x ``K``):
work is conserved exactly; contention is resolved at step granularity (the bias of
:attr:`~envs.sim.config.Fidelity.FAST`, measured in ``experiments/dl2_speed_models.py``).

:class:`ContentionSpeed` (``name = "contention"``) is the same model's *uncontended*, fully
spread speed, the estimate allocators plan with (Optimus' marginal gains, SRTF's remaining
time); it is what the result's ``speed_model`` records.  Standard library + numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from envs.sim.config import SimConfig
from envs.sim.elastic.allocators import Allocator
from envs.sim.elastic.cluster import Placement
from envs.sim.elastic.simulator import SlotRecord, SlotSimulator
from envs.sim.elastic.spec import ElasticCluster, ElasticJob, JobType
from envs.sim.engine import SimulationError, Simulator
from envs.sim.errors import ConfigError
from envs.sim.policies.base import ClusterView
from envs.sim.spec import ClusterSpec, CommArch, JobSpec, ModelProfile, NetworkSpec, Workload
from envs.sim.stacks import make_stack

__all__ = [
    "ContentionConfig",
    "ContentionSlotSimulator",
    "ContentionSpeed",
    "FixedPlacer",
    "SlotEngineStats",
    "devices_per_node",
    "engine_job",
    "solo_iteration_s",
]

#: reference per-worker batch in samples (only its ratio to the per-worker batch matters)
_REF_BATCH = 100


@dataclass(frozen=True)
class ContentionConfig:
    """How a slot is simulated in the contention engine (see the module docstring).

    - ``network``: the NICs' ``b`` and contention penalty ``η`` (ms/MB); default the
      Ada-SRSF constants (η / b = 0.27).
    - ``global_batch_workers`` (``G``): the fixed global batch in reference batches.
    - ``half_duplex``: count push and pull on one link (DL²'s accounting; x 2 volume).
    - ``comm``: the engine's communication scheduler (``"fs"`` fair share = no admission
      control, ``"srsf<n>"``, ``"adasrsf"``); ``order``: the engine's job order (priority of
      exchanges and of placement inside a slot).
    - ``min_steps_per_slot``: time compression (``None`` = every iteration simulated).
    - ``seed``: the engine's generator (RAND placement).
    """

    network: NetworkSpec = field(default_factory=NetworkSpec)
    global_batch_workers: int = 8
    half_duplex: bool = True
    comm: str = "fs"
    order: str = "srsf"
    min_steps_per_slot: int | None = 50
    seed: int = 0

    def __post_init__(self) -> None:
        if isinstance(self.global_batch_workers, bool) or self.global_batch_workers < 1:
            raise ConfigError(
                f"global_batch_workers must be an integer >= 1, got {self.global_batch_workers!r}"
            )
        if self.min_steps_per_slot is not None and self.min_steps_per_slot < 1:
            raise ConfigError(
                f"min_steps_per_slot must be >= 1 or None, got {self.min_steps_per_slot}"
            )
        make_stack(f"{self.order}:ff_{self.comm}")  # raises ConfigError naming a bad part


def _volume_scale(job_type: JobType, cfg: ContentionConfig) -> float:
    """Engine MB per real MB of ``job_type``'s exchange (its own bandwidth under one ``b``)."""
    scale = (1000.0 / job_type.inter_bw_mb_s) / cfg.network.b_ms_per_mb
    return 2.0 * scale if cfg.half_duplex else scale


def engine_job(
    job_id: int,
    job_type: JobType,
    workers: int,
    ps: int,
    iterations: int,
    cfg: ContentionConfig,
    *,
    submit_ms: float = 0.0,
    chunk: int = 1,
) -> JobSpec:
    """The engine's PS job for ``job_type`` at ``(workers, ps)``: per-worker batch
    ``G / workers`` reference batches (global batch fixed), compute ``local_comp_time_s``
    per reference batch (split 1/3 forward, 2/3 backward), exchanged volume scaled to the
    type's bandwidth; ``chunk`` iterations merged into one engine iteration."""
    if workers < 1 or ps < 1:
        raise ConfigError(f"an engine PS job needs >= 1 worker and >= 1 PS, got ({workers}, {ps})")
    if chunk < 1 or iterations < 1:
        raise ConfigError(f"chunk and iterations must be >= 1, got {chunk}, {iterations}")
    comp_ms = job_type.local_comp_time_s * 1000.0
    base = ModelProfile(
        name=job_type.model,
        model_size_mb=job_type.model_size_mb * _volume_scale(job_type, cfg),
        gpu_memory_mb=1.0,  # one worker per device (exclusive devices)
        batch_size=_REF_BATCH,
        forward_ms=comp_ms / 3.0,
        backward_ms=comp_ms * 2.0 / 3.0,
    )
    m = base.with_batch(_REF_BATCH * cfg.global_batch_workers / workers)
    if chunk > 1:
        m = ModelProfile(
            m.name,
            m.model_size_mb * chunk,
            m.gpu_memory_mb,
            m.batch_size,
            m.forward_ms * chunk,
            m.backward_ms * chunk,
        )
    return JobSpec(
        job_id=job_id,
        submit_ms=submit_ms,
        model=m,
        iterations=iterations,
        num_gpus=workers,
        comm=CommArch.PS,
        name=job_type.model,
        num_ps=ps,
    )


def solo_iteration_s(job_type: JobType, workers: int, ps: int, cfg: ContentionConfig) -> float:
    """Seconds per iteration of a job alone with every task on its own node."""
    compute = job_type.local_comp_time_s * cfg.global_batch_workers / workers
    volume = job_type.model_size_mb * _volume_scale(job_type, cfg) * max(ps, workers) / ps
    return compute + volume * cfg.network.b_ms_per_mb / 1000.0


class ContentionSpeed:
    """The contention model's uncontended speed (every task on its own node, no other job):
    ``G / solo_iteration_s`` reference batches per second; 0 without a worker or a PS."""

    name = "contention"

    def __init__(self, cfg: ContentionConfig | None = None) -> None:
        self.cfg = cfg or ContentionConfig()

    def speed(self, job_type: JobType, num_ps: int, num_workers: int) -> float:
        if num_ps < 0 or num_workers < 0:
            raise ConfigError(f"num_ps and num_workers must be >= 0, got ({num_ps}, {num_workers})")
        if num_ps == 0 or num_workers == 0:
            return 0.0
        g = self.cfg.global_batch_workers
        return g / solo_iteration_s(job_type, num_workers, num_ps, self.cfg)


class FixedPlacer:
    """A core :class:`~envs.sim.policies.base.Placer` that returns devices chosen beforehand
    (the allocator's nodes); ``None`` for a job it was not given."""

    name = "slot"
    comm_estimate_ms_per_mb: float | None = None
    reads_load = False

    def __init__(self, devices: Mapping[int, list[int]]) -> None:
        self.devices = dict(devices)

    def place(
        self, job: JobSpec, cluster: ClusterView, rng: np.random.Generator
    ) -> list[int] | None:
        return self.devices.get(job.job_id)


def devices_per_node(cluster: ElasticCluster, types: Sequence[JobType]) -> int:
    """Most workers of any of ``types`` one node can hold (its engine devices)."""
    best = 1
    for t in types:
        fits = [cluster.cpu_slots // t.worker_cpu if t.worker_cpu else None]
        fits.append(cluster.gpu_slots // t.worker_gpu if t.worker_gpu else None)
        known = [f for f in fits if f is not None]
        best = max(best, min(known) if known else cluster.cpu_slots)
    return best


@dataclass
class SlotEngineStats:
    """Totals over a run: engine events and iterations simulated (merged steps)."""

    events: int = 0
    steps: int = 0
    slots: int = 0


class ContentionSlotSimulator(SlotSimulator):
    """:class:`SlotSimulator` whose per-slot progress comes out of the contention engine.

    ``placer``: ``None`` = the allocator's own task placement (needs an allocator that logs
    ``last_decisions``, as every allocator of :mod:`envs.sim.elastic.allocators` does), or a
    core placement token (``"ff"``, ``"ls"``, ``"lwf1"``, ``"rand"``, ...).  ``speed`` is the
    model allocators plan with (default :class:`ContentionSpeed` of ``config``).
    """

    def __init__(
        self,
        cluster: ElasticCluster,
        jobs: Sequence[ElasticJob],
        allocator: Allocator | None,
        config: ContentionConfig | None = None,
        *,
        placer: str | None = None,
        speed: ContentionSpeed | None = None,
        scaling_overhead_s: float = 0.0,
        max_slots: int = 100_000,
        on_slot: Callable[[SlotRecord], None] | None = None,
        strict_reference_placement: bool = False,
        placement: str | Placement | None = None,
    ) -> None:
        self.config = config or ContentionConfig()
        if placer is not None:
            make_stack(f"{self.config.order}:{placer}_{self.config.comm}")  # validate the token
        elif allocator is None:
            raise ConfigError(
                "ContentionSlotSimulator without an allocator needs a core placer (placer=...): "
                "the slot placement is read from the allocator's decisions"
            )
        self.placer_name = placer
        super().__init__(
            cluster,
            jobs,
            allocator,
            speed or ContentionSpeed(self.config),
            scaling_overhead_s=scaling_overhead_s,
            max_slots=max_slots,
            on_slot=on_slot,
            strict_reference_placement=strict_reference_placement,
            placement=placement,
        )
        types = {j.type.model: j.type for j in jobs}
        self.devices = devices_per_node(cluster, list(types.values()))
        self.engine_cluster = ClusterSpec(
            num_servers=cluster.num_nodes,
            gpus_per_server=self.devices,
            gpu_memory_mb=1.0,
            network=self.config.network,
        )
        self.stats = SlotEngineStats()

    def reset(self) -> None:
        super().reset()
        self.stats = SlotEngineStats()

    # ------------------------------------------------------------------ one slot
    def _slot_rates(
        self, t: int, allocation: Mapping[int, tuple[int, int]]
    ) -> Mapping[int, float] | None:
        slot_s = self.spec.slot_s
        rates: dict[int, float] = {}
        specs: list[JobSpec] = []
        meta: dict[int, tuple[float, float, float]] = {}  # jid -> (overhead s, need, per it)
        for jid, (workers, ps) in allocation.items():
            if workers == 0 and ps == 0:
                continue
            r = self._runs[jid]
            rates[jid] = 0.0
            if workers == 0 or ps == 0:
                continue  # DL²'s PS mode: no progress without a worker and a PS
            overhead = (
                self.scaling_overhead_s if r.slots_run > 0 and (workers, ps) != r.alloc else 0.0
            )
            ty = r.spec.type
            chunk = self._chunk(ty, workers, ps)
            per_it = chunk * self.config.global_batch_workers * r.spec.speed_factor
            per_it /= ty.iterations_per_epoch  # epochs per engine iteration
            need = (r.spec.real_num_epochs - r.progress) / per_it  # engine iterations
            its = max(1, math.ceil(need - 1e-9))
            specs.append(
                engine_job(
                    jid, ty, workers, ps, its, self.config, submit_ms=overhead * 1000.0, chunk=chunk
                )
            )
            meta[jid] = (overhead, need, per_it)
        if not specs:
            return rates
        sim = self._engine(t, specs)
        end_ms = slot_s * 1000.0
        sim.run_until(end_ms)
        self.stats.events += sim.events
        self.stats.slots += 1
        for job in sim.jobs:
            jid = job.spec.job_id
            overhead, need, per_it = meta[jid]
            n = job.iterations_done
            self.stats.steps += n
            run_s = slot_s - overhead
            start = job.start_ms
            if not math.isnan(job.finish_ms):
                done_ms = start + (job.finish_ms - start) * min(need, n) / n
                used = max(done_ms / 1000.0 - overhead, 1e-12)
                rates[jid] = need * per_it / used
                continue
            if math.isnan(start):
                continue  # never placed in this slot (a core placer found no room)
            if n == 0:  # the first iteration is still running: credit it at solo speed
                tau_ms = job.spec.model.compute_ms + job.spec.model.model_size_mb * (
                    self.config.network.b_ms_per_mb
                )
                credit = min((end_ms - start) / tau_ms, 1.0 - 1e-6)
            else:
                credit = n * (end_ms - start) / (job.last_sync_ms - start)
            credit = min(credit, need * (1.0 - 1e-6))  # it did not finish in the model
            rates[jid] = credit * per_it / run_s
        return rates

    def _chunk(self, ty: JobType, workers: int, ps: int) -> int:
        m = self.config.min_steps_per_slot
        if m is None:
            return 1
        tau = solo_iteration_s(ty, workers, ps, self.config)
        return max(1, math.floor(self.spec.slot_s / (tau * m)))

    def _engine(self, t: int, specs: list[JobSpec]) -> Simulator:
        cfg = self.config
        sim_cfg = SimConfig(seed=cfg.seed + t)
        workload = Workload(tuple(specs), name=f"slot {t}")
        if self.placer_name is not None:
            stack = make_stack(f"{cfg.order}:{self.placer_name}_{cfg.comm}")
            return Simulator(self.engine_cluster, workload, stack, sim_cfg)
        devices, ps_servers = self._slot_placement(t, {s.job_id for s in specs})
        stack = make_stack(f"{cfg.order}:ff_{cfg.comm}")
        stack.placer = FixedPlacer(devices)
        return Simulator(self.engine_cluster, workload, stack, sim_cfg, ps_servers=ps_servers)

    def _slot_placement(
        self, t: int, jids: set[int]
    ) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
        """Engine devices of every worker and servers of every PS, from the allocator's log."""
        decisions = getattr(self.allocator, "last_decisions", None)
        if decisions is None:
            raise ConfigError(
                f"allocator {self.allocator!r} does not log last_decisions; use placer=..."
            )
        per = self.devices
        used = [0] * self.spec.num_nodes
        devices: dict[int, list[int]] = {j: [] for j in jids}
        ps_servers: dict[int, list[int]] = {j: [] for j in jids}
        for jid, role, node in decisions:
            if jid not in jids:
                continue
            if role in ("worker", "bundle"):
                if used[node] >= per:
                    raise SimulationError(
                        f"slot {t}: node {node} holds more than {per} workers (job {jid})"
                    )
                devices[jid].append(node * per + used[node])
                used[node] += 1
            if role in ("ps", "bundle"):
                ps_servers[jid].append(node)
        for jid in jids:
            w, p = len(devices[jid]), len(ps_servers[jid])
            if (w, p) != self._decided(jid):
                raise SimulationError(
                    f"slot {t}: the allocator's log places {w} workers / {p} PS of job {jid}, "
                    f"but it decided {self._decided(jid)}"
                )
        return devices, ps_servers

    def _decided(self, jid: int) -> tuple[int, int]:
        return self._pending_alloc[jid]

    def end_slot(self, decided: Mapping[int, tuple[int, int]]) -> SlotRecord:
        self._pending_alloc = {j: (int(w), int(p)) for j, (w, p) in decided.items()}
        return super().end_slot(decided)
