"""``ClusterEnv``: the transitions of ``dlsched/Cluster-v0`` (reset, step, slots).

The env wraps the elastic layer (:class:`~envs.sim.elastic.simulator.SlotSimulator`,
measured-speed mode by default) with DL²'s state encoding and incremental actions (the DL²
reference-code notes §3-5, DL² paper §4.1 and §4.3).  The observation encoding, the masks,
the rewards and the rendering are in the sibling modules (mixed in, or looked up in the
reward registry :mod:`envs.gym.rewards`); the spaces, the action encoding and ``info`` are
in :mod:`envs.gym.cluster.contract`.  Speed: docs/design/envs.md ("Hot path of step").
"""

from __future__ import annotations

import copy
import functools
import io
import pickle
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.error import ResetNeeded

from envs.gym.cluster.contract import (
    DEFAULT_MAX_SLOTS,
    EXTENDED_FEATURES_PER_JOB,
    FEATURES_PER_JOB,
    ROLE_OFFSET,
    Obs,
    action_space,
    observation_space,
    parse_action,
    step_info,
)
from envs.gym.cluster.masks import MaskMixin
from envs.gym.cluster.observation import ObservationMixin, _Row
from envs.gym.cluster.render import RenderMixin
from envs.gym.cluster.state import DecisionStateMixin
from envs.gym.rewards import CLUSTER, SlotStep, reward_fn
from envs.gym.seeds import check_seed
from envs.sim.elastic import native_alloc
from envs.sim.elastic.allocators import Allocator, JobState
from envs.sim.elastic.cluster import Placement, SlotCluster, placement_rule
from envs.sim.elastic.simulator import SlotSimulator
from envs.sim.elastic.spec import ElasticCluster, ElasticJob, SpeedModel
from envs.sim.elastic.speed import MeasuredSpeed
from envs.sim.elastic.trace import elastic_jobs_from_trace, elastic_jobs_from_workload
from envs.sim.elastic.types import dl2_job_types
from envs.sim.elastic.workload import DL2_LARGE, DL2_SMALL, DL2Setting
from envs.sim.errors import ConfigError, check_number
from envs.sim.traces.options import TraceConfig, load_trace_workload

__all__ = ["ClusterEnv"]

_SETTINGS = {"small": DL2_SMALL, "large": DL2_LARGE}


@functools.lru_cache(maxsize=8)
def _measured_speed(max_ps: int, max_workers: int) -> MeasuredSpeed:
    """One measured-speed table per caps (its fit is the slow part of construction)."""
    return MeasuredSpeed(max_ps=max_ps, max_workers=max_workers)


def _resolve_setting(setting: str | DL2Setting) -> DL2Setting:
    if isinstance(setting, str):
        if setting not in _SETTINGS:
            raise ConfigError(f"unknown setting {setting!r}; known: {sorted(_SETTINGS)}")
        setting = _SETTINGS[setting]
    if not isinstance(setting, DL2Setting):
        raise ConfigError(f"setting must be 'small', 'large' or a DL2Setting, got {setting!r}")
    return setting


def _check_options(
    J: int,
    L: int,
    features: str,
    reward: str,
    jct_scale: float,
    max_slots: int,
    max_invalid_per_slot: int,
    render_mode: str | None,
    render_modes: list[str],
    jobs_and_trace: bool,
) -> None:
    """ClusterEnv's constructor options, each with a clear error."""
    if J < 1 or L < 1:
        raise ConfigError(f"J and L must be >= 1, got J={J}, L={L}")
    if features not in ("dl2", "extended"):
        raise ConfigError(f"features must be 'dl2' or 'extended', got {features!r}")
    reward_fn(CLUSTER, reward)  # an unknown name: one error listing the env's rewards
    check_number(jct_scale, "jct_scale", gt=0)
    if max_slots < 1:
        raise ConfigError(f"max_slots must be >= 1, got {max_slots}")
    if max_invalid_per_slot < 1:
        raise ConfigError(f"max_invalid_per_slot must be >= 1, got {max_invalid_per_slot}")
    if render_mode is not None and render_mode not in render_modes:
        raise ConfigError(f"render_mode must be one of {render_modes}")
    if jobs_and_trace:
        raise ConfigError("give either jobs= or trace=, not both")


