"""Release a trained policy as one small file, ``policies/<name>/policy.npz``, or re-save a
released policy of an older format in it.

    python tools/release_policy.py runs/<run dir> policies/<name> [--act sampled]
    python tools/release_policy.py --convert policies/<name>
    python tools/release_policy.py --search hold policies/<plan policy> policies/<name>

The first keeps only what acting needs of a run's final checkpoint, in the one policy file
format (:mod:`agents.policy_file`: ``.npz``, no pickle): the network's weights (no optimizer
state), how to rebuild it (the training env and policy config), the env layout it acts in,
``act`` (how the policy is meant to act: ``argmax``, or ``sampled`` for a policy whose masked
argmax can stall jobs, e.g. one trained from scratch; evaluate it with
``policy_eval.deterministic=false``) and where it comes from (the training command, seed,
decisions, git commit and package versions of the run's ``run.json``).  The result is usable
as ``policy:policies/<name>`` in ``evaluate.py``.  (A ``train.py +agent=plan_pg`` or
``+agent=contention_pg`` run's ``checkpoints/best/policy.npz`` is already such a file: a
release is a copy of it.)

``--convert`` re-saves the policy in a directory (an older ``policy.pt`` + ``policy.json``, or
an EpisodePG ``policy.npz`` of format ``dlsched.episode_pg/1``) as ``policy.npz`` of the one
format, the same weights bit for bit (:func:`agents.policy_file.convert`), and removes the
older files.

``--search BASE`` copies a ``dlsched/ClusterPlan-v0`` policy (its weights bit for bit) into a
file that acts inside a decision-time search over the slot's plan on the known jobs
(:mod:`agents.plan_search`; its rollouts follow ``BASE`` and, with ``--also PLAN ...``, each
of those plans held, a plan's value being the best of its continuations):
``policies/general_search`` is ``policies/general`` so copied, with ``--search hold --also
esrtf_load "esrtf(backfill=True)" optimus``.  ``--search planned --blocks 1 4 16 0`` is the
receding-horizon search (its own planned sequence as the continuation); ``--extra PLAN ...``
adds plans that only the search tries (the network picks among its own); ``--boost M ...``
(with ``planned``) also tries each job of the window served first for ``M`` slots.  With
``--future`` the file's search is the clairvoyant one (its copies keep the jobs still to
arrive): a measurement of what seeing the future would add (docs/experiments/general-policy.md),
never a scheduler; the file says so.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from agents.checkpoint import load_policy
from agents.policy_file import FILE_NAME, convert, load, save_dl2
from envs.provenance import read_provenance
from envs.sim.errors import ConfigError


def release(run_dir: Path, out: Path, act: str | None = None) -> Path:
    """Write ``out/policy.npz`` from ``run_dir``'s final checkpoint."""
    checkpoint = run_dir / "checkpoints" / "final"
    if not (checkpoint / "model.zip").is_file():
        raise ConfigError(f"{run_dir}: no final checkpoint (checkpoints/final/model.zip)")
    run_json = run_dir / "run.json"
    if not run_json.is_file():
        raise ConfigError(f"{run_dir}: run.json (the run's record) is missing")
    run = json.loads(run_json.read_text())
    policy, meta = load_policy(checkpoint)
    made = read_provenance(run)  # run.json's provenance, of this or an older version
    argv = [a for a in made["command"] or [] if not a.startswith("hydra.run.dir=")]
    record = {
        "command": shlex.join(["python", *argv]),
        "config": run.get("config"),
        "seed": run.get("seed"),
        "git_commit": made["git_commit"],
        "git_dirty": made["git_dirty"],
        "versions": made["versions"],
        "time": run.get("time"),
        "agent": meta.get("agent"),
        "class": meta.get("class"),
        "num_timesteps": meta.get("num_timesteps"),
    }
    return save_dl2(out / FILE_NAME, policy, env=meta["env"], policy_config=meta.get("policy", {}),
                    record=record, act=act or meta.get("act", "argmax"))  # fmt: skip


def convert_release(directory: Path) -> Path:
    """Re-save the policy of ``directory`` as ``policy.npz`` of the one format and remove
    its older files (``policy.pt`` + ``policy.json``); the new file is checked to load with
    the same weights before anything is removed."""
    old = load(directory)
    tmp = directory / "policy.converted.npz"
    convert(old.path, tmp)
    new = load(tmp)
    a, b = old.net.state_dict(), new.net.state_dict()
    if a.keys() != b.keys() or any(not bool((a[k] == b[k]).all()) for k in a):
        tmp.unlink()
        raise ConfigError(f"{directory}: the converted weights differ from the old file's")
    tmp.replace(directory / FILE_NAME)
    if old.path.suffix == ".pt":
        old.path.unlink()
        old.path.with_suffix(".json").unlink(missing_ok=True)
    return directory / FILE_NAME


