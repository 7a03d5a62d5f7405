"""``contention:<policy>``: a policy acting in ``dlsched/Contention-v0``; ``bound:solo`` and
``bound:capacity``.

Why: the learned admission and placement policies of Contention-v0 meet the contention
engine's stacks in one ``evaluate.py`` command, on the same prepared workloads, cluster and
fidelity as the ``stack:`` runs, with the same per-job records (so every table, paired
difference and plot covers them), next to the bound no schedule can beat.

- ``contention:<rule>``: a rule registered in
  :data:`~envs.gym.contention_env.CONTENTION_TEACHERS` (``srsf``:
  :func:`~envs.gym.contention_env.srsf_teacher`, LWF-1 + SRSF(1) exactly; ``exclusive``:
  :func:`~envs.gym.contention_env.srsf_exclusive_teacher`; a user's own by
  :func:`~envs.gym.contention_env.contention_teacher`) in the env of
  ``experiments/contention_h2h.py`` (:data:`TEACHER_ENV`);
- ``contention:<file.npz | directory with policy.npz>``: an EpisodePG policy saved by
  :func:`agents.episode_pg.save_episode_pg`, acting by masked argmax in the env layout it
  records (window, placements, comm; its cluster shape must be the run's, but for the set
  network and the rule selector, which act on any cluster);
- ``bound:solo``: each job alone on the empty cluster from its arrival, at its best placement
  candidate (:data:`SOLO_PLACEMENTS`): JCTs no schedule can beat.
- ``bound:capacity``: ``bound:solo`` plus the cluster's GPU capacity
  (:func:`capacity_jcts_ms`): an average JCT no schedule can beat; its per-job figures are the
  programme's, which only on average bound a schedule's.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from hydra.utils import to_absolute_path

from envs.sim import ClusterSpec, ConfigError, NetworkSpec, SimConfig, simulate
from envs.sim.capacity_bound import capacity_bound
from envs.sim.errors import SimulationError
from envs.sim.spec import Workload
from evaluation.config import EvaluateConfig
from evaluation.runs import RunOutput, RunTask, engine_output
from evaluation.workloads import Prepared, sim_config

if TYPE_CHECKING:
    from agents.episode_pg import MaskedMLP
    from agents.rule_selector import RuleSelector
    from agents.set_contention import SetContentionNet
    from envs.gym.contention_env import ContentionEnv
    from envs.gym.episode import Actor

__all__ = [
    "SOLO_PLACEMENTS",
    "TEACHER_ENV",
    "BoundKind",
    "ContentionKind",
    "capacity_jcts_ms",
    "solo_jcts_ms",
]

#: The env the teachers act in: ``experiments/contention_h2h.py``'s (and the released
#: policy's) comm, placement candidates and window.
TEACHER_ENV: dict[str, Any] = {
    "comm": "srsf1",
    "placements": ["lwf1", "ls", "ff", "ovl"],  # ovl: for exclusive_overlap (others: lwf1)
    "J": 20,
}
#: The placements ``bound:solo`` tries for each job alone (it keeps the fastest).
SOLO_PLACEMENTS = ("lwf1", "ff", "ls")
_POLICY_FILE = "policy.npz"


def _is_teacher(arg: str) -> bool:
    """Whether ``contention:<arg>`` names a registered rule (else a policy file)."""
    from envs.gym.contention_env import CONTENTION_TEACHERS

    return arg in CONTENTION_TEACHERS


def _policy_file(arg: str) -> Path:
    """The policy file of ``contention:<arg>`` (absolute; a directory means its
    ``policy.npz``)."""
    p = Path(to_absolute_path(arg))
    return p / _POLICY_FILE if p.is_dir() else p


@functools.lru_cache(maxsize=4)
def _load(path: str) -> tuple[MaskedMLP | SetContentionNet | RuleSelector, dict[str, Any]]:
    from agents.episode_pg import MaskedMLP, load_episode_pg
    from agents.rule_selector import RuleSelector
    from agents.set_contention import SetContentionNet

    net, meta = load_episode_pg(path)
    if not isinstance(net, MaskedMLP | SetContentionNet | RuleSelector):
        raise ConfigError(
            f"{path}: a {net.arch!r} network acts on plan observations "
            "(dlsched/ClusterPlan-v0), not in dlsched/Contention-v0: evaluate it as policy:<path>"
        )
    return net, meta


def _layout(arg: str) -> dict[str, Any]:
    """The env layout (``J``, ``placements``, ``comm``) of a teacher or a saved policy."""
    if _is_teacher(arg):
        return dict(TEACHER_ENV)
    _, meta = _load(str(_policy_file(arg)))
    env = meta.get("env")
    if not isinstance(env, dict):
        raise ConfigError(f"{_policy_file(arg)}: its metadata has no env layout ('env')")
    if "id" in env:
        raise ConfigError(
            f"{_policy_file(arg)}: a {env['id']} policy, not a Contention-v0 one: evaluate it "
            "as policy:<path> (workload=env)"
        )
    return env


def _make_env(
    spec: str,
    layout: dict[str, Any],
    cluster: ClusterSpec,
    fidelity: str,
    workloads: Sequence[Workload] | None = None,
) -> ContentionEnv:
    from envs.gym.contention_env import ContentionEnv

    try:
        return ContentionEnv(
            workloads=workloads,
            num_servers=cluster.num_servers,
            gpus_per_server=cluster.gpus_per_server,
            gpu_memory_mb=cluster.gpu_memory_mb,
            comm=str(layout["comm"]),
            placements=tuple(layout["placements"]),
            J=int(layout["J"]),
            fidelity=fidelity,
        )
    except KeyError as exc:
        raise ConfigError(f"{spec}: the policy's env layout lacks {exc}") from None
    except ConfigError as exc:
        raise ConfigError(f"{spec}: Contention-v0 cannot take this run: {exc}") from None


class ContentionKind:
    """A teacher or a saved EpisodePG policy acting in Contention-v0 (module docstring)."""

    name = "contention"
    needs = "workload"

    def check(self, arg: str, cfg: EvaluateConfig) -> None:
        spec = f"{self.name}:{arg}"
        if not _is_teacher(arg) and not _policy_file(arg).is_file():
            from envs.gym.contention_env import CONTENTION_TEACHERS

            raise ConfigError(
                f"{spec}: neither a teacher ({', '.join(CONTENTION_TEACHERS)}) nor a saved "
                f"EpisodePG policy: {str(_policy_file(arg))!r} not found"
            )
        layout = _layout(arg)
        if cfg.mode != "correct" or cfg.check_invariants:
            raise ConfigError(
                f"{spec}: Contention-v0 simulates the correct model only (mode=correct, "
                f"check_invariants=false), got mode={cfg.mode!r}, "
                f"check_invariants={cfg.check_invariants}"
            )
        net = cfg.cluster.network
        if (net.a_ms, net.b_ms_per_mb, net.eta_ms_per_mb) != (
            NetworkSpec().a_ms,
            NetworkSpec().b_ms_per_mb,
            NetworkSpec().eta_ms_per_mb,
        ):
            raise ConfigError(
                f"{spec}: Contention-v0 has the default network ({NetworkSpec()}); "
                f"cluster.network is {net}"
            )
        sc = sim_config(cfg, cfg.seeds[0] if cfg.seeds else 0)
        c = ClusterSpec(
            cfg.cluster.num_servers, cfg.cluster.gpus_per_server, cfg.cluster.gpu_memory_mb
        )
        env = _make_env(spec, layout, c, sc.fidelity.level.value)
        if not _is_teacher(arg):
            self._check_sizes(spec, arg, env)

    @staticmethod
    def _check_sizes(spec: str, arg: str, env: ContentionEnv) -> None:
        from agents.set_contention import SetContentionNet

        net, meta = _load(str(_policy_file(arg)))
        if getattr(net, "acts_on_env", False):  # a rule selector: the rules act anywhere
            return
        if isinstance(net, SetContentionNet):  # any cluster and window
            try:
                net.layout(env.obs_size, env.wait_action + 1)
            except ConfigError as exc:
                raise ConfigError(f"{spec}: {exc}") from None
            return
        want = (int(meta["obs_size"]), int(meta["n_actions"]))
        got = (env.obs_size, env.wait_action + 1)
        if want != got:
            lay = meta["env"]
            raise ConfigError(
                f"{spec}: the policy takes {want[0]} observations and {want[1]} actions (its "
                f"env: J={lay.get('J')}, placements {lay.get('placements')}, "
                f"{lay.get('num_servers')} servers); this run's env gives {got[0]} and {got[1]} "
                f"(J={env.J}, {env.cluster.num_servers} servers)"
            )

    def resolve(self, arg: str) -> str:
        """A teacher's name, or the policy file's absolute path."""
        return arg if _is_teacher(arg) else str(_policy_file(arg))

    def check_workloads(self, arg: str, prepared: Sequence[Prepared], cluster: ClusterSpec) -> None:
        """Every seed's workload must be one the env can take (models it observes)."""
        workloads = [p.workload for p in prepared if p.workload is not None]
        if workloads:
            _make_env(f"{self.name}:{arg}", _layout(arg), cluster, "fast", workloads)

    def _actor(self, arg: str) -> tuple[Actor, dict[str, Any]]:
        """The rule (:class:`~envs.gym.actors.RuleActor`) or the saved network's masked
        argmax (:class:`~agents.actors.NetActor`) as an actor, and its record."""
        from agents.actors import NetActor
        from envs.gym.actors import RuleActor
        from envs.gym.contention_env import CONTENTION_TEACHERS

        rule = CONTENTION_TEACHERS.get(arg)
        if rule is not None:
            return RuleActor(rule), {"teacher": getattr(rule, "__name__", arg)}
        net, meta = _load(arg)
        return NetActor(net), {"path": arg, "act": "argmax", "meta": meta}

    def run(self, task: RunTask) -> RunOutput:
        p = task.prepared
        assert p.workload is not None
        layout = _layout(task.arg)
        fidelity = task.sim_config.fidelity.level.value
        t0, c0 = time.perf_counter(), time.process_time()  # the env (its simulator) and episode
        env = _make_env(task.scheduler, layout, task.cluster, fidelity, [p.workload])
        act, policy = self._actor(task.arg)
        from envs.gym.episode import run_episode

        with _one_torch_thread(not _is_teacher(task.arg)):
            # invalid actions: the env's no-ops, until max_invalid in a row truncate
            run = run_episode(env, act, p.seed, options={"workload_seed": p.seed}, strict=False)
        if run.truncated:
            raise SimulationError(
                f"{task.scheduler} seed {p.seed}: the policy got stuck ({run.steps} steps, "
                f"{env.max_invalid} invalid actions in a row)"
            )
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        info = run.info
        res = info["result"]
        episode = {
            "return": run.ret,
            "avg_jct_s": info["avg_jct_s"],
            "decisions": info["decisions"],
            "steps": run.steps,
            "stops": info["stops"],
        }
        env_record = {
            "id": "dlsched/Contention-v0",
            **{k: layout[k] for k in ("J", "placements", "comm")},
            "fidelity": fidelity,
        }
        out_info = {
            "sim_config": res.config,
            "events": res.events,
            "wall_s": wall,
            "cpu_s": cpu,
            "env": env_record,
            "policy": policy,
            "episode": episode,
        }
        return engine_output(task, res, out_info)


