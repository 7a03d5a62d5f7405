"""``dlsched/Cluster-v0``: DL²'s scheduling problem as a Gymnasium environment.

The environment wraps the elastic layer (:class:`~envs.sim.elastic.simulator.SlotSimulator`,
measured-speed mode by default) with DL²'s state encoding and incremental actions
(the DL² reference-code notes §3-5, DL² paper §4.1 and §4.3).

**Episode.**  ``reset`` draws a workload (:meth:`DL2Setting.workload`, or the fixed ``jobs``, or
the jobs of a normalised trace CSV given as ``trace=`` (:mod:`envs.sim.elastic.trace`)),
builds a simulator and opens the first slot that has an active job.  Each ``step`` is one
*decision* inside the current time slot; many decisions make one slot.  The slot closes on
the void action or automatically when no non-void action is valid any more (every window job
at its caps or nothing of theirs fits); the simulator then trains every job for the slot
(:meth:`SlotSimulator.end_slot`) and the next slot opens.  Slots with no active job (waiting
for arrivals) are run empty automatically (``info["empty_slots"]`` counts them).
``terminated`` when every job has finished; ``truncated`` when the slot count reaches
``max_slots`` (default :data:`DEFAULT_MAX_SLOTS`).  A ``step`` after the episode ended raises
:class:`gymnasium.error.ResetNeeded`.

**Window** (``J`` rows, default ``setting.J``).  The rows are the first ``J`` active jobs in
arrival order (ties by job id, the simulator's order).  Jobs beyond the window get nothing in
this slot: they wait and enter the window, in arrival order, as earlier jobs finish (DL²'s
"invisible backlog").  *Difference from DL²:* its RL env gives every uncompleted job, in or
out of the window, one worker + one PS at the start of every slot (``ASSIGN_BUNDLE``) and
leaves out of the window the jobs at both caps; here nothing is pre-allocated (the policy
decides every task) and the window keeps capped jobs (their rows are fully masked).  With
``allocator_for_unused`` (any :class:`~envs.sim.elastic.allocators.Allocator`, e.g. ``DRF()``)
the jobs beyond the window are instead allocated by it, on the capacity the window left, when
the slot closes.

**Observation**: a flat ``Box(0, 1, (J * (L + 5),), float32)``; row ``j`` (entries
``j*(L+5) .. j*(L+5)+L+4``) describes window job ``j``; rows without a job are zero:

=============  ======================================================================
columns        value
=============  ======================================================================
``0 .. L-1``   one-hot job type (``JobType.index``; ``L`` = number of types, 8 in DL²)
``L``          slots since arrival ``(t - arrival) / STAY_SCALE`` clipped to 1 (DL²'s
               ``STAY``; :data:`STAY_SCALE` = 100 slots, DL²'s disabled rescale constant)
``L + 1``      remaining declared epochs ``max(1 - progress / num_epochs, 0)``
``L + 2``      dominant-resource share of the allocation built so far in this slot
               (over the cluster's total CPU and GPU slots; in [0, 1] by construction)
``L + 3``      workers allocated so far in this slot / ``max_workers``
``L + 4``      PS allocated so far in this slot / ``max_ps`` (0 when ``max_ps`` is 0)
=============  ======================================================================

With ``features="extended"`` each row has two more columns (``L + 5``, ``L + 6``), for
workloads whose job sizes the type does not determine (real traces; DL²'s generator sets a
job's epochs from its type):

=============  ======================================================================
``L + 5``      remaining work in slots at the job's caps, log-scaled:
               ``log1p(remaining epochs / epochs per slot at (max_ps, max_workers))
               / log1p(REMAINING_SCALE)`` clipped to 1 (:data:`REMAINING_SCALE` = 10,000)
``L + 6``      requested size ``log1p(max_workers) / log1p(setting.max_workers)``, clipped
=============  ======================================================================

*Difference from DL²:* its input is raw integers (type 1..8, stay, workers, PS;
``INPUT_RESCALE = False``); here the type is one-hot and the counts are scaled to [0, 1] by
the constants above so that off-the-shelf policies see bounded inputs.

**Action**: ``Discrete(3J + 1)``.  ``a = 3j`` adds one worker to window job ``j``, ``3j + 1``
one PS, ``3j + 2`` one worker and one PS on the same node (bundle); ``a = 3J`` is void (close
the slot).  Tasks go to the node chosen by the cluster's placement rule (``placement=``; by
default the least-loaded node they fit on, :class:`SlotCluster`).
:meth:`ClusterEnv.action_masks` (True = valid; sb3-contrib's convention) masks rows without a
job, a role at its cap (``max_workers`` / ``max_ps``; the bundle when either is), and a task
(or bundle) that the placement rule cannot place (fits on no node; with ``"reference"``,
does not fit on the least-loaded node).  Void is always valid.  **Invalid actions** (masked, out of
range, or not an integer) are a no-op: nothing is placed, the slot stays open, the step's
reward is 0, ``info["invalid_action"]`` is True and ``info["invalid_actions"]`` counts them
over the episode.  ``max_invalid_per_slot`` (default 1,000) invalid actions within one slot
truncate the episode (``info["stuck"]``), so that a policy that never closes a slot cannot
loop forever.

**Reward** (``reward=``):

* ``"dl2"`` (the class's default; ``gymnasium.make`` defaults to ``"jct"``): DL²'s slot
  reward, the sum over jobs that ran in the slot of epochs trained / declared ``num_epochs``
  (:attr:`SlotRecord.reward`).  Over a complete episode it sums to the number of jobs (each
  job's fractions add up to 1), whatever the policy: learners that maximise the return see
  no difference between policies, only DL²'s per-slot credit rule gives it a signal.
* ``"jct"``: minus the job-time spent in the system during the slot, ``-sum over active jobs
  (active or waiting beyond the window) of (min(finish, t + 1) - t)`` divided by
  ``jct_scale`` (default 1): 1 slot for a job that does not finish, the used fraction of the
  slot for one that does.  Over a complete episode the sum is exactly ``-(sum of JCTs in
  slots) / jct_scale`` with the simulator's fractional finish times.

Both are given on the step that closes the slot and 0 on the other steps (DL²: the env returns
the slot reward on the decision that closes it).  ``info["slot_ended"]`` is True on that step,
so that an algorithm can credit every decision of the slot with the reward ``step`` returned
(DL²'s training rule; the learners read the returned reward, so a Gymnasium reward wrapper
reaches them).  ``info["slot_reward"]`` repeats it for logging (the unwrapped value).
Empty slots have reward 0 in both modes.

**info** (every step): ``slot`` (index of the open slot, or of the next one once the episode
ended), ``slot_ended``, ``slot_reward``, ``closed_slot`` (index of the slot closed at this step,
-1 if none), ``empty_slots`` (empty slots run at this step; ``empty_slots_total`` over the episode),
``invalid_action``,
``invalid_actions``, ``jobs_finished``, ``num_jobs``; at the episode's end
``unfinished_jobs`` and ``stuck`` (truncated by ``max_invalid_per_slot``), and when
``terminated``: ``avg_jct_slots``, ``avg_jct_s``, ``makespan_slots`` (SB3's
``Monitor(env, info_keywords=("avg_jct_slots",))`` logs them).

**Seeding.**  ``reset(seed=s)`` uses workload seed ``s`` (the same jobs as
``setting.workload(s)``); ``reset()`` without a seed uses the constructor's ``seed`` on the
very first reset and afterwards draws a fresh workload seed from ``self.np_random`` (seeded by
the last seed given), so every episode is a new, reproducible workload.  With ``jobs=`` the
workload is fixed.  Everything else is deterministic.

**Render**: ``"ansi"`` returns a text table of the window rows; ``"rgb_array"`` a uint8 image
with one band of :data:`CELL_PX` pixels per node, ``cpu_slots`` CPU cells (used: blue), a gap,
then ``gpu_slots`` GPU cells (used: green), free cells grey; it shows the allocation built so
far in the open slot.

**Speed.**  The observation rows, the mask and the placement search are kept incrementally
within a slot (rebuilt when a slot opens): a placement updates its row, the mask row of its
job, and, only when some demand stopped fitting on every node, the whole mask (which demands
fit somewhere is ``cluster.occupied & cluster.fit_positions(demand)``, rechecked only when a
placement emptied the last node of a free state).  A placement that leaves the slot open is
the hot path of :meth:`step`: its outcome is known (reward 0, not done) and ``info`` is one
dict literal.  The mask lives in a bytearray seen through a numpy view, the observation is
written through a memoryview (per slot: column-wise through numpy), and the node search is
the cluster's (:meth:`SlotCluster.take`: a bit set of occupied free states, no scan over
nodes).  ``step`` and ``reset`` return a *copy* of the observation buffer and
:meth:`action_masks` a copy of the mask (about 0.3 microseconds each): callers keep them
(``agents/vec.py`` stores the terminal observation in ``info``, pretraining datasets append
observations), which a view of the buffer would silently overwrite at the next step.  ``info``
is a fresh dict with every documented key on every step; the episode's results
(``sim.result()``) are computed only on the terminating step.  ``benchmarks/bench_env.py``
measures the rate (EXPERIMENTS.md).

**Contention speed mode**: :class:`ContentionClusterEnv` (built by
:func:`envs.gym.factory.make_env` for ``speed="contention"``) is the same env whose slots are
simulated in the contention engine (:class:`~envs.sim.elastic.engine_slots.
ContentionSlotSimulator`): the engine places the tasks where the env put them (its placement
log is the simulator's ``last_decisions``), or, with ``placer=`` a core placement token such
as ``"lwf1"``, uses only the per-job counts.  The default :class:`ClusterEnv` path is
unchanged (its simulator is built by :meth:`ClusterEnv._new_sim`).

**Registration**: importing :mod:`envs.gym` registers :data:`ENV_ID` with
:func:`envs.gym.factory.gym_make` as entry point (every key of the Hydra env config, checked;
``reward="jct"`` by default); ``gymnasium.make("envs.gym:dlsched/Cluster-v0", ...)`` imports
it on demand (Gymnasium 1.x's ``module:id`` syntax; Gymnasium 1.x no longer loads
``gymnasium.envs`` entry-point plugins, so a bare id needs the import).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces
from gymnasium.error import ResetNeeded

from envs.sim.elastic.allocators import Allocator, JobState, dominant_share
from envs.sim.elastic.cluster import Placement, SlotCluster, placement_rule
from envs.sim.elastic.engine_slots import (
    ContentionConfig,
    ContentionSlotSimulator,
    ContentionSpeed,
)
from envs.sim.elastic.simulator import SlotSimulator
from envs.sim.elastic.spec import ElasticCluster, ElasticJob, SpeedModel
from envs.sim.elastic.speed import MeasuredSpeed
from envs.sim.elastic.trace import elastic_jobs_from_trace, elastic_jobs_from_workload
from envs.sim.elastic.types import dl2_job_types
from envs.sim.elastic.workload import DL2_LARGE, DL2_SMALL, DL2Setting
from envs.sim.errors import ConfigError, check_number
from envs.sim.traces.options import TraceConfig, load_trace_workload

__all__ = [
    "ACTION_ROLES",
    "CELL_PX",
    "DEFAULT_MAX_SLOTS",
    "ENV_ID",
    "EXTENDED_FEATURES_PER_JOB",
    "FEATURES_PER_JOB",
    "REMAINING_SCALE",
    "STAY_SCALE",
    "ClusterEnv",
    "ContentionClusterEnv",
]

#: The registered id.
ENV_ID = "dlsched/Cluster-v0"
#: Slots since arrival are divided by this and clipped to 1 (DL²'s disabled ``stay / 100``).
STAY_SCALE = 100.0
#: Per-job features after the ``L`` one-hot type columns (``features="dl2"``).
FEATURES_PER_JOB = 5
#: ... and with ``features="extended"`` (remaining work and size, log-scaled).
EXTENDED_FEATURES_PER_JOB = 7
#: Slots of remaining work that the extended remaining-work column maps to 1 (log scale).
REMAINING_SCALE = 10_000.0
_LOG_REMAINING = math.log1p(REMAINING_SCALE)
#: Default truncation horizon in slots (DL²'s heuristics need up to ~1140 slots in the small
#: setting, reference notes §13.9).
DEFAULT_MAX_SLOTS = 2000
#: Pixels per cell side in the ``rgb_array`` picture.
CELL_PX = 4

_SETTINGS = {"small": DL2_SMALL, "large": DL2_LARGE}
_FREE = np.array([60, 60, 60], dtype=np.uint8)
_CPU = np.array([66, 133, 244], dtype=np.uint8)
_GPU = np.array([52, 168, 83], dtype=np.uint8)
_GAP = np.array([0, 0, 0], dtype=np.uint8)

Obs = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class _Row:
    """What a window row needs of its job: worker and PS demands (CPU, GPU slots), caps,
    indices of its worker, PS and bundle demands in ``ClusterEnv._demands``, type index."""

    wc: int
    wg: int
    pc: int
    pg: int
    max_w: int
    max_p: int
    iw: int
    ip: int
    ib: int
    type_index: int
    open_mask: bytes  # the row's mask entries with nothing allocated on an empty cluster
    open_valid: int  # how many of them are True
    acts: tuple[tuple[int, int], ...]  # per action kind (worker, PS, bundle): (CPU, GPU)
    arrival: int  # arrival slot
    # The allocation columns of the row for (w, p) at index ``w * (max_p + 1) + p``, filled
    # on first use; shared by the jobs of the same demands and caps (ClusterEnv._tables).
    table: list[tuple[float, float, float] | None]
    epochs_per_slot: float = 0.0  # at the job's caps (extended features)
    size: float = 0.0  # the extended size column


@functools.lru_cache(maxsize=8)
def _measured_speed(max_ps: int, max_workers: int) -> MeasuredSpeed:
    """One measured-speed table per caps (its fit is the slow part of construction)."""
    return MeasuredSpeed(max_ps=max_ps, max_workers=max_workers)


class ClusterEnv(gym.Env[Obs, np.int64]):
    """DL²'s per-slot incremental worker/PS allocation (see the module docstring).

    Keyword arguments: ``setting`` (``"small"``, ``"large"`` or a :class:`DL2Setting`), ``seed``
    (workload seed of the first unseeded reset), ``J`` (window, default ``setting.J``), ``L``
    (number of job types, default the type table's length), ``reward`` (``"dl2"`` or
    ``"jct"``), ``jct_scale``, ``max_slots`` (truncation horizon), ``jobs`` (a fixed workload
    instead of the generator), ``workload_options`` (other arguments of the generator:
    ``arrival``, ``fixed_length``, errors), ``slot_s`` (default: the setting's cluster),
    ``speed`` (default :class:`MeasuredSpeed` with the setting's caps),
    ``scaling_overhead_s``, ``placement`` (a :class:`~envs.sim.elastic.cluster.Placement`
    name: ``"least_loaded"`` (default), ``"reference"`` (DL²'s: the least-loaded node or
    nothing), ``"first_fit"`` (alias ``"ff"``, the stacks' name), ``"packing"``),
    ``strict_reference_placement`` (the same as
    ``placement="reference"``), ``allocator_for_unused`` and ``render_mode``.
    """

    metadata: dict[str, Any] = {"render_modes": ["ansi", "rgb_array"], "render_fps": 4}  # noqa: RUF012

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
        if isinstance(setting, str):
            if setting not in _SETTINGS:
                raise ConfigError(f"unknown setting {setting!r}; known: {sorted(_SETTINGS)}")
            setting = _SETTINGS[setting]
        if not isinstance(setting, DL2Setting):
            raise ConfigError(f"setting must be 'small', 'large' or a DL2Setting, got {setting!r}")
        self.setting = setting
        self.J = setting.J if J is None else int(J)
        types = dl2_job_types()
        if workload_options and "types" in workload_options:
            types = tuple(workload_options["types"])
        self.L = len(types) if L is None else int(L)
        if self.J < 1 or self.L < 1:
            raise ConfigError(f"J and L must be >= 1, got J={self.J}, L={self.L}")
        if features not in ("dl2", "extended"):
            raise ConfigError(f"features must be 'dl2' or 'extended', got {features!r}")
        self.features = features
        self._n_features = EXTENDED_FEATURES_PER_JOB if features == "extended" else FEATURES_PER_JOB
        if reward not in ("dl2", "jct"):
            raise ConfigError(f"reward must be 'dl2' or 'jct', got {reward!r}")
        check_number(jct_scale, "jct_scale", gt=0)
        if max_slots < 1:
            raise ConfigError(f"max_slots must be >= 1, got {max_slots}")
        if max_invalid_per_slot < 1:
            raise ConfigError(f"max_invalid_per_slot must be >= 1, got {max_invalid_per_slot}")
        self.max_invalid_per_slot = int(max_invalid_per_slot)
        self._invalid_slot = 0
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ConfigError(f"render_mode must be one of {self.metadata['render_modes']}")
        self.reward_mode = reward
        self.jct_scale = float(jct_scale)
        self.max_slots = int(max_slots)
        self.default_seed = int(seed)
        if jobs is not None and trace is not None:
            raise ConfigError("give either jobs= or trace=, not both")
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
        if trace is not None and trace_options is not None:
            # any trace layout, read, windowed and converted as evaluate.py's workload=trace
            # does (envs/sim/traces/options.py: the same options for both)
            cl = self.cluster_spec
            workload, _, _ = load_trace_workload(
                trace, trace_options, cluster_gpus=cl.num_nodes * cl.gpu_slots, seed=int(seed)
            )
            jobs = elastic_jobs_from_workload(
                workload, slot_s=cl.slot_s, speed=self.speed, where=str(trace)
            )
        elif trace is not None:
            # a normalised trace CSV (envs/sim/elastic/trace.py rules), model draws seeded
            jobs = elastic_jobs_from_trace(
                trace, seed=int(seed), slot_s=self.cluster_spec.slot_s, speed=self.speed
            )
        self.fixed_jobs = None if jobs is None else tuple(jobs)
        self.scaling_overhead_s = float(scaling_overhead_s)
        self.placement = placement_rule(placement, strict_reference_placement)
        self.strict_reference_placement = self.placement is Placement.REFERENCE
        self.allocator_for_unused = allocator_for_unused
        self.render_mode = render_mode

        self.observation_space = spaces.Box(
            0.0, 1.0, shape=(self.J * (self.L + self._n_features),), dtype=np.float32
        )
        self.action_space = spaces.Discrete(3 * self.J + 1)
        self.void_action = 3 * self.J

        self.sim: SlotSimulator | None = None
        self.jobs: tuple[ElasticJob, ...] = ()
        self.workload_seed: int | None = None
        self._views: list[JobState] = []  # every active job of the open slot
        self._window: list[JobState] = []
        self._alloc: dict[int, list[int]] = {}  # window job id -> [workers, ps] this slot
        self._slot_open = False
        self._ended = True
        # Per-slot caches (rebuilt when a slot opens, updated incrementally per placement).
        self._cap_cpu = int(self.cluster_spec.cpu_slots)
        self._cap_gpu = int(self.cluster_spec.gpu_slots)
        self._total_cpu = self.cluster_spec.num_nodes * self._cap_cpu
        self._total_gpu = self.cluster_spec.num_nodes * self._cap_gpu
        self._width = self.L + self._n_features
        # The mask lives in a bytearray (cheap item writes) seen by numpy through ``_mask``;
        # ``_n_valid`` counts its True non-void entries.
        self._closed_bytes = bytes(3 * self.J) + b"\x01"
        self._mbytes = bytearray(self._closed_bytes)
        self._mask = np.frombuffer(self._mbytes, dtype=bool)
        self._n_valid = 0
        self._obs_flat = np.zeros(self.J * self._width, dtype=np.float32)
        self._obs_buf = self._obs_flat.reshape(self.J, self._width)  # a view: rows
        # Item writes through a memoryview cost half of numpy's; both round a Python float
        # to float32 by the same C cast, so the values are the same.  (Any: typeshed types a
        # memoryview's items as int, this one's format is "f".)
        self._obs_mv: Any = self._obs_flat.data
        # Per job of the episode (built at reset): demands, caps, demand indices, type index.
        self._static: dict[int, _Row] = {}
        self._rows: list[_Row] = []  # the window's, by row
        self._counts: list[list[int]] = []  # the _alloc lists, by window row
        # Distinct demands (cpu, gpu) of the episode's jobs (worker, PS, bundle), the free
        # states each fits in (SlotCluster.fit_positions), and whether it fits on some node in
        # the open slot (``cluster.occupied & positions``).
        self._demands: list[tuple[int, int]] = []
        self._fit_masks: list[int] = []
        self._fits: list[bool] = []
        self._alloc_col = self.L + 2  # first allocation column of a row
        # per job profile (demands, caps): the allocation columns by (w, p), see _Row.table
        self._tables: dict[tuple[int, ...], list[tuple[float, float, float] | None]] = {}
        self._cluster: SlotCluster | None = None  # the simulator's (placements of the env)
        self._t = 0  # the open slot (sim.t)
        self._num_jobs = 0
        self._invalid = 0
        self._empty_total = 0
        self._finished = 0

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_obs_mv"]  # a memoryview does not pickle; rebuilt by __setstate__
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        # views do not survive pickling as views: rebuild them over the unpickled data
        self.__dict__.update(state)
        self._mask = np.frombuffer(self._mbytes, dtype=bool)
        self._obs_buf = self._obs_flat.reshape(self.J, self._width)
        self._obs_mv = self._obs_flat.data

    # ------------------------------------------------------------------ Gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Obs, dict[str, Any]]:
        if seed is not None:
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
        self._invalid = 0
        self._empty_total = 0
        self._finished = 0
        self._ended = False
        empty = self._open_next_slot()
        info = self._info(False, 0.0, -1, empty, self.sim.done)
        info["invalid_action"] = False
        return self._obs(), info

    def step(self, action: Any) -> tuple[Obs, float, bool, bool, dict[str, Any]]:
        if not self._slot_open:
            if self._ended:
                self._require_sim()
                raise ResetNeeded("the episode has ended; call reset()")
            return self._step_end(False)
        kind = type(action)
        if kind is int or kind is np.int64:  # the usual cases, without _parse
            a: int | None = int(action)
        else:
            a = self._parse(action)
        void = self.void_action
        if a is not None and 0 <= a < void and self._mbytes[a]:
            if self._apply(a):
                # The hot path: a placement that leaves the slot open.  Nothing else changes
                # (not terminated, not truncated, reward 0): info in one literal.
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
        info = self._info(closed >= 0, reward, closed, empty, terminated)
        info["invalid_action"] = invalid
        if self._ended:
            info["unfinished_jobs"] = len(self.jobs) - self._finished
            info["stuck"] = stuck and not terminated
        obs = self._obs_flat.copy() if self._slot_open else self._obs_flat_closed()
        return obs, reward, terminated, truncated, info

    def action_masks(self) -> npt.NDArray[np.bool_]:
        """Valid actions (True), length ``3J + 1``; void (last) always True."""
        return self._mask.copy()

    def render(self) -> str | npt.NDArray[np.uint8] | None:
        if self.render_mode == "ansi":
            return self._render_ansi()
        if self.render_mode == "rgb_array":
            return self._render_rgb()
        return None

    # ------------------------------------------------------------------ internals
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

    def _parse(self, action: Any) -> int | None:
        """The action as an int in range, or ``None`` (invalid)."""
        if type(action) is int or isinstance(action, np.integer):
            a = int(action)
            return a if 0 <= a <= self.void_action else None
        try:
            arr = np.asarray(action)
            if arr.size != 1 or not np.issubdtype(arr.dtype, np.integer):
                return None
            a = int(arr.reshape(()))
        except (TypeError, ValueError):
            return None
        return a if 0 <= a <= self.void_action else None

    def _prepare_jobs(self) -> None:
        """Per-job rows (demands, caps, indices of the distinct demands, type) and the fit
        counts of the distinct demands on an empty node, for the episode's jobs."""
        index: dict[tuple[int, int], int] = {}
        self._static = {}
        cap_c, cap_g = self._cap_cpu, self._cap_gpu
        for job in self.jobs:
            t = job.type
            wc, wg, pc, pg = t.worker_cpu, t.worker_gpu, t.ps_cpu, t.ps_gpu
            demands = ((wc, wg), (pc, pg), (wc + pc, wg + pg))
            ids = [index.setdefault(d, len(index)) for d in demands]
            # on an empty cluster every rule places a task iff it fits on an empty node
            fw, fp, fb = (c <= cap_c and g <= cap_g for c, g in demands)
            w_ok, p_ok = job.max_workers > 0, job.max_ps > 0
            bits = (w_ok and fw, p_ok and fp, w_ok and p_ok and fb)
            eps = 0.0
            size = 0.0
            if self._n_features > FEATURES_PER_JOB:
                its = self.speed.speed(t, job.max_ps, job.max_workers)
                eps = its * self.cluster_spec.slot_s / t.iterations_per_epoch
                top = max(self.setting.max_workers, 1)
                size = min(math.log1p(job.max_workers) / math.log1p(top), 1.0)
            self._static[job.job_id] = _Row(
                wc,
                wg,
                pc,
                pg,
                job.max_workers,
                job.max_ps,
                ids[0],
                ids[1],
                ids[2],
                t.index,
                bytes(bits),
                sum(bits),
                ((wc, wg), (pc, pg), (wc + pc, wg + pg)),
                job.arrival_slot,
                self._table(wc, wg, pc, pg, job.max_workers, job.max_ps),
                eps,
                size,
            )
        self._demands = list(index)
        cluster = self._require_sim().cluster
        self._fit_masks = [cluster.fit_positions(c, g) for c, g in self._demands]

    def _table(
        self, wc: int, wg: int, pc: int, pg: int, max_w: int, max_p: int
    ) -> list[tuple[float, float, float] | None]:
        """The (shared, lazily filled) allocation-column table of a job profile."""
        key = (wc, wg, pc, pg, max_w, max_p)
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = [None] * ((max_w + 1) * (max_p + 1))
        return table

    def _columns(self, row: _Row, w: int, p: int) -> tuple[float, float, float]:
        """The allocation columns of ``row`` with ``w`` workers and ``p`` PS (dominant share
        clipped at 1, ``w / max_workers``, ``p / max_ps``), into its table."""
        share = 0.0  # dominant_share(), the same arithmetic
        if self._total_cpu > 0:
            share = (w * row.wc + p * row.pc) / self._total_cpu
        if self._total_gpu > 0:
            gpu_share = (w * row.wg + p * row.pg) / self._total_gpu
            if gpu_share > share:  # max(share, gpu_share)
                share = gpu_share
        columns = (
            1.0 if share > 1.0 else share,  # min(share, 1.0)
            w / row.max_w,
            p / row.max_p if row.max_p > 0 else 0.0,
        )
        row.table[w * (row.max_p + 1) + p] = columns
        return columns

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
        # _mask_row(j), inlined (this is the hot path): the fit state of the row's demands
        # only changed if some demand stopped fitting anywhere (handled above)
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

    def _update_fits(self) -> bool:
        """Recompute which demands fit on some node; whether that changed."""
        occupied = self._cluster.occupied  # type: ignore[union-attr]  # a slot is open
        fits = [(occupied & positions) != 0 for positions in self._fit_masks]
        if fits == self._fits:
            return False
        self._fits = fits
        return True

    def _close_mask(self) -> None:
        self._mbytes[:] = self._closed_bytes
        self._n_valid = 0

    def _build_slot_cache(self) -> None:
        """Rows, fit counts, observation and mask of a newly opened slot."""
        cluster = self._require_sim().cluster
        static = self._static
        self._rows = [static[v.spec.job_id] for v in self._window]
        self._counts = list(self._alloc.values())
        rows = self._rows
        occupied = cluster.occupied
        self._fits = [(occupied & positions) != 0 for positions in self._fit_masks]
        if cluster.is_empty():  # the usual case (begin_slot emptied it)
            self._mbytes[: 3 * len(rows)] = b"".join([row.open_mask for row in rows])
            self._n_valid = sum([row.open_valid for row in rows])
        else:
            self._refresh_mask()
        self._obs_flat.fill(0.0)  # the allocation columns are 0: nothing allocated yet
        n = len(rows)
        if not n:
            return
        t, L, buf = self._t, self.L, self._obs_buf
        # Column-wise: the values are computed in Python floats as before (stay, and
        # JobState.remaining_fraction inlined), rounded to float32 by the assignment (the same
        # C cast as the memoryview's), then clipped at 1 (min(x, 1.0) commutes with the
        # rounding: it is monotone and 1.0 is a float32).
        buf[:n, L] = [(t - row.arrival) / STAY_SCALE for row in rows]
        buf[:n, L + 1] = [
            max(1.0 - v.progress_epochs / v.spec.num_epochs, 0.0) for v in self._window
        ]
        clip = buf[:n, L : L + 2]
        np.minimum(clip, 1.0, out=clip)
        if self._n_features > FEATURES_PER_JOB:
            buf[:n, L + 5] = [
                min(
                    math.log1p(
                        max(v.spec.num_epochs - v.progress_epochs, 0.0) / row.epochs_per_slot
                    )
                    / _LOG_REMAINING,
                    1.0,
                )
                if row.epochs_per_slot > 0
                else 1.0
                for v, row in zip(self._window, rows, strict=True)
            ]
            buf[:n, L + 6] = [row.size for row in rows]
        obs, width = self._obs_mv, self._width
        for j, row in enumerate(rows):
            obs[j * width + row.type_index] = 1.0

    def _mask_row(self, j: int) -> None:
        """Mask entries of window row ``j`` from its counts and the fit state."""
        row = self._rows[j]
        w, p = self._counts[j]
        w_ok = w < row.max_w
        p_ok = p < row.max_p
        if self.strict_reference_placement:
            cluster = self._require_sim().cluster
            fw = cluster.find_node(row.wc, row.wg) is not None
            fp = cluster.find_node(row.pc, row.pg) is not None
            fb = cluster.find_node(row.wc + row.pc, row.wg + row.pg) is not None
        else:
            fits = self._fits
            fw, fp, fb = fits[row.iw], fits[row.ip], fits[row.ib]
        mb = self._mbytes
        k = 3 * j
        before = mb[k] + mb[k + 1] + mb[k + 2]
        vw = w_ok and fw
        vp = p_ok and fp
        vb = w_ok and p_ok and fb
        mb[k] = vw
        mb[k + 1] = vp
        mb[k + 2] = vb
        self._n_valid += vw + vp + vb - before

    def _refresh_mask(self) -> None:
        for j in range(len(self._rows)):
            self._mask_row(j)

    def _close_slot(self) -> float:
        """Run the open slot with the decided allocation; its reward."""
        sim = self._require_sim()
        decided: dict[int, tuple[int, int]] = {jid: (c[0], c[1]) for jid, c in self._alloc.items()}
        backlog = self._views[self.J :]
        if self.allocator_for_unused is not None and backlog:
            extra = self.allocator_for_unused.allocate(
                backlog, sim.cluster, self.speed, self.cluster_spec.slot_s
            )
            for jid, alloc in extra.items():
                if jid in decided:
                    raise ConfigError(f"allocator_for_unused allocated window job {jid}")
                decided[jid] = alloc
        t = sim.t
        record = sim.end_slot(decided)
        self._slot_open = False
        self._close_mask()
        self._finished += len(record.finished)
        if self.reward_mode == "dl2":
            return float(record.reward)
        in_system = 0.0
        for view in self._views:
            finish = sim.finish_time(view.job_id)
            in_system += 1.0 if finish is None else finish - t
        return -in_system / self.jct_scale

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
                self._window = views[: self.J]
                self._alloc = {v.spec.job_id: [0, 0] for v in self._window}
                self._slot_open = True
                self._t = sim.t
                self._build_slot_cache()
                break
            sim.end_slot({})
            empty += 1
        self._empty_total += empty
        return empty

    def _obs(self) -> Obs:
        return self._obs_flat.copy() if self._slot_open else self._obs_flat_closed()

    def _obs_flat_closed(self) -> Obs:
        return np.zeros(self.J * self._width, dtype=np.float32)

    def _info(
        self, slot_ended: bool, slot_reward: float, closed: int, empty: int, done: bool
    ) -> dict[str, Any]:
        """Every documented key; the episode's results (``sim.result()``) only when done."""
        sim = self.sim
        assert sim is not None
        info: dict[str, Any] = {
            "slot": sim.t,
            "slot_ended": slot_ended,
            "slot_reward": slot_reward,
            "closed_slot": closed,
            "empty_slots": empty,
            "empty_slots_total": self._empty_total,
            "invalid_actions": self._invalid,
            "jobs_finished": self._finished,
            "num_jobs": len(self.jobs),
        }
        if done:
            result = sim.result()
            info["avg_jct_slots"] = result.avg_jct_slots
            info["avg_jct_s"] = result.avg_jct_s
            info["makespan_slots"] = result.makespan_slots
        return info

    def _render_ansi(self) -> str:
        sim = self._require_sim()
        mask = self.action_masks()
        lines = [
            f"slot {sim.t}  open={self._slot_open}  window {len(self._window)}/{self.J}  "
            f"active {len(self._views)}  finished "
            f"{self._finished}/{len(self.jobs)}  invalid {self._invalid}",
            f"{'row':>3} {'job':>5} {'type':<12} {'stay':>5} {'remain':>7} {'dom':>6} "
            f"{'W':>3} {'PS':>3}  valid(W,PS,B)",
        ]
        for j, job in enumerate(self._window):
            w, p = self._alloc[job.job_id]
            dom = dominant_share(job, w, p, sim.cluster)
            valid = "".join("x" if mask[3 * j + k] else "." for k in range(3))
            lines.append(
                f"{j:>3} {job.job_id:>5} {job.spec.type.model:<12} {sim.t - job.arrival:>5} "
                f"{job.remaining_fraction:>7.3f} {dom:>6.3f} {w:>3} {p:>3}  {valid}"
            )
        if len(self._views) > self.J:
            lines.append(f"    + {len(self._views) - self.J} job(s) waiting beyond the window")
        return "\n".join(lines) + "\n"

    def _render_rgb(self) -> npt.NDArray[np.uint8]:
        cluster = self._require_sim().cluster
        ncpu, ngpu = cluster.cpu_capacity, cluster.gpu_capacity
        cols = ncpu + 1 + ngpu
        grid = np.empty((cluster.num_nodes, cols, 3), dtype=np.uint8)
        grid[:] = _FREE
        grid[:, ncpu] = _GAP
        cpu_idx = np.arange(ncpu)[None, :]
        gpu_idx = np.arange(ngpu)[None, :]
        grid[:, :ncpu][cpu_idx < cluster.used_cpu[:, None]] = _CPU
        grid[:, ncpu + 1 :][gpu_idx < cluster.used_gpu[:, None]] = _GPU
        return np.repeat(np.repeat(grid, CELL_PX, axis=0), CELL_PX, axis=1)


#: The role of each action kind (``a - 3 * row``), as allocators name it in ``last_decisions``.
ACTION_ROLES = ("worker", "ps", "bundle")


class _EnvDecisions:
    """What :class:`ContentionSlotSimulator` reads of an allocator when it uses the
    allocator's task placement: the slot's ordered ``(job_id, role, node)`` log, here the
    env's own placements (the env is the allocator)."""

    name = "env"

    def __init__(self) -> None:
        self.last_decisions: list[tuple[int, str, int]] = []

    def allocate(self, *args: Any, **kwargs: Any) -> dict[int, tuple[int, int]]:
        raise ConfigError("the env's decisions are made by its actions, not by allocate()")


class ContentionClusterEnv(ClusterEnv):
    """:class:`ClusterEnv` whose slots are simulated in the contention engine
    (:class:`~envs.sim.elastic.engine_slots.ContentionSlotSimulator`, the ``contention``
    speed mode of the elastic world) instead of the measured table.

    Same observation, actions, masks, rewards and seeding as :class:`ClusterEnv`; only the
    epochs a job trains in a slot differ.  Extra keyword arguments: ``contention`` (a
    :class:`~envs.sim.elastic.engine_slots.ContentionConfig`; default its defaults: fair-share
    NICs, SRSF engine order, 50 merged steps per slot, exact slot reuse) and ``placer``:

    * ``None`` (default): the engine places every worker and PS exactly on the node the env
      put it (the env's placement rule, ``placement=``); the env logs its placements as the
      simulator's ``last_decisions`` (``allocator_for_unused`` is not supported then: its
      tasks would have no log);
    * a core placement token (``"lwf1"``, ``"ff"``, ``"ls"``, ...): only the per-job
      ``(workers, ps)`` counts of the env's decisions are used; the core placer chooses the
      workers' devices in the engine (PS ``k`` next to worker ``k mod W``).

    ``speed`` (what the env's jobs and heuristics plan with) defaults to the contention
    model's uncontended speed (:class:`ContentionSpeed` of ``contention``).
    """

    def __init__(
        self,
        setting: str | DL2Setting = "small",
        *,
        contention: ContentionConfig | None = None,
        placer: str | None = None,
        speed: SpeedModel | None = None,
        **kwargs: Any,
    ) -> None:
        self.contention = contention if contention is not None else ContentionConfig()
        if not isinstance(self.contention, ContentionConfig):
            raise ConfigError(f"contention must be a ContentionConfig, got {contention!r}")
        if placer is not None:
            from envs.sim.stacks import make_stack

            make_stack(f"{self.contention.order}:{placer}_{self.contention.comm}")
        elif kwargs.get("allocator_for_unused") is not None:
            raise ConfigError(
                "allocator_for_unused needs a core placer (placer=...) in the contention "
                "mode: the engine reads the env's own placements, and the backlog "
                "allocator's tasks have none"
            )
        self.placer_name = placer
        super().__init__(
            setting,
            speed=ContentionSpeed(self.contention) if speed is None else speed,
            **kwargs,
        )
        self._decisions = _EnvDecisions()

    def _new_sim(self) -> SlotSimulator:
        return ContentionSlotSimulator(
            self.cluster_spec,
            self.jobs,
            self._decisions if self.placer_name is None else None,
            self.contention,
            placer=self.placer_name,
            speed=self.speed if isinstance(self.speed, ContentionSpeed) else None,
            scaling_overhead_s=self.scaling_overhead_s,
            max_slots=self.max_slots + 1,
            placement=self.placement,
        )

    def _apply(self, a: int) -> bool:
        if self.placer_name is None:
            # log the node the placement rule will choose (SlotCluster.take follows
            # find_node's rule) for the engine's task placement
            j = a // 3
            kind = a - 3 * j
            cpu, gpu = self._rows[j].acts[kind]
            node = self._cluster.find_node(cpu, gpu)  # type: ignore[union-attr]
            if node is not None:
                job_id = self._window[j].spec.job_id
                self._decisions.last_decisions.append((job_id, ACTION_ROLES[kind], node))
        return super()._apply(a)

    def _open_next_slot(self) -> int:
        self._decisions.last_decisions = []
        return super()._open_next_slot()
