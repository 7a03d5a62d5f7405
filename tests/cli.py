"""Running the project's commands as a user would, for the tests: ``python <script> args`` in
the repository root, output captured, with a time limit (a hang fails the test)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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


def train_in_process(overrides: list[str], out: Path) -> dict[str, Any]:
    """What ``python train.py *overrides`` does, in this process (its key check, then
    ``training.run.train`` into ``out``, which must exist): the run's summary.  Torch's
    threads and random state are this process's own again afterwards; a refusal raises its
    :class:`~envs.sim.errors.ConfigError`."""
    import torch as th
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    import train
    from training.run import to_train_config
    from training.run import train as run_train

    with initialize_config_dir(str(ROOT / "conf"), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    threads = th.get_num_threads()  # a run sets torch's threads and seed: this process's own
    try:
        with th.random.fork_rng():
            train._check_keys(cfg)
            resolved = OmegaConf.to_container(cfg, resolve=True)  # as train.py records it
            return run_train(to_train_config(cfg), out, resolved)  # type: ignore[arg-type]
    finally:
        th.set_num_threads(threads)


def train_refusal(overrides: list[str], out: Path) -> str:
    """:func:`train_in_process` for a run refused before it trains: the message of the
    :class:`ConfigError` that train.py prints as its one line (and exits 2).  Fails the test
    if the run is not refused."""
    import pytest

    from envs.sim.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        train_in_process(overrides, out)
    return str(err.value)