@contextlib.contextmanager
def _one_torch_thread(on: bool) -> Iterator[None]:
    """One torch thread while a network acts (one small MLP per decision: more threads only
    add overhead), restored afterwards; nothing (no torch import) for a rule."""
    if not on:
        yield
        return
    import torch as th

    threads = th.get_num_threads()
    th.set_num_threads(1)
    try:
        yield
    finally:
        th.set_num_threads(threads)


def solo_jcts_ms(cluster: ClusterSpec, w: Workload, cfg: SimConfig) -> np.ndarray:
    """Each job of ``w`` alone on the empty cluster, at the fastest of
    :data:`SOLO_PLACEMENTS`: its JCT (ms), which no schedule can beat."""
    cfg = cfg.override(progress_s=None, max_wall_s=None)
    out = []
    for job in w.jobs:
        alone = Workload((replace(job, submit_ms=0.0),), name="solo")
        out.append(
            min(
                simulate(cluster, alone, f"{p}_srsf1", cfg).records[0].jct_ms
                for p in SOLO_PLACEMENTS
            )
        )
    return np.array(out)


def capacity_jcts_ms(cluster: ClusterSpec, w: Workload, cfg: SimConfig) -> np.ndarray:
    """JCTs (ms) whose *mean* no schedule of ``w`` on ``cluster`` can beat: the mean-busy-time
    programme of :mod:`envs.sim.capacity_bound` over the cluster's GPUs.  A job's compute work
    is its workers x iterations x (forward + backward) GPU-ms; it progresses at most at one
    GPU-ms per ms per worker (a GPU runs one task at a time, time-shared or not; communication
    only adds time) and holds a GPU for each GPU-ms per ms, from its arrival, finishing no
    earlier than alone at its best placement (:func:`solo_jcts_ms`)."""
    solo = solo_jcts_ms(cluster, w, cfg)
    release = np.array([j.submit_ms for j in w.jobs])
    out = capacity_bound(
        release=release,
        work=[j.total_compute_ms for j in w.jobs],
        rate_cap=[float(j.num_gpus) for j in w.jobs],
        use=np.ones((len(w.jobs), 1)),
        capacity=[float(cluster.num_gpus)],
        floor=solo,
    )
    return np.asarray(out.completion - release)


