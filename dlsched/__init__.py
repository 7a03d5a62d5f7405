"""dlsched's public API: the Gymnasium envs, one simulation, the evaluation, trained policies.

Importing the package registers the three env ids (Gymnasium 1.x's convention), so that::

    import gymnasium as gym
    import dlsched

    gym.register_envs(dlsched)  # a no-op that keeps linters from removing the import
    env = gym.make("dlsched/Cluster-v0", setting="tiny")

- :func:`make` — an env by id or by setting name, with overrides (``gymnasium.make``);
- :func:`simulate` — one scheduler on one seed's workload, as one run of ``evaluate.py``;
- :func:`evaluate` — the whole ``evaluate.py`` pipeline in this process (tables, run dir);
- :func:`load_policy` — a released or trained policy, with ``predict`` / ``act``.

Bad names and keys raise :class:`ConfigError` (one line naming them).  Only Gymnasium's
registry is imported with the package; the simulator, torch, Hydra and Ray are imported by the
call that needs them.  ``dlsched`` is a facade above the layers (``envs``, ``agents``,
``pretrain``, ``training``, ``evaluation``): nothing in the project imports it.  Guide:
docs/api.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from gymnasium.envs.registration import register, registry

from dlsched.api import ENTRY_POINTS, ENV_IDS, Evaluation, evaluate, make, simulate
from dlsched.policies import Policy, load_policy, released_policies

if TYPE_CHECKING:
    from envs.sim.errors import ConfigError

__all__ = [
    "ENV_IDS",
    "LAYERS",
    "ConfigError",
    "Evaluation",
    "Policy",
    "__version__",
    "evaluate",
    "load_policy",
    "make",
    "released_policies",
    "simulate",
]

#: The project's top-level packages, installed beside ``dlsched`` under generic names.
LAYERS: tuple[str, ...] = ("envs", "agents", "pretrain", "training", "evaluation")


def _check_layers() -> None:
    """An ``ImportError`` naming the package when a top-level ``envs`` (``agents``, ...) that
    Python would import is not the one installed beside ``dlsched``: another distribution or a
    folder on ``sys.path`` shadows it (docs/api.md, "Package names").  Finds, imports nothing."""
    from importlib.util import find_spec

    root = Path(__file__).resolve().parent.parent
    for name in LAYERS:
        spec = find_spec(name)
        origin = spec.origin if spec is not None else None
        want = root / name / "__init__.py"
        if origin is None:
            raise ImportError(
                f"dlsched: the top-level package {name!r} is not found as a regular package "
                f"(dlsched's is {want.parent}); reinstall dlsched (pip install -e .)"
            )
        if Path(origin).resolve() != want:
            raise ImportError(
                f"dlsched: the top-level package {name!r} comes from {origin}, not dlsched's "
                f"{want.parent}: something else on sys.path provides a package of that name; "
                "install dlsched in a virtual environment of its own (docs/api.md, "
                "'Package names')"
            )


_check_layers()

for _id, _entry_point in ENTRY_POINTS.items():
    if _id not in registry:  # ``envs.gym`` (or an earlier import) may have registered it
        register(id=_id, entry_point=_entry_point)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dlsched")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"


#: The installed distribution's version (``pyproject.toml``).
__version__: str = _version()


def __getattr__(name: str) -> Any:
    """``ConfigError`` on first use (it lives in ``envs.sim``, which imports the simulator)."""
    if name == "ConfigError":
        from envs.sim.errors import ConfigError

        return ConfigError
    raise AttributeError(f"module 'dlsched' has no attribute {name!r}")
