"""``dlsched/Contention-v0``: learned job admission and placement in Ada-SRSF's own world.

Why: the DL² env decides per time slot in the elastic world; this env puts a learner in the
contention engine's world instead, fixed-demand all-reduce jobs, time-shared GPUs, all-reduces
contending on NICs, continuous time, so that learned policies meet the Ada-SRSF stacks on
their own ground.  Each step is one decision at an instant where the engine
(:mod:`envs.sim.decisions`) stopped: start a window job with a candidate placement, or wait.
Actions, masks, observation, reward and workloads: :class:`ContentionEnv`; teachers:
:func:`srsf_teacher`, :func:`srsf_exclusive_teacher`, :func:`exclusive_backfill_teacher`;
training over a distribution of settings (generator loads and cluster sizes, Philly windows
of the training VCs): :class:`ContentionDistribution`, :class:`ContentionMixEnv`.
Details: docs/design/envs.md#dlschedcontention-v0
"""

from __future__ import annotations

import copy
import math
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any, TypeVar

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from envs.gym.rewards import CONTENTION, DecisionStep, reward_fn
from envs.gym.seeds import SEED_LIMIT, check_seed
from envs.gym.workloads import (
    TEST_VCS,
    TRAIN_DAYS,
    TRAIN_VCS,
    VALIDATION_DAYS,
    TraceWindows,
    contention_window,
    usable_vcs,
)
from envs.sim import ClusterSpec, SimConfig
from envs.sim.config import Fidelity, FidelityOptions, ModelOptions
from envs.sim.decisions import DecisionSimulator
from envs.sim.engine import Job
from envs.sim.errors import ConfigError
from envs.sim.models import REFERENCE_MODELS
from envs.sim.policies.base import count_eligible
from envs.sim.policies.placement import COMM_ONLY, Overlap
from envs.sim.spec import JobSpec, Workload
from envs.sim.stacks import make_stack
from envs.sim.workload import ADA_SRSF_GPU_COUNTS as _GENERATOR_GPUS
from envs.sim.workload import ADA_SRSF_SCALES, generate_ada_srsf, paper_scale_workload

__all__ = [
    "CONTENTION_ENV_ID",
    "CONTENTION_TEACHERS",
    "OBS_WIDTHS",
    "PLACEMENTS",
    "RULE_PLACEMENTS",
    "ContentionConfig",
    "ContentionDistribution",
    "ContentionEnv",
    "ContentionMixEnv",
    "contention_teacher",
    "exclusive_backfill_teacher",
    "exclusive_easy_teacher",
    "exclusive_overlap_teacher",
    "rule_missing",
    "srsf_exclusive_teacher",
    "srsf_teacher",
    "teacher",
]

CONTENTION_ENV_ID = "dlsched/Contention-v0"
#: Placement candidates an action may name (stack placement tokens).
PLACEMENTS = ("lwf1", "lwf4", "ls", "ff", "ovl")
_MODELS = tuple(REFERENCE_MODELS)
_JOB_F = len(_MODELS) + 5
_SERVER_F = 4
_GLOBAL_F = 3
#: the observation's row widths: per window job, per server, and the global features (what a
#: size-agnostic network reads the observation by: :mod:`agents.set_contention`)
OBS_WIDTHS = (_JOB_F, _SERVER_F, _GLOBAL_F)


def _log(x: float) -> float:
    return math.log1p(max(x, 0.0)) / 10.0


Obs = npt.NDArray[np.float32]


