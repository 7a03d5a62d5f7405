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
import math
import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from envs.files import atomic_path
from envs.provenance import read_provenance
from envs.sim.errors import ConfigError

if TYPE_CHECKING:  # torch is imported where a network is built (read_meta needs numpy only)
    import torch as th

__all__ = [
    "CLUSTER_ID",
    "CONTENTION_ID",
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

#: The ``format`` tag of this file format.
FORMAT = "dlsched.policy/1"
#: The tag of the EpisodePG files written before it (still read).
EPISODE_PG_FORMAT = "dlsched.episode_pg/1"
#: The name of a policy file in a policy directory.
FILE_NAME = "policy.npz"
META_KEY = "__meta__"
CLUSTER_ID = "dlsched/Cluster-v0"
PLAN_ID = "dlsched/ClusterPlan-v0"
CONTENTION_ID = "dlsched/Contention-v0"
#: The acting modes of ``act``.
ACTS = ("argmax", "sampled")
#: The standard fields of the training record (``unknown`` lists those a record lacks).
RECORD_FIELDS = ("command", "config", "seed", "git_commit", "versions")


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


def _record(record: dict[str, Any]) -> dict[str, Any]:
    """``record`` with ``unknown``: the standard fields it does not know."""
    made = read_provenance(record)
    known = {
        "command": made["command"],
        "config": record.get("config"),
        "seed": record.get("seed"),
        "git_commit": made["git_commit"],
        "versions": made["versions"],
    }
    out = dict(record)
    for key in ("command", "git_commit", "git_dirty", "versions"):  # (older records' spellings)
        if key not in out and made[key] is not None:
            out[key] = made[key]
    out["unknown"] = [k for k in RECORD_FIELDS if known[k] in (None, [], {})]
    return out


def _finite(arrays: dict[str, np.ndarray], where: str) -> None:
    for k, v in arrays.items():
        if v.dtype.kind in "fc" and not np.isfinite(v).all():
            raise ConfigError(f"{where}: weight {k!r} holds non-finite values (NaN or inf)")


def save(
    path: str | os.PathLike[str],
    net: th.nn.Module,
    *,
    net_meta: dict[str, Any],
    layout: dict[str, Any],
    env: dict[str, Any],
    record: dict[str, Any],
    act: str = "argmax",
    temperature: float = 1.0,
) -> Path:
    """Write ``net`` (its ``state_dict``) and the metadata of the module docstring to
    ``path`` (``.npz``), atomically; non-finite weights are refused."""
    p = Path(path)
    if p.suffix != ".npz":
        raise ConfigError(f"a policy file is a .npz file, got {str(p)!r}")
    if act not in ACTS:
        raise ConfigError(f"act must be 'argmax' or 'sampled', got {act!r}")
    if not (math.isfinite(temperature) and temperature > 0):
        raise ConfigError(f"temperature must be finite and > 0, got {temperature}")
    meta: dict[str, Any] = {
        "format": FORMAT,
        "net": net_meta,
        "layout": layout,
        "env": env,
        "act": act,
        "temperature": float(temperature),
        "masked": True,
        "training": _record(record),
    }
    arrays = {k: v.detach().cpu().numpy() for k, v in net.state_dict().items()}
    if META_KEY in arrays:
        raise ConfigError(f"a network weight may not be named {META_KEY!r}")
    _finite(arrays, str(p))
    arrays[META_KEY] = np.array(json.dumps(meta, default=str))
    with atomic_path(p) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)
    return p