def _allocate_backlog(
    allocator: Allocator,
    backlog: list[JobState],
    decided: dict[int, tuple[int, int]],
    sim: SlotSimulator,
    speed: SpeedModel,
) -> None:
    """Add ``allocator``'s allocation of the jobs beyond the window to ``decided``, on the
    capacity the window left."""
    extra = allocator.allocate(backlog, sim.cluster, speed, sim.spec.slot_s)
    for jid, alloc in extra.items():
        if jid in decided:
            raise ConfigError(f"allocator_for_unused allocated window job {jid}")
        decided[jid] = alloc


def _trace_jobs(
    trace: str, options: TraceConfig | None, cluster: ElasticCluster, speed: SpeedModel, seed: int
) -> list[ElasticJob]:
    """The elastic jobs of a trace file: with ``options``, any layout read, windowed and
    converted as evaluate.py's ``workload=trace`` does (:mod:`envs.sim.traces.options`, the
    same options for both); without, a normalised trace CSV (:mod:`envs.sim.elastic.trace`
    rules), model draws seeded."""
    if options is None:
        return list(elastic_jobs_from_trace(trace, seed=seed, slot_s=cluster.slot_s, speed=speed))
    workload, _, _ = load_trace_workload(
        trace, options, cluster_gpus=cluster.num_nodes * cluster.gpu_slots, seed=seed
    )
    return list(
        elastic_jobs_from_workload(workload, slot_s=cluster.slot_s, speed=speed, where=trace)
    )


