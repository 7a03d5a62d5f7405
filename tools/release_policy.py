"""Release a trained policy as small files: ``policies/<name>/policy.pt`` + ``policy.json``.

    python tools/release_policy.py runs/<run dir> policies/<name> [--act sampled]

Keeps only what acting needs: the network's weights (``policy.pt``, a torch state dict, no
optimizer state) and ``policy.json`` with how to rebuild it (the training env and policy
config, as :func:`agents.checkpoint.load_policy` reads them) and where it comes from (the
training command, seed, decisions, git commit and package versions of the run's
``run.json``), and ``act``: how the policy is meant to act (``argmax``, or ``sampled`` for a
policy whose masked argmax can stall jobs, e.g. one trained from scratch; evaluate it with
``policy_eval.deterministic=false``).  The result is usable as ``policy:policies/<name>`` in
``evaluate.py``.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from agents.checkpoint import load_policy, save_policy_weights
from envs.provenance import read_provenance
from envs.sim.errors import ConfigError


def release(run_dir: Path, out: Path, act: str | None = None) -> Path:
    """Write ``out/policy.pt`` and ``out/policy.json`` from ``run_dir``'s final checkpoint."""
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
    info = {
        "env": meta["env"],
        "policy": meta.get("policy", {}),
        "agent": meta.get("agent"),
        "class": meta.get("class"),
        "num_timesteps": meta.get("num_timesteps"),
        "act": act or meta.get("act", "argmax"),
        "trained_with": {
            "command": shlex.join(["python", *argv]),
            "seed": run.get("seed"),
            "git_commit": made["git_commit"],
            "git_dirty": made["git_dirty"],
            "versions": made["versions"],
            "time": run.get("time"),
        },
    }
    return save_policy_weights(policy, out / "policy.pt", info)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--act", choices=["argmax", "sampled"], default=None,
                    help="how it acts (default: as its run validated it)")  # fmt: skip
    args = ap.parse_args(argv)
    try:
        path = release(args.run_dir, args.out, args.act)
    except ConfigError as exc:
        sys.exit(f"error: {exc}")
    print(f"{path} ({path.stat().st_size / 1024:.0f} KiB) and {path.with_suffix('.json').name}")


if __name__ == "__main__":
    main()
