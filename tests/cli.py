"""Running the project's commands as a user would, for the tests: ``python <script> args`` in
the repository root, output captured, with a time limit (a hang fails the test)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_script(
    script: str, *args: str, timeout: float = 300, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``python <script> *args`` from the repository root (``script``: e.g. ``evaluate.py``)."""
    return subprocess.run(
        [sys.executable, script, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=None if env is None else dict(env),
    )
