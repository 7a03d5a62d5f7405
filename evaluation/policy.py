"""``policy:<path>``: a trained DL²-style policy, evaluated through the DL² Gymnasium env.

``path`` is what :func:`agents.checkpoint.load_policy` takes: a policy file ``policy.npz`` of a
``dlsched/Cluster-v0`` network (the one format, :mod:`agents.policy_file`; or a directory
holding one), a checkpoint directory (``model.zip`` + ``meta.json``), a ``model.zip``, or older
pretrained weights ``policy.pt`` (+ ``policy.json``); relative paths are relative to the
directory ``evaluate.py`` was started in. Its recorded training env (``meta["env"]``) is the
default evaluation env of workload kind ``env``. Actions: masked argmax or draws from the
masked softmax with ``numpy.random.default_rng([policy_eval.sample_seed, workload seed])``, so
that each seed's run is reproducible whatever other seeds run; by default as the policy was
validated in training (:func:`act_deterministic`).

``path`` may also be a stock SB3 model (``model.save("x.zip")`` of ``PPO``, ``MaskablePPO``,
``A2C``, any activation): a ``.zip`` that no ``meta.json`` beside it attributes to a learner of
``train.py``.  Its policy is loaded alone (:func:`agents.policy.policy_from_zip`), it acts with
the env's action masks like every policy here (also a ``PPO`` trained without masks), and its
default is sampled actions (``policy_eval.deterministic=true``: argmax).  It records no
training env: give the evaluation env (``workload.env.setting=...``) it was trained in.

The parent process reads only the JSON metadata (no torch); each worker process loads the
network once (:func:`agents.checkpoint.load_policy`, or :func:`agents.policy.policy_from_zip`)
and acts with its numpy copy (:class:`agents.policy.NumpyPolicy`), or, for a network that copy
cannot mirror, with the torch network itself (:class:`agents.policy.TorchPolicy`; a note on
stderr and ``inference_reason`` in ``run.json`` say why).

``path`` may also be a ``dlsched/ClusterPlan-v0`` policy: a ``policy.npz`` (or a directory
holding one) whose layout names that env. It acts in the same ``Cluster-v0`` env as every other
scheduler: at each slot's start it picks the allocator that plans the slot
(:class:`envs.gym.plan_env.PlanActor`), exactly as in training. Its recorded inner env config
is its training env. Its metadata lives inside the ``.npz``, so the parent process loads that
network too (with torch)."""

from __future__ import annotations

import copy
import functools
import json
import sys
from collections import OrderedDict
from collections.abc import Hashable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from hydra.utils import to_absolute_path

from envs.memo import file_stamp, memo
from envs.sim import ConfigError
from evaluation.config import EvaluateConfig
from evaluation.runs import RunOutput, RunTask

if TYPE_CHECKING:
    from agents.episode_results import Actor
    from agents.plan_policy import PlanPolicy
    from agents.policy import NumpyPolicy, TorchPolicy
    from envs.gym.cluster_env import ClusterEnv

__all__ = ["PolicyKind", "act_deterministic", "checkpoint_meta", "policy_path"]

_NPZ = "policy.npz"


def act_deterministic(setting: bool | None, meta: dict[str, Any]) -> bool:
    """Argmax or sampling: the setting when given, else the policy's recorded ``act``
    (``"argmax"`` / ``"sampled"``), else sampled (``train.py``'s validation default)."""
    if setting is not None:
        return bool(setting)
    act = meta.get("act", "sampled")
    if act not in ("argmax", "sampled"):
        raise ConfigError(f"the policy's recorded act must be 'argmax' or 'sampled', got {act!r}")
    return act == "argmax"


def policy_path(arg: str) -> Path:
    """The checkpoint path of ``policy:<arg>`` (absolute)."""
    return Path(to_absolute_path(arg))


def _read_json(path: Path, required: bool) -> dict[str, Any]:
    if not path.is_file():
        if required:
            raise ConfigError(
                f"{path}: missing; the policy's weights need it (how to rebuild the network)"
            )
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not readable JSON ({exc})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return data


def _npz(path: Path) -> Path | None:
    """The policy file (``.npz``) at ``path``: the file, or a directory's ``policy.npz``."""
    if path.is_dir() and (path / _NPZ).is_file():
        return path / _NPZ
    return path if path.suffix == ".npz" else None


#: The policy files' metadata this process read (:func:`_file_meta`).
_METAS: OrderedDict[Hashable, dict[str, Any]] = OrderedDict()


