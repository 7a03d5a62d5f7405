"""``python -m evaluation.bench --runner ray`` on a real two-node Ray cluster
(``tests/conftest.py``): every cell's per-job CSVs and the board are the local run's, byte
for byte (a cluster start is about 10 s on 2 cores)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
ARGS = ["--only", "tiresias-60", "--schedulers", "lwf1_adasrsf", "dlas:count_fs", "--no-plot"]


def _bench(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "evaluation.bench", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )


def _files(out: Path) -> dict[str, bytes]:
    (root,) = [p for p in out.glob("*/*") if p.is_dir()]  # <suite>-<version>/<code>
    keep = [*root.glob("*/*/jobs_*.csv"), root / "board.csv"]
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(keep)}


def test_ray_cells_are_the_local_cells_byte_for_byte(ray_cluster, tmp_path: Path) -> None:
    if sys.platform != "linux":  # pragma: no cover
        pytest.skip("the two-node fixture is for Linux")
    local = _bench(*ARGS, "--workers", "2", "--out", str(tmp_path / "local"))
    assert local.returncode == 0, local.stderr[-3000:]
    ray = _bench(
        *ARGS,
        "--runner",
        "ray",
        "--address",
        ray_cluster.address,
        "--out",
        str(tmp_path / "ray"),
        env=ray_cluster.env,
    )
    assert ray.returncode == 0, ray.stderr[-3000:]
    # each cell's 3 runs were Ray tasks on the cluster's nodes
    assert ray.stdout.count("tiresias-60 / lwf1_adasrsf: ray: 3 run(s) on") == 1, ray.stdout
    # the runs' CPU is the cluster's: no overhead is claimed for this command
    assert "CPU s on the Ray cluster (their cpu_s)" in ray.stdout and "overhead" not in ray.stdout
    assert "driver CPU" in ray.stdout
    got, want = _files(tmp_path / "ray"), _files(tmp_path / "local")
    assert len(want) == 1 + 2 * 3  # the board and 2 schedulers x 3 seeds
    assert got == want
