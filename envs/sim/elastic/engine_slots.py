"""DL²'s slot loop driving the contention-aware event engine (speed model ``"contention"``).

:class:`ContentionSlotSimulator` has :class:`~envs.sim.elastic.simulator.SlotSimulator`'s
interface (``reset``/``begin_slot``/``end_slot``/``result``/``run``) and slot semantics
(arrivals, allocator, scaling overhead, fractional finish, every slot check); only the
epochs a job trains in a slot differ: instead of a table lookup, every slot is *simulated* by
:class:`envs.sim.engine.Simulator`:

1. the allocator decides ``(workers, ps)`` per job and places every task on a node through
   the :class:`~envs.sim.elastic.cluster.SlotCluster` (capacity checked as usual);
2. each allocated job with a worker and a PS becomes a parameter-server job of the engine
   (:mod:`envs.sim.elastic.engine_jobs`: units of work, network); node ``n`` is engine
   server ``n`` with ``devices_per_node`` exclusive devices, placed as the class says;
3. the engine runs ``slot_s`` seconds (``Simulator.run_until``) under its contention model;
   a job whose allocation changed starts ``scaling_overhead_s`` late;
4. each job's epochs follow from the iterations it completed (``_slot_rates``); partial
   progress is carried to the next slot, which places every job again from scratch.

Time compression (``_chunk``), exact reuse of slot states (``_observe``) and an optional
measurement window (``_extrapolated``) keep long runs affordable.  Standard library + numpy.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from envs.sim.config import ModelOptions, SimConfig
from envs.sim.elastic.allocators import Allocator
from envs.sim.elastic.cluster import Placement
from envs.sim.elastic.engine_jobs import (
    ContentionConfig,
    ContentionSpeed,
    FixedPlacer,
    devices_per_node,
    engine_job,
    solo_iteration_s,
)
from envs.sim.elastic.simulator import SlotRecord, SlotSimulator
from envs.sim.elastic.spec import ElasticCluster, ElasticJob, JobType
from envs.sim.engine import Job as EngineJob
from envs.sim.engine import SimulationError, Simulator
from envs.sim.errors import ConfigError
from envs.sim.spec import ClusterSpec, JobSpec, Workload
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


@dataclass
class SlotEngineStats:
    """Totals over a run: engine events and iterations simulated (merged steps); slots with
    engine work, of which ``simulated`` ran the engine (``windowed`` of them only for the
    measurement window, ``ContentionConfig.measure_fraction``) and ``reused`` took an earlier
    slot's outcome (``ContentionConfig.reuse_slots``)."""

    events: int = 0
    steps: int = 0
    slots: int = 0
    simulated: int = 0
    reused: int = 0
    windowed: int = 0


@dataclass(frozen=True)
class _Observed:
    """One job at the end of the simulated part of a slot in the engine: steps done, start,
    last barrier, finish (NaN if not finished), its uncontended step time (compute +
    busiest-NIC volume x b), and ``bound``: the outcome holds for a job that needs more than
    ``bound`` steps (``n``; with a measurement window, the steps it would reach by the slot
    end at its measured rate, plus one); ``steps_at_end``: the steps credited at the slot end
    to a job that started, passed a barrier and did not finish (NaN otherwise)."""

    n: int
    start_ms: float
    last_sync_ms: float
    finish_ms: float
    tau_ms: float
    bound: int
    steps_at_end: float


@dataclass(frozen=True)
class _Entry:
    """One job of a slot: id, type, workers, PSs, scaling overhead (s), iterations merged per
    engine step, engine steps to run (``its``, the last partial) and needed (``need``,
    fractional), epochs per engine step."""

    jid: int
    type: JobType
    workers: int
    ps: int
    overhead: float
    chunk: int
    its: int
    need: float
    per_it: float


#: distinct slot states kept for reuse (the cache is emptied when it is full)
_CACHE_SIZE = 4096


def _finishing_rate(
    e: _Entry, start_ms: float, until_ms: float, done: float, steps: float
) -> float:
    """Epochs/s of job ``e``, which finishes its ``e.need`` steps once ``done`` of the
    ``steps`` it makes from ``start_ms`` to ``until_ms`` are done (after its overhead)."""
    done_ms = start_ms + (until_ms - start_ms) * done / steps
    return e.need * e.per_it / max(done_ms / 1000.0 - e.overhead, 1e-12)


