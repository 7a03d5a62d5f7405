"""The one policy file format's reading and writing: arrays and metadata, no networks built.

The format is documented in :mod:`agents.policy_file` (its loader, which builds the network of
any policy file, lives there).  This module knows only the file: :func:`save` writes a network's
``state_dict`` and the metadata with :func:`np.savez`, atomically; :func:`read` returns the
arrays and the metadata of a file of this format or of the older EpisodePG format
``dlsched.episode_pg/1`` (its metadata upgraded in memory); the layouts of
``dlsched/ClusterPlan-v0`` and ``dlsched/Contention-v0`` networks; the training record with
its ``unknown`` fields; the refusal of non-finite weights; :func:`verify_policy_weights` (an
older ``policy.pt`` against the SHA-256 its ``policy.json`` records).  It imports no other
module of ``agents`` (:mod:`agents.episode_pg` writes and reads its networks through it), and
torch only where a network's weights are copied.
"""

from __future__ import annotations

import json
import math
import os
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from envs.files import atomic_path, sha256_file
from envs.provenance import read_provenance
from envs.sim.errors import ConfigError

if TYPE_CHECKING:
    import torch as th

__all__ = [
    "episode_layout",
    "load_weights",
    "read",
    "record_of",
    "save",
    "save_episode_net",
    "unreadable",
    "verify_policy_weights",
    "with_meta",
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
#: A path; an env layout (``None``: the env's own ``policy_layout()``).
PathLike = str | os.PathLike[str]
Layout = dict[str, Any] | None
#: The standard fields of the training record (``unknown`` lists those a record lacks).
RECORD_FIELDS = ("command", "config", "seed", "git_commit", "versions")


def record_of(record: dict[str, Any]) -> dict[str, Any]:
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


def _flat(net_meta: dict[str, Any]) -> dict[str, Any]:
    """The network's sizes also at the metadata's top level (``obs_size``, ``n_actions``,
    ``hidden``: where the EpisodePG files before this format had them, and their readers
    look)."""
    return {k: net_meta[k] for k in ("obs_size", "n_actions", "hidden") if k in net_meta}


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
        **_flat(net_meta),
        "net": net_meta,
        "layout": layout,
        "env": env,
        "act": act,
        "temperature": float(temperature),
        "masked": True,
        "training": record_of(record),
    }
    arrays = {k: v.detach().cpu().numpy() for k, v in net.state_dict().items()}
    if META_KEY in arrays:
        raise ConfigError(f"a network weight may not be named {META_KEY!r}")
    _finite(arrays, str(p))
    arrays[META_KEY] = np.array(json.dumps(meta, default=str))
    with atomic_path(p) as tmp, open(tmp, "wb") as f:
        np.savez(f, **arrays)
    return p


def episode_layout(
    net: Any, env: Any, described: dict[str, Any] | None = None
) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """``(env_id, layout, env)`` of an EpisodePG network ``net`` acting in ``env``: a
    ``PlanEnv`` (its ``policy_layout()``), or a ``ContentionEnv`` whose layout the caller
    describes (``described``: :func:`agents.episode_pg.contention_env_layout`); a network that
    does not fit the env is a :class:`ConfigError`."""
    from agents.set_plan import SetPlanNet

    n_actions = int(env.action_space.n)
    if getattr(net, "arch", "mlp") == "contention_set":
        net.layout(env.obs_size, n_actions)  # a ConfigError if the rows do not fit
        fits = True
    elif getattr(net, "arch", "mlp") == "rule_selector":  # the rules act on any cluster
        fits = True
    elif isinstance(net, SetPlanNet):
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
    if described is None:
        raise ConfigError(f"{type(env).__name__}: no policy layout (policy_layout()) given")
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
    # any cluster, any window
    anywhere = getattr(net, "arch", "mlp") in ("contention_set", "rule_selector")
    return {
        "env_id": CONTENTION_ID,
        "obs_size": "any" if anywhere else int(net.obs_size),
        "row_width": None,
        "J": "any" if anywhere else J,
        "n_actions": "any" if anywhere else int(net.n_actions),
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
    path: PathLike, net: Any, env: Any, record: dict[str, Any], act: str, described: Layout
) -> Path:
    """An EpisodePG network (:class:`~agents.episode_pg.MaskedMLP` or
    :class:`~agents.set_plan.SetPlanNet`) of ``env`` (a ``PlanEnv``, or a ``ContentionEnv``
    of layout ``described``) as a policy file (what
    :func:`agents.episode_pg.save_episode_pg` writes)."""
    p = Path(path)
    if p.suffix != ".npz":
        raise ConfigError(f"a saved EpisodePG policy is a .npz file, got {str(p)!r}")
    if act not in ACTS:
        raise ConfigError(f"act must be 'argmax' or 'sampled', got {act!r}")
    _, layout, described = episode_layout(net, env, described)
    return save(p, net, net_meta=_episode_net_meta(net), layout=layout, env=described,
                record=record, act=act)  # fmt: skip


