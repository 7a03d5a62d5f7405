"""Learned placement in Ada-SRSF's own world (``dlsched/Contention-v0``), head to head with
the fixed-demand stacks, and the lower bound.

    python experiments/contention_h2h.py                        # heuristics + bound, test seeds
    python experiments/contention_h2h.py --train 40000 --seeds 3   # + BC, then MaskablePPO
    python experiments/contention_h2h.py --train 40000 --learned-only   # the learned rows only
    python experiments/contention_h2h.py --learner pg --iterations 30 --seeds 3 --learned-only
    python experiments/contention_h2h.py --workload philly --test-windows 10   # Philly windows

Why: it measures whether a policy that learns admission and placement in the contention
engine's world beats the engine's fixed-demand stacks, and how far everything is from a
bound no schedule can beat.  Workloads: ``generate_ada_srsf`` at paper scale (1000-6000
iterations, arrivals over 20 min, 160 jobs; test seeds 1000-1009, which nothing else
touches), or ``--workload philly``: windows of the public Philly corpus, trained on the
training VCs and days, tested on windows of the held-out VCs.  Seeds, windows, the rows and
what is printed: :func:`main`.
Results: docs/experiments/contention-env.md.
"""

from __future__ import annotations

import argparse
import csv
import functools
import math
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from _common import markdown_table, seed_list

from agents.config import AgentConfig, ContentionPGConfig
from agents.episode_pg import load_episode_pg
from envs.files import write_bytes
from envs.gym.contention_env import (
    ContentionConfig,
    ContentionEnv,
    srsf_exclusive_teacher,
    srsf_teacher,
)
from envs.gym.workloads import (
    TEST_VCS,
    TRAIN_DAYS,
    TRAIN_VCS,
    VALIDATION_DAYS,
    TraceWindows,
    contention_window,
)
from envs.sim import ClusterSpec, ModelOptions, SimConfig, simulate
from envs.sim.spec import Workload
from envs.sim.stacks import TABLE_IV, TABLE_V
from envs.sim.workload import paper_scale_workload
from evaluation.contention import solo_jcts_ms
from evaluation.stats import mean_ci95
from training.config import EvalConfig, TrainConfig
from training.contention import train_contention
from training.contention_ppo import episode_jcts, policy_actor, train_maskable_ppo

STACKS = [*dict.fromkeys([*TABLE_V, *TABLE_IV]), "dlas:skew_fs", "dgittins:skew_fs",
          "psrsf:count_fs", "srsf:count_fs"]  # fmt: skip
#: communication schedulers the env may run (``--comm``): SRSF(1) or AdaDUAL
COMMS = ("srsf1", "adasrsf")
PLACEMENTS = ("lwf1", "ls", "ff")
VALIDATION = [500, 501, 502, 503, 504]
#: Philly windows: the cuts of ``conf/workload/philly.yaml`` (durations capped at 2 days,
#: arrivals at 70% of the cluster's GPUs, at most 200 macro-iterations per job).
PHILLY_CUTS: dict[str, Any] = {"duration_cap_h": 48.0, "load": 0.7}
MAX_ITERATIONS = 200


def philly_windows(split: str, jobs: int) -> TraceWindows:
    """Training / validation windows: the training VCs in their days; test: the held-out VCs,
    any day (the split of :mod:`envs.gym.workloads` and :mod:`evaluation.heldout`)."""
    vcs, days = {
        "train": (TRAIN_VCS, TRAIN_DAYS),
        "validation": (TRAIN_VCS, VALIDATION_DAYS),
        "test": (TEST_VCS, (0.0, 120.0)),
    }[split]
    return TraceWindows(vcs=list(vcs), days=list(days), jobs=jobs, **PHILLY_CUTS)


def make_env(args: argparse.Namespace, split: str, fidelity: str) -> ContentionEnv:
    """A training (``split="train"``) or validation env: paper-scale generator workloads per
    episode seed, or with ``--workload philly`` a window of that split per episode seed."""
    if args.workload == "philly":
        return ContentionEnv(
            trace=philly_windows(split, args.window_jobs),
            trace_max_iterations=MAX_ITERATIONS,
            comm=args.comm,
            placements=PLACEMENTS,
            fidelity=fidelity,
        )
    return ContentionEnv(scale="paper", comm=args.comm, placements=PLACEMENTS, fidelity=fidelity)