def episode_layout(net: Any, env: Any) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``(env_id, layout, env)`` of an EpisodePG network ``net`` acting in ``env`` (a
    ``PlanEnv``, or a ``ContentionEnv``); a network that does not fit the env is a
    :class:`ConfigError`."""
    from agents.episode_pg import contention_env_layout
    from agents.set_plan import SetPlanNet

    n_actions = int(env.action_space.n)
    if isinstance(net, SetPlanNet):
        net.window_of(env.obs_size)  # a ConfigError if the rows do not fit
        fits = net.n_actions == n_actions
    else:
        fits = net.obs_size == env.obs_size and net.n_actions == n_actions
    if not fits:
        inputs = "any window" if isinstance(net, SetPlanNet) else f"{net.obs_size} inputs"
        raise ConfigError(
            f"the network ({inputs}, {net.n_actions} actions) does not fit "
            f"the env ({env.obs_size} observations, {n_actions} actions)"
        )
    if hasattr(env, "policy_layout"):  # a PlanEnv
        described = env.policy_layout()
        return PLAN_ID, _plan_layout(net, described), described
    described = contention_env_layout(env)
    return CONTENTION_ID, _contention_layout(net, described), described


def _plan_layout(net: Any, env: dict[str, Any]) -> dict[str, Any]:
    from envs.gym.plan_env import plan_label

    labels = [plan_label(str(n), dict(o)) for n, o in env["plans"]]
    inner = env.get("env") or {}
    anywhere = getattr(net, "arch", "mlp") == "set"
    return {
        "env_id": PLAN_ID,
        "obs_size": "any" if anywhere else int(net.obs_size),
        "row_width": int(net.row_width) if anywhere else None,
        "J": "any" if anywhere else _window_of(inner),
        "n_actions": len(labels),
        "actions": labels,
    }


def _window_of(config: dict[str, Any]) -> int | None:
    """The window ``J`` of a ``Cluster-v0`` env config (``None`` if it cannot be built)."""
    try:
        from envs.gym.factory import coerce_env_config, make_env

        return int(make_env(coerce_env_config(config)).J)
    except (ConfigError, TypeError, ValueError, KeyError):
        return None


def _contention_layout(net: Any, env: dict[str, Any]) -> dict[str, Any]:
    J, places = int(env["J"]), [str(x) for x in env["placements"]]
    return {
        "env_id": CONTENTION_ID,
        "obs_size": int(net.obs_size),
        "row_width": None,
        "J": J,
        "n_actions": int(net.n_actions),
        "actions": {
            "placements": places,
            "encoding": f"a = j * {len(places)} + c places window job j (of {J}) with "
            f"placement candidate c; a = {J * len(places)} waits",
        },
    }


def _episode_net_meta(net: Any) -> dict[str, Any]:
    described = net.describe()
    return {"kind": described["arch"], **described, "activation": "tanh"}


def save_episode_net(
    path: str | os.PathLike[str], net: Any, env: Any, record: dict[str, Any], act: str = "argmax"
) -> Path:
    """An EpisodePG network (:class:`~agents.episode_pg.MaskedMLP` or
    :class:`~agents.set_plan.SetPlanNet`) of ``env`` (a ``PlanEnv`` or ``ContentionEnv``)
    as a policy file (what :func:`agents.episode_pg.save_episode_pg` writes)."""
    p = Path(path)
    if p.suffix != ".npz":
        raise ConfigError(f"a saved EpisodePG policy is a .npz file, got {str(p)!r}")
    if act not in ACTS:
        raise ConfigError(f"act must be 'argmax' or 'sampled', got {act!r}")
    _, layout, described = episode_layout(net, env)
    return save(p, net, net_meta=_episode_net_meta(net), layout=layout, env=described,
                record=record, act=act)  # fmt: skip


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


def _read_npz(p: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    if not p.is_file():
        raise ConfigError(f"policy file {str(p)!r} not found")
    try:
        with np.load(p, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        meta = json.loads(str(arrays.pop(META_KEY)))
    except KeyError:
        raise ConfigError(f"{p}: not a saved policy (no {META_KEY} entry)") from None
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise ConfigError(
            f"{p}: cannot read the saved policy: the file is corrupt or not a .npz "
            f"({type(exc).__name__}: {str(exc)[:200]})"
        ) from None
    if not isinstance(meta, dict) or meta.get("format") not in (FORMAT, EPISODE_PG_FORMAT):
        got = meta.get("format") if isinstance(meta, dict) else meta
        raise ConfigError(f"{p}: format {got!r} is not {FORMAT!r} (nor {EPISODE_PG_FORMAT!r})")
    return arrays, meta


def _upgrade_episode(p: Path, meta: dict[str, Any]) -> dict[str, Any]:
    """The metadata of an EpisodePG file (``dlsched.episode_pg/1``) in this format."""
    described = meta.get("net")
    if not isinstance(described, dict):  # (files written before the set network)
        try:
            described = {"arch": "mlp", **{k: meta[k] for k in ("obs_size", "n_actions", "hidden")}}
        except KeyError as exc:
            raise ConfigError(f"{p}: its metadata lacks the network's {exc}") from None
    env = meta.get("env")
    if not isinstance(env, dict):
        raise ConfigError(f"{p}: its metadata has no env layout ('env')")
    net = _episode_net_meta(_Described(described))
    if env.get("id") == PLAN_ID:
        layout = _plan_layout(_Described(described), env)
    elif "id" in env:
        raise ConfigError(f"{p}: an EpisodePG policy of an unknown env {env['id']!r}")
    else:
        layout = _contention_layout(_Described(described), env)
    return {"format": FORMAT, "net": net, "layout": layout, "env": env,
            "act": meta.get("act", "argmax"), "temperature": 1.0, "masked": True,
            "training": _record(dict(meta.get("training") or {}))}  # fmt: skip


class _Described:
    """A network's ``describe()`` dict read as the network (its sizes), for layouts."""

    def __init__(self, described: dict[str, Any]) -> None:
        self._d = described
        self.arch = described.get("arch", "mlp")

    def __getattr__(self, name: str) -> Any:
        try:
            return self._d[name]
        except KeyError:
            raise AttributeError(name) from None

    def describe(self) -> dict[str, Any]:
        return {"arch": self.arch, **{k: v for k, v in self._d.items() if k != "arch"}}


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
            "training": _record(record)}  # fmt: skip