class ContentionSlotSimulator(SlotSimulator):
    """:class:`SlotSimulator` whose per-slot progress comes out of the contention engine.

    Per iteration every worker computes, then pushes ``M/P`` to each PS and pulls it back;
    traffic between servers goes through their NICs under the engine's contention model
    (``k`` tasks on a NIC each move at ``1 / (k b + (k-1) η)`` MB/ms, a PS exchange at its
    busiest NIC's share), traffic inside a node is free.

    ``placer``: ``None`` (default, ``"slot"``): workers and PSs sit exactly where the
    allocator put them (:class:`FixedPlacer` and the engine's ``ps_servers`` hook; needs an
    allocator that logs ``last_decisions``, as every allocator of
    :mod:`envs.sim.elastic.allocators` does); or a core placement token (``"ff"``, ``"ls"``,
    ``"lwf<κ>"``, ``"rand"``): a core placer of :mod:`envs.sim.policies.placement` chooses the
    workers' devices (the allocator's node choice is ignored; only its counts are used) and
    PS ``k`` sits with worker ``k mod W`` (the engine's rule).  The DL² per-node GPU-slot
    limit is then not enforced per node (a node may get ``devices_per_node`` GPU workers);
    the allocator still bounds the totals.  ``speed`` is the model allocators plan with
    (default :class:`ContentionSpeed` of ``config``, which the result's ``speed_model``
    records).
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
        # exact reuse needs a slot's run to be a function of the key: not with RAND placement
        # (seeded per slot), a load-reading core placer (the load is remaining work) or an
        # admission-controlling comm policy (it reads priorities that move within the slot)
        core = make_stack(f"{self.config.order}:{placer}_fs").placer if placer else None
        self._reuse = (
            self.config.reuse_slots
            and self.config.comm == "fs"
            and not (core is not None and (core.randomised or core.reads_load))
        )
        self._cache: dict[tuple[object, ...], tuple[_Observed, ...]] = {}

    def reset(self) -> None:
        super().reset()
        self.stats = SlotEngineStats()
        self._cache = {}

    # ------------------------------------------------------------------ one slot
    def _slot_rates(
        self, t: int, allocation: Mapping[int, tuple[int, int]]
    ) -> Mapping[int, float] | None:
        """Epochs/s of every allocated job over slot ``t``, from the engine's run.

        A job that finishes in the engine at ``f`` ms, after its ``n``-th iteration while it
        needed ``r <= n`` iterations (the last one fractional), finishes at
        ``s + (f - s) r / n`` (``s`` its start in the slot).  A job that has not finished is
        credited ``n (T - s) / (L - s)`` iterations, ``L`` its last iteration end and ``T``
        the slot end (its mean iteration rate carried to the boundary: exact for identical
        iterations; a job whose first iteration in the slot has not ended is credited
        ``(T - s) / τ`` of an iteration, ``τ`` its compute plus its busiest NIC's volume at
        the uncontended rate, capped below 1).  A job whose credit reaches the ``r``
        iterations it needs (its last iteration is fractional, the engine runs it whole)
        finishes at ``s + (T - s) r / credit``: without this a job needing a fraction of an
        iteration longer than the slot was credited just under it every slot and never
        finished (the Ada-SRSF workload in 1-s slots), and in DL²'s settings such a job
        finished one slot late."""
        slot_s = self.spec.slot_s
        rates: dict[int, float] = {}
        entries: list[_Entry] = []
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
            entries.append(_Entry(jid, ty, workers, ps, overhead, chunk, its, need, per_it))
        if not entries:
            return rates
        observed = self._observe(t, entries)
        end_ms = slot_s * 1000.0
        for e, ob in zip(entries, observed, strict=True):
            n, need, per_it = ob.n, e.need, e.per_it
            run_s = slot_s - e.overhead
            start = ob.start_ms
            if not math.isnan(ob.finish_ms):
                rates[e.jid] = _finishing_rate(e, start, ob.finish_ms, min(need, n), n)
                continue
            if math.isnan(start):
                continue  # never placed in this slot (a core placer found no room)
            # no barrier passed yet: credit the running step at solo speed
            solo = min((end_ms - start) / ob.tau_ms, 1.0 - 1e-6)
            credit = solo if n == 0 else ob.steps_at_end
            if credit >= need:
                # its last, fractional step ends before the slot end at its rate over the slot
                # (the engine runs whole steps): it finishes there
                rates[e.jid] = _finishing_rate(e, start, end_ms, need, credit)
                continue
            rates[e.jid] = credit * per_it / run_s
        return rates

    def _specs(self, entries: list[_Entry]) -> list[JobSpec]:
        cfg = self.config
        return [
            engine_job(
                e.jid,
                e.type,
                e.workers,
                e.ps,
                e.its,
                cfg,
                submit_ms=e.overhead * 1000.0,
                chunk=e.chunk,
            )
            for e in entries
        ]

    def _observe(self, t: int, entries: list[_Entry]) -> tuple[_Observed, ...]:
        """What the engine shows of every job of ``entries`` at the slot end: simulated, or
        reused from an earlier slot with the same state (``ContentionConfig.reuse_slots``).

        Every slot starts the engine from scratch, so a slot's run is a function of its
        *state* (``_state_key``) plus the jobs' iteration counts.  The counts matter only
        through finishes: a job that needs more steps than it completed by the slot end in a
        run of the same state (in which no job finished) cannot tell the two runs apart.  So
        such a slot takes the stored outcome (steps, start, last barrier per job) instead of
        being simulated, and its rates follow with the job's own remaining work.  In DL²'s
        settings, once arrivals are over, most slots repeat the previous slot's state (DRF
        small setting: 136 of 15,165 slots simulated).  Reuse is off where the run is not a
        function of that state: RAND placement (seeded per slot), a core placer that reads
        the GPUs' load (LWF, LS: the load is remaining work), a communication scheduler with
        admission control (it reads priorities that move with the iteration counts).
        Reused and simulated runs are tested equal bit for bit."""
        placement = None if self.placer_name is not None else self._slot_placement(t, entries)
        specs: list[JobSpec] | None = None
        key = None
        if self._reuse:
            if placement is None:
                specs = self._specs(entries)  # a core placer's order: the engine priorities
            key = self._state_key(entries, placement, specs)
            hit = self._cache.get(key)
            # valid iff no job can finish before the slot end: every job still needs more
            # engine iterations than it had completed by then in the cached run (whose jobs
            # did not finish either), so the event sequence up to the slot end is the same
            if hit is not None and all(
                e.its > ob.bound for e, ob in zip(entries, hit, strict=True)
            ):
                self.stats.reused += 1
                self.stats.slots += 1
                return hit
        if specs is None:
            specs = self._specs(entries)
        sim = self._engine(t, specs, placement)
        end_ms = self.spec.slot_s * 1000.0
        observed: tuple[_Observed, ...] | None = None
        f = self.config.measure_fraction
        if f is not None and f < 1.0:
            sim.run_until(0.5 * f * end_ms)
            half = {job.spec.job_id: (job.iterations_done, job.last_sync_ms) for job in sim.jobs}
            sim.run_until(f * end_ms)
            observed = self._extrapolated(sim, end_ms, half)
            if observed is not None:
                self.stats.windowed += 1
        if observed is None:
            sim.run_until(end_ms)  # resumes after a window that could not be extrapolated
            steps = {
                job.spec.job_id: job.iterations_done
                * (end_ms - job.start_ms)
                / (job.last_sync_ms - job.start_ms)
                for job in sim.jobs
                if job.iterations_done > 0 and math.isnan(job.finish_ms)
            }
            observed = self._observed(
                sim,
                lambda job: job.iterations_done,
                lambda job: steps.get(job.spec.job_id, math.nan),
            )
        self.stats.events += sim.events
        self.stats.slots += 1
        self.stats.simulated += 1
        self.stats.steps += sum(ob.n for ob in observed)
        if key is not None and all(math.isnan(ob.finish_ms) for ob in observed):
            if len(self._cache) >= _CACHE_SIZE:
                self._cache.clear()
            self._cache[key] = observed
        return observed

    def _observed(
        self,
        sim: Simulator,
        bound: Callable[[EngineJob], int],
        steps_at_end: Callable[[EngineJob], float],
    ) -> tuple[_Observed, ...]:
        b = self.config.network.b_ms_per_mb
        return tuple(
            _Observed(
                n=job.iterations_done,
                start_ms=job.start_ms,
                last_sync_ms=job.last_sync_ms,
                finish_ms=job.finish_ms,
                tau_ms=job.spec.model.compute_ms + job.spec.model.model_size_mb * b,
                bound=bound(job),
                steps_at_end=steps_at_end(job),
            )
            for job in sim.jobs
        )

    def _extrapolated(
        self, sim: Simulator, end_ms: float, half: Mapping[int, tuple[int, float]]
    ) -> tuple[_Observed, ...] | None:
        """The window's observations carried to ``end_ms``: each job's steps at the window
        end plus its rate over the window's second half (from its last barrier before the
        half, ``half``: steps and barrier time; from its start if it had none) times the time
        left after its last barrier.  ``None`` (simulate the rest) if a job has not started,
        has finished, passed no barrier in the second half, or would reach its last step by
        ``end_ms`` (a finish in the slot changes the others' contention).

        An approximation, off by default (``measure_fraction``).  Measured per-slot rate
        error against the whole slot, same states, DL²'s small setting (``python
        experiments/dl2_speed_models.py --window-check 200``): mean 1-3%, p99 10-21%, max up
        to 76% (f = 0.1-0.3) — the per-step contention pattern at 50 steps per slot is
        bursty, so it is not used for the published tables."""
        at_end: dict[int, float] = {}
        for job in sim.jobs:
            jid, n, s = job.spec.job_id, job.iterations_done, job.start_ms
            if not math.isnan(job.finish_ms) or math.isnan(s):
                return None
            n_h, last_h = half[jid]
            if n_h == 0:
                last_h = s
            if n - n_h < 1:
                return None
            rate = (n - n_h) / (job.last_sync_ms - last_h)
            steps = n + (end_ms - job.last_sync_ms) * rate
            if job.spec.iterations <= math.floor(steps) + 1:
                return None
            at_end[jid] = steps
        return self._observed(
            sim,
            lambda job: math.floor(at_end[job.spec.job_id]) + 1,
            lambda job: at_end[job.spec.job_id],
        )

    def _state_key(
        self,
        entries: list[_Entry],
        placement: tuple[dict[int, list[int]], dict[int, list[int]]] | None,
        specs: list[JobSpec] | None,
    ) -> tuple[object, ...]:
        """Everything of a slot's engine run but the jobs' iteration counts: each job's id,
        type, workers, PSs, start (scaling overhead) and step merging (``chunk``) in workload
        order, which fix its engine job but for the iterations; with the allocator's
        placement, the nodes of every worker and PS relabelled in order of first use (nodes
        are identical, so a relabelled placement runs the same); with a core placer, the
        ranking of the engine's initial job priorities (it decides the placement).

        Without the priority ranking under fixed placement and fair share (no admission
        control, the placement is given) the run does not depend on the order; the tests
        check reused runs equal to simulated ones bit for bit."""
        parts: list[object] = []
        label: dict[int, int] = {}  # node -> order of first use (the key is up to relabelling)
        per = self.devices
        for e in entries:
            where: tuple[tuple[int, ...], tuple[int, ...]] | None = None
            if placement is not None:
                devices, ps_servers = placement
                ws = tuple(label.setdefault(g // per, len(label)) for g in devices[e.jid])
                ps = tuple(label.setdefault(n, len(label)) for n in ps_servers[e.jid])
                where = (ws, ps)
            parts.append((e.jid, e.type, e.workers, e.ps, e.overhead, e.chunk, where))
        if specs is not None:
            # a core placer places in the order of the engine's job priorities (SRSF: remaining
            # compute, which moves with the iteration counts): their ranking is part of the key
            prio = [s.total_compute_ms for s in specs]
            parts.append(tuple(sorted(range(len(specs)), key=prio.__getitem__)))
        return tuple(parts)

    def _chunk(self, ty: JobType, workers: int, ps: int) -> int:
        """Time compression (``min_steps_per_slot = m``; ``None`` = exact): simulating every
        iteration of a 1,200-s slot costs ~10^5 events per slot on DL²'s workloads, so a job
        whose uncontended iteration takes ``τ`` runs as merged steps of
        ``K = max(1, floor(slot_s / (τ m)))`` iterations (compute and exchanged volume x
        ``K``): work is conserved exactly; contention is resolved at step granularity (the
        bias of :attr:`~envs.sim.config.Fidelity.FAST`, measured in
        ``experiments/dl2_speed_models.py``)."""
        m = self.config.min_steps_per_slot
        if m is None:
            return 1
        tau = solo_iteration_s(ty, workers, ps, self.config)
        return max(1, math.floor(self.spec.slot_s / (tau * m)))

    def _engine(
        self,
        t: int,
        specs: list[JobSpec],
        placement: tuple[dict[int, list[int]], dict[int, list[int]]] | None,
    ) -> Simulator:
        cfg = self.config
        sim_cfg = SimConfig(model=ModelOptions(seed=cfg.seed + t))
        workload = Workload(tuple(specs), name=f"slot {t}")
        if placement is None:
            stack = make_stack(f"{cfg.order}:{self.placer_name}_{cfg.comm}")
            return Simulator(self.engine_cluster, workload, stack, sim_cfg)
        devices, ps_servers = placement
        stack = make_stack(f"{cfg.order}:ff_{cfg.comm}")
        stack.placer = FixedPlacer(devices)
        return Simulator(self.engine_cluster, workload, stack, sim_cfg, ps_servers=ps_servers)

    def _slot_placement(
        self, t: int, entries: list[_Entry]
    ) -> tuple[dict[int, list[int]], dict[int, list[int]]]:
        """Engine devices of every worker and servers of every PS, from the allocator's log."""
        jids = {e.jid for e in entries}
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