class ContentionEnv(gym.Env[Obs, np.int64]):
    """The env (``dlsched/Contention-v0``).

    Fixed-demand all-reduce jobs, time-shared GPUs, all-reduces contending on NICs, continuous
    time: the contention engine (:mod:`envs.sim.decisions`) stops whenever jobs are queued and
    something changed (a job arrived or GPU memory was freed or taken) and at least one queued job
    fits; each step is then one decision at that instant:

    - ``j * C + c``: start window job ``j`` now, placed by candidate ``c`` of ``placements``
      (``lwf1``: LWF-1, least-loaded GPU or the fewest least-loaded servers; ``lwf4``; ``ls``:
      least-loaded GPUs, spread; ``ff``: first fit), then decide again at the same instant;
    - ``J * C``: wait — run on to the next stop.

    The window is the first ``J`` queued jobs by remaining GPU compute (SRSF's key: GPUs x
    iterations x compute per iteration; ties by arrival).  The communication scheduler
    (``comm``: ``adasrsf`` = AdaDUAL, ``srsf<n>``, ``fs``) admits the all-reduces as in the
    stacks.  ``action_masks()``:
    a start is valid when the row holds a job and it fits (enough GPUs with room for a worker);
    wait is valid unless nothing runs and no job is still to arrive (waiting would never end).

    **Observation** (``Box``, float32, flattened): per window row ``[model one-hot (4), log2
    GPUs / 5, log1p(service s) / 10, log1p(waiting s) / 10, fits, present]``, per server
    ``[free memory share, log1p(GPU load s) / 10, NIC tasks / 4, running workers / GPUs]`` and
    ``[log1p(queued beyond the window), running jobs / GPUs, jobs still to arrive / jobs]``.

    **Reward** (``reward``, a ``"contention"`` reward of :mod:`envs.gym.rewards`, computed on
    every valid step from a :class:`~envs.gym.rewards.DecisionStep`): by default ``"jct"``,
    ``-(A(t') - A(t)) / (1000 N)`` with ``A(t)`` the time jobs have spent in the
    system up to ``t`` (finished: their JCT; others: ``t - submit``), ``N`` jobs: the episode's
    return is exactly ``-avg JCT`` in seconds (tested).  An invalid action changes nothing, gets
    reward 0 and ``info["invalid_action"]``; ``max_invalid`` in a row truncate the episode
    (``info["stuck"]``).  At the end ``info`` has ``avg_jct_s``, ``p95_jct_s``, ``makespan_s``,
    ``decisions``, ``unfinished_jobs`` (0) and the engine's
    :class:`~envs.sim.results.SimResult` (``result``); a truncated (stuck) episode's last
    ``info`` has the same figures but ``result``, each unfinished job counted as finishing
    at the truncation (a job still to arrive: JCT 0), so that they are lower bounds, the
    return is still exactly ``-avg_jct_s``, and ``unfinished_jobs`` says how many.

    **Workloads**: ``generate_ada_srsf`` per episode seed (``scale="small"``: the reference's
    1/100 scale; ``"paper"``: 1000-6000 iterations over 20 minutes), or ``workloads=[...]`` given,
    one per episode by the episode seed, or ``trace=TraceWindows(...)`` (or its fields as a
    dict): a window of the Philly corpus drawn per episode with ``default_rng(episode seed)``
    (:func:`~envs.gym.workloads.contention_window`: ``num_jobs`` jobs unless ``trace.jobs``,
    real time, at most ``trace_max_iterations`` macro-iterations per job; JCTs in trace
    seconds; the reset's ``info["trace"]`` records the cuts).  ``fidelity="fast"`` (default)
    merges iterations (~0.4 CPU-s per paper-scale episode; its JCTs differ from full fidelity by
    several percent, EXPERIMENTS.md); ``"full"`` simulates every iteration (~8 CPU-s).
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012

    def __init__(
        self,
        *,
        scale: str = "small",
        num_jobs: int = 160,
        workloads: Sequence[Workload] | None = None,
        num_servers: int = 16,
        gpus_per_server: int = 4,
        gpu_memory_mb: float = 32768.0,
        comm: str = "adasrsf",
        placements: Sequence[str] = ("lwf1", "ls", "ff"),
        J: int = 20,
        fidelity: str = "fast",
        max_invalid: int = 1000,
        trace: TraceWindows | Mapping[str, Any] | None = None,
        trace_max_iterations: int | None = 200,
        reward: str = "jct",
        **unknown: Any,
    ) -> None:
        super().__init__()
        if unknown:  # one line naming them and the keywords it takes (not Python's TypeError)
            import inspect

            takes = sorted(k for k in inspect.signature(ContentionEnv).parameters if k != "unknown")
            raise ConfigError(
                f"{CONTENTION_ENV_ID}: unknown keyword(s) {sorted(unknown)}; it takes {takes}"
            )
        if scale not in ("small", "paper"):
            raise ConfigError(f"scale must be 'small' or 'paper', got {scale!r}")
        if not placements or len(set(placements)) != len(placements):
            raise ConfigError(f"placements must be distinct names, got {list(placements)}")
        bad = [p for p in placements if p not in PLACEMENTS]
        if bad:
            raise ConfigError(f"unknown placements {bad}; known: {list(PLACEMENTS)}")
        if J < 1 or num_jobs < 1 or max_invalid < 1:
            raise ConfigError(
                f"J, num_jobs and max_invalid must be >= 1, got {J}, {num_jobs}, {max_invalid}"
            )
        if fidelity not in (Fidelity.FAST.value, Fidelity.FULL.value):
            raise ConfigError(f"fidelity must be 'fast' or 'full', got {fidelity!r}")
        self.fidelity = Fidelity(fidelity)
        self.cluster = ClusterSpec(
            num_servers=num_servers, gpus_per_server=gpus_per_server, gpu_memory_mb=gpu_memory_mb
        )
        make_stack(f"ff_{comm}")  # checks the comm name now
        self.workloads = list(workloads) if workloads is not None else None
        if self.workloads is not None:
            if not self.workloads:
                raise ConfigError("workloads is empty")
            for w in self.workloads:
                w.check_fits(self.cluster)
                models = {j.model.name for j in w.jobs} - set(_MODELS)
                if models:
                    raise ConfigError(f"workload {w.name!r}: models {sorted(models)} have no "
                                      f"observation column (known: {list(_MODELS)})")  # fmt: skip
        self.trace = _trace_windows(trace)
        if self.trace is not None:
            if self.workloads is not None:
                raise ConfigError("give workloads or trace, not both")
            tmi = trace_max_iterations
            ok = isinstance(tmi, (int, np.integer)) and not isinstance(tmi, bool) and tmi >= 1
            if tmi is not None and not ok:
                raise ConfigError(
                    f"trace_max_iterations must be an integer >= 1 or None, got {tmi!r}"
                )
            usable_vcs(self.trace, int(self.trace.jobs or num_jobs))  # a clear error now
        self.trace_max_iterations = trace_max_iterations
        self.reward = reward
        self._reward_fn = reward_fn(CONTENTION, reward)  # an unknown name: one clear error
        self._windows: dict[int, tuple[Workload, dict[str, Any]]] = {}
        self.scale, self.num_jobs, self.comm = scale, int(num_jobs), comm
        self.placements = tuple(placements)
        self.J, self.C = int(J), len(self.placements)
        self.max_invalid = int(max_invalid)
        self.wait_action = self.J * self.C
        self.action_space = spaces.Discrete(self.J * self.C + 1)
        self._use(self.cluster)
        self.sim: DecisionSimulator | None = None
        self.window: list[Job] = []
        self.done = True

    # ------------------------------------------------------------------ episode
    def _window(self, seed: int) -> tuple[Workload, dict[str, Any]]:
        """The trace window of episode seed ``seed`` (cached: a group of rollouts reuses it)."""
        assert self.trace is not None
        if seed not in self._windows:
            if len(self._windows) >= 256:
                self._windows.clear()
            self._windows[seed] = contention_window(
                self.trace,
                self.cluster,
                np.random.default_rng(seed),
                num_jobs=self.num_jobs,
                max_iterations=self.trace_max_iterations,
            )
        return self._windows[seed]

    def _use(self, cluster: ClusterSpec) -> None:
        """Act on ``cluster``: the observation's length and space follow its servers."""
        self.cluster = cluster
        self.obs_size = self.J * _JOB_F + cluster.num_servers * _SERVER_F + _GLOBAL_F
        self.observation_space = spaces.Box(-1.0, 10.0, shape=(self.obs_size,), dtype=np.float32)

    def _workload(self, seed: int) -> Workload:
        if self.trace is not None:
            return self._window(seed)[0]
        if self.workloads is not None:
            return self.workloads[seed % len(self.workloads)]
        if self.scale == "paper":
            return paper_scale_workload(seed, self.num_jobs)
        return generate_ada_srsf(seed, num_jobs=self.num_jobs)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[npt.NDArray[np.float32], dict[str, Any]]:
        # the episode's seed also seeds the engine (ModelOptions.seed): 0 <= seed < 2**32
        if seed is not None:
            seed = check_seed(seed, f"{CONTENTION_ENV_ID} reset seed", SEED_LIMIT)
        super().reset(seed=seed)
        wseed = int(self.np_random.integers(2**31)) if seed is None else seed
        if options and "workload_seed" in options:
            key = f"{CONTENTION_ENV_ID} reset options['workload_seed']"
            wseed = check_seed(options["workload_seed"], key, SEED_LIMIT)
        workload = self._workload(wseed)
        cfg = SimConfig(
            fidelity=FidelityOptions(level=self.fidelity), model=ModelOptions(seed=wseed)
        )
        self.sim = DecisionSimulator(self.cluster, workload, make_stack(f"lwf1_{self.comm}"), cfg)
        # _to_decision passes over quiet stops anyway: the engine skips them without returning
        self.sim.skip_quiet = True
        self.placers = [make_stack(f"{p}_{self.comm}").placer for p in self.placements]
        self._count_jobs()
        self.area = 0.0  # A(t) at the last reward
        self.area_ms = 0.0  # and its t (A(0) = 0)
        self.decisions = 0
        self.invalid_run = 0
        self.done = False
        self._to_decision()
        info: dict[str, Any] = {"workload": workload.name, "workload_seed": wseed}
        if self.trace is not None:
            info["trace"] = copy.deepcopy(self._window(wseed)[1])  # the caller's to keep
        return self._obs(), info

    def _fits(self, job: Job) -> bool:
        assert self.sim is not None
        return count_eligible(job.spec, self.sim) >= job.spec.num_gpus

    def _to_decision(self) -> None:
        """Leave the current stop and run to the next one where a decision is worth asking
        (something changed and a queued job fits), or to the end."""
        sim = self.sim
        assert sim is not None
        while True:
            if not sim.advance():
                self.done = True
                self.window = []
                return
            # unchanged: no queued job fits that did not fit at the last stop
            if sim.changed and self._anything_fits():
                break
        # SRSF's key (remaining GPU compute), stable: arrival order on ties
        self.window = sorted(sim.queued, key=lambda j: j.remaining_compute_ms)[: self.J]

    def _anything_fits(self) -> bool:
        assert self.sim is not None
        return any(self._fits(j) for j in self.sim.queued)

    def _area(self) -> float:
        assert self.sim is not None
        t = self.sim.now
        a = 0.0
        for j in self.sim.jobs:
            sub = j.spec.submit_ms
            if not math.isnan(j.finish_ms):
                a += j.finish_ms - sub
            elif sub <= t:
                a += t - sub
        return a

    def _censored_figures(self) -> dict[str, Any]:
        """The end-of-episode figures of an episode truncated with jobs unfinished: each counts
        as finishing now (a job still to arrive: JCT 0), so ``avg_jct_s`` is ``A(now) / N``
        (a lower bound; the episode's return is still exactly ``-avg_jct_s``)."""
        sim = self.sim
        assert sim is not None
        now = sim.now
        jct, ends = [], []
        for j in sim.jobs:
            sub = j.spec.submit_ms
            end = j.finish_ms if not math.isnan(j.finish_ms) else max(now, sub)
            jct.append(end - sub)
            ends.append(j.finish_ms if not math.isnan(j.finish_ms) else now)
        arr = np.asarray(jct, dtype=float) / 1000.0
        return {
            "avg_jct_s": float(arr.mean()) if arr.size else 0.0,
            "p95_jct_s": float(np.percentile(arr, 95)) if arr.size else 0.0,
            "makespan_s": max(ends, default=0.0) / 1000.0,
            "decisions": self.decisions,
            "stops": sim.stops,
            "unfinished_jobs": sum(math.isnan(j.finish_ms) for j in sim.jobs),
        }

    # ------------------------------------------------------------------ acting
    def action_masks(self) -> npt.NDArray[np.bool_]:
        mask = np.zeros(self.J * self.C + 1, dtype=bool)
        if self.done or self.sim is None:
            mask[self.wait_action] = True
            return mask
        for j, job in enumerate(self.window):
            if self._fits(job):
                mask[j * self.C : (j + 1) * self.C] = True
        mask[self.wait_action] = self.can_wait()
        return mask

    def can_wait(self) -> bool:
        """Whether the wait action is valid now: a job is running or one is still to arrive
        (the wait action's entry of :meth:`action_masks`)."""
        sim = self.sim
        assert sim is not None
        return bool(sim.running) or self.jobs_to_arrive() > 0

    def jobs_to_arrive(self) -> int:
        """How many of the episode's jobs have not arrived yet."""
        assert self.sim is not None
        return len(self.submits) - bisect_right(self.submits, self.sim.now)

    def forget_future(self) -> int:
        """Go on without the episode's jobs still to arrive (for a search's copy that must not
        see them): :meth:`DecisionSimulator.forget_arrivals`, and the episode's job count
        and arrival times follow; the number dropped."""
        assert self.sim is not None
        dropped = self.sim.forget_arrivals()
        self._count_jobs()
        return dropped

    def fast_factor(self) -> int:
        """``K``, the iterations a FAST run of the episode's jobs (those it has, after
        :meth:`forget_future`) merges into one step: what :meth:`coarsen` would merge
        (:meth:`DecisionSimulator.fast_factor`)."""
        assert self.sim is not None
        return self.sim.fast_factor()

    def coarsen(self) -> None:
        """Go on in FAST fidelity (for a search's copy of a FULL episode whose model is the
        cheaper engine): :meth:`DecisionSimulator.coarsen`; a FAST episode is left as it is."""
        assert self.sim is not None
        if self.fidelity is not Fidelity.FAST:
            self.sim.coarsen()
            self.fidelity = Fidelity.FAST

    def replace_future(self, specs: Sequence[JobSpec]) -> int:
        """Go on with ``specs`` in place of the episode's jobs still to arrive (a search's
        guess at them, none of which may arrive before now): :meth:`forget_future`, then
        :meth:`DecisionSimulator.add_arrivals`; the number of jobs dropped."""
        assert self.sim is not None
        dropped = self.forget_future()
        self.sim.add_arrivals(specs)
        self._count_jobs()
        return dropped

    def _count_jobs(self) -> None:
        """The episode's arrival times and job count, from the engine's jobs (at reset, and
        when a search's copy forgets or replaces the jobs still to arrive)."""
        assert self.sim is not None
        self.submits = sorted(j.spec.submit_ms for j in self.sim.jobs)
        self.n = len(self.sim.jobs)

    def idle_gpus(self) -> int:
        """The cluster's GPUs less the workers placed on them (negative when GPUs are
        time-shared): what the rules that do not time-share may still start."""
        assert self.sim is not None
        return self.cluster.num_gpus - sum(len(r) for r in self.sim.residents)

    def step(
        self, action: Any
    ) -> tuple[npt.NDArray[np.float32], float, bool, bool, dict[str, Any]]:
        if self.done or self.sim is None:
            raise ConfigError("step() on a finished episode: call reset() first")
        sim = self.sim
        try:
            a = int(action)
            valid_int = a == action or isinstance(action, (np.integer, int))
        except (TypeError, ValueError, OverflowError):
            a, valid_int = -1, False
        info: dict[str, Any] = {"invalid_action": False}
        ok = valid_int and 0 <= a <= self.wait_action and bool(self.action_masks()[a])
        if ok and a == self.wait_action:
            self._to_decision()
        elif ok:
            job, placer = self.window[a // self.C], self.placers[a % self.C]
            if getattr(placer, "reads_load", True):
                sim.settle_loads()
            gpus = placer.place(job.spec, sim, sim.rng)
            if gpus is None:  # pragma: no cover - masks say it fits
                ok = False
            else:
                sim.start(job, gpus)
                self.decisions += 1
                if self._anything_fits():
                    self.window = [j for j in self.window if j is not job]
                else:
                    self._to_decision()
        if not ok:
            self.invalid_run += 1
            info["invalid_action"] = True
            truncated = self.invalid_run >= self.max_invalid
            if truncated:
                self.done = True
                info["stuck"] = True
                info.update(self._censored_figures())
            return self._obs(), 0.0, False, truncated, info
        self.invalid_run = 0
        area, now = self._area(), sim.now
        step = DecisionStep(self.area_ms, now, self.area, area, self.n, sim.jobs)
        reward = self._reward_fn(self, step)
        self.area, self.area_ms = area, now
        if self.done:
            result = sim.result()
            jct = np.array([r.jct_ms for r in result.records]) / 1000.0
            info.update(
                avg_jct_s=float(jct.mean()),
                p95_jct_s=float(np.percentile(jct, 95)),
                makespan_s=result.makespan_ms / 1000.0,
                decisions=self.decisions,
                stops=sim.stops,
                unfinished_jobs=0,
                result=result,
            )
        return self._obs(), float(reward), self.done, False, info

    # ------------------------------------------------------------------ observation
    def _obs(self) -> npt.NDArray[np.float32]:
        obs = np.zeros(self.obs_size, dtype=np.float32)
        sim = self.sim
        if sim is None or self.done:
            return obs
        now = sim.now
        for r, job in enumerate(self.window):
            s = job.spec
            row = obs[r * _JOB_F : (r + 1) * _JOB_F]
            if s.model.name in _MODELS:
                row[_MODELS.index(s.model.name)] = 1.0
            k = len(_MODELS)
            row[k] = math.log2(s.num_gpus) / 5.0
            row[k + 1] = _log(job.remaining_compute_ms / 1000.0)
            row[k + 2] = _log((now - s.submit_ms) / 1000.0)
            row[k + 3] = float(self._fits(job))
            row[k + 4] = 1.0
        base = self.J * _JOB_F
        per, cap = self.cluster.gpus_per_server, self.cluster.gpu_memory_mb
        for srv in range(self.cluster.num_servers):
            gs = range(srv * per, (srv + 1) * per)
            row = obs[base + srv * _SERVER_F : base + (srv + 1) * _SERVER_F]
            row[0] = sum(sim.free_mem_mb[g] for g in gs) / (cap * per)
            row[1] = _log(sum(sim.load_ms[g] for g in gs) / per / 1000.0)
            row[2] = len(sim.nic_tasks[srv]) / 4.0
            row[3] = sum(len(sim.residents[g]) for g in gs) / per
        g0 = base + self.cluster.num_servers * _SERVER_F
        obs[g0] = math.log1p(max(len(sim.queue) - self.J, 0))
        obs[g0 + 1] = len(sim.running) / self.cluster.num_gpus
        obs[g0 + 2] = self.jobs_to_arrive() / self.n
        return np.clip(obs, -1.0, 10.0)


def _trace_windows(trace: TraceWindows | Mapping[str, Any] | None) -> TraceWindows | None:
    """``trace`` as a checked :class:`TraceWindows` (a mapping gives its fields)."""
    if trace is None or isinstance(trace, TraceWindows):
        out = copy.deepcopy(trace)  # the env's own: a later change to the caller's cannot reach it
    elif isinstance(trace, Mapping):
        known = {f.name for f in fields(TraceWindows)}
        unknown = sorted(set(map(str, trace)) - known)
        if unknown:
            raise ConfigError(f"trace: unknown keys {unknown}; known: {sorted(known)}")
        out = TraceWindows(**dict(trace))
    else:
        raise ConfigError(
            f"trace must be a TraceWindows, a mapping of its fields or None, got {trace!r}"
        )
    if out is not None:
        out.check()
    return out


#: the roles an episode of a distribution is drawn for (:class:`ContentionDistribution`): the
#: index enters the draw's seed, and each has its own days of the Philly corpus
ROLES = {"train": (0, TRAIN_DAYS), "validation": (1, VALIDATION_DAYS)}
#: the Ada-SRSF paper's cluster (16 x 4 GPUs): a generator load of 1 is its arrival rate per GPU
_PAPER_SERVERS = 16


def _setting_key(key: str) -> str:
    return f"contention.distribution.{key}"


def _numbers(values: Any, key: str, kind: type, lo: float) -> list[Any]:
    """``values`` as a non-empty list of ``kind`` (``int`` or ``float``) ``>= lo`` (finite);
    else one :class:`ConfigError` naming the key."""
    ok = isinstance(values, Sequence) and not isinstance(values, str) and len(values) > 0
    out: list[Any] = []
    for v in values if ok else ():
        good = isinstance(v, int | float | np.integer | np.floating) and not isinstance(v, bool)
        if not good or (kind is int and float(v) != int(v)) or not math.isfinite(float(v)):
            ok = False
            break
        out.append(kind(v))
    if not ok or any(v < lo for v in out):
        what = "integers" if kind is int else "numbers"
        raise ConfigError(
            f"{_setting_key(key)} must be a non-empty list of {what} >= {lo:g}, got {values!r}"
        )
    return out


@dataclass
class ContentionDistribution:
    """A distribution of ``dlsched/Contention-v0`` episodes (``train.py``'s
    ``contention.distribution`` block; :class:`ContentionMixEnv` draws them): each episode
    seed draws its setting with ``default_rng([seed, role, episode seed])`` (``role`` 0 for
    training, 1 for validation; no global generator), so one seed is one setting, always.

    - With probability ``1 - trace_share``, the Ada-SRSF generator of the config's ``scale``
      and ``num_jobs`` (the episode seed is the generator's seed) on ``servers`` servers (one
      drawn) at a load drawn from ``loads``: the arrival window is the scale's (20 minutes at
      paper scale) x ``16 / servers / load``, so that load 1 is the paper's arrival rate per
      GPU at any size (16 servers, load 1: exactly :func:`~envs.sim.workload.paper_scale_workload`).
    - With probability ``trace_share``, a window of the public Philly corpus
      (:func:`~envs.gym.workloads.contention_window`, the library's windows): ``trace_jobs``
      consecutive jobs (one drawn) of a VC of ``trace_vcs`` (the training VCs, never a held-out
      one of :data:`~envs.gym.workloads.TEST_VCS`), starting in the role's days (training
      :data:`~envs.gym.workloads.TRAIN_DAYS`, validation
      :data:`~envs.gym.workloads.VALIDATION_DAYS`: never day 90 or later), durations capped at
      ``duration_cap_h``, arrivals scaled to a load drawn from ``trace_loads``, each job run as
      at most ``trace_max_iterations`` macro-iterations, on its *natural* cluster times a
      factor drawn from ``trace_sizes``: enough servers for the window's largest request (at
      least ``trace_min_servers``), at most ``trace_max_servers`` (a larger request clipped).

    The settings differ in cluster size, so only a network that acts on any cluster
    (``agent.contention.arch=set``) trains on them."""

    enabled: bool = False
    seed: int = 0
    servers: list[int] = field(default_factory=lambda: [8, 16, 32, 64])
    loads: list[float] = field(default_factory=lambda: [0.5, 1.0, 2.0])
    trace_share: float = 0.5
    trace_vcs: list[str] = field(default_factory=lambda: list(TRAIN_VCS))
    trace_jobs: list[int] = field(default_factory=lambda: [30, 60])
    trace_loads: list[float] = field(default_factory=lambda: [0.5, 1.0, 2.0])
    trace_sizes: list[int] = field(default_factory=lambda: [1, 2, 4])
    trace_min_servers: int = 4
    trace_max_servers: int = 64
    duration_cap_h: float = 24.0
    trace_max_iterations: int = 200

    def check(self, gpus_per_server: int = 4) -> None:
        """One :class:`ConfigError` per bad key (naming it and what it takes)."""
        check_seed(self.seed, _setting_key("seed"), SEED_LIMIT)
        share = self.trace_share
        if isinstance(share, bool) or not isinstance(share, int | float) or not 0 <= share <= 1:
            raise ConfigError(f"{_setting_key('trace_share')} must be in [0, 1], got {share!r}")
        _numbers(self.loads, "loads", float, 1e-9)
        _numbers(self.trace_loads, "trace_loads", float, 1e-9)
        _numbers(self.trace_jobs, "trace_jobs", int, 2)
        _numbers(self.trace_sizes, "trace_sizes", int, 1)
        for key in ("trace_min_servers", "trace_max_servers", "trace_max_iterations"):
            _numbers([getattr(self, key)], key, int, 1)
        if self.trace_min_servers > self.trace_max_servers:
            raise ConfigError(
                f"{_setting_key('trace_min_servers')} ({self.trace_min_servers}) must be <= "
                f"{_setting_key('trace_max_servers')} ({self.trace_max_servers})"
            )
        _numbers([self.duration_cap_h], "duration_cap_h", float, 1e-9)
        # the generator's largest job (32 GPUs) must fit every cluster size
        need = max(g for g, _ in _GENERATOR_GPUS) / gpus_per_server
        servers = _numbers(self.servers, "servers", int, 1)
        if share < 1 and min(servers) < need:
            raise ConfigError(
                f"{_setting_key('servers')} {servers}: the generator's largest job needs "
                f"{math.ceil(need)} servers of {gpus_per_server} GPUs"
            )
        vcs = self.trace_vcs
        if isinstance(vcs, str) or not vcs or not all(isinstance(v, str) for v in vcs):
            raise ConfigError(
                f"{_setting_key('trace_vcs')} must be a list of VC names, got {vcs!r} (quote "
                "names that read as numbers)"
            )
        held = sorted(set(vcs) - set(TRAIN_VCS))
        if held:
            raise ConfigError(
                f"{_setting_key('trace_vcs')}: {held} are not training VCs (held out for "
                f"testing: {list(TEST_VCS)}); choose among {list(TRAIN_VCS)} (quote a name "
                "that reads as a number: '6214e9')"
            )
        if share > 0:  # each VC must give windows of the largest size in the shorter split
            for _, days in ROLES.values():
                usable_vcs(self.windows(days, max(self.trace_jobs), 1.0), max(self.trace_jobs))

    def windows(self, days: tuple[float, float], jobs: int, load: float) -> TraceWindows:
        """The library's trace windows of ``days`` (:class:`~envs.gym.workloads.TraceWindows`)."""
        cap = float(self.duration_cap_h)
        return TraceWindows(vcs=list(self.trace_vcs), days=list(days), jobs=int(jobs),
                            duration_cap_h=cap, load=float(load))  # fmt: skip

    def natural_servers(self, gpus: int, factor: int, gpus_per_server: int) -> int:
        """The servers of a window whose largest request is ``gpus`` GPUs: enough for it (at
        least ``trace_min_servers``) times ``factor``, at most ``trace_max_servers``."""
        need = max(math.ceil(gpus / gpus_per_server), int(self.trace_min_servers))
        return min(need * int(factor), int(self.trace_max_servers))


@dataclass(frozen=True)
class DrawnSetting:
    """One episode's setting of a :class:`ContentionDistribution`: its cluster, workload and
    the record of how it was drawn (``kind``: ``generator`` or ``trace``, ``num_servers``,
    ``load``, ``label``, and a trace window's cuts)."""

    cluster: ClusterSpec
    workload: Workload
    record: dict[str, Any]


def draw_setting(
    dist: ContentionDistribution, base: ContentionEnv, seed: int, role: str
) -> DrawnSetting:
    """The setting of episode ``seed`` for ``role`` (``train`` or ``validation``) of ``dist``
    on clusters shaped as ``base``'s (GPUs per server, memory) with ``base``'s ``scale`` and
    ``num_jobs`` (see :class:`ContentionDistribution`)."""
    index, days = ROLES[role]
    rng = np.random.default_rng([int(dist.seed), index, int(seed)])
    per, mem = base.cluster.gpus_per_server, base.cluster.gpu_memory_mb

    def cluster(servers: int) -> ClusterSpec:
        return ClusterSpec(num_servers=servers, gpus_per_server=per, gpu_memory_mb=mem)

    if float(rng.random()) < float(dist.trace_share):
        jobs = int(dist.trace_jobs[int(rng.integers(len(dist.trace_jobs)))])
        load = float(dist.trace_loads[int(rng.integers(len(dist.trace_loads)))])
        factor = int(dist.trace_sizes[int(rng.integers(len(dist.trace_sizes)))])
        workload, window = contention_window(
            dist.windows(days, jobs, load),
            lambda gpus: cluster(dist.natural_servers(gpus, factor, per)),
            rng,
            max_iterations=int(dist.trace_max_iterations),
        )
        servers = int(window["num_servers"])
        label = f"{window['label']} load={load:g} x{factor} servers={servers}"
        record = {"kind": "trace", "num_servers": servers, "load": load, "size": factor,
                  "label": label, "window": window}  # fmt: skip
        return DrawnSetting(cluster(servers), workload, record)
    servers = int(dist.servers[int(rng.integers(len(dist.servers)))])
    load = float(dist.loads[int(rng.integers(len(dist.loads)))])
    iterations_scale, scale_window_ms = ADA_SRSF_SCALES[base.scale]
    window_ms = scale_window_ms * _PAPER_SERVERS / servers / load
    workload = generate_ada_srsf(int(seed), num_jobs=base.num_jobs,
                                 iterations_scale=iterations_scale,
                                 arrival_window_ms=window_ms, models=REFERENCE_MODELS)  # fmt: skip
    label = f"generator:{base.scale} seed={seed} load={load:g} servers={servers}"
    record = {"kind": "generator", "num_servers": servers, "load": load, "label": label,
              "arrival_window_ms": window_ms}  # fmt: skip
    return DrawnSetting(cluster(servers), workload, record)


class ContentionMixEnv(ContentionEnv):
    """:class:`ContentionEnv` over a distribution of settings (:class:`ContentionDistribution`):
    each reset draws the episode's setting from its workload seed (:func:`draw_setting`, for
    ``role``) and runs that workload on that cluster; everything else is the env's own, the
    same dynamics, window ``J``, placements and communication scheduler.  The observation's
    length follows the drawn cluster (``obs_size`` and ``observation_space`` are the current
    episode's), so a network that reads any cluster acts in it
    (:class:`~agents.set_contention.SetContentionNet`).  Between episodes (before the first
    reset and once one has ended) ``cluster`` is the one given at construction, the layout
    saved with a policy trained here.  ``info["setting"]`` at each reset is the draw's
    record."""

    def __init__(
        self, distribution: ContentionDistribution, role: str = "train", **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        if role not in ROLES:
            raise ConfigError(f"distribution role must be one of {list(ROLES)}, got {role!r}")
        if self.trace is not None or self.workloads is not None:
            raise ConfigError("a distribution draws its own workloads: give no trace or workloads")
        distribution.check(self.cluster.gpus_per_server)
        self.distribution = copy.deepcopy(distribution)
        self.role = role
        self._drawn: dict[int, DrawnSetting] = {}
        self.setting: DrawnSetting | None = None
        self.base_cluster = self.cluster

    def drawn(self, seed: int) -> DrawnSetting:
        """The setting of episode seed ``seed`` (cached: a group of rollouts reuses it)."""
        if seed not in self._drawn:
            if len(self._drawn) >= 256:
                self._drawn.clear()
            self._drawn[seed] = draw_setting(self.distribution, self, seed, self.role)
        return self._drawn[seed]

    def _workload(self, seed: int) -> Workload:
        drawn = self.setting = self.drawn(seed)
        self._use(drawn.cluster)
        return drawn.workload

    def step(
        self, action: Any
    ) -> tuple[npt.NDArray[np.float32], float, bool, bool, dict[str, Any]]:
        out = super().step(action)
        if self.done:  # the episode's cluster served its last observation
            self._use(self.base_cluster)
        return out

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[npt.NDArray[np.float32], dict[str, Any]]:
        obs, info = super().reset(seed=seed, options=options)
        assert self.setting is not None
        info["setting"] = copy.deepcopy(self.setting.record)
        return obs, info


@dataclass
class ContentionConfig:
    """``dlsched/Contention-v0``'s settings as a typed config (``train.py``'s ``contention``
    block, for ``+agent=contention_pg``): :class:`ContentionEnv`'s keyword arguments but the
    workloads, which the env draws per episode seed (generator ``scale`` and ``num_jobs``).
    The defaults are the released ``contention_exclusive_pg``'s env: paper scale, 16 x 4
    GPUs, SRSF(1) communication (so the ``srsf`` rule is exactly LWF-1 + SRSF(1)), LWF-1 / LS /
    FF placements, a window of 20 jobs, fast fidelity, the ``jct`` reward (``reward``: a
    ``"contention"`` reward of :mod:`envs.gym.rewards`).  ``distribution`` (off by default):
    train over a distribution of generator settings and Philly windows of the training VCs at
    several cluster sizes instead (:class:`ContentionDistribution`)."""

    scale: str = "paper"
    num_jobs: int = 160
    num_servers: int = 16
    gpus_per_server: int = 4
    gpu_memory_mb: float = 32768.0
    comm: str = "srsf1"
    placements: list[str] = field(default_factory=lambda: ["lwf1", "ls", "ff"])
    J: int = 20
    fidelity: str = "fast"
    max_invalid: int = 1000
    reward: str = "jct"
    distribution: ContentionDistribution = field(default_factory=ContentionDistribution)

    def _kwargs(self) -> dict[str, Any]:
        kwargs = asdict(self)
        del kwargs["distribution"]
        kwargs["placements"] = tuple(self.placements)
        return kwargs

    def make(self) -> ContentionEnv:
        """A fresh env of these settings (checked by the env: one clear error each); the
        ``distribution`` block is :meth:`make_distribution`'s."""
        return ContentionEnv(**self._kwargs())

    def make_distribution(self, role: str = "train") -> ContentionMixEnv:
        """A fresh env of these settings over ``distribution``'s episodes for ``role``
        (``train`` or ``validation``): :class:`ContentionMixEnv`."""
        return ContentionMixEnv(self.distribution, role, **self._kwargs())


#: ``dlsched/Contention-v0``'s rules by name: ``(env) -> action``, each registered once by
#: :func:`contention_teacher`.  ``evaluate.py`` runs them as ``contention:<name>``, and any of
#: them is a behaviour-cloning teacher (:func:`agents.episode_pg.clone`).
CONTENTION_TEACHERS: dict[str, Callable[[ContentionEnv], int]] = {}
#: the placement candidates each rule places with (an env without them cannot run it)
RULE_PLACEMENTS: dict[str, tuple[str, ...]] = {}


_Rule = TypeVar("_Rule", bound=Callable[..., int])


def contention_teacher(name: str, needs: Sequence[str] = ("lwf1",)) -> Callable[[_Rule], _Rule]:
    """Register a Contention-v0 rule under ``name`` (letters, digits and ``_``; once) that
    places with the candidates ``needs``."""
    if not name.replace("_", "").isalnum() or not name[:1].isalpha():
        raise ConfigError(f"contention teacher name {name!r}: letters, digits and '_' only")

    def register(rule: _Rule) -> _Rule:
        if name in CONTENTION_TEACHERS:
            raise ConfigError(f"contention teacher {name!r} is registered twice")
        CONTENTION_TEACHERS[name] = rule
        RULE_PLACEMENTS[name] = tuple(needs)
        return rule

    return register


def rule_missing(name: str, placements: Sequence[str]) -> list[str]:
    """The placement candidates rule ``name`` needs that ``placements`` lacks (``[]``: it
    acts in an env of those candidates)."""
    teacher(name)
    return [p for p in RULE_PLACEMENTS[name] if p not in placements]


def teacher(name: str) -> Callable[[ContentionEnv], int]:
    """The registered rule ``name``; an unknown name is one :class:`ConfigError` listing the
    registered ones."""
    rule = CONTENTION_TEACHERS.get(name)
    if rule is None:
        known = ", ".join(sorted(CONTENTION_TEACHERS))
        raise ConfigError(f"unknown Contention-v0 teacher {name!r}; known: {known}")
    return rule


def _candidate(env: ContentionEnv, placement: str) -> int:
    """The index of ``placement`` among ``env``'s candidates; one :class:`ConfigError` when
    the env has no such candidate (the rules place with it)."""
    if placement not in env.placements:
        raise ConfigError(
            f"the rule places with {placement!r}, which is not among this env's placement "
            f"candidates {list(env.placements)}; add it to placements"
        )
    return env.placements.index(placement)


@contention_teacher("srsf")
def srsf_teacher(env: ContentionEnv, placement: str = "lwf1") -> int:
    """The SRSF rule through the env: start the window's first job that fits (the window is
    in remaining-service order) with ``placement``; wait when none fits."""
    mask = env.action_masks()
    c = _candidate(env, placement)
    for j in range(len(env.window)):
        if mask[j * env.C + c]:
            return j * env.C + c
    return env.wait_action


@contention_teacher("exclusive")
def srsf_exclusive_teacher(env: ContentionEnv, placement: str = "lwf1") -> int:
    """SRSF without GPU time-sharing at admission: :func:`srsf_teacher`'s choice, except that
    it waits (where waiting is valid) rather than start a job that would put more workers on
    the cluster than it has GPUs.  Not in the Ada-SRSF paper: a baseline found while looking
    for the headroom a learned policy could take (EXPERIMENTS.md)."""
    a = srsf_teacher(env, placement)
    if a == env.wait_action or not env.can_wait():  # the wait action's mask, not the whole mask
        return a
    if env.window[a // env.C].spec.num_gpus > env.idle_gpus():
        return env.wait_action
    return a


@contention_teacher("exclusive_backfill")
def exclusive_backfill_teacher(env: ContentionEnv, placement: str = "lwf1") -> int:
    """The exclusive rule with backfilling: start the first window job (remaining-service
    order) that fits and would not put more workers on the cluster than it has GPUs, even
    when an earlier one would (where :func:`srsf_exclusive_teacher` waits for the earlier
    one); wait when none would; where waiting is not valid, :func:`srsf_teacher`'s choice.
    Not in the Ada-SRSF paper: the strongest rule found for issue 36 (docs/experiments/
    contention-env.md, "Backfilling")."""
    mask = env.action_masks()
    if not mask[env.wait_action]:
        return srsf_teacher(env, placement)
    idle = env.idle_gpus()
    c = _candidate(env, placement)
    for j, job in enumerate(env.window):
        if mask[j * env.C + c] and job.spec.num_gpus <= idle:
            return j * env.C + c
    return env.wait_action


@contention_teacher("exclusive_easy")
def exclusive_easy_teacher(env: ContentionEnv, placement: str = "lwf1") -> int:
    """The exclusive rule with EASY backfilling (Lifka, 1995): the job SRSF would start (the
    first window job that fits) starts when it would not put more workers on the cluster than
    it has GPUs; else it holds a reservation at the *shadow time*, when enough running jobs
    will have finished for it, and a later window job starts only if it runs on idle GPUs and
    ends by then or leaves the reservation's GPUs free (it takes no more than the GPUs idle
    at the shadow time beyond the first job's).  A job's run time is estimated as its
    remaining compute per worker (the SRSF key's own figure; communication not counted).
    Where waiting is not valid: :func:`srsf_teacher`'s choice."""
    mask = env.action_masks()
    if not mask[env.wait_action]:
        return srsf_teacher(env, placement)
    sim = env.sim
    assert sim is not None
    c = _candidate(env, placement)
    fits = [j for j in range(len(env.window)) if mask[j * env.C + c]]
    if not fits:
        return env.wait_action
    idle = env.idle_gpus()
    need = env.window[fits[0]].spec.num_gpus
    if need <= idle:
        return fits[0] * env.C + c
    shadow, extra, free = math.inf, 0, idle
    for end, gpus in sorted((sim.now + j.remaining_compute_ms / len(j.gpus), len(j.gpus))
                            for j in sim.running):  # fmt: skip
        free += gpus
        if free >= need:
            shadow, extra = end, free - need
            break
    for j in fits[1:]:
        job = env.window[j]
        gpus = job.spec.num_gpus
        if gpus <= idle and (sim.now + job.remaining_compute_ms / gpus <= shadow or gpus <= extra):
            return j * env.C + c
    return env.wait_action


@contention_teacher("exclusive_overlap", needs=("lwf1", "ovl"))
def exclusive_overlap_teacher(env: ContentionEnv, placement: str = "lwf1") -> int:
    """The exclusive rule with backfilling, and compute overlapped with communication: what
    :func:`exclusive_backfill_teacher` does where it starts a job; where it waits, the first
    window job (remaining-service order) that fits one server and that the ``ovl`` candidate
    (:class:`~envs.sim.policies.placement.Overlap`) puts on one server's GPUs that are idle or
    held only by jobs that span servers starts there.  Those jobs' GPUs idle while they
    all-reduce; the new job computes in those gaps and never communicates itself.  The env
    needs the ``ovl`` candidate (a clear error names it otherwise)."""
    c = _candidate(env, "ovl")  # an env without it: one clear error at once
    a = exclusive_backfill_teacher(env, placement)
    mask = env.action_masks()
    if a != env.wait_action or not mask[env.wait_action]:
        return a
    sim = env.sim
    assert sim is not None
    placer = env.placers[c]
    assert isinstance(placer, Overlap)
    per = env.cluster.gpus_per_server
    for j, job in enumerate(env.window):
        if job.spec.num_gpus > per or not mask[j * env.C + c]:
            continue
        got = placer.choose(job.spec, sim)
        if got is not None and got[1] <= COMM_ONLY and len({g // per for g in got[0]}) == 1:
            return j * env.C + c
    return env.wait_action