class ClusterEnv(
    ObservationMixin, MaskMixin, RenderMixin, DecisionStateMixin, gym.Env[Obs, np.int64]
):
    """DL²'s per-slot incremental worker/PS allocation.

    **Episode.**  ``reset`` draws a workload (:meth:`DL2Setting.workload`, or the fixed
    ``jobs``, or the jobs of a normalised trace CSV given as ``trace=``
    (:mod:`envs.sim.elastic.trace`)), builds a simulator and opens the first slot that has an
    active job.  Each ``step`` is one *decision* inside the current time slot; many decisions
    make one slot.  The slot closes on the void action or automatically when no non-void
    action is valid any more (every window job at its caps or nothing of theirs fits); the
    simulator then trains every job for the slot (:meth:`SlotSimulator.end_slot`) and the
    next slot opens.  Slots with no active job (waiting for arrivals) are run empty
    automatically (``info["empty_slots"]`` counts them).  ``terminated`` when every job has
    finished; ``truncated`` when the slot count reaches ``max_slots`` (default
    :data:`DEFAULT_MAX_SLOTS`).  A ``step`` after the episode ended raises
    :class:`gymnasium.error.ResetNeeded`.  Spaces, actions and ``info``:
    :mod:`envs.gym.cluster.contract`; observation: :class:`ObservationMixin`; masks:
    :class:`MaskMixin`; rewards: :mod:`envs.gym.cluster.rewards`.

    **Window** (``J`` rows, default ``setting.J``).  The rows are the first ``J`` active jobs
    in arrival order (ties by job id, the simulator's order).  Jobs beyond the window get
    nothing in this slot: they wait and enter the window, in arrival order, as earlier jobs
    finish (DL²'s "invisible backlog"; how this differs from DL²: docs/design/envs.md,
    "The window").  With ``allocator_for_unused`` (any
    :class:`~envs.sim.elastic.allocators.Allocator`, e.g. ``DRF()``) the jobs beyond the
    window are instead allocated by it, on the capacity the window left, when the slot
    closes.

    **Seeding.**  ``reset(seed=s)`` uses workload seed ``s`` (the same jobs as
    ``setting.workload(s)``); ``reset()`` without a seed uses the constructor's ``seed`` on
    the very first reset and afterwards draws a fresh workload seed from ``self.np_random``
    (seeded by the last seed given), so every episode is a new, reproducible workload.  With
    ``jobs=`` the workload is fixed.  Everything else is deterministic.

    Keyword arguments: ``setting`` (``"small"``, ``"large"`` or a :class:`DL2Setting`), ``seed``
    (workload seed of the first unseeded reset), ``J`` (window, default ``setting.J``), ``L``
    (number of job types, default the type table's length), ``reward`` (a ``"cluster"``
    reward of :mod:`envs.gym.rewards`: ``"dl2"``, ``"jct"``, ...), ``jct_scale``,
    ``max_slots`` (truncation horizon), ``jobs`` (a fixed workload instead of the generator),
    ``workload_options`` (other arguments of the generator: ``arrival``, ``fixed_length``,
    errors), ``slot_s`` (default: the setting's cluster), ``speed`` (default
    :class:`MeasuredSpeed` with the setting's caps), ``scaling_overhead_s``, ``placement`` (a
    :class:`~envs.sim.elastic.cluster.Placement` name: ``"least_loaded"`` (default),
    ``"reference"`` (DL²'s: the least-loaded node or nothing), ``"first_fit"`` (alias
    ``"ff"``, the stacks' name), ``"packing"``), ``strict_reference_placement`` (the same as
    ``placement="reference"``), ``allocator_for_unused`` and ``render_mode``.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}  # noqa: RUF012
    #: whether opening a slot writes its observation (``False`` only in a :meth:`lookahead`
    #: copy made with ``observe=False``: its observations are stale, its steps the same)
    _observe = True

    def __init__(
        self,
        setting: str | DL2Setting = "small",
        *,
        seed: int = 0,
        J: int | None = None,
        L: int | None = None,
        reward: str = "dl2",
        jct_scale: float = 1.0,
        max_slots: int = DEFAULT_MAX_SLOTS,
        jobs: Sequence[ElasticJob] | None = None,
        trace: str | None = None,
        workload_options: Mapping[str, Any] | None = None,
        slot_s: float | None = None,
        speed: SpeedModel | None = None,
        scaling_overhead_s: float = 0.0,
        strict_reference_placement: bool = False,
        placement: str | None = None,
        allocator_for_unused: Allocator | None = None,
        render_mode: str | None = None,
        features: str = "dl2",
        max_invalid_per_slot: int = 1000,
        trace_options: TraceConfig | None = None,
    ) -> None:
        self.setting = setting = _resolve_setting(setting)
        self.J = setting.J if J is None else int(J)
        types = dl2_job_types()
        if workload_options and "types" in workload_options:
            types = tuple(workload_options["types"])
        self.L = len(types) if L is None else int(L)
        _check_options(
            self.J, self.L, features, reward, jct_scale, max_slots, max_invalid_per_slot,
            render_mode, self.metadata["render_modes"], jobs is not None and trace is not None,
        )  # fmt: skip
        self.features = features
        self._n_features = EXTENDED_FEATURES_PER_JOB if features == "extended" else FEATURES_PER_JOB
        self.max_invalid_per_slot = int(max_invalid_per_slot)
        self._invalid_slot = 0
        self.reward_mode = reward
        self._reward_fn = reward_fn(CLUSTER, reward)
        self.jct_scale = float(jct_scale)
        self.max_slots = int(max_slots)
        self.default_seed = int(seed)
        self.workload_options = dict(workload_options or {})
        base = setting.cluster()
        self.cluster_spec = (
            base
            if slot_s is None
            else ElasticCluster(base.num_nodes, base.cpu_slots, base.gpu_slots, float(slot_s))
        )
        self.speed: SpeedModel = (
            _measured_speed(setting.max_ps, setting.max_workers) if speed is None else speed
        )
        if trace is not None:
            jobs = _trace_jobs(trace, trace_options, self.cluster_spec, self.speed, int(seed))
        self.fixed_jobs = None if jobs is None else tuple(jobs)
        self.scaling_overhead_s = float(scaling_overhead_s)
        self.placement = placement_rule(placement, strict_reference_placement)
        self.strict_reference_placement = self.placement is Placement.REFERENCE
        self.allocator_for_unused = allocator_for_unused
        self.render_mode = render_mode

        self.observation_space = observation_space(self.J, self.L + self._n_features)
        self.action_space = action_space(self.J)
        self.void_action = 3 * self.J

        self.sim: SlotSimulator | None = None
        self.jobs: tuple[ElasticJob, ...] = ()
        self.workload_seed: int | None = None
        self._views: list[JobState] = []  # every active job of the open slot
        self._window: list[JobState] = []
        self._alloc: dict[int, list[int]] = {}  # window job id -> [workers, ps] this slot
        self._slot_open = False
        self._placed = 0  # increments placed in the open slot (by step or plan_slot)
        self._ended = True
        # Per-slot caches (rebuilt when a slot opens, updated incrementally per placement).
        self._cap_cpu = int(self.cluster_spec.cpu_slots)
        self._cap_gpu = int(self.cluster_spec.gpu_slots)
        self._total_cpu = self.cluster_spec.num_nodes * self._cap_cpu
        self._total_gpu = self.cluster_spec.num_nodes * self._cap_gpu
        self._width = self.L + self._n_features
        self._init_mask_buffers()
        self._init_obs_buffers()
        # Per job of the episode (built at reset): demands, caps, demand indices, type index.
        self._static: dict[int, _Row] = {}
        self._rows: list[_Row] = []  # the window's, by row
        self._counts: list[list[int]] = []  # the _alloc lists, by window row
        self._alloc_col = self.L + 2  # first allocation column of a row
        # per job profile (demands, caps): the allocation columns by (w, p), see _Row.table
        self._tables: dict[tuple[int, ...], list[tuple[float, float, float] | None]] = {}
        self._cluster: SlotCluster | None = None  # the simulator's (placements of the env)
        self._t = 0  # the open slot (sim.t)
        self._num_jobs = 0
        self._invalid = 0
        self._empty_total = 0
        self._finished = 0
        #: the increments of the last :meth:`plan_slot` that could not be placed
        self.last_shortfalls: list[tuple[int, str, int, int]] = []

    def replica(self) -> ClusterEnv:
        """An independent copy of this env (its episode state included; ``reset`` it): the
        same options, jobs and speed model (the immutable parts are shared, not copied), so
        that an episode reset with the same seed runs the same in both."""
        memo: dict[int, Any] = {id(self.speed): self.speed, id(self.setting): self.setting}
        if self.fixed_jobs is not None:
            memo[id(self.fixed_jobs)] = self.fixed_jobs
        return copy.deepcopy(self, memo)

    def lookahead(self, known_only: bool = True, observe: bool = True) -> Callable[[], ClusterEnv]:
        """A maker of independent copies of this env at this point of its episode, to look
        ahead in: each call returns a fresh copy (the env is pickled once; the immutable
        parts, the speed model, the setting and the job specs, are shared, not copied, which
        also keeps the speed model's memo warm).  With ``known_only`` a copy knows only the
        jobs that have arrived (:meth:`SlotSimulator.forget_future`): stepping it to its end
        runs the jobs in the system and nothing after, what a scheduler can simulate without
        seeing the future; its ``jobs`` (and so :meth:`episode_jcts`) are the known jobs.
        Without, a copy also holds the jobs still to arrive (a clairvoyant look).  A copy
        reports no progress (no heartbeat, no slot hook); with ``observe=False`` it does not
        write the observations of the slots it opens (the observations it returns are
        stale; its slots, rewards and results are the same: for rollouts whose continuation
        reads no observation, about a sixth faster)."""
        sim = self._require_sim()
        shared: list[Any] = [self.speed, self.setting, *self.jobs]
        if self.fixed_jobs is not None:
            shared.append(self.fixed_jobs)
        ids = {id(o): i for i, o in enumerate(shared)}
        buf = io.BytesIO()
        pickler = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
        pickler.persistent_id = lambda obj: ids.get(id(obj))  # type: ignore[method-assign]
        hooks = sim.heartbeat, sim.on_slot
        sim.heartbeat = sim.on_slot = None
        try:
            pickler.dump(self)
        finally:
            sim.heartbeat, sim.on_slot = hooks
        blob = buf.getvalue()

        def make() -> ClusterEnv:
            unpickler = pickle.Unpickler(io.BytesIO(blob))
            unpickler.persistent_load = shared.__getitem__  # type: ignore[method-assign]
            out: ClusterEnv = unpickler.load()
            if known_only:
                out.forget_future()
            if not observe:
                out._observe = False
            return out

        return make

    def state_key(self) -> tuple[Any, ...]:
        """What the rest of the episode depends on, as a hashable value: the slot, whether
        the episode ended, and every job's progress, allocation, slots run and finish (two
        copies with equal keys, stepped alike, step alike: a search runs such states once)."""
        sim = self._require_sim()
        runs = tuple(
            (jid, r.progress, r.alloc, r.slots_run, r.finish) for jid, r in sim._runs.items()
        )
        return (sim.t, self._ended, runs)

    def forget_future(self) -> int:
        """Forget the jobs still to arrive (:meth:`SlotSimulator.forget_future`), for a copy
        that looks ahead (:meth:`lookahead`), never the run itself; how many."""
        sim = self._require_sim()
        n = sim.forget_future()
        if n:
            known = {job.job_id for job in sim.jobs}
            self.jobs = tuple(job for job in self.jobs if job.job_id in known)
            self._num_jobs = len(self.jobs)
        return n

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_obs_mv"]  # a memoryview does not pickle; rebuilt by __setstate__
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        # views do not survive pickling as views: rebuild them over the unpickled data
        self.__dict__.update(state)
        self.__dict__.setdefault("_row_cache", {})  # (caches that older pickles lack)
        self.__dict__.setdefault("_fit_cache", {})
        self._bind_mask_views()
        self._bind_obs_views()

    # ------------------------------------------------------------------ Gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Obs, dict[str, Any]]:
        if seed is not None:
            seed = check_seed(seed, "dlsched/Cluster-v0 reset seed", None)  # any integer >= 0
            super().reset(seed=seed)
            wl_seed = int(seed)
        elif self._np_random is None:
            super().reset(seed=self.default_seed)
            wl_seed = self.default_seed
        else:
            wl_seed = int(self.np_random.integers(2**31 - 1))
        self.workload_seed = wl_seed
        if self.fixed_jobs is not None:
            self.jobs = self.fixed_jobs
        else:
            self.jobs = self.setting.workload(wl_seed, **self.workload_options)
        for job in self.jobs:
            if not 0 <= job.type.index < self.L:
                raise ConfigError(
                    f"job {job.job_id} has type index {job.type.index}, outside L={self.L}"
                )
        self.sim = self._new_sim()
        self._cluster = self.sim.cluster
        self._num_jobs = len(self.jobs)
        self._prepare_jobs()
        self._prepare_fits()
        self._invalid = 0
        self._empty_total = 0
        self._finished = 0
        self._ended = False
        empty = self._open_next_slot()
        sim = self.sim
        info = step_info(
            sim.t,
            False,
            0.0,
            -1,
            empty,
            self._empty_total,
            self._invalid,
            self._finished,
            self._num_jobs,
            False,
            sim.result() if sim.done else None,
        )
        return self._obs(), info

    def step(self, action: Any) -> tuple[Obs, float, bool, bool, dict[str, Any]]:
        if not self._slot_open:
            if self._ended:
                self._require_sim()
                raise ResetNeeded("the episode has ended; call reset()")
            return self._step_end(False)
        kind = type(action)
        if kind is int or kind is np.int64:  # the usual cases, without parse_action
            a: int | None = int(action)
        else:
            a = parse_action(action, self.void_action)
        void = self.void_action
        if a is not None and 0 <= a < void and self._mbytes[a]:
            if self._apply(a):
                # The hot path: a placement that leaves the slot open.  Nothing else changes
                # (not terminated, not truncated, reward 0).  info is step_info()'s dict for
                # these values, written out: the call would cost ~2% of a step.  Keep the two
                # the same (tests/gym/test_cluster_env.py's recorded digests include info).
                return (
                    self._obs_flat.copy(),
                    0.0,
                    False,
                    False,
                    {
                        "slot": self._t,
                        "slot_ended": False,
                        "slot_reward": 0.0,
                        "closed_slot": -1,
                        "empty_slots": 0,
                        "empty_slots_total": self._empty_total,
                        "invalid_actions": self._invalid,
                        "jobs_finished": self._finished,
                        "num_jobs": self._num_jobs,
                        "invalid_action": False,
                    },
                )
            return self._step_end(True)  # placed, and no non-void action is valid any more
        return self._step_end(a == void)  # void closes the slot; anything else is invalid

    def plan_slot(self, allocator: Allocator) -> tuple[Obs, float, bool, bool, dict[str, Any], int]:
        """The open slot planned by ``allocator`` and closed, in one call: the same outcome as
        a :class:`~envs.gym.heuristic.HeuristicDriver` of ``allocator`` stepping this env
        until the slot closes (same placements in the same order, same counts, same
        observation, reward and ``info`` of the closing step), plus the number of env steps
        that takes (increments placed, and the void that closes the slot unless the last
        placement left nothing valid).  The slot must have nothing placed yet.

        How: the allocator plans the window on the env's own (empty) cluster, which is what
        replaying its increments one by one by the placement rule gives as long as it placed
        every task by the rule and released none (``SlotCluster.off_rule`` unchanged: every
        increment then fits, in caps, when the env places it).  Otherwise (Optimus'
        and EfficientSRTF's released first tasks, Tetris' chosen nodes) the cluster is emptied
        and the increments are replayed by the rule, skipping those the env's mask would
        refuse, exactly as the driver does; :attr:`last_shortfalls` lists those
        (``(job_id, role, cpu, gpu)``; empty when the plan was applied whole).  Design:
        docs/design/envs.md ("A slot in one call")."""
        if not self._slot_open:
            if self._ended:
                self._require_sim()
                raise ResetNeeded("the episode has ended; call reset()")
            raise ConfigError("plan_slot needs an open slot")
        cluster: SlotCluster = self._cluster  # type: ignore[assignment]  # a slot is open
        if self._placed:  # (not slot_untouched(): the slot is open)
            raise ConfigError("plan_slot needs a slot with nothing placed yet")
        window = self._window
        off_rule = cluster.off_rule
        target = allocator.allocate(window, cluster, self.speed, self.cluster_spec.slot_s)
        decisions = allocator.last_decisions  # type: ignore[attr-defined]
        self.last_shortfalls = []
        if cluster.off_rule == off_rule:
            # in C where built (native_alloc.set_counts: this loop, for exact lists and pairs)
            if not native_alloc.set_counts(self._alloc, target):
                for jid, c in self._alloc.items():
                    c[0], c[1] = target[jid]
            placed = len(decisions)
        else:
            cluster.release_all()
            placed = self._replay(decisions)
        self._placed = placed
        steps = placed + (not placed or self._any_valid())
        obs, reward, term, trunc, info = self._step_end(True)
        return obs, reward, term, trunc, info, steps

    def slot_untouched(self) -> bool:
        """Whether a slot is open with nothing placed in it yet."""
        return self._slot_open and not self._placed

    def _replay(self, decisions: Sequence[tuple[int, str, int]]) -> int:
        """Place ``decisions`` (``(job_id, role, node)``, the node ignored) one by one by the
        placement rule on the empty cluster, skipping the increments the mask refuses (a cap
        reached, or no node for it) and stopping where no action is valid any more (the env
        closes the slot there); the increments placed."""
        cluster: SlotCluster = self._cluster  # type: ignore[assignment]  # a slot is open
        rows = {job.job_id: j for j, job in enumerate(self._window)}
        placed = 0
        for jid, role, _node in decisions:
            j = rows[jid]
            kind = ROLE_OFFSET[role]
            row = self._rows[j]
            counts = self._counts[j]
            w, p = counts
            cpu, gpu = row.acts[kind]
            if (kind != 1 and w >= row.max_w) or (kind != 0 and p >= row.max_p):
                self.last_shortfalls.append((jid, role, cpu, gpu))
                continue
            if cluster.take(cpu, gpu) < 0:
                self.last_shortfalls.append((jid, role, cpu, gpu))
                continue
            if kind != 1:
                counts[0] += 1
            if kind != 0:
                counts[1] += 1
            placed += 1
            if not self._any_valid():
                break
        return placed

    def _any_valid(self) -> bool:
        """Whether some non-void action is valid now: the mask's rule
        (:meth:`~envs.gym.cluster.masks.MaskMixin._row_valid`) on every row, with the fit
        state brought up to the cluster's (the mask buffers themselves are not kept up to
        date by :meth:`plan_slot`)."""
        fits = self._fits_at(self._cluster.occupied)  # type: ignore[union-attr]  # _update_fits()
        if fits is not self._fits and fits != self._fits:
            self._fits = fits
        if self.strict_reference_placement:
            return any(
                any(self._row_valid(row, w, p))
                for row, (w, p) in zip(self._rows, self._counts, strict=True)
            )
        fits = self._fits
        valid = native_alloc.any_valid(fits, self._rows, self._counts)  # (this loop, in C)
        if valid is not None:
            return valid
        for row, (w, p) in zip(self._rows, self._counts, strict=True):  # _row_valid, inlined
            w_ok = w < row.max_w
            p_ok = p < row.max_p
            if (w_ok and fits[row.iw]) or (p_ok and (fits[row.ip] or (w_ok and fits[row.ib]))):
                return True
        return False

    def _step_end(self, close: bool) -> tuple[Obs, float, bool, bool, dict[str, Any]]:
        """The step's outcome when it is not the hot path of :meth:`step`: with a slot open,
        close it (``close``) or count an invalid action; then the usual five values."""
        sim = self.sim
        assert sim is not None  # not ended: reset() built it
        reward = 0.0
        closed = -1
        empty = 0
        invalid = False
        if self._slot_open:
            if close:
                closed = sim.t
                reward = self._close_slot()
                empty = self._open_next_slot()
                if (
                    self._slot_open
                    and not sim.done
                    and self._invalid_slot < self.max_invalid_per_slot
                ):
                    # The usual close: the next slot is open and the episode goes on (neither
                    # terminated nor truncated, as below); info is step_info()'s dict for these
                    # values, written out (as on step's hot path; tests/gym/test_cluster_env.py's
                    # digests hold both to the same keys, order and values).
                    self._ended = False
                    return (
                        self._obs_flat.copy(),
                        reward,
                        False,
                        False,
                        {
                            "slot": sim.t,
                            "slot_ended": True,
                            "slot_reward": reward,
                            "closed_slot": closed,
                            "empty_slots": empty,
                            "empty_slots_total": self._empty_total,
                            "invalid_actions": self._invalid,
                            "jobs_finished": self._finished,
                            "num_jobs": self._num_jobs,
                            "invalid_action": False,
                        },
                    )
            else:
                invalid = True
                self._invalid += 1
                self._invalid_slot += 1
        terminated = sim.done
        stuck = self._invalid_slot >= self.max_invalid_per_slot
        truncated = not terminated and (not self._slot_open or stuck)
        if stuck:
            self._slot_open = False
        self._ended = terminated or truncated
        info = step_info(
            sim.t,
            closed >= 0,
            reward,
            closed,
            empty,
            self._empty_total,
            self._invalid,
            self._finished,
            self._num_jobs,
            invalid,
            sim.result() if terminated else None,
            self._num_jobs - self._finished if self._ended else None,
            stuck and not terminated,
            self._censored_figures() if self._ended and not terminated else None,
        )
        obs = self._obs_flat.copy() if self._slot_open else self._obs_flat_closed()
        return obs, reward, terminated, truncated, info

    # ------------------------------------------------------------------ internals
    def episode_jcts(self) -> tuple[list[float], float, int]:
        """``(each job's JCT in slots, makespan, unfinished jobs)`` of the episode so far: an
        unfinished job counts as finishing at slot ``sim.t`` (one not yet arrived, at its
        arrival: JCT 0), so while jobs are unfinished the figures are lower bounds (the
        censored figures of a truncated episode's ``info``, and of
        :func:`agents.episode_results.evaluate_policy`'s results)."""
        sim = self._require_sim()
        end = float(sim.t)
        jcts: list[float] = []
        makespan, unfinished = end if not self.jobs else 0.0, 0
        for job in self.jobs:
            f = sim.finish_time(job.job_id)
            if f is None:
                unfinished += 1
                f = max(end, float(job.arrival_slot))
                makespan = max(makespan, end)
            else:
                makespan = max(makespan, f)
            jcts.append(f - job.arrival_slot)
        return jcts, makespan, unfinished

    def _censored_figures(self) -> tuple[float, float, float]:
        """``(avg_jct_slots, avg_jct_s, makespan_slots)`` of an episode truncated with jobs
        unfinished (:meth:`episode_jcts`; :func:`~envs.gym.cluster.contract.step_info`)."""
        if not self.jobs:
            return 0.0, 0.0, 0.0
        jcts, makespan, _ = self.episode_jcts()
        avg = sum(jcts) / len(jcts)
        return avg, avg * self.cluster_spec.slot_s, makespan

    def _new_sim(self) -> SlotSimulator:
        """The episode's simulator for ``self.jobs`` (built by :meth:`reset`)."""
        return SlotSimulator(
            self.cluster_spec,
            self.jobs,
            None,
            self.speed,
            scaling_overhead_s=self.scaling_overhead_s,
            max_slots=self.max_slots + 1,
            placement=self.placement,
        )

    def _require_sim(self) -> SlotSimulator:
        if self.sim is None:
            raise ResetNeeded("call reset() before step()")
        return self.sim

    def _apply(self, a: int) -> bool:
        """Place the task(s) of non-void action ``a``, valid by the mask (the mask is exactly
        the validity rule: caps, and a node the task fits on under the placement rule);
        whether some non-void action is still valid."""
        j = a // 3  # (builtins divmod/min/max cost more than the arithmetic here)
        kind = a - 3 * j
        row = self._rows[j]
        cpu, gpu = row.acts[kind]
        cluster: SlotCluster = self._cluster  # type: ignore[assignment]  # a slot is open
        occupied = cluster.occupied
        node = cluster.take(cpu, gpu)  # the rule of SlotCluster.find_node
        if node < 0:  # pragma: no cover - the mask used the same rule
            raise ConfigError(f"no node fits ({cpu}, {gpu}); the mask is out of date")
        self._placed += 1
        counts = self._counts[j]
        if kind != 1:
            counts[0] += 1
        if kind != 0:
            counts[1] += 1
        w, p = counts
        columns = row.table[w * (row.max_p + 1) + p]  # the row's allocation columns
        if columns is None:
            columns = self._columns(row, w, p)
        base = j * self._width + self._alloc_col
        obs = self._obs_mv
        obs[base], obs[base + 1], obs[base + 2] = columns
        if self.strict_reference_placement:
            self._refresh_mask()  # the least-loaded node overall may have changed for anyone
            return self._n_valid > 0
        # Some demand may fit nowhere any more only if the node left the last node of its
        # free state (an occupied state emptied; then recheck the fits, rarely changed).
        if occupied & ~cluster.occupied and self._update_fits():
            self._refresh_mask()
            return self._n_valid > 0
        # MaskMixin._mask_row(j), inlined (this is the hot path): the fit state of the row's
        # demands only changed if some demand stopped fitting anywhere (handled above)
        fits = self._fits
        w_ok = w < row.max_w
        p_ok = p < row.max_p
        vw = w_ok and fits[row.iw]
        vp = p_ok and fits[row.ip]
        vb = w_ok and p_ok and fits[row.ib]
        mb = self._mbytes
        k = 3 * j
        n_valid = self._n_valid + vw + vp + vb - mb[k] - mb[k + 1] - mb[k + 2]
        self._n_valid = n_valid
        mb[k] = vw
        mb[k + 1] = vp
        mb[k + 2] = vb
        return n_valid > 0

    def _build_slot_cache(self, opened: tuple[bytes, int] | None = None) -> None:
        """Rows, fit state, mask and observation of a newly opened slot; ``opened``: the rows
        are set already (with ``_alloc``), and this is their open mask and its valid count
        (``native_alloc.open_rows``)."""
        if opened is None:
            static = self._static
            self._rows = [static[v.spec.job_id] for v in self._window]
            self._counts = list(self._alloc.values())
        self._open_mask(opened)
        if self._observe:
            self._write_slot_obs()

    def _close_slot(self) -> float:
        """Run the open slot with the decided allocation; its reward."""
        sim = self.sim
        assert sim is not None  # a slot is open
        decided = native_alloc.decided(self._alloc)  # (the dict below, in C where built)
        if decided is None:
            decided = {jid: (c[0], c[1]) for jid, c in self._alloc.items()}
        if self.allocator_for_unused is not None:
            backlog = self._views[self.J :]
            if backlog:
                _allocate_backlog(self.allocator_for_unused, backlog, decided, sim, self.speed)
        t = sim.t
        record = sim.end_slot(decided)
        self._slot_open = False
        self._close_mask()
        self._finished += len(record.finished)
        return self._reward_fn(self, SlotStep(record, self._views, t))

    def _open_next_slot(self) -> int:
        """Begin the next slot with an active job (running empty slots); empty slots run."""
        sim = self._require_sim()
        empty = 0
        self._invalid_slot = 0
        self._views, self._window, self._alloc = [], [], {}
        self._close_mask()
        self._rows, self._counts = [], []
        while not sim.done and sim.t < self.max_slots:
            views = sim.begin_slot()
            if views:
                self._views = views
                window = self._window = views[: self.J]
                # alloc, rows and counts in C where built (native_alloc.open_rows: the
                # comprehensions here and in _build_slot_cache)
                opened = native_alloc.open_rows(window, self._static)
                mask = None
                if opened is None:
                    self._alloc = {v.spec.job_id: [0, 0] for v in window}
                else:
                    self._alloc, self._rows, self._counts, joined, n_valid = opened
                    mask = (joined, n_valid)
                self._slot_open = True
                self._placed = 0
                self._t = sim.t
                self._build_slot_cache(mask)
                break
            sim.end_slot({})
            empty += 1
        self._empty_total += empty
        return empty