def test_workloads(args: argparse.Namespace, cluster: ClusterSpec) -> dict[int, Workload]:
    """Test workloads by seed: paper-scale generator seeds ``--test``, or ``--test-windows``
    held-out Philly windows (seeds 0..N-1) drawn with ``--window-seed``."""
    if args.workload != "philly":
        return {s: paper_scale_workload(s) for s in args.test}
    rng = np.random.default_rng(args.window_seed)
    spec = philly_windows("test", args.window_jobs)
    return {
        i: contention_window(spec, cluster, rng, max_iterations=MAX_ITERATIONS)[0]
        for i in range(args.test_windows)
    }


def jcts_of(result: Any) -> np.ndarray:
    return np.array([r.jct_ms for r in result.records]) / 1000.0


def solo_bound(cluster: ClusterSpec, w: Workload) -> np.ndarray:
    """Each job alone on the empty cluster from its arrival, at its best placement
    (:func:`evaluation.contention.solo_jcts_ms`, evaluate.py's ``bound:solo``): JCTs (s) no
    schedule can beat."""
    return solo_jcts_ms(cluster, w, SimConfig()) / 1000.0


def pg_config(args: argparse.Namespace, seed: int) -> TrainConfig:
    """``--learner pg`` as ``train.py +agent=contention_pg``'s config: the clone of
    ``--teacher`` (none with ``--from-scratch``), then EpisodePG (learning rate 3e-4, no
    entropy bonus), validated on seeds 500-504 in the ``--comm`` / ``--train-fidelity`` env."""
    c = ContentionPGConfig(
        teacher="none" if args.from_scratch else args.teacher, bc_workloads=args.bc_workloads,
        bc_epochs=args.bc_epochs, bc_smoothing=args.bc_smoothing, iterations=args.iterations,
        groups=args.groups, group_size=args.group_size, epsilon=args.epsilon,
        temperature=args.temperature, val_every=args.val_every,
    )  # fmt: skip
    agent = AgentConfig(name="contention_pg", algo="contention_pg", learning_rate=3e-4,
                        ent_coef=0.0, contention=c)  # fmt: skip
    env = ContentionConfig(comm=args.comm, placements=list(PLACEMENTS),
                           fidelity=args.train_fidelity)  # fmt: skip
    return TrainConfig(agent=agent, contention=env, eval=EvalConfig(seeds=list(VALIDATION)),
                       seed=seed, torch_threads=1)  # fmt: skip


def train_pg(args: argparse.Namespace, seed: int) -> Path:
    """One ``--learner pg`` training seed: :func:`training.contention.train_contention` (the
    pipeline of ``train.py +agent=contention_pg``) into ``--runs``/``pg_seed<seed>``; with
    ``--workload philly`` on the trace windows' training and validation envs."""
    cfg = pg_config(args, seed)
    out = args.runs / f"pg_seed{seed}"
    out.mkdir(parents=True, exist_ok=True)
    envs = None
    if args.workload == "philly":
        fid = args.train_fidelity
        envs = (make_env(args, "train", fid), make_env(args, "validation", fid))
    train_contention(cfg, out, asdict(cfg), envs=envs)
    return out


def _placed(e: ContentionEnv, _obs: Any, placement: str) -> int:
    """The SRSF rule with one placement candidate."""
    return srsf_teacher(e, placement)


def _curve(run: Path) -> list[tuple[int, float]]:
    """The validation curve of a run: (iteration, avg JCT rounded to 0.1 s)."""
    with open(run / "learning_curve.csv", newline="") as f:
        return [(int(r["iteration"]), round(float(r["avg_jct"]), 1)) for r in csv.DictReader(f)]


# ------------------------------------------------------------------------------ report
def _pm(values: np.ndarray, fmt: str, unit: str = "") -> str:
    """``"mean<unit> ± half-width"`` of the 95% Student-t CI over seeds
    (:func:`evaluation.stats.mean_ci95`); ``± n/a`` with a single seed, which has no CI."""
    m, h = mean_ci95(list(values))
    return f"{m:{fmt}}{unit} ± " + ("n/a" if math.isnan(h) else f"{h:{fmt.lstrip('+')}}")


