"""experiments/dl2_search.py drives :func:`agents.search.rollout_search`: its table row is the
search's result (the search itself is tested in tests/agents/test_search.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from agents.search import rollout_search
from envs.gym.factory import EnvConfig
from experiments.dl2_search import main
from pretrain.dataset import TeacherDataset


def test_the_table_is_the_searchs_and_save_writes_its_decisions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    main(["--setting", "tiny", "--seeds", "2000", "--save", str(tmp_path / "d.npz")])
    out = capsys.readouterr().out
    r = rollout_search(EnvConfig(setting="tiny"), 2000, search_seed=2000)
    row = next(line for line in out.splitlines() if line.startswith("| 2000"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:4] == [f"{r.base_jct:.2f}", f"{r.jct:.2f}", f"{r.change_pct:+.1f}%"]
    data = TeacherDataset.load(tmp_path / "d.npz")
    assert data.actions.tolist() == r.actions and set(np.unique(data.episodes)) == {0}
