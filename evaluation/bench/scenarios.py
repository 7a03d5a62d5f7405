"""The benchmark's frozen scenario suites (``bench/v1``).

A :class:`Scenario` is a name, a world, the ``evaluate.py`` overrides that define its workload and
cluster, its seeds and a one-line note on where it comes from.  A suite is a tuple of them; its
version (:func:`suite_version`) is a digest of its canonical JSON, so any change to the list (a
scenario added, removed, renamed, or one override or seed changed) gives a new version, and
results cached under the old version are never mixed with the new.

Worlds:

- ``elastic``: DL²'s elastic world through the DL² Gymnasium env (``workload=env``): every
  ``elastic:<allocator>`` heuristic and every released ``policy:`` acts on the same env
  (window, placement, backlog pinned by the scenario);
- ``contention``: the fixed-demand contention engine on job-level workloads: the named stacks,
  ``contention:srsf | exclusive`` and released ``contention:`` policies;
- ``grouper``: Grouper's flow-level cojob simulator (``workload=grouper``): its network
  policies as ``grouper:<policy>``; the metric is the average stage completion time.

Held-out data only: the Philly windows come from :data:`envs.gym.workloads.TEST_VCS` (never
trained, validated or tuned on), starting on day 90 of the corpus (the test days); the
generator seeds are the policies' held-out test seeds (DL² 300-302, Ada-SRSF paper scale
1000-1001).  ``docs/bench.md`` says what each source is and what is synthesised.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["SUITES", "V1", "WORLDS", "Scenario", "canonical_json", "suite_version"]

WORLDS = ("elastic", "contention", "grouper")


@dataclass(frozen=True)
class Scenario:
    """One benchmark scenario: ``overrides`` are ``evaluate.py``'s ``key=value`` (without
    ``stacks``, ``seeds``, ``out_dir``, ``workers``, ``runner``: the benchmark sets those)."""

    name: str
    world: str
    overrides: tuple[str, ...]
    seeds: tuple[int, ...]
    source: str

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["overrides"] = list(self.overrides)
        d["seeds"] = list(self.seeds)
        return d


def canonical_json(suite: tuple[Scenario, ...]) -> str:
    """The suite as canonical JSON (sorted keys, no whitespace): what its version digests."""
    return json.dumps([s.as_dict() for s in suite], sort_keys=True, separators=(",", ":"))


def suite_version(suite: tuple[Scenario, ...]) -> str:
    """The first 12 hex digits of the SHA-256 of :func:`canonical_json`."""
    return hashlib.sha256(canonical_json(suite).encode()).hexdigest()[:12]


#: The public Philly corpus (gzip digest of all VCs) and the test window's start (day 90).
_CORPUS = "envs/sim/data/traces/philly_digest_public.csv.gz"
_TEST_DAY0_S = 90 * 86400
#: Jobs per Philly window and their duration cap (1 day) — small enough to run the board on a
#: laptop; the window is the first 30 jobs of the VC submitted from day 90 on.
_WINDOW_JOBS = 30
_CAP_S = 86400
#: Load factors (offered load = factor x the cluster's GPUs) and cluster scales.
_LOADS = (("0.5", 0.5), ("1", 1.0), ("2", 2.0))
_SCALES = (1, 4, 16)
#: Base clusters of the Philly windows: elastic = the DL² env's ``medium`` setting (12 nodes of
#: 8 GPU slots), contention = 4 servers x 4 GPUs (the Tiresias 60-job trace's 16 GPUs).
_ELASTIC_NODES = 12
_CONTENTION_SERVERS = 4
_TRACE_SEEDS = (0, 1, 2)
#: The DL² env converts a trace window deterministically (its seed does not change the jobs),
#: so an elastic Philly scenario has one seed: more would repeat the same run.
_ENV_TRACE_SEEDS = (0,)

_DL2_BASE_NODES = {"small": 48, "medium": 12, "large": 500}
#: load -> nodes factor: light = twice the nodes (half the load), heavy = half the nodes.
_DL2_LOADS = (("light", 2.0), ("normal", 1.0), ("heavy", 0.5))
_DL2_SEEDS = (300, 301, 302)


def _dl2() -> list[Scenario]:
    out = []
    for setting, backlog in (("small", "none"), ("medium", "none"), ("large", "none"),
                             ("small", "bundle")):  # fmt: skip
        for load, factor in _DL2_LOADS:
            nodes = max(1, int(_DL2_BASE_NODES[setting] * factor))
            tag = f"{setting}-bundle" if backlog == "bundle" else setting
            out.append(
                Scenario(
                    name=f"dl2-{tag}-{load}",
                    world="elastic",
                    overrides=(
                        "workload=env",
                        f"workload.env.setting={setting}",
                        f"workload.env.backlog={backlog}",
                        f"workload.env.overrides.num_nodes={nodes}",
                    ),
                    seeds=_DL2_SEEDS,
                    source=(
                        f"DL²'s generator, its {setting} setting"
                        + (" with DL²'s bundle backlog" if backlog == "bundle" else "")
                        + f", {nodes} nodes ({load} load: x{1 / factor:g} of the setting's)"
                    ),
                )
            )
    return out


def _philly_window(vc: str, load: float) -> tuple[str, ...]:
    return (
        f"workload.trace.vcs=[{vc}]",
        f"workload.trace.start_s={_TEST_DAY0_S}",
        f"workload.trace.max_jobs={_WINDOW_JOBS}",
        f"workload.trace.duration_cap_s={_CAP_S}",
        f"workload.trace.target_load={load}",
        "workload.trace.fit=clip",
    )


def _philly(vc: str, load_tag: str, load: float, scale: int, world: str) -> Scenario:
    window = _philly_window(vc, load)
    if world == "elastic":
        world_keys: tuple[str, ...] = (
            "workload=env",
            "workload.env.setting=medium",
            "workload.env.backlog=none",
            f"workload.env.trace={_CORPUS}",
            f"workload.env.overrides.num_nodes={_ELASTIC_NODES * scale}",
        )
        cluster = f"DL² medium env, {_ELASTIC_NODES * scale} nodes"
    else:
        world_keys = (
            "workload.kind=trace",
            f"workload.path={_CORPUS}",
            f"cluster.num_servers={_CONTENTION_SERVERS * scale}",
            "workload.trace.max_iterations=200",
        )
        cluster = f"{_CONTENTION_SERVERS * scale}x4 GPUs"
    return Scenario(
        name=f"philly-{vc}-load{load_tag}-x{scale}-{world}",
        world=world,
        overrides=world_keys + window,
        seeds=_ENV_TRACE_SEEDS if world == "elastic" else _TRACE_SEEDS,
        source=(
            f"public Philly corpus, held-out VC {vc}: first {_WINDOW_JOBS} jobs from day 90, "
            f"durations capped at 1 day, arrivals scaled to load {load:g}; {cluster}; "
            + ("models drawn once (one seed)" if world == "elastic" else "models drawn per seed")
        ),
    )


def _philly_all() -> list[Scenario]:
    out = []
    for world in ("elastic", "contention"):
        for load_tag, load in _LOADS:  # the full grid on the largest held-out VC
            for scale in _SCALES:
                out.append(_philly("ee9e8c", load_tag, load, scale, world))
        for vc in ("6c71a0", "2869ce", "e13805"):  # the other held-out VCs at x1, load 1
            out.append(_philly(vc, "1", 1.0, 1, world))
    return out


def _others() -> list[Scenario]:
    return [
        Scenario(
            name="ada-paper-generated",
            world="contention",
            overrides=("workload=generated_paper_scale", "cluster=ada_srsf"),
            seeds=(1000, 1001),
            source=(
                "Ada-SRSF's workload distribution at the paper's scale (160 jobs, 1000-6000 "
                "iterations, arrivals over 20 min; synthesised), held-out seeds, 16x4 GPUs"
            ),
        ),
        Scenario(
            name="ada160-builtin",
            world="contention",
            overrides=("workload=ada160", "cluster=ada_srsf"),
            seeds=(0, 1, 2),
            source=(
                "the Ada-SRSF reference code's shipped 160-job workloads (seeds 0-2), at its "
                "1/100 scale, 16x4 GPUs"
            ),
        ),
        Scenario(
            name="philly-slice",
            world="contention",
            overrides=("workload=philly", "cluster=ada_srsf"),
            seeds=(0, 1, 2),
            source=(
                "the shipped 200-job Philly slice (VC 6c71a0), durations capped at 2 days, "
                "load 0.7 of 16x4 GPUs (conf/workload/philly.yaml); models drawn per seed"
            ),
        ),
        Scenario(
            name="tiresias-60",
            world="contention",
            overrides=(
                "workload.kind=trace",
                "workload.path=envs/sim/data/tiresias/tiresias_60job.csv",
                "workload.trace.unknown_models=family",
                "cluster.num_servers=4",
            ),
            seeds=(0, 1, 2),
            source=(
                "Tiresias's public 60-job trace (its repository's example), 4x4 GPUs as its "
                "simulator's; unknown models by family, others drawn per seed"
            ),
        ),
    ]


#: Pollux's and Sia's workloads (``envs/sim/data/pollux/``, ``envs/sim/data/sia/``, read by
#: :func:`envs.sim.traces.pollux.read_pollux`): real arrivals, GPU counts and applications;
#: durations and models synthesised by that module's documented rules.  Both papers' clusters
#: have 64 GPUs: Pollux's 16 nodes x 4 GPUs, Sia's a heterogeneous mix (here homogeneous).
#: Contention world: 16 servers x 4 GPUs, each job run as at most 200 macro-iterations (as the
#: Philly scenarios).  Elastic world: the DL² env's ``medium`` setting (window J = 12) on 32
#: nodes (2 GPU workers each: 64 GPUs); its conversion draws nothing here (every job's model
#: comes from its application), so one seed.
_POLLUX_DIR = "envs/sim/data/pollux"
_SIA_DIR = "envs/sim/data/sia"
_POLLUX_SERVERS = 16
_POLLUX_NODES = 32
#: name -> (file, what it is)
_POLLUX_SIA: dict[str, tuple[str, str]] = {
    "pollux-w6": (
        f"{_POLLUX_DIR}/workload-6.csv",
        "Pollux's workload 6 (its testbed and simulator-fidelity workload; 160 jobs over 8 h)",
    ),
    "pollux-w1": (
        f"{_POLLUX_DIR}/workload-1.csv",
        "Pollux's workload 1 of its 8 simulator workloads (160 jobs over 8 h)",
    ),
    "sia-philly-w1": (
        f"{_SIA_DIR}/philly-workload-1.csv",
        "Sia's Philly workload 1 (160 jobs over 8 h)",
    ),
    "sia-saturn-w1": (
        f"{_SIA_DIR}/saturn-workload-1.csv",
        "Sia's Helios-Saturn workload 1 (160 jobs over 8 h)",
    ),
    "sia-rate10-w1": (
        f"{_SIA_DIR}/rate_10-workload-1.csv",
        "Sia's arrival-rate sweep at 10 jobs/h, workload 1 (80 jobs over 8 h)",
    ),
    "sia-rate30-w1": (
        f"{_SIA_DIR}/rate_30-workload-1.csv",
        "Sia's arrival-rate sweep at 30 jobs/h, workload 1 (240 jobs over 8 h)",
    ),
}
#: the ones also run in the elastic world
_POLLUX_SIA_ELASTIC = ("pollux-w6", "sia-saturn-w1")
_SYNTHESISED = (
    "real arrivals, GPU counts and applications; durations from each application's GPU-time "
    "band and models by application (synthesised)"
)


def _pollux_sia() -> list[Scenario]:
    out = [
        Scenario(
            name=name,
            world="contention",
            overrides=(
                "workload.kind=trace",
                f"workload.path={path}",
                f"cluster.num_servers={_POLLUX_SERVERS}",
                "workload.trace.max_iterations=200",
            ),
            seeds=_TRACE_SEEDS,
            source=f"{what}; {_SYNTHESISED}; {_POLLUX_SERVERS}x4 GPUs",
        )
        for name, (path, what) in _POLLUX_SIA.items()
    ]
    for name in _POLLUX_SIA_ELASTIC:
        path, what = _POLLUX_SIA[name]
        out.append(
            Scenario(
                name=f"{name}-elastic",
                world="elastic",
                overrides=(
                    "workload=env",
                    "workload.env.setting=medium",
                    "workload.env.backlog=none",
                    f"workload.env.trace={path}",
                    "workload.trace.format=pollux",
                    f"workload.env.overrides.num_nodes={_POLLUX_NODES}",
                ),
                seeds=_ENV_TRACE_SEEDS,
                source=f"{what}; {_SYNTHESISED}; DL² medium env, {_POLLUX_NODES} nodes",
            )
        )
    return out


def _grouper_tiresias() -> list[Scenario]:
    """Tiresias's 2,400-job stress trace (contention world) and Grouper's 40 cojobs (the
    ``grouper`` world: its own flow-level simulator, its metric the stage completion time)."""
    return [
        Scenario(
            name="tiresias-2400",
            world="contention",
            overrides=(
                "workload=tiresias",
                "workload.copies=40",
                "workload.shift_s=7.0",
                "cluster.num_servers=15",
                "cluster.network.a_ms=0.0",
                "cluster.network.b_ms_per_mb=1e-9",
                "cluster.network.eta_ms_per_mb=0.0",
                "fidelity=job",
            ),
            seeds=(0,),
            source=(
                "Tiresias's 2,400-job stress trace: 40 copies of its public 60-job trace, copy k "
                "shifted by 7k s (the shared reference note's construction: synthesised from the "
                "real trace), its own model table; 15x4 GPUs under upstream's duration model "
                "(JOB fidelity, free network), as benchmarks/bench_tiresias.py; one seed (the "
                "jobs are fixed and the duration model draws nothing)"
            ),
        ),
        Scenario(
            name="grouper-40cojobs",
            world="grouper",
            overrides=("workload=grouper",),
            seeds=(0,),
            source=(
                "Grouper's 40-cojob trace (its repository's; 8 jobs per cojob, stages 20-40-80-480 "
                "iterations, successive halving), full scale, 10 hosts at 1 Gbps, in Grouper's "
                "flow-level simulator, as experiments/grouper_repro.py; metric: average stage "
                "completion time; one seed (deterministic)"
            ),
        ),
    ]


#: ``bench/v1``: frozen.  Change it only by making a new suite (``V2``) and adding it to
#: :data:`SUITES`; its version changes with any edit anyway.
V1: tuple[Scenario, ...] = (
    *_dl2(),
    *_philly_all(),
    *_others(),
    *_pollux_sia(),
    *_grouper_tiresias(),
)

#: suite name -> its scenarios
SUITES: dict[str, tuple[Scenario, ...]] = {"v1": V1}