def _read_npz(p: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """The arrays and the metadata of the ``.npz`` at ``p``, as saved."""
    if not p.is_file():
        raise ConfigError(f"policy file {str(p)!r} not found")
    try:
        with np.load(p, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        meta = json.loads(str(arrays.pop(META_KEY)))
    except KeyError:
        raise ConfigError(
            f"{p}: not a saved EpisodePG policy nor a policy file of {FORMAT} (no {META_KEY} entry)"
        ) from None
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
    return {"format": FORMAT, **_flat(net), "net": net, "layout": layout, "env": env,
            "act": meta.get("act", "argmax"), "temperature": 1.0, "masked": True,
            "training": record_of(dict(meta.get("training") or {}))}  # fmt: skip


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


def load_weights(p: Path, net: Any, arrays: dict[str, np.ndarray]) -> None:
    import torch as th

    _finite(arrays, str(p))
    try:
        net.load_state_dict({k: th.as_tensor(v) for k, v in arrays.items()})
    except (KeyError, TypeError, ValueError, RuntimeError) as exc:
        raise ConfigError(
            f"{p}: the weights do not match the network its metadata describes "
            f"({type(exc).__name__}: {str(exc)[:300]})"
        ) from None


def read(path: str | os.PathLike[str]) -> tuple[dict[str, np.ndarray], dict[str, Any], str]:
    """``(arrays, meta, source)`` of the policy file ``path`` (``.npz``): its weights, its
    metadata in this format (an EpisodePG file's upgraded) and the format it was written in;
    a missing, corrupt or foreign file is a :class:`ConfigError` naming it."""
    p = Path(path)
    arrays, meta = _read_npz(p)
    source = str(meta["format"])
    if source != FORMAT:
        meta = _upgrade_episode(p, meta)
    if not isinstance(meta.get("net"), dict) or not isinstance(meta.get("layout"), dict):
        raise ConfigError(f"{p}: its metadata lacks the network ('net') or the layout")
    return arrays, meta, source


def with_meta(
    path: str | os.PathLike[str], out: str | os.PathLike[str], update: dict[str, Any]
) -> Path:
    """Write ``out`` (``.npz``): the policy file ``path`` (of this format) with the same arrays,
    bit for bit, and its metadata updated by ``update`` (top-level keys), atomically."""
    p, q = Path(path), Path(out)
    if q.suffix != ".npz":
        raise ConfigError(f"a policy file is a .npz file, got {str(q)!r}")
    arrays, meta = _read_npz(p)
    if meta.get("format") != FORMAT:
        raise ConfigError(f"{p}: re-save it in {FORMAT} first (tools/release_policy.py --convert)")
    meta.update(update)
    payload: dict[str, Any] = {**arrays, META_KEY: np.array(json.dumps(meta, default=str))}
    with atomic_path(q) as tmp, open(tmp, "wb") as f:
        np.savez(f, **payload)
    return q


def verify_policy_weights(path: str | os.PathLike[str]) -> None:
    """Check a ``policy.pt`` against the ``sha256`` its ``policy.json`` records (nothing to
    check when it records none: released files from before): a :class:`ConfigError` naming
    the ``.pt`` when they differ (torch does not check its zip's CRCs: a flipped bit would
    load as a wrong weight)."""
    p = Path(path)
    meta_path = p.with_suffix(".json")
    if not meta_path.is_file():
        return
    try:
        want = json.loads(meta_path.read_text()).get("sha256")
    except (OSError, ValueError, AttributeError) as exc:
        raise unreadable(meta_path, "the policy's metadata", exc) from None
    if want is None:
        return
    try:
        got = sha256_file(p)
    except OSError as exc:
        raise unreadable(p, "the weights", exc) from None
    if got != want:
        raise ConfigError(
            f"{p}: checksum mismatch: the file is corrupt or truncated (SHA-256 {got[:16]}..., "
            f"{meta_path.name} says {str(want)[:16]}...); retrain or restore it"
        )


def unreadable(path: Path, what: str, exc: BaseException) -> ConfigError:
    """The error of a file that cannot be read (as :mod:`agents.checkpoint` words it)."""
    return ConfigError(
        f"{path}: cannot read {what}: the file is corrupt, truncated or from an "
        f"incompatible setup ({type(exc).__name__}: {str(exc)[:300]})"
    )
