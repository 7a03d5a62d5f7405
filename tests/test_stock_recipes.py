"""Every stock-tool recipe of the docs runs as written: the ``python`` blocks of docs/usage.md
that use Gymnasium or SB3 (``gym.make``, ``MaskablePPO``, ``Monitor(``, ``check_env``,
``evaluate_policy``) run in order in one namespace, and the ``evaluate.py`` commands of
"Evaluating a stock SB3 model" run on the model its block saved; any other docs page's blocks
that use SB3 run too.  Only sizes shrink: the learners' step counts and rollouts, the seeds,
the evaluation horizon."""

from __future__ import annotations

import csv
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import sb3_contrib
import torch as th

ROOT = Path(__file__).resolve().parents[1]
USAGE = ROOT / "docs" / "usage.md"
STOCK = ("gym.make", "MaskablePPO", "Monitor(", "check_env", "evaluate_policy")


def _blocks(text: str, lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)


def _section(text: str, title: str) -> str:
    start = text.index(f"### {title}")
    end = text.find("\n#", start + 1)
    return text[start : end if end >= 0 else len(text)]


class _SmallMaskablePPO(sb3_contrib.MaskablePPO):
    """MaskablePPO with rollouts of 64 decisions unless the recipe says otherwise."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("n_steps", 64)
        kwargs.setdefault("batch_size", 64)
        super().__init__(*args, **kwargs)


def _shrunk(code: str) -> str:
    return re.sub(r"\.learn\([\d_]+\)", ".learn(128)", code)


def _recipes(page: Path) -> list[str]:
    """The page's ``python`` blocks that use SB3 (any page) or Gymnasium (usage.md)."""
    names = STOCK if page == USAGE else STOCK[1:]
    return [b for b in _blocks(page.read_text(), "python") if any(s in b for s in names)]


def _exec(recipes: list[str], where: Path) -> dict[str, Any]:
    """Run ``recipes`` in order in one namespace, learners shrunk, torch on one thread."""
    namespace: dict[str, Any] = {"__name__": "recipes"}
    threads = th.get_num_threads()
    th.set_num_threads(1)
    try:
        for code in recipes:
            exec(compile(_shrunk(code), str(where), "exec"), namespace)
    finally:
        th.set_num_threads(threads)
    return namespace


def test_other_docs_pages_sb3_recipes_run_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sb3_contrib, "MaskablePPO", _SmallMaskablePPO)
    for page in [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]:
        if page != USAGE and _recipes(page):
            _exec(_recipes(page), page)


def test_usage_stock_recipes_run_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = USAGE.read_text()
    recipes = _recipes(USAGE)
    assert len(recipes) >= 4  # Cluster-v0, Monitor / evaluate_policy, Contention-v0, stock model
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sb3_contrib, "MaskablePPO", _SmallMaskablePPO)
    namespace = _exec(recipes, USAGE)
    # the Monitor recipe logged its episodes with the JCT figures (no KeyError on truncation)
    assert len(namespace["lengths"]) == 3 and all(r < 0 for r in namespace["returns"])
    assert (tmp_path / "mppo_tiny.zip").is_file()

    # the evaluate.py commands of the stock-model section, on the model saved above
    commands = _blocks(_section(text, "Evaluating a stock SB3 model"), "bash")
    lines = [c for c in " ".join(commands).replace("\\\n", " ").splitlines() if c.strip()]
    assert len(lines) == 2
    for k, line in enumerate(lines):
        argv = shlex.split(line, comments=True)
        assert argv[:2] == [".venv/bin/python", "evaluate.py"]
        args = [a if not a.startswith("seeds=") else "seeds=[0]" for a in argv[2:]]
        out = tmp_path / f"run{k}"
        proc = subprocess.run(
            [sys.executable, str(ROOT / "evaluate.py"), *args, f"out_dir={out}", "plot=false",
             "workload.env.max_slots=200"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        with open(out / "summary.csv", newline="") as f:
            rows = {r["stack"]: r for r in csv.DictReader(f)}
        assert "policy:mppo_tiny.zip" in rows and float(rows["elastic:drf"]["avg_jct_s"]) > 0
