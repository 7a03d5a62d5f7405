"""``experiments/`` holds drivers only (issue 33): a script is a list of ``train.py`` /
``evaluate.py`` / library calls and a table; the logic a user of the library would want lives
in the library, where it is tested.

Every ``experiments/*.py`` is parsed with :mod:`ast` (nothing is imported).  Three
measurable marks of library logic are refused:

- **an env loop**: a call of a method named ``step`` (``env.step(a)``): episodes are driven
  by the library (:func:`agents.episode_pg.run_episode`,
  :meth:`~envs.gym.heuristic.HeuristicDriver.run_episode`, :mod:`agents.search`);
- **a class with behaviour**: a class with a base class or a method (a subclass of a
  simulator, a learner, a result type with properties); a plain record (fields only, e.g. a
  frozen dataclass of a run's settings) is allowed;
- **a gradient step**: a ``.backward()`` call or a ``torch.optim`` optimizer: training loops
  are :mod:`training` and :mod:`agents`.

Before the drivers were thinned, each rule failed: ``.step(`` in ``dl2_search.py``,
``contention_search.py`` and ``contention_h2h.py``; classes with methods in ``dl2_search.py``
(``SearchResult``, ``Decisions``) and ``dl2_speed_models.py`` (a simulator subclass); a
gradient step in ``contention_h2h.py`` (its own behaviour cloning).
:func:`test_the_rules_catch_library_logic` shows each rule firing on such code.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def library_logic(source: str, name: str = "<script>") -> list[str]:
    """Each mark of library logic in ``source`` (module docstring): ``"name:line: what"``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        line = getattr(node, "lineno", 0)
        where = f"{name}:{line}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr == "step":
                found.append((line, f"{where}: an env loop (.step() call)"))
            elif node.func.attr == "backward":
                found.append((line, f"{where}: a gradient step (.backward() call)"))
        elif isinstance(node, ast.Attribute) and node.attr == "optim":
            found.append((line, f"{where}: an optimizer (torch.optim)"))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").endswith(".optim"):
            found.append((line, f"{where}: an optimizer (from {node.module} import)"))
        elif isinstance(node, ast.ClassDef):
            methods = [n.name for n in node.body if isinstance(n, ast.FunctionDef)]
            if node.bases or methods:
                what = f"class {node.name} (bases: {len(node.bases)}, methods: {methods})"
                found.append((line, f"{where}: {what}"))
    return [hit for _, hit in sorted(found)]


def test_experiments_define_no_library_logic() -> None:
    scripts = sorted((ROOT / "experiments").glob("*.py"))
    assert len(scripts) > 10  # the directory is where this test thinks it is
    found = [
        hit
        for p in scripts
        for hit in library_logic(p.read_text(encoding="utf-8"), f"experiments/{p.name}")
    ]
    assert not found, "library logic in experiments/ (move it into the library):\n" + "\n".join(
        found
    )


def test_the_rules_catch_library_logic() -> None:
    loop = "def finish(env, rule):\n    while True:\n        env.step(rule(env))\n"
    assert library_logic(loop) == ["<script>:3: an env loop (.step() call)"]
    subclass = "class Shadow(Simulator):\n    x = 1\n"
    assert library_logic(subclass) == ["<script>:1: class Shadow (bases: 1, methods: [])"]
    behaviour = "class Result:\n    @property\n    def pct(self):\n        return 1\n"
    assert library_logic(behaviour) == ["<script>:1: class Result (bases: 0, methods: ['pct'])"]
    grad = "import torch as th\nopt = th.optim.Adam(p)\nloss.backward()\n"
    assert library_logic(grad) == [
        "<script>:2: an optimizer (torch.optim)",
        "<script>:3: a gradient step (.backward() call)",
    ]
    assert library_logic("from torch.optim import Adam\n") == [
        "<script>:1: an optimizer (from torch.optim import)"
    ]
    record = (
        "from dataclasses import dataclass\n\n@dataclass(frozen=True)\nclass Run:\n"
        "    name: str\n    clusters: tuple[int, ...]\n"
    )
    driver = "r = run_episode(env, 0, act=rule)\nprint(markdown_table(rows, headers))\n"
    assert library_logic(record) == [] and library_logic(driver) == []
