"""The one policy file: ``policy.npz``, self-describing, no pickle.

Every trained policy that leaves a training run (a run's ``checkpoints/best`` and
``checkpoints/final`` of the EpisodePG pipelines, a release in ``policies/``) is one file
written by :func:`np.savez` and read with ``allow_pickle=False``: the network's weights as
arrays (its ``state_dict``, one array per entry) and one JSON entry ``__meta__``:

==============  ===============================================================================
``format``      ``"dlsched.policy/1"`` (:data:`FORMAT`)
``net``         the network, enough to rebuild it with no other file: ``kind`` (``mlp``: the
                flat :class:`~agents.episode_pg.MaskedMLP`; ``set``: the size-agnostic
                :class:`~agents.set_plan.SetPlanNet`; ``dl2``: a ``dlsched/Cluster-v0``
                :class:`~agents.policy.DL2Policy`, whose ``policy`` is its
                :class:`~agents.policy.PolicyConfig`), its sizes (``obs_size``, ``n_actions``,
                ``hidden``, ``row_width``, ...) and ``activation``
``layout``      the env layout it acts in, the same keys for every env: ``env_id``
                (``dlsched/Cluster-v0``, ``dlsched/ClusterPlan-v0``, ``dlsched/Contention-v0``),
                ``obs_size`` (or ``"any"``: a size-agnostic network), ``row_width`` (the width
                of a window row, ``None`` where the net reads the observation flat), ``J`` (the
                window, or ``"any"``), ``n_actions`` (``"3J+1"``: a ``Cluster-v0`` network of
                any window) and ``actions`` (what an action means: the
                plans' labels, the placement candidates, the per-row roles)
``env``         the env it was trained in, as each env's loader reads it: a ``Cluster-v0``
                :class:`~envs.gym.factory.EnvConfig` mapping; a ``ClusterPlan-v0`` layout
                (``id``, the inner ``env`` config, the ``plans``); a ``Contention-v0`` layout
                (:func:`~agents.episode_pg.contention_env_layout`: ``J``, ``placements``,
                ``comm``, the cluster's shape, ...)
``act``         how it acts: ``"argmax"`` or ``"sampled"`` (as it was validated);
                ``temperature`` (of the sampled softmax, 1.0) and ``masked`` (the env's
                ``action_masks()`` apply: always ``true`` today)
``training``    the training record: ``command``, ``config``, ``seed``, ``git_commit``,
                ``git_dirty``, ``versions`` (:mod:`envs.provenance`), plus what the pipeline
                adds (iteration kept, validation figure, ...); ``unknown`` lists the standard
                fields the record lacks (a policy re-saved from an older file records what
                that file knew, nothing invented)
==============  ===============================================================================

:func:`load` is the one loader: it reads this format, and still reads the two older ones,
upgrading their metadata in memory to the layout above: a ``policy.npz`` of the EpisodePG
format ``dlsched.episode_pg/1`` and a ``policy.pt`` (torch state dict) + ``policy.json``.  A
missing, corrupt or foreign file, weights that do not fit the described network, or a weight
that is not finite is a :class:`~envs.sim.errors.ConfigError` naming the file;
:func:`check_fits` refuses an env of another layout in one line naming the file, what it
expects and what the env gives.  :func:`convert` re-saves an older file in this format
(``python tools/release_policy.py --convert policies/<name>``): the same weights, bit for bit.

Writing is atomic (:func:`envs.files.atomic_path`: a reader or a killed run sees the old file
or the new one); numpy's zip keeps a CRC of every array, checked on loading.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agents.policy_format import (
    CLUSTER_ID,
    CONTENTION_ID,
    EPISODE_PG_FORMAT,
    FILE_NAME,
    FORMAT,
    PLAN_ID,
    load_weights,
    read,
    record_of,
    save,
    save_episode_net,
    unreadable,
    verify_policy_weights,
)
from envs.provenance import read_provenance
from envs.sim.errors import ConfigError

__all__ = [
    "CLUSTER_ID",
    "CONTENTION_ID",
    "EPISODE_PG_FORMAT",
    "FILE_NAME",
    "FORMAT",
    "PLAN_ID",
    "PolicyFile",
    "check_fits",
    "convert",
    "find",
    "load",
    "read_meta",
    "save",
    "save_dl2",
    "save_episode_net",
]


@dataclass
class PolicyFile:
    """A loaded policy file: ``net`` (a :class:`~agents.episode_pg.MaskedMLP`,
    :class:`~agents.set_plan.SetPlanNet` or :class:`~agents.policy.DL2Policy`, in eval mode),
    ``meta`` (the metadata of the module docstring; an older file's upgraded) and ``source``
    (the format it was read from: :data:`FORMAT`, ``"dlsched.episode_pg/1"`` or
    ``"policy.pt"``)."""

    path: Path
    net: Any
    meta: dict[str, Any]
    source: str
    #: the metadata as the file holds it (an older ``policy.json``, not upgraded)
    original: dict[str, Any] | None = None

    @property
    def env_id(self) -> str:
        """The env the policy acts in."""
        return str(self.meta["layout"]["env_id"])

    @property
    def layout(self) -> dict[str, Any]:
        return dict(self.meta["layout"])

    @property
    def deterministic(self) -> bool:
        """Whether it acts by its masked argmax (else sampled), as it was validated."""
        return self.meta.get("act") == "argmax"


# ---------------------------------------------------------------------------- writing
def _activation(net: Any) -> str:
    """The hidden layers' activation of ``net`` (its modules', lower-case)."""
    import torch as th

    for m in net.modules():
        if isinstance(m, th.nn.Tanh | th.nn.ReLU | th.nn.LeakyReLU | th.nn.ELU | th.nn.GELU):
            return type(m).__name__.lower()
    fn = getattr(net, "activation_fn", None)
    return fn.__name__.lower() if isinstance(fn, type) else "unknown"


def _cluster_layout(env: Any, config: dict[str, Any]) -> dict[str, Any]:
    """The layout of a ``Cluster-v0`` network of ``config`` (:class:`PolicyConfig` mapping)
    in ``env``: a per-job network without positions acts on any window."""
    (size,) = env.observation_space.shape
    anywhere = config.get("arch") == "per_job" and not config.get("position")
    return {
        "env_id": CLUSTER_ID,
        "obs_size": "any" if anywhere else int(size),
        "row_width": int(size) // int(env.J),
        "J": "any" if anywhere else int(env.J),
        "n_actions": "3J+1" if anywhere else int(env.action_space.n),
        "actions": {
            "roles": ["worker", "ps", "bundle"],
            "encoding": "a = 3 j + k adds role k to window job j; a = 3 J is void (close the slot)",
        },
    }


def save_dl2(
    path: str | os.PathLike[str],
    policy: Any,
    *,
    env: dict[str, Any],
    policy_config: dict[str, Any],
    record: dict[str, Any],
    act: str = "argmax",
) -> Path:
    """A ``Cluster-v0`` :class:`~agents.policy.DL2Policy` trained in the env of config
    ``env`` (:meth:`EnvConfig.as_dict`), of network config ``policy_config``
    (:class:`~agents.policy.PolicyConfig` mapping), as a policy file."""
    config = {"arch": "mlp", **policy_config}  # weights from before policy.arch are MLPs
    gym_env = _build_dl2(env, config, str(path))[1]
    return save(path, policy, net_meta=_dl2_net_meta(policy, gym_env, config),
                layout=_cluster_layout(gym_env, config), env=dict(env), record=record,
                act=act)  # fmt: skip


def _dl2_net_meta(policy: Any, env: Any, config: dict[str, Any]) -> dict[str, Any]:
    """The ``net`` entry of a :class:`~agents.policy.DL2Policy` of network ``config`` acting
    in ``env``."""
    from agents.policy import PolicyConfig

    return {
        "kind": "dl2",
        "arch": config["arch"],
        "policy": dict(vars(PolicyConfig(**config))),
        "activation": _activation(policy),
        "obs_size": int(env.observation_space.shape[0]),
        "n_actions": int(env.action_space.n),
    }


# ---------------------------------------------------------------------------- reading
def find(path: str | os.PathLike[str]) -> Path:
    """The policy file ``path`` names: the file, or a directory's ``policy.npz`` (else its
    older ``policy.pt``)."""
    p = Path(path)
    if p.is_dir():
        for name in (FILE_NAME, "policy.pt"):
            if (p / name).is_file():
                return p / name
        raise ConfigError(f"{p}: no policy file ({FILE_NAME}, or an older policy.pt) in it")
    return p


def _upgrade_pt(p: Path, old: dict[str, Any], policy: Any, env: Any) -> dict[str, Any]:
    """The metadata of a ``policy.pt`` + ``policy.json`` in this format."""
    config = {"arch": "mlp", **(old.get("policy") or {})}
    trained = dict(old.get("trained_with") or {})
    record = {
        **{k: old[k] for k in ("agent", "class", "num_timesteps") if k in old},
        **{k: v for k, v in trained.items() if k != "git"},
    }
    made = read_provenance(trained)
    record.update({"git_commit": made["git_commit"], "git_dirty": made["git_dirty"]})
    net, layout = _dl2_net_meta(policy, env, config), _cluster_layout(env, config)
    return {"format": FORMAT, "net": net, "layout": layout, "env": dict(old["env"]),
            "act": old.get("act", "argmax"), "temperature": 1.0, "masked": True,
            "training": record_of(record)}  # fmt: skip


def _load_pt(p: Path) -> tuple[Any, dict[str, Any], Any]:
    """``(policy, meta, env)`` of an older ``policy.pt`` and its ``policy.json`` (checked
    against the SHA-256 it records), the network rebuilt for the env of its config."""
    import torch as th

    meta_path = p.with_suffix(".json")
    if not p.is_file():
        raise ConfigError(f"{p}: no such file")
    if not meta_path.is_file():
        raise ConfigError(f"{p}: {meta_path} (how to rebuild the policy) is missing")
    verify_policy_weights(p)
    try:
        meta = json.loads(meta_path.read_text())
        env_config = meta["env"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise unreadable(meta_path, "the policy's metadata", exc) from None
    # weights saved before ``policy.arch`` existed are MLPs, whatever the default is now
    policy, env = _build_dl2(env_config, {"arch": "mlp", **meta.get("policy", {})}, str(p))
    try:
        state = th.load(p)
        for k, v in state.items():
            if v.is_floating_point() and not bool(th.isfinite(v).all()):
                raise ConfigError(f"{p}: weight {k!r} holds non-finite values (NaN or inf)")
        policy.load_state_dict(state)
    except ConfigError:
        raise
    except (OSError, RuntimeError, ValueError, KeyError, AttributeError, EOFError) as exc:
        raise unreadable(
            p, f"the weights (for the network {meta_path.name} describes)", exc
        ) from None
    policy.set_training_mode(False)
    return policy, meta, env


def _build_dl2(env: dict[str, Any], config: dict[str, Any], where: str) -> tuple[Any, Any]:
    """A fresh :class:`DL2Policy` of network ``config`` for the env of config ``env``, and
    that env."""
    from agents.policy import DL2Policy, PolicyConfig, policy_kwargs
    from envs.gym.factory import coerce_env_config, make_env

    try:
        gym_env = make_env(coerce_env_config(env))
        kwargs = policy_kwargs(PolicyConfig(**config), gym_env.J)
    except (TypeError, ValueError, KeyError) as exc:
        raise ConfigError(f"{where}: cannot rebuild the network it describes ({exc})") from None
    policy = DL2Policy(gym_env.observation_space, gym_env.action_space, lambda _: 1e-4, **kwargs)
    return policy, gym_env


def read_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The metadata of the policy file at ``path`` (a file or a directory, :func:`find`) in
    this format, without building the network (an older ``policy.pt``'s is read whole)."""
    p = find(path)
    if p.suffix == ".pt":
        return load(p).meta
    return read(p)[1]


