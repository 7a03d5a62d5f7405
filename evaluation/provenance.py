"""What produced a run: git commit (and whether the tree was dirty), versions, command."""

from __future__ import annotations

import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = ["provenance"]

_ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(
            ["git", *args],
            cwd=_ROOT,
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "unknown"


def provenance() -> dict[str, Any]:
    """``git_commit``, ``git_dirty``, package ``versions`` and the ``command`` line."""
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain") if commit else None
    return {
        "git_commit": commit or "unknown",
        "git_dirty": (status != "") if status is not None else None,
        "versions": {
            "python": platform.python_version(),
            **{
                d: _version(d)
                for d in ("dlsched", "numpy", "hydra-core", "omegaconf", "matplotlib")
            },
        },
        "command": [sys.executable, *sys.argv],
    }