def summary_table(rows: dict[str, list[np.ndarray]], base: str) -> str:
    """The Markdown table of :func:`main`, rows by mean avg JCT: avg and p95 JCT (s) over the
    seeds and the avg JCT relative to ``base`` on the same seed (%), each mean ± 95% CI."""
    ref = np.array([j.mean() for j in rows[base]])
    table = []
    for name, per_seed in sorted(rows.items(), key=lambda kv: np.mean([j.mean() for j in kv[1]])):
        avg = np.array([j.mean() for j in per_seed])
        p95 = np.array([np.percentile(j, 95) for j in per_seed])
        table.append([
            name, _pm(avg, ".1f"), _pm(p95, ".1f"), _pm((avg - ref) / ref * 100, "+.2f", "%")
        ])  # fmt: skip
    return markdown_table(table, ["scheduler", "avg JCT (s)", "p95 JCT (s)", f"vs {base}"])


def merge_rows(rows: dict[str, list[np.ndarray]], specs: list[str], n: int) -> None:
    """Add the rows of earlier ``--save`` runs (``NPZ[=PREFIX]``), skipping the rows this
    run made too (the paired baseline)."""
    for spec in specs:
        path, _, prefix = spec.partition("=")
        with np.load(path) as saved:
            names = sorted({k.rsplit("/", 1)[0] for k in saved.files})
            for name in names:
                if name not in rows:
                    parts = [saved[f"{name}/{i}"] for i in range(n)]
                    rows.setdefault(f"{prefix + ' ' if prefix else ''}{name}", parts)


def learned_rows(
    args: argparse.Namespace,
    full: ContentionEnv,
    seeds: list[int],
    rows: dict[str, Any],
    train_seeds: list[int],
) -> None:
    """Train per training seed and add the learned policies' rows on the test ``seeds``."""
    if args.learner == "pg":
        for seed in train_seeds:
            run = train_pg(args, seed)
            best = run / "checkpoints" / "best" / "policy.npz"
            if args.save_policy is not None:
                write_bytes(args.save_policy, best.read_bytes())
                print(f"policy (training seed {seed}): {args.save_policy}", file=sys.stderr,
                      flush=True)  # fmt: skip
            recipe = "scratch " if args.from_scratch else f"{args.teacher} "
            if args.bc_smoothing > 0 and not args.from_scratch:
                recipe = f"{args.teacher}~{args.bc_smoothing:g} "
            tags = [("pg", best)]
            if not args.from_scratch:
                tags.insert(0, ("bc", run / "checkpoints" / "clone" / "policy.npz"))
            for tag, path in tags:
                net, _ = load_episode_pg(path)
                name = f"{recipe}{tag} (seed {seed})"
                rows[name] = [episode_jcts(full, s, net.act) for s in seeds]
            print(f"seed {seed} curve: {_curve(run)}", file=sys.stderr, flush=True)
    elif args.train > 0:
        for seed in train_seeds:
            out = train_maskable_ppo(
                lambda split: make_env(args, split, args.train_fidelity), seed,
                decisions=args.train, every=args.every, n_envs=args.n_envs,
                n_steps=args.n_steps, bc_workloads=args.bc_workloads,
                bc_epochs=args.bc_epochs, validation_seeds=VALIDATION,
            )  # fmt: skip
            model = out["model"]
            for tag, state in (("bc", out["bc_state"]), ("rl", out["best_state"])):
                model.policy.load_state_dict(state)
                rows[f"{tag} (seed {seed})"] = [
                    episode_jcts(full, s, policy_actor(model)) for s in seeds
                ]
            print(f"seed {seed} curve: {out['curve']}", file=sys.stderr)


def _train_seeds(ap: argparse.ArgumentParser, args: argparse.Namespace) -> list[int]:
    """The training seeds; ``--save-policy`` needs exactly one (pg) and a ``.npz`` path."""
    seeds: list[int] = args.train_seeds or list(range(args.seeds))
    if args.save_policy is not None and (args.learner != "pg" or len(seeds) != 1):
        ap.error("--save-policy needs --learner pg and exactly one training seed")
    if args.save_policy is not None and args.save_policy.suffix != ".npz":
        ap.error(f"--save-policy: expected a .npz path, got {args.save_policy}")
    return seeds