def _file_meta(npz: Path) -> dict[str, Any]:
    """The metadata of the policy file ``npz`` (:func:`agents.policy_file.read_meta`: the
    JSON entry only, no network built); read once per process and file (by its size and
    mtime: checking a scheduler, its training env and its runs each ask), a copy each time."""
    from agents.policy_file import read_meta

    stamp = file_stamp(npz)
    if stamp is None:
        return read_meta(npz)
    return copy.deepcopy(memo(_METAS, stamp, lambda: read_meta(npz)))


def plan_file(path: Path) -> Path | None:
    """The ``.npz`` of an EpisodePG policy at ``path`` (a file or a directory holding
    ``policy.npz``: a ClusterPlan-v0 policy, or a Contention-v0 one, which the plan loader
    refuses with a line saying how to evaluate it), else ``None`` (also for a
    ``dlsched/Cluster-v0`` network's policy file, which :func:`load_network` loads)."""
    from agents.policy_file import CLUSTER_ID

    npz = _npz(path)
    if npz is None or not npz.is_file():
        return npz
    return None if _file_meta(npz)["layout"]["env_id"] == CLUSTER_ID else npz


def _network_meta(npz: Path) -> dict[str, Any]:
    """A ``Cluster-v0`` policy file's metadata, with its network config as ``policy`` (as a
    checkpoint's ``meta.json`` has it)."""
    meta = _file_meta(npz)
    return {**meta, "policy": dict(meta["net"].get("policy") or {})}


@functools.lru_cache(maxsize=4)
def _load_plan(path: str) -> PlanPolicy:
    """A saved plan policy (its ``env`` the inner env config), loaded once per process."""
    from agents.plan_policy import PlanPolicy

    return PlanPolicy.load(path)


def _plan_meta(policy: PlanPolicy) -> dict[str, Any]:
    return {
        **(policy.meta or {}),
        "env": policy.env,
        "plans": list(policy.plans),
        "any_window": policy.any_window,
    }


def checkpoint_meta(path: Path) -> dict[str, Any]:
    """The metadata of a policy checkpoint (the layouts :func:`load_policy` accepts, or a
    plan policy's ``.npz``), without loading an SB3 network; :class:`ConfigError` for a
    missing or unknown layout."""
    plan = plan_file(path)
    if plan is not None:
        if not plan.is_file():
            raise ConfigError(f"policy file {str(plan)!r} not found")
        return _plan_meta(_load_plan(str(plan)))
    npz = _npz(path)
    if npz is not None:  # a dlsched/Cluster-v0 network's policy file
        return _network_meta(npz)
    if path.is_dir():
        if (path / "model.zip").is_file():
            return _read_json(path / "meta.json", required=False)
        if (path / "policy.pt").is_file():
            return _read_json(path / "policy.json", required=True)
        raise ConfigError(
            f"policy {path}: neither a checkpoint (model.zip) nor policy.npz nor policy.pt"
        )
    if not path.is_file():
        raise ConfigError(f"policy checkpoint {str(path)!r} not found")
    if path.suffix == ".zip":
        return _read_json(path.parent / "meta.json", required=False)
    if path.suffix == ".pt":
        return _read_json(path.with_suffix(".json"), required=True)
    raise ConfigError(
        f"policy {path}: expected a checkpoint directory, model.zip, policy.pt or policy.npz"
    )


def _stock_zip(path: Path, meta: dict[str, Any]) -> Path | None:
    """The ``.zip`` at ``path`` (a file, or a directory's ``model.zip``) when no ``meta.json``
    names the learner that saved it (``class``, which ``train.py`` records): a stock SB3 model
    (``model.save(...)`` of PPO, MaskablePPO, A2C, ...), whose policy is loaded alone."""
    if "class" in meta:
        return None
    if path.is_dir():
        path = path / "model.zip"
    return path if path.suffix == ".zip" and path.is_file() else None


