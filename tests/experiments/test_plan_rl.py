"""experiments/plan_rl.py on ``tiny``: clone + EpisodePG + held-out table end to end; the
clone of the constant EfficientSRTF teacher is EfficientSRTF on every test workload."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from experiments.plan_rl import main


def test_plan_rl_smoke(tmp_path: Path) -> None:
    main(["--setting", "tiny", "--seeds", "0", "--iterations", "2", "--groups", "2",
          "--group-size", "2", "--val-every", "1", "--val-seeds", "100-101",
          "--bc-seeds", "2000-2001", "--bc-epochs", "20", "--test-seeds", "300-302",
          "--out", str(tmp_path)])  # fmt: skip
    rec = json.loads((tmp_path / "results.json").read_text())
    curve = rec["runs"][0]["curve"]
    assert [c["iteration"] for c in curve] == [0, 1, 2]
    test = {k: np.asarray(v) for k, v in rec["test"].items()}
    assert set(test) == {"learned", "clone", "esrtf", "esrtf_load", "optimus", "drf"}
    np.testing.assert_array_equal(test["clone"][0], test["esrtf"])
    assert (tmp_path / "table.md").read_text().count("\n| ") == 7  # header + 6 rows


def test_plan_rl_refuses_reserved_bc_seeds(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main(["--bc-seeds", "300-301", "--out", str(tmp_path)])
