"""What a run records about itself: config, seed, package versions, git commit."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

from envs.files import write_json

__all__ = ["git_commit", "package_versions", "run_record", "write_run_record"]

PACKAGES = (
    "numpy",
    "torch",
    "gymnasium",
    "stable-baselines3",
    "sb3-contrib",
    "hydra-core",
    "omegaconf",
    "tensorboard",
)


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args],
            capture_output=True,
            text=True,
            timeout=10,
            cwd=Path(__file__).resolve().parent,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_commit() -> dict[str, Any]:
    """``{"commit": sha or None, "dirty": bool or None}`` of the source tree."""
    sha = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no")
    return {"commit": sha, "dirty": None if status is None else bool(status)}


def package_versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "platform": platform.platform()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def run_record(config: Any, seed: int | None, **extra: Any) -> dict[str, Any]:
    """A JSON-able record of a run: resolved config, seed, versions, git state, time, argv."""
    return {
        "time": datetime.now(UTC).isoformat(timespec="seconds"),
        "argv": list(sys.argv),
        "cwd": os.getcwd(),
        "seed": seed,
        "config": config,
        "versions": package_versions(),
        "git": git_commit(),
        **extra,
    }


def write_run_record(path: str | os.PathLike[str], record: dict[str, Any]) -> Path:
    """Write ``record`` to ``path`` as JSON, atomically (:func:`envs.files.write_json`)."""
    return write_json(path, record)