class BoundKind:
    """``bound:solo`` and ``bound:capacity`` (module docstring).  Their GPU utilisation is not
    a schedule's (the jobs overlap beyond the cluster): left out (NaN)."""

    name = "bound"
    needs = "workload"
    bounds = ("solo", "capacity")

    def check(self, arg: str, cfg: EvaluateConfig) -> None:
        if arg not in self.bounds:
            raise ConfigError(f"unknown bound {arg!r}; known: {list(self.bounds)}")

    def run(self, task: RunTask) -> RunOutput:
        p = task.prepared
        w = p.workload
        assert w is not None
        t0, c0 = time.perf_counter(), time.process_time()
        bound = task.scheduler.split(":", 1)[1]
        jcts = capacity_jcts_ms if bound == "capacity" else solo_jcts_ms
        jct_ms = jcts(task.cluster, w, task.sim_config)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        k = p.ms_per_s
        submit = np.array([j.submit_ms for j in w.jobs]) / k
        finish = submit + jct_ms / k
        makespan = float(finish.max()) if finish.size else 0.0
        return RunOutput(
            scheduler=task.scheduler,
            seed=p.seed,
            job_id=np.array([j.job_id for j in w.jobs]),
            name=[j.name for j in w.jobs],
            num_gpus=np.array([j.num_gpus for j in w.jobs]),
            submit_s=submit,
            start_s=submit.copy(),
            finish_s=finish,
            ideal_s=np.array([j.iterations * j.model.compute_ms for j in w.jobs]) / k,
            makespan_s=makespan,
            gpu_util=float("nan"),
            util_t=np.array([0.0, max(makespan, 1.0)]),
            util=np.array([np.nan]),
            info={
                "bound": (
                    "the mean JCT of the GPU-capacity programme (per-job figures are not "
                    "bounds), each job no faster than alone, best of "
                    if bound == "capacity"
                    else "each job alone, best of "
                )
                + ", ".join(SOLO_PLACEMENTS),
                "wall_s": wall,
                "cpu_s": cpu,
            },
        )
