"""The envs, one simulation and the evaluation: thin, typed wrappers over the project's layers.

Each function imports what it runs when it is called (``import dlsched`` stays light):

- :func:`make` — ``gymnasium.make`` of a dlsched env id, or of ``dlsched/Cluster-v0`` with a
  setting name (the factory :func:`envs.gym.factory.gym_make`: the keys of
  :class:`~envs.gym.factory.EnvConfig`);
- :func:`simulate` — one scheduler on one seed's workload, the run ``evaluate.py`` makes of
  that pair (:func:`evaluation.pipeline.make_plan`, then :func:`evaluation.kinds.run_task`);
- :func:`evaluate` — :func:`evaluation.pipeline.evaluate` in this process, as ``evaluate.py``
  runs it: the tables, per-job CSVs, plots and ``run.json`` in a run directory.

:func:`simulate` and :func:`evaluate` take ``evaluate.py``'s config: its ``key=value``
overrides as strings (``"seeds=[0,1]"``, ``"workload.kind=generator"``, ``"workload=philly"``
to pick ``conf/workload/philly.yaml``) and/or top-level keys as keyword arguments
(``seeds=[0, 1]``, ``workload={"kind": "generator", "num_jobs": 20}``); the schema is
:class:`evaluation.config.EvaluateConfig`, whose defaults are ``conf/evaluate.yaml``'s.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import gymnasium as gym

    from evaluation.config import EvaluateConfig
    from evaluation.runs import RunOutput

__all__ = ["ENTRY_POINTS", "ENV_IDS", "Evaluation", "evaluate", "make", "simulate"]

#: The Gymnasium ids of dlsched's envs -> their entry points, the same as ``envs.gym``
#: registers (tests/test_package.py checks that the two agree).  As strings, so that
#: ``import dlsched`` does not import the envs: ``gymnasium.make`` imports one when it is made.
ENTRY_POINTS: dict[str, str] = {
    # the factory: the keys of the Hydra env config (any setting, speed mode, features)
    "dlsched/Cluster-v0": "envs.gym.factory:gym_make",
    # one action per slot: which allocator plans it
    "dlsched/ClusterPlan-v0": "envs.gym.plan_env:PlanEnv",
    # job-level decisions in the contention engine
    "dlsched/Contention-v0": "envs.gym.contention_env:ContentionEnv",
}
#: The env ids, in the order above.
ENV_IDS: tuple[str, ...] = tuple(ENTRY_POINTS)

#: ``gymnasium.make``'s own keyword arguments (not passed to the env)
_MAKE_KEYS = frozenset({"max_episode_steps", "disable_env_checker"})
#: Keys of a whole evaluation that one :func:`simulate` run does not take.
_EVALUATION_KEYS = (
    "stacks",
    "seeds",
    "baseline",
    "workers",
    "runner",
    "out_dir",
    "resume",
    "overwrite",
    "plot",
)


def make(env: str = "dlsched/Cluster-v0", /, **kwargs: Any) -> gym.Env[Any, Any]:
    """A dlsched env by id, or ``dlsched/Cluster-v0`` in a named setting, through
    ``gymnasium.make`` (so with its wrappers; ``.unwrapped`` is the env's class).

    ``env``: one of :data:`ENV_IDS` (``"Cluster-v0"`` without the namespace also works), or a
    setting of :data:`envs.gym.factory.SETTINGS` (``"tiny"``, ``"small"``, ``"medium"``,
    ``"large"``, ``"ada"``, ``"ada_builtin"``), which means ``dlsched/Cluster-v0`` with that
    ``setting``.  ``kwargs`` go to the env's entry point: for ``Cluster-v0`` the keys of
    :class:`~envs.gym.factory.EnvConfig` (``overrides={"num_jobs": 6}``, ``reward``,
    ``speed``, ``features``, ...) and ``seed``, checked as ``train.py``'s ``env=`` is.

    ``make("tiny", overrides={"num_jobs": 6})`` is
    ``gymnasium.make("dlsched/Cluster-v0", setting="tiny", overrides={"num_jobs": 6})``.
    An unknown id, setting or keyword is a :class:`~envs.sim.errors.ConfigError` naming it.
    """
    import gymnasium as gym

    from envs.gym.factory import SETTINGS
    from envs.sim.errors import ConfigError

    if not isinstance(env, str):
        raise ConfigError(f"make: env must be an env id or a setting name, got {env!r}")
    if env in ENV_IDS or f"dlsched/{env}" in ENV_IDS:
        env_id = env if env in ENV_IDS else f"dlsched/{env}"
    elif env in SETTINGS:
        if "setting" in kwargs:
            raise ConfigError(
                f"make({env!r}, setting={kwargs['setting']!r}): the setting is given twice"
            )
        env_id, kwargs = "dlsched/Cluster-v0", {"setting": env, **kwargs}
    else:
        raise ConfigError(
            f"unknown env {env!r}: neither an env id {list(ENV_IDS)} nor a setting of "
            f"dlsched/Cluster-v0 {sorted(SETTINGS)}"
        )
    _check_keywords(env_id, kwargs)
    return gym.make(env_id, **kwargs)


def _check_keywords(env_id: str, kwargs: Mapping[str, Any]) -> None:
    """A keyword the entry point does not take (one without ``**kwargs``) is a
    :class:`ConfigError` naming it, not a ``TypeError`` from inside ``gymnasium.make``."""
    import inspect

    from gymnasium.envs.registration import load_env_creator, registry

    from envs.sim.errors import ConfigError

    entry_point = registry[env_id].entry_point
    creator = load_env_creator(entry_point) if isinstance(entry_point, str) else entry_point
    if creator is None:
        return
    params = inspect.signature(creator).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return  # the entry point checks its keywords itself (Cluster-v0, ClusterPlan-v0)
    unknown = sorted(set(kwargs) - set(params) - _MAKE_KEYS)
    if unknown:
        raise ConfigError(f"{env_id}: unknown keyword(s) {unknown}; it takes {sorted(params)}")


def _config(
    overrides: Sequence[str], values: Mapping[str, Any]
) -> tuple[EvaluateConfig, dict[str, Any]]:
    """:func:`evaluation.compose.compose`: ``evaluate.py``'s config without Hydra."""
    from evaluation.compose import compose

    return compose(overrides, values)


def simulate(scheduler: str, *overrides: str, seed: int = 0, **config: Any) -> RunOutput:
    """Run one scheduler on one seed's workload in this process and return the run: exactly
    the run ``evaluate.py stacks=[<scheduler>] seeds=[<seed>] ...`` makes of that pair (the
    same validation, workload and simulator), without writing anything.

    ``scheduler``: an ``evaluate.py`` scheduler spec: a contention-engine stack
    (``"lwf1_adasrsf"``, ``"fifo:lwf4_srsf2"``), ``"elastic:<allocator>"``,
    ``"policy:<path>"``, ``"contention:<srsf | exclusive | policy.npz>"`` or ``"bound:solo"``.
    ``overrides`` / ``config``: the rest of ``evaluate.py``'s config (module docstring), e.g.
    ``workload={"kind": "generator", "num_jobs": 20}``, ``mode="reference"``,
    ``fidelity="fast"``; the keys of a whole evaluation (``stacks``, ``seeds``, ``out_dir``,
    ``workers``, ...) are :func:`evaluate`'s.

    Returns the :class:`~evaluation.runs.RunOutput`: per-job ``submit_s`` / ``start_s`` /
    ``finish_s`` (``jct_s``, ``queue_s``), ``makespan_s``, ``gpu_util``; for a
    contention-engine stack the times are the engine's ms / the workload's ms per second
    (1000 for the generated and shipped Ada-SRSF workloads).  A bad scheduler, key or value is
    a :class:`~envs.sim.errors.ConfigError` naming it.
    """
    from envs.numerics import use_portable
    from envs.sim.errors import ConfigError
    from evaluation.kinds import run_task
    from evaluation.pipeline import make_plan

    use_portable()  # the same bits on every x86-64 machine (envs/numerics.py)
    given = set(config) | {o.partition("=")[0].split(".")[0] for o in overrides if "=" in o}
    extra = [k for k in _EVALUATION_KEYS if k in given]
    if extra:
        raise ConfigError(
            f"simulate: {extra} configure a whole evaluation (dlsched.evaluate); simulate runs "
            "one scheduler on one seed in this process"
        )
    if not isinstance(scheduler, str) or not scheduler:
        raise ConfigError(f"simulate: scheduler must be a scheduler spec, got {scheduler!r}")
    values = {**config, "stacks": [scheduler], "seeds": [seed], "workers": 1, "plot": False}
    cfg, _ = _config(overrides, values)
    plan = make_plan(cfg)
    return run_task(plan.tasks[0])


@dataclass(frozen=True)
class Evaluation:
    """What :func:`evaluate` gives back.

    ``rows``: the summary rows as :func:`evaluation.pipeline.evaluate` returns them (per run,
    then each scheduler's mean over seeds when there are several; keys ``stack``, ``seed``,
    ``avg_jct_s``, ...);
    ``run_dir``: the run directory; ``summary``: ``summary.md``'s text (the tables)."""

    rows: list[dict[str, Any]]
    run_dir: Path
    summary: str


def evaluate(*overrides: str, verbose: bool = False, **config: Any) -> Evaluation:
    """``evaluate.py`` in this process: every scheduler of ``stacks`` on every seed's
    workload, the run directory written (``summary.md`` / ``.csv``, per-job CSVs, plots,
    ``run.json``) and the summary rows returned.

    ``overrides``: ``evaluate.py``'s command-line overrides as strings (``"seeds=[0,1,2]"``,
    ``"workload=philly"``); ``config``: top-level keys (``stacks=[...]``, ``seeds=[...]``,
    ``workload={...}``, ``out_dir=...``, ``workers=1``), read as ``evaluate.py`` reads its
    config (module docstring).  ``out_dir`` defaults to ``runs/<date>_<time>_evaluate``
    under the current directory, as ``evaluate.py``'s; a directory holding an earlier run
    is refused unless ``resume=True`` or ``overwrite=True``.  ``workers=0`` (the default)
    runs one process per core.  The tables are printed as ``evaluate.py`` prints them only
    when ``verbose`` (warnings and progress lines go to stderr either way).

    A bad scheduler, key or value is a :class:`~envs.sim.errors.ConfigError` naming it, before
    anything runs; Ctrl-C raises :class:`evaluation.pipeline.Interrupted` with the finished
    runs kept (resume with ``resume=True``).
    """
    from envs.files import os_error
    from envs.numerics import use_portable
    from evaluation.pipeline import evaluate as run_evaluation

    use_portable()  # the same bits on every x86-64 machine (envs/numerics.py)
    cfg, resolved = _config(overrides, config)
    run_dir = Path(cfg.out_dir)
    made = not run_dir.exists()
    try:
        run_dir.mkdir(parents=True, exist_ok=True)  # Hydra makes it for evaluate.py
    except OSError as exc:
        raise os_error(run_dir, exc, "make the run directory") from None
    out = io.StringIO()
    try:
        with contextlib.nullcontext() if verbose else contextlib.redirect_stdout(out):
            rows = run_evaluation(cfg, run_dir, resolved)
    except BaseException:
        if made and run_dir.is_dir() and not any(run_dir.iterdir()):
            run_dir.rmdir()  # failed before writing anything: leave no empty directory
        raise
    return Evaluation(rows, run_dir, (run_dir / "summary.md").read_text(encoding="utf-8"))
