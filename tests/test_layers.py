"""The top-level packages are layers: every import points downward, so no two import each other.

Every ``.py`` under each package is parsed with :mod:`ast` (nothing is imported), and every
``import`` / ``from ... import`` naming another top-level package of the repository counts:
module-level, inside functions (lazy imports) and under ``if TYPE_CHECKING:`` alike.

=============  ==============================================================================
``envs``       the simulators and the Gymnasium envs: imports no other package
``agents``     learners, policies, rollouts, checkpoints of learned schedulers: ``envs``
``pretrain``   teacher datasets, behaviour cloning into the agents' policy: ``envs``, ``agents``
``training``   the training pipeline (config schema, pretraining stage, RL run, run records):
               ``envs``, ``agents``, ``pretrain``
``evaluation`` the head-to-head evaluation: ``envs``, ``agents``, ``pretrain``
``dlsched``    the public API, a facade over every layer: all five above
=============  ==============================================================================

``training`` and ``evaluation`` are siblings: neither imports the other.  Entry points sit on
top and may import anything, but no package imports them: the scripts at the root
(``train.py``, ``evaluate.py``), ``experiments/``, ``benchmarks/``, ``tools/``, ``tests/``
and a package's ``__main__.py`` (``python -m pretrain``: running the package's command, not
importing the package).  A new top-level package must be placed in :data:`LAYERS`.

``dlsched`` is the top: no package imports it (:data:`LAYERS`), and neither does any entry
point but the tests (:func:`test_nothing_but_tests_imports_the_facade`): it is the users'
way in, and the project's own code stays on the layers.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Each top-level package -> the packages it may import.
LAYERS: dict[str, frozenset[str]] = {
    "envs": frozenset(),
    "agents": frozenset({"envs"}),
    "pretrain": frozenset({"envs", "agents"}),
    "training": frozenset({"envs", "agents", "pretrain"}),
    "evaluation": frozenset({"envs", "agents", "pretrain"}),
    "dlsched": frozenset({"envs", "agents", "pretrain", "training", "evaluation"}),
}
#: The facade: only tests may import it (module docstring).
FACADE = "dlsched"
#: Directories of scripts and tests (not packages anything may import).
ENTRY_DIRS = ("experiments", "benchmarks", "tools", "tests")
#: Directories that hold no Python to check.
SKIP_DIRS = {".venv", ".git", "runs", "docs", "conf", "policies", "build", "dist"}

Imports = dict[str, dict[str, list[str]]]  # package -> imported package -> ["file:line", ...]


def local_names(root: Path) -> dict[str, str]:
    """Every importable top-level name of the repository -> ``"package"`` or ``"entry"``."""
    names: dict[str, str] = {}
    for p in sorted(root.iterdir()):
        if p.name.startswith(".") or p.name in SKIP_DIRS or p.name.endswith(".egg-info"):
            continue
        if p.is_dir() and (p / "__init__.py").is_file() and p.name not in ENTRY_DIRS:
            names[p.name] = "package"
        elif (p.is_dir() and any(p.rglob("*.py"))) or p.suffix == ".py":
            names[p.stem] = "entry"
    return names


def _imported(node: ast.AST) -> Iterator[str]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name
    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        yield node.module  # a relative import stays inside its own package


def package_imports(root: Path) -> Imports:
    """For each package (``__main__.py`` files left out: entry points), where it imports each
    other top-level name of the repository."""
    names = local_names(root)
    out: Imports = {}
    for package in (n for n, kind in names.items() if kind == "package"):
        found: dict[str, list[str]] = {}
        for path in sorted((root / package).rglob("*.py")):
            if path.name == "__main__.py":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                for module in _imported(node):
                    top = module.split(".")[0]
                    if top != package and top in names:
                        site = f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}"
                        found.setdefault(top, []).append(site)
        out[package] = found
    return out


def layer_violations(imports: Imports, layers: Mapping[str, frozenset[str]]) -> list[str]:
    """Each import of a package (or entry point) that ``layers`` does not allow."""
    bad = []
    for package, found in sorted(imports.items()):
        for target, sites in sorted(found.items()):
            if target not in layers.get(package, frozenset()):
                bad.append(f"{package} -> {target}: " + ", ".join(sites))
    return bad


def cycles(imports: Imports) -> list[list[str]]:
    """The import cycles between packages, each as its path ``[a, b, ..., a]`` (one per
    strongly connected group)."""
    graph = {p: sorted(t for t in found if t in imports) for p, found in imports.items()}
    found_cycles: list[list[str]] = []
    seen: set[str] = set()
    for start in sorted(graph):
        if start in seen:
            continue
        stack: list[tuple[str, list[str]]] = [(start, [start])]
        while stack:  # depth-first: the first path that comes back to ``start``
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    found_cycles.append([*path, start])
                    seen.update(path)
                    stack.clear()
                    break
                if nxt not in path:
                    stack.append((nxt, [*path, nxt]))
    return found_cycles


def test_every_package_has_a_layer() -> None:
    packages = {n for n, kind in local_names(ROOT).items() if kind == "package"}
    assert packages <= set(LAYERS), (
        f"new top-level package(s) {sorted(packages - set(LAYERS))}: place them in LAYERS "
        "(tests/test_layers.py) with the packages they may import"
    )
    assert {"envs", "agents", "pretrain", "training", "evaluation", FACADE} <= packages


def test_the_facade_is_the_top_layer() -> None:
    """Every other package is below ``dlsched``, and none may import it."""
    assert set(LAYERS[FACADE]) == set(LAYERS) - {FACADE}
    assert all(FACADE not in allowed for allowed in LAYERS.values())


def facade_importers(root: Path) -> list[str]:
    """Every ``import`` of the facade outside it and ``tests/``, as ``file:line``."""
    sites = []
    for top in sorted(root.iterdir()):
        name = top.name
        if name in (FACADE, "tests") or name in SKIP_DIRS or name.startswith("."):
            continue
        if name.endswith(".egg-info"):
            continue
        for path in sorted(top.rglob("*.py")) if top.is_dir() else [top]:
            if path.suffix != ".py":
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                if any(m.split(".")[0] == FACADE for m in _imported(node)):
                    sites.append(f"{path.relative_to(root)}:{getattr(node, 'lineno', 0)}")
    return sites


def test_nothing_but_tests_imports_the_facade() -> None:
    bad = facade_importers(ROOT)
    assert not bad, f"{FACADE} is imported by the project's own code: " + ", ".join(bad)


def _write_tree(root: Path, files: dict[str, str]) -> None:
    """A toy repository under ``root``: each relative path with its text."""
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def test_the_facade_check_catches_an_import(tmp_path: Path) -> None:
    files = {
        "dlsched/__init__.py": "import envs\n",
        "envs/__init__.py": "",
        "experiments/run.py": "import json\n\ndef f():\n    from dlsched.api import make\n",
        "tests/test_x.py": "import dlsched\n",
        "train.py": "import dlsched\n",
    }
    _write_tree(tmp_path, files)
    assert facade_importers(tmp_path) == ["experiments/run.py:4", "train.py:1"]


def test_the_layers_themselves_have_no_cycle() -> None:
    as_imports = {p: {t: ["LAYERS"] for t in allowed} for p, allowed in LAYERS.items()}
    assert cycles(as_imports) == []


def test_imports_point_downward() -> None:
    bad = layer_violations(package_imports(ROOT), LAYERS)
    assert not bad, "upward or sideways imports between top-level packages:\n" + "\n".join(bad)


def test_no_import_cycle_between_packages() -> None:
    imports = package_imports(ROOT)
    found = cycles(imports)
    detail = []
    for cycle in found:
        sites = "; ".join(f"{a}->{b} at {imports[a][b][0]}" for a, b in itertools.pairwise(cycle))
        detail.append(" -> ".join(cycle) + f"  ({sites})")
    assert not found, "import cycles between top-level packages:\n" + "\n".join(detail)


@pytest.fixture
def tangled(tmp_path: Path) -> Path:
    """A repository where ``agents`` and ``pretrain`` import each other (as they once did),
    ``envs`` imports ``agents`` lazily and ``agents`` imports an experiment script."""
    files = {
        "envs/__init__.py": "",
        "envs/sim.py": "def f():\n    from agents.policy import P\n",
        "agents/__init__.py": "",
        "agents/config.py": "import json\nfrom pretrain.bc import BCConfig\nfrom . import policy\n",
        "agents/policy.py": "import experiments.headroom\nP = 1\n",
        "pretrain/__init__.py": "",
        "pretrain/bc.py": "from agents.policy import P\nfrom envs import sim\n",
        "pretrain/__main__.py": "from training.config import X\n",  # an entry point: fine
        "training/__init__.py": "",
        "training/config.py": "from pretrain.bc import BCConfig\nX = 1\n",
        "experiments/headroom.py": "from agents.config import *\n",
        "train.py": "from training.config import X\n",
    }
    _write_tree(tmp_path, files)
    return tmp_path


def test_the_checks_catch_cycles_and_upward_imports(tangled: Path) -> None:
    imports = package_imports(tangled)
    assert imports["training"] == {"pretrain": ["training/config.py:1"]}
    assert layer_violations(imports, LAYERS) == [
        "agents -> experiments: agents/policy.py:1",
        "agents -> pretrain: agents/config.py:2",
        "envs -> agents: envs/sim.py:2",
    ]
    assert cycles(imports) == [
        ["agents", "pretrain", "agents"],
        ["envs", "agents", "pretrain", "envs"],
    ]


# ------------------------------------------------------------------ cycles between modules


def module_graph(root: Path) -> dict[str, set[str]]:
    """Each module of the packages -> the modules of the packages it imports (lazy imports
    included); a module importing its own package's ``__init__`` does not count (Python runs
    the ``__init__`` first anyway)."""
    mods: dict[str, Path] = {}
    for package in (n for n, kind in local_names(root).items() if kind == "package"):
        for path in (root / package).rglob("*.py"):
            if path.name != "__main__.py":
                name = ".".join(path.relative_to(root).with_suffix("").parts)
                mods[name.removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {}
    for m, path in mods.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets.update(_imported(node))
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets.update(f"{node.module}.{a.name}" for a in node.names)
        graph[m] = {t for t in targets if t in mods and t != m and not m.startswith(f"{t}.")}
    return graph


def module_cycles(root: Path) -> list[list[str]]:
    """The import cycles between modules (:func:`module_graph`), each as its sorted strongly
    connected group."""
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    graph = module_graph(root)
    names = sorted(graph)
    at = {m: i for i, m in enumerate(names)}
    edges = [(at[a], at[b]) for a, ts in graph.items() for b in ts]
    rows, cols = zip(*edges, strict=True) if edges else ((), ())
    adj = csr_matrix(([1] * len(edges), (rows, cols)), shape=(len(names), len(names)))
    _, label = connected_components(adj, directed=True, connection="strong")
    groups: dict[int, list[str]] = {}
    for m, lab in zip(names, label, strict=True):
        groups.setdefault(int(lab), []).append(m)
    return sorted(g for g in groups.values() if len(g) > 1)


#: Cycles inside ``envs`` that are known and left for later (the engine's core and its
#: preemptive and reference loops); any other cycle fails the test below (the rewards <->
#: env and env <-> factory cycles were removed).
KNOWN_CYCLES = [
    ["envs.sim.engine.core", "envs.sim.engine.preemption", "envs.sim.engine.reference"],
]


def test_no_new_import_cycle_between_modules() -> None:
    """Modules import each other in one direction, lazy imports included (``training.plan``
    and ``training.run`` used to import each other lazily; the baselines they share are
    :mod:`training.baselines` now)."""
    found = module_cycles(ROOT)
    assert [c for c in found if c not in KNOWN_CYCLES] == []


def test_module_cycles_finds_a_lazy_cycle(tmp_path: Path) -> None:
    pkg = tmp_path / "training"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from training.b import g\n")
    (pkg / "b.py").write_text("from training import a\n\ndef g():\n    pass\n")
    (pkg / "c.py").write_text("from training.a import f\n")
    assert module_cycles(tmp_path) == [["training.a", "training.b"]]


# ------------------------------------------------------ the env's state through its contract

#: Where code outside the env package lives.
OUTSIDE_ENVS = (
    "agents", "pretrain", "training", "evaluation", "dlsched", "experiments", "tools",
    "benchmarks",
)  # fmt: skip


def private_env_reads(root: Path, folders: Sequence[str] = OUTSIDE_ENVS) -> list[str]:
    """Each read of a private attribute (``_name``, not a dunder) of an env-like object —
    rooted at a name containing ``env`` or ``sim`` (``env``, ``val_env``, ``envs[i]``,
    ``env.simulator``, ``sim``) or ``e`` — in ``folders``: the env's and its simulator's state
    are read through their public contracts (``envs/gym/cluster/state.py``)."""
    found = []
    for folder in folders:
        for path in sorted((root / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
                    continue
                if node.attr.startswith("__"):
                    continue
                base = node.value
                while isinstance(base, ast.Subscript | ast.Attribute):  # to the chain's root
                    base = base.value
                if isinstance(base, ast.Name) and (
                    "env" in base.id or "sim" in base.id or base.id == "e"
                ):
                    found.append(f"{path.relative_to(root)}:{node.lineno} {base.id}.{node.attr}")
    return found


def test_no_private_env_attribute_is_read_outside_envs() -> None:
    assert private_env_reads(ROOT) == []


def test_private_env_reads_finds_them(tmp_path: Path) -> None:
    (tmp_path / "agents").mkdir()
    (tmp_path / "agents" / "a.py").write_text(
        "def f(env, envs, e, other, sim):\n"
        "    return env._mask, envs[0]._t, e._obs(), other._x, env.__class__, env.live_mask\n"
        "def g(env, sim):\n"
        "    return env.simulator._cpu_util, sim._gpu_util, sim.utilisation\n"
    )
    assert sorted(private_env_reads(tmp_path, ["agents"])) == [
        "agents/a.py:2 e._obs",
        "agents/a.py:2 env._mask",
        "agents/a.py:2 envs._t",
        "agents/a.py:4 env._cpu_util",
        "agents/a.py:4 sim._gpu_util",
    ]


def test_experiments_do_not_edit_sys_path() -> None:
    """The scripts import the installed project and each other by bare name (their directory
    is first on ``sys.path`` when run); none edits ``sys.path`` (issue 33)."""
    edits = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in sorted((ROOT / "experiments").glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute)
        and node.attr == "path"
        and isinstance(node.value, ast.Name)
        and node.value.id == "sys"
    ]
    assert edits == []