def load(path: str | os.PathLike[str]) -> PolicyFile:
    """The policy file at ``path`` (a file, or a directory: :func:`find`) in any of the three
    formats (module docstring), its network rebuilt and in eval mode."""
    p = find(path)
    if p.suffix == ".pt":
        policy, old, env = _load_pt(p)
        meta = _upgrade_pt(p, old, policy, env)
        return PolicyFile(p, policy, meta, "policy.pt", old)
    if p.suffix != ".npz":
        raise ConfigError(f"{p}: a policy file is a .npz (or an older policy.pt)")
    arrays, meta, source = read(p)
    net_meta = meta["net"]
    kind = net_meta.get("kind")
    if kind != "dl2":
        from agents.episode_pg import net_from_file

        return PolicyFile(p, net_from_file(p, arrays, meta), meta, source)
    try:
        net, _ = _build_dl2(meta["env"], dict(net_meta["policy"]), str(p))
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"{p}: cannot rebuild the network of kind {kind!r} its metadata describes ({exc})"
        ) from None
    load_weights(p, net, arrays)
    net.set_training_mode(False)
    return PolicyFile(p, net, meta, source)


def check_fits(
    path: str | os.PathLike[str],
    meta: dict[str, Any],
    env_id: str,
    obs_size: int,
    n_actions: int,
    row_width: int = 0,
) -> None:
    """A :class:`ConfigError` in one line, naming the file ``path``, what it expects and what
    the env gives, when the policy of metadata ``meta`` (:attr:`PolicyFile.meta`) does not
    act in an env of ``env_id`` with observations of ``obs_size`` entries (rows of
    ``row_width``, for a size-agnostic network) and ``n_actions`` actions."""
    lay = meta["layout"]

    def expects() -> str:
        return (f"{lay['env_id']}, observations of {lay['obs_size']} entries"
                + (f" (rows of {lay['row_width']})" if lay.get("row_width") else "")
                + f", {lay['n_actions']} actions")  # fmt: skip

    width = int(lay.get("row_width") or 0)
    if lay["obs_size"] != "any":
        size_ok = lay["obs_size"] == obs_size
    else:  # any window: rows of the network's width (a plan observation adds its globals)
        size_ok = not width or not row_width or row_width == width
    want = lay["n_actions"]
    if want == "3J+1":  # a per-job network of any window: 3 actions per row, then void
        want = 3 * (obs_size // width) + 1 if width and obs_size % width == 0 else -1
    if lay["env_id"] != env_id or not size_ok or int(want) != int(n_actions):
        raise ConfigError(
            f"{path}: the policy expects {expects()}; the env gives {env_id}, observations "
            f"of {obs_size} entries"
            + (f" (rows of {row_width})" if row_width else "")
            + f", {n_actions} actions"
        )


# ---------------------------------------------------------------------------- conversion
def convert(path: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> Path:
    """Re-save the policy at ``path`` (an older ``policy.pt`` + ``policy.json`` or EpisodePG
    ``policy.npz``, or a file of this format) in this format: ``out`` (default: ``policy.npz``
    beside it); the same weights, bit for bit, and the metadata upgraded (:func:`load`).
    The older files are left in place (the caller removes them)."""
    pf = load(path)
    target = Path(out) if out is not None else pf.path.parent / FILE_NAME
    meta = pf.meta
    return save(target, pf.net, net_meta=meta["net"], layout=meta["layout"], env=meta["env"],
                record={k: v for k, v in meta["training"].items() if k != "unknown"},
                act=meta["act"], temperature=float(meta.get("temperature", 1.0)))  # fmt: skip