def main() -> None:
    """Run the head-to-head and print the table.

    Workloads: ``generate_ada_srsf`` at paper scale (1000-6000 iterations, arrivals over 20 min,
    160 jobs).  Seeds: training draws workload seeds in [10_000, 2**31) from each training seed's
    generator, validation uses 500-504 (BC epochs / RL checkpoints are picked there), the test
    table 1000-1009 (``--test``), which nothing else touches.

    ``--workload philly``: windows of ``--window-jobs`` consecutive submissions of one VC of the
    public Philly corpus (:func:`~envs.gym.workloads.contention_window`; the cuts of
    ``conf/workload/philly.yaml``: durations capped at 2 days, arrivals scaled to 70% of the
    64 GPUs, at most 200 macro-iterations per job; models drawn per window).  Training draws a
    window per workload seed from the training VCs (:data:`~envs.gym.workloads.TRAIN_VCS`) in
    days 0-75, validation (seeds 500-504) from the same VCs in days 75-90, and the test table
    is ``--test-windows`` windows of the held-out VCs (:data:`~envs.gym.workloads.TEST_VCS`,
    any day) drawn with ``--window-seed``: VCs no training or validation window comes from.

    Schedulers on the test seeds, all in full fidelity:

    - the engine's stacks via ``simulate()`` (LWF-1 + Ada-SRSF, LWF-1 + SRSF(1..3), FF / LS /
      RAND + Ada-SRSF, the Tiresias stacks);
    - ``env:srsf+<placement>``: the SRSF teacher through the env (``comm`` = SRSF(1)) with each
      placement candidate (``lwf1`` is LWF-1 + SRSF(1) exactly, a test says so);
    - ``env:srsf_exclusive+lwf1``: the SRSF teacher that waits rather than oversubscribe GPUs
      (:func:`~envs.gym.contention_env.srsf_exclusive_teacher`);
    - ``bc`` / ``rl``: the cloned and the fine-tuned policies (masked argmax) through the same env,
      one row per training seed; ``--learner ppo`` (MaskablePPO from the SRSF clone,
      :mod:`training.contention_ppo`) or ``pg`` (:class:`agents.episode_pg.EpisodePG`: group
      policy gradient over whole episodes, from the clone, ``--epsilon`` exploration;
      ``--from-scratch`` skips the clone): the pipeline of ``train.py +agent=contention_pg``
      (:func:`training.contention.train_contention`), one run per training seed in
      ``--runs``/``pg_seed<seed>``;
    - ``bound``: each job alone on an empty cluster from its arrival (its best placement: one
      server when it fits, else the fewest servers), avg JCT: no schedule can do better.

    Printed: a Markdown table of mean ± 95% CI (Student t over seeds,
    :func:`evaluation.stats.mean_ci95`; ``n/a`` with one test seed) of avg and p95 JCT (s), and
    the paired avg-JCT difference against LWF-1 + SRSF(1) with its 95% CI.  Training and the
    env run with ``fidelity=fast`` unless ``--train-fidelity full``.
    """
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--test", type=seed_list, default=list(range(1000, 1010)))
    ap.add_argument("--workload", choices=["generator", "philly"], default="generator",
                    help="paper-scale generator workloads or Philly trace windows")  # fmt: skip
    ap.add_argument("--test-windows", type=int, default=10, help="philly: held-out windows")
    ap.add_argument("--window-seed", type=int, default=12345, help="philly: test window draw")
    ap.add_argument("--window-jobs", type=int, default=160, help="philly: jobs per window")
    ap.add_argument("--train", type=int, default=0, help="RL decisions per training seed")
    ap.add_argument("--seeds", type=int, default=3, help="training seeds")
    ap.add_argument("--every", type=int, default=20_000)
    ap.add_argument("--n-envs", type=int, default=8)
    ap.add_argument("--n-steps", type=int, default=256)
    ap.add_argument("--bc-workloads", type=int, default=40)
    ap.add_argument("--bc-epochs", type=int, default=20)
    ap.add_argument("--train-fidelity", default="fast")
    ap.add_argument("--learner", choices=["ppo", "pg"], default="ppo")
    ap.add_argument("--iterations", type=int, default=30, help="pg: iterations")
    ap.add_argument("--val-every", type=int, default=2, help="pg: iterations between checks")
    ap.add_argument("--groups", type=int, default=4, help="pg: workload seeds per iteration")
    ap.add_argument("--group-size", type=int, default=8, help="pg: rollouts per seed")
    ap.add_argument("--epsilon", type=float, default=0.1, help="pg: uniform exploration share")
    ap.add_argument("--temperature", type=float, default=1.0, help="pg: sampling temperature")
    ap.add_argument("--from-scratch", action="store_true", help="pg: no behaviour cloning")
    ap.add_argument("--bc-smoothing", type=float, default=0.0,
                    help="pg: share of each BC target spread over the valid actions")  # fmt: skip
    ap.add_argument("--comm", choices=COMMS, default="srsf1",
                    help="the env's communication scheduler: srsf1 (teachers = LWF-1 + SRSF(1)) "
                         "or adasrsf (teachers = LWF-1 + Ada-SRSF)")  # fmt: skip
    ap.add_argument("--teacher", choices=["srsf", "exclusive"], default="srsf",
                    help="pg: the rule the clone copies")  # fmt: skip
    ap.add_argument("--save", type=Path, default=None, help="write the per-job JCTs (npz)")
    ap.add_argument("--merge", nargs="*", default=[], metavar="NPZ[=PREFIX]",
                    help="add rows saved by earlier --save runs (names prefixed)")  # fmt: skip
    ap.add_argument("--cdf", type=Path, default=None, help="plot the per-job JCT CDFs (png)")
    ap.add_argument("--save-policy", type=Path, default=None, metavar="NPZ",
                    help="pg, one training seed: save the kept policy (evaluate.py "
                         "contention:NPZ)")  # fmt: skip
    ap.add_argument("--runs", type=Path, default=None,
                    help="pg: where the training runs go (<runs>/pg_seed<seed>; default "
                         "runs/contention_h2h/<workload>_<teacher>_<comm>)")  # fmt: skip
    ap.add_argument("--train-seeds", type=seed_list, default=None,
                    help="training seeds (default: 0..--seeds-1)")  # fmt: skip
    ap.add_argument(
        "--learned-only",
        action="store_true",
        help="only LWF-1 + SRSF(1) (the paired baseline) and the learned rows",
    )
    args = ap.parse_args()
    if args.test_windows < 2 or args.window_jobs < 2:
        ap.error("--test-windows and --window-jobs must be >= 2")
    train_seeds = _train_seeds(ap, args)
    if args.runs is None:
        recipe = "scratch" if args.from_scratch else args.teacher
        args.runs = Path("runs/contention_h2h") / f"{args.workload}_{recipe}_{args.comm}"
    th.set_num_threads(1)
    cluster = ClusterSpec()
    tests = test_workloads(args, cluster)
    seeds = list(tests)
    if args.workload == "philly":
        print("test windows: " + ", ".join(w.name for w in tests.values()), file=sys.stderr)
    rows: dict[str, list[np.ndarray]] = {}
    t0 = time.perf_counter()
    for st in (
        STACKS if not args.learned_only else dict.fromkeys(["lwf1_srsf1", f"lwf1_{args.comm}"])
    ):
        rows[st] = [
            jcts_of(simulate(cluster, w, st, SimConfig(model=ModelOptions(seed=s))))
            for s, w in tests.items()
        ]
    full = ContentionEnv(scale="paper", comm=args.comm, placements=PLACEMENTS, fidelity="full")
    if args.workload == "philly":  # episode seed i -> test window i
        full = ContentionEnv(workloads=list(tests.values()), comm=args.comm, placements=PLACEMENTS,
                             fidelity="full")  # fmt: skip
    if not args.learned_only:
        rows["bound (solo)"] = [solo_bound(cluster, w) for w in tests.values()]
        for p in PLACEMENTS[1:]:
            rule = functools.partial(_placed, placement=p)
            rows[f"env:srsf+{p}"] = [episode_jcts(full, s, rule) for s in seeds]
        rows["env:srsf_exclusive+lwf1"] = [
            episode_jcts(full, s, lambda e, _: srsf_exclusive_teacher(e)) for s in seeds
        ]

    print(f"heuristics and bound: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    learned_rows(args, full, seeds, rows, train_seeds)
    merge_rows(rows, args.merge, len(seeds))
    if args.save is not None:
        payload: dict[str, Any] = {
            f"{n}/{i}": j for n, js in rows.items() for i, j in enumerate(js)
        }
        np.savez(args.save, **payload)
    print(summary_table(rows, "lwf1_srsf1"))
    if args.cdf is not None:
        from evaluation.report import plot_cdf

        what = "Philly held-out windows" if args.workload == "philly" else "paper scale, test seeds"
        plot_cdf(args.cdf, rows, f"Contention-v0, {what} {len(seeds)}")
        print(f"JCT CDFs: {args.cdf}", file=sys.stderr)


if __name__ == "__main__":
    main()