def _build_episode_net(p: Path, net_meta: dict[str, Any]) -> Any:
    from agents.episode_pg import build_net

    skip = ("kind", "activation")
    return build_net({k: v for k, v in net_meta.items() if k not in skip})


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


def _load_weights(p: Path, net: Any, arrays: dict[str, np.ndarray]) -> None:
    import torch as th

    _finite(arrays, str(p))
    try:
        net.load_state_dict({k: th.as_tensor(v) for k, v in arrays.items()})
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise ConfigError(
            f"{p}: the weights do not match the network its metadata describes "
            f"({type(exc).__name__}: {str(exc)[:300]})"
        ) from None


def read_meta(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The metadata of the policy file at ``path`` (a file or a directory, :func:`find`) in
    this format, without building the network (an older ``policy.pt``'s is read whole)."""
    p = find(path)
    if p.suffix == ".pt":
        return load(p).meta
    _, meta = _read_npz(p)
    return meta if meta["format"] == FORMAT else _upgrade_episode(p, meta)


def load(path: str | os.PathLike[str]) -> PolicyFile:
    """The policy file at ``path`` (a file, or a directory: :func:`find`) in any of the three
    formats (module docstring), its network rebuilt and in eval mode."""
    p = find(path)
    if p.suffix == ".pt":
        import torch as th

        from agents.checkpoint import load_policy

        policy, old = load_policy(p)
        env = _build_dl2(old["env"], {"arch": "mlp", **(old.get("policy") or {})}, str(p))[1]
        for k, v in policy.state_dict().items():
            if v.is_floating_point() and not bool(th.isfinite(v).all()):
                raise ConfigError(f"{p}: weight {k!r} holds non-finite values (NaN or inf)")
        return PolicyFile(p, policy, _upgrade_pt(p, old, policy, env), "policy.pt")
    if p.suffix != ".npz":
        raise ConfigError(f"{p}: a policy file is a .npz (or an older policy.pt)")
    arrays, meta = _read_npz(p)
    source = str(meta["format"])
    if source != FORMAT:
        meta = _upgrade_episode(p, meta)
    net_meta = meta.get("net")
    if not isinstance(net_meta, dict) or not isinstance(meta.get("layout"), dict):
        raise ConfigError(f"{p}: its metadata lacks the network ('net') or the layout")
    kind = net_meta.get("kind")
    try:
        if kind == "dl2":
            net, _ = _build_dl2(meta["env"], dict(net_meta["policy"]), str(p))
        else:
            net = _build_episode_net(p, net_meta)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"{p}: cannot rebuild the network of kind {kind!r} its metadata describes ({exc})"
        ) from None
    _load_weights(p, net, arrays)
    if kind == "dl2":
        net.set_training_mode(False)
    else:
        net.eval()
    return PolicyFile(p, net, meta, source)


def check_fits(
    pf: PolicyFile, env_id: str, obs_size: int, n_actions: int, row_width: int = 0
) -> None:
    """A :class:`ConfigError` in one line, naming the file, what it expects and what the env
    gives, when ``pf`` does not act in an env of ``env_id`` with observations of
    ``obs_size`` entries (rows of ``row_width``, for a size-agnostic network) and
    ``n_actions`` actions."""
    lay = pf.meta["layout"]

    def expects() -> str:
        return (f"{lay['env_id']}, observations of {lay['obs_size']} entries"
                + (f" (rows of {lay['row_width']})" if lay.get("row_width") else "")
                + f", {lay['n_actions']} actions")  # fmt: skip

    size_ok = (
        lay["obs_size"] == obs_size
        if lay["obs_size"] != "any"
        else not lay.get("row_width") or not row_width or row_width == lay["row_width"]
    )
    want = lay["n_actions"]
    if want == "3J+1":  # a per-job network of any window: 3 actions per row, then void
        width = int(lay.get("row_width") or 0)
        want = 3 * (obs_size // width) + 1 if width and obs_size % width == 0 else -1
    if lay["env_id"] != env_id or not size_ok or int(want) != int(n_actions):
        raise ConfigError(
            f"{pf.path}: the policy expects {expects()}; the env gives {env_id}, observations "
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
