"""The simulator core imports with the standard library and numpy only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = (
    "torch",
    "gymnasium",
    "gym",
    "hydra",
    "omegaconf",
    "stable_baselines3",
    "matplotlib",
    "scipy",
)

SCRIPT = f"""
import json, sys
import envs.sim, envs.sim.engine, envs.sim.workload, envs.sim.stacks, envs.sim.results
import pkgutil, importlib, envs.sim.elastic
for m in pkgutil.iter_modules(envs.sim.elastic.__path__):
    importlib.import_module("envs.sim.elastic." + m.name)
from envs.sim.elastic.speed import MeasuredSpeed
MeasuredSpeed()
from envs.sim import ClusterSpec, SimConfig, simulate
from envs.sim.workload import builtin_ada_srsf
w = builtin_ada_srsf(0)
simulate(ClusterSpec(), w, "lwf1_adasrsf", SimConfig())
heavy = {HEAVY!r}
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in heavy)))
"""


def test_core_imports_no_heavy_dependencies() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
