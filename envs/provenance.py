"""What produced a run: the source tree's git commit and whether it was dirty, the versions of
Python and the packages, and the command line.  One module for every record the project
writes (``train.py``'s and ``python -m pretrain``'s ``run.json`` through
:mod:`training.runinfo`, ``evaluate.py``'s through :mod:`evaluation.provenance`, the
metadata of saved policies), so that they all carry the same keys (:data:`KEYS`) with the
same meaning; it sits in ``envs`` (the lowest layer) so that both ``training`` and
``evaluation`` may import it.

The keys:

* ``git_commit``: ``git rev-parse HEAD`` of the repository holding this file; ``None`` when it
  is not a git checkout or git is missing.
* ``git_dirty``: whether the working tree differs from that commit (``None`` when unknown).
  The rule: modified or staged tracked files AND untracked files that ``.gitignore`` does not
  ignore make it dirty (``git status --porcelain``).  Why untracked files count: a new module
  not yet added changes what runs, and the commit alone could not rebuild the tree; the
  outputs the project writes (``runs/``, ``outputs/``, ``multirun/``, build products) are
  ignored, so they never make a tree dirty.
* ``versions``: ``python``, ``platform`` and each distribution of :data:`PACKAGES` (``"not
  installed"`` where absent).
* ``command``: the command line as a list, ``sys.argv`` (the script first: ``train.py``,
  ``evaluate.py``...).
* ``numerics``: whether PyTorch and MKL ran their portable paths, the same bits on every
  x86-64 machine (:func:`envs.numerics.record`; ``None`` in older records).

Records written before this module carried ``git: {commit, dirty}`` and ``argv`` (training)
or ``command`` as one string (saved ``plan_pg`` policies): :func:`read_provenance` reads
either form into these keys.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from envs import numerics

__all__ = [
    "KEYS",
    "PACKAGES",
    "code_version",
    "git_state",
    "package_versions",
    "provenance",
    "read_provenance",
]

#: The keys of :func:`provenance` (every record's provenance, whoever writes it).
KEYS = ("git_commit", "git_dirty", "versions", "command", "numerics")

#: Distributions whose versions a record names.
PACKAGES = (
    "dlsched",
    "numpy",
    "scipy",
    "torch",
    "gymnasium",
    "stable-baselines3",
    "sb3-contrib",
    "hydra-core",
    "omegaconf",
    "tensorboard",
    "matplotlib",
    "tabulate",
)

_ROOT = Path(__file__).resolve().parents[1]


def _git(*args: str) -> str | None:
    """``git args`` in the repository's root: its stripped output, or ``None`` when git is
    missing, times out or fails (e.g. not a checkout)."""
    try:
        out = subprocess.run(
            ["git", *args], cwd=_ROOT, capture_output=True, text=True, timeout=20, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def git_state() -> tuple[str | None, bool | None]:
    """``(commit, dirty)`` of the source tree (see the module docstring for the rule)."""
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return None, None
    status = _git("status", "--porcelain", "--untracked-files=normal")
    return commit, None if status is None else status != ""


def code_version() -> str:
    """A short name of the code that runs: the commit's first 12 hex digits, plus
    ``-dirty-<first 8 hex of sha256(git diff HEAD, then each untracked file's name and
    bytes)>`` when the tree is dirty; ``unknown`` outside a git checkout."""
    import hashlib

    commit, dirty = git_state()
    if commit is None:
        return "unknown"
    if not dirty:
        return commit[:12]
    h = hashlib.sha256((_git("diff", "HEAD") or "").encode())
    for name in sorted((_git("ls-files", "--others", "--exclude-standard") or "").splitlines()):
        h.update(b"\0" + name.encode() + b"\0")
        try:
            h.update((_ROOT / name).read_bytes())
        except OSError:
            h.update(b"unreadable")
    return f"{commit[:12]}-dirty-{h.hexdigest()[:8]}"


def package_versions() -> dict[str, str]:
    """``python``, ``platform`` and each of :data:`PACKAGES`'s versions."""
    out = {"python": platform.python_version(), "platform": platform.platform()}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def provenance() -> dict[str, Any]:
    """The record's provenance: ``git_commit``, ``git_dirty``, ``versions``, ``command``,
    ``numerics``."""
    commit, dirty = git_state()
    return {
        "git_commit": commit,
        "git_dirty": dirty,
        "versions": package_versions(),
        "command": list(sys.argv),
        "numerics": numerics.record(),
    }


def read_provenance(record: dict[str, Any]) -> dict[str, Any]:
    """The :data:`KEYS` of ``record``, a record of this module or an older one (``git:
    {commit, dirty}``, ``argv``, or ``command`` as one string); a key the record lacks is
    ``None``."""
    old = record.get("git")
    git: dict[str, Any] = old if isinstance(old, dict) else {}
    command = record.get("command", record.get("argv"))
    if isinstance(command, str):
        command = command.split()
    return {
        "git_commit": record.get("git_commit", git.get("commit")),
        "git_dirty": record.get("git_dirty", git.get("dirty")),
        "versions": record.get("versions"),
        "command": command,
        "numerics": record.get("numerics"),
    }