def release_search(
    source: Path,
    out: Path,
    base: str,
    tol: float,
    argv: list[str],
    also: Sequence[str] = (),
    future: bool = False,
    blocks: Sequence[int] = (),
    extra: Sequence[str] = (),
    boost: Sequence[int] = (),
) -> Path:
    """Write ``out/policy.npz``: the plan policy ``source`` (a ``policy.npz`` or a directory
    holding one) with a decision-time search recorded (:mod:`agents.plan_search`: ``base``,
    ``tol``, ``also``, ``future``, ``blocks``, ``extra``, ``boost``), the same weights bit for
    bit; the record names the source, its SHA-256 and the command (``argv``: this tool's
    arguments)."""
    from agents.plan_policy import PlanPolicy
    from agents.plan_search import PlanSearch
    from agents.policy_format import with_meta
    from envs.files import sha256_file

    src = source if source.suffix == ".npz" else source / FILE_NAME
    policy = PlanPolicy.load(src)  # (a ClusterPlan-v0 policy, or a clear error)
    search = PlanSearch(
        base=base,
        tol=tol,
        also=tuple(also),
        future=future,
        blocks=tuple(blocks),
        extra=tuple(extra),
        boost=tuple(boost),
    )
    search.check(policy.labels)
    meta = policy.meta or {}
    update = {
        "search": search.describe(),
        "derived": {
            "from": str(source),
            "sha256": sha256_file(src),
            "command": shlex.join(["python", "tools/release_policy.py", *argv]),
            "what": (
                "the source's weights inside a clairvoyant plan search (it reads the jobs "
                "still to arrive): a measurement, not a scheduler"
                if future
                else "the source's weights, acting inside a decision-time plan search"
            ),
        },
        "training": meta.get("training"),
    }
    return with_meta(src, out / FILE_NAME, update)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("run_dir", type=Path, help="a run directory (or, with --convert, a policy)")
    ap.add_argument("out", type=Path, nargs="?", default=None)
    ap.add_argument("--act", choices=["argmax", "sampled"], default=None,
                    help="how it acts (default: as its run validated it)")  # fmt: skip
    ap.add_argument("--convert", action="store_true",
                    help="re-save the released policy RUN_DIR in the one format")  # fmt: skip
    ap.add_argument(
        "--search",
        metavar="BASE",
        default=None,
        help="copy the plan policy RUN_DIR to OUT acting inside a decision-time search whose "
        "rollouts follow BASE (hold, policy or a plan label)",
    )
    ap.add_argument(
        "--tol",
        type=float,
        default=1e-9,
        help="with --search: the relative margin a plan must beat the network's by",
    )
    ap.add_argument(
        "--also",
        nargs="+",
        metavar="PLAN",
        default=[],
        help="with --search: plan labels that also continue each tried plan, held (a plan's "
        "value is the best of its continuations)",
    )
    ap.add_argument(
        "--blocks",
        nargs="+",
        type=int,
        metavar="M",
        default=[],
        help="with --search planned: the block lengths (slots; 0: to the end) tried at each "
        "slot, continued by the search's planned sequence",
    )
    ap.add_argument(
        "--extra",
        nargs="+",
        metavar="PLAN",
        default=[],
        help="with --search: plan labels the search tries beside the policy's own plans (the "
        "network never picks them)",
    )
    ap.add_argument(
        "--boost",
        nargs="+",
        type=int,
        metavar="M",
        default=[],
        help="with --search planned: also try each job of the window served first (the planned "
        "EfficientSRTF plan's 'first') for M slots",
    )
    ap.add_argument(
        "--future",
        action="store_true",
        help="with --search: the clairvoyant search (its copies see the jobs still to arrive): "
        "to measure what the future is worth, never a scheduler",
    )
    args = ap.parse_args(argv)
    try:
        if args.search is not None:
            if args.out is None:
                ap.error("the output directory (policies/<name>) is missing")
            given = sys.argv[1:] if argv is None else argv
            path = release_search(
                args.run_dir,
                args.out,
                args.search,
                args.tol,
                given,
                args.also,
                args.future,
                args.blocks,
                args.extra,
                args.boost,
            )
        elif args.convert:
            path = convert_release(args.run_dir)
        elif args.out is None:
            ap.error("the output directory (policies/<name>) is missing")
        else:
            path = release(args.run_dir, args.out, args.act)
    except ConfigError as exc:
        sys.exit(f"error: {exc}")
    print(f"{path} ({path.stat().st_size / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