@functools.lru_cache(maxsize=4)
def load_network(path: str) -> tuple[NumpyPolicy | TorchPolicy, dict[str, Any]]:
    """The policy of ``path`` for acting, loaded once per process: its numpy copy, or the
    torch network itself where the numpy copy cannot mirror it (a note on stderr says why)."""
    from agents.checkpoint import load_policy, verify_checkpoint
    from agents.policy import TorchPolicy, inference_policy, policy_from_zip

    p = Path(path)
    meta = checkpoint_meta(p)
    npz = _npz(p)
    stock = None if npz is not None else _stock_zip(p, meta)
    if stock is not None:
        verify_checkpoint(stock.parent, names=[stock.name])  # nothing to check without manifest
        policy: Any = policy_from_zip(stock)
    else:
        policy, loaded = load_policy(npz or path)  # a policy file, a checkpoint, a policy.pt
        meta = {**loaded, "policy": meta.get("policy", loaded.get("policy"))} if npz else loaded
    fast = inference_policy(getattr(policy, "policy", policy))
    if isinstance(fast, TorchPolicy):
        print(
            f"note: policy:{path} acts with its torch network (slower): the numpy copy cannot "
            f"mirror it ({fast.reason})",
            file=sys.stderr,
        )
    return fast, meta


def plan_actor(policy: PlanPolicy, deterministic: bool, sample_seed: int, spec: str) -> Any:
    def make(env: ClusterEnv, seed: int) -> Actor:
        rng = np.random.default_rng([sample_seed, seed])
        try:
            return policy.actor(env, deterministic, rng)
        except ConfigError as exc:
            raise ConfigError(f"{spec}: {exc}") from None

    return make


def network_actor(
    fast: NumpyPolicy | TorchPolicy, deterministic: bool, sample_seed: int, spec: str
) -> Any:
    def make(env: ClusterEnv, seed: int) -> Actor:
        shape = fast.policy.observation_space.shape
        env_shape = env.observation_space.shape
        assert env_shape is not None
        # a per-job network without positions acts on any window of rows of its width
        width = getattr(fast, "row_width", None)
        other_window = width is not None and env_shape[0] == env.J * width
        if shape != env_shape and not (getattr(fast, "any_window", False) and other_window):
            raise ConfigError(
                f"{spec}: the policy takes observations of shape {shape}, the env gives "
                f"{env.observation_space.shape} (window J={env.J}, L={env.L})"
            )
        from agents.actors import PolicyActor

        return PolicyActor(fast, deterministic, sample_seed, seed)

    return make


class PolicyKind:
    """A trained policy through the DL² env (see the module docstring)."""

    name = "policy"
    needs = "env"

    def check(self, arg: str, cfg: EvaluateConfig) -> None:
        checkpoint_meta(policy_path(arg))

    def resolve(self, arg: str) -> str:
        """The checkpoint path, absolute (relative to where ``evaluate.py`` started)."""
        return str(policy_path(arg))

    def training_env(self, arg: str) -> dict[str, Any] | None:
        """The env the policy was trained in (``meta["env"]``), if its checkpoint says."""
        env = checkpoint_meta(policy_path(arg)).get("env")
        return dict(env) if isinstance(env, dict) else None

    def any_window(self, arg: str) -> bool:
        """Whether the policy acts on any window ``J`` and cluster size (a size-agnostic
        network: the plan policies' set network, :mod:`agents.set_plan`, or a Cluster-v0
        per-job network without the position column, :class:`agents.policy.PerJobNetwork`):
        its training env's window does not bind the run."""
        meta = checkpoint_meta(policy_path(arg))
        if "any_window" in meta:  # a plan policy's
            return bool(meta["any_window"])
        net = meta.get("policy")  # a Cluster-v0 network's config: per-job without positions
        return isinstance(net, dict) and net.get("arch") == "per_job" and not net.get("position")

    def run(self, task: RunTask) -> RunOutput:
        from evaluation.env_runs import run_in_env

        path = policy_path(task.arg)
        pe = task.policy_eval
        plan = plan_file(path)
        if plan is not None:
            policy = _load_plan(str(plan))
            meta = _plan_meta(policy)
            deterministic = act_deterministic(pe.deterministic, meta)
            make = plan_actor(policy, deterministic, pe.sample_seed, task.scheduler)
            inference: dict[str, Any] = {}
        else:
            fast, meta = load_network(str(path))
            deterministic = act_deterministic(pe.deterministic, meta)
            make = network_actor(fast, deterministic, pe.sample_seed, task.scheduler)
            reason = getattr(fast, "reason", None)  # a TorchPolicy's: why not numpy
            inference = {"inference": "torch" if reason else "numpy"}
            if reason:
                inference["inference_reason"] = reason
        info = {
            "policy": {
                "path": str(path),
                "deterministic": deterministic,
                "sample_seed": pe.sample_seed,
                "meta": meta,
                **inference,
            }
        }
        return run_in_env(task, make, info)
