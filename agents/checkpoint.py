"""Checkpoints of learned schedulers, and loading a policy for evaluation.

A checkpoint is a directory:

==================  =========================================================================
``model.zip``       SB3's ``save`` (weights, optimizer state, hyperparameters, counters, the
                    agent's own run-time state: its numpy generator, pending slot decisions)
``replay.npz``      the replay buffer (DL²'s agents; SB3 never saves it in ``model.zip``)
``env.pkl``         the vectorised training env, mid-episode (``ClusterEnv`` pickles), so that
                    training resumes exactly where it stopped (not written for an env that
                    says ``picklable = False``: a federated ``RayVecEnv``)
``rng.pt``          torch's global RNG state
``global_rng.pkl``  numpy's and Python's global RNG states (SB3's PPO shuffles with numpy's)
``meta.json``       agent name and class, env config(s), timesteps, policy config
``manifest.json``   written last: the size and SHA-256 of every other file, and
                    ``num_timesteps``; a directory without it is an unfinished save
==================  =========================================================================

Saving never leaves a torn checkpoint: :func:`save_checkpoint` writes everything into a fresh
sibling ``<name>.tmp-<pid>``, the manifest last, ``fsync``-s it, then swaps it in (the old
directory becomes ``<name>.prev`` for the instant of the swap, then is removed).  A run
killed at any instant leaves at least one complete checkpoint among ``<name>``,
``<name>.prev`` and ``<name>.tmp-*``; :func:`find_checkpoint` (``resume=``) picks the newest
complete one, and the next save removes what dead runs left.  Loading checks every file
against the manifest (a flipped bit is a :class:`ConfigError` naming the file, not a
silently wrong network); checkpoints written before manifests existed load unchecked.

:func:`load_checkpoint` restores all of it (``learn(..., reset_num_timesteps=False)`` then
continues identically: a test checks it).  :func:`load_policy` returns just the policy network
and the metadata, for evaluation; it also accepts a bare ``model.zip``, a ``Cluster-v0``
policy file (``policy.npz``, :mod:`agents.policy_file`) or a pretraining / older released
``policy.pt`` (with its ``policy.json``, which records the ``.pt``'s SHA-256, checked on
loading when present).
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import pickle
import random
import shutil
import signal
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.base_class import BaseAlgorithm

from agents.policy_format import verify_policy_weights
from envs.files import atomic_path, fsync_dir, os_error, sha256_file, write_json
from envs.sim.errors import ConfigError

__all__ = [
    "MANIFEST",
    "copy_checkpoint",
    "find_checkpoint",
    "load_checkpoint",
    "load_policy",
    "read_meta",
    "save_checkpoint",
    "save_policy_weights",
    "signals_deferred",
    "verify_checkpoint",
    "verify_policy_weights",
]

#: the file a checkpoint's save writes last: every other file's size and SHA-256
MANIFEST = "manifest.json"
MANIFEST_FORMAT = "dlsched-checkpoint/1"

#: what each file of a checkpoint holds (for the error that names it)
_WHAT = {
    "model.zip": "the model",
    "replay.npz": "the replay buffer",
    "env.pkl": "the saved training env",
    "rng.pt": "torch's RNG state",
    "global_rng.pkl": "numpy's and Python's RNG states",
    "meta.json": "the checkpoint's metadata",
    MANIFEST: "the checkpoint's manifest",
}

PathLike = str | os.PathLike[str]


def _agent_classes() -> dict[str, type[BaseAlgorithm]]:
    """The classes a ``model.zip`` may hold: every registered learner's checkpoint class
    (:data:`agents.learners.LEARNERS`) and SB3's stock ``A2C``."""
    from stable_baselines3 import A2C

    from agents.learners import LEARNERS, resolve

    classes: dict[str, type[BaseAlgorithm]] = {
        e.checkpoint_class.rpartition(":")[2]: resolve(e.checkpoint_class)
        for e in LEARNERS.values()
        if e.checkpoint_class is not None
    }
    return {**classes, "A2C": A2C}


@contextlib.contextmanager
def signals_deferred() -> Iterator[None]:
    """Ctrl-C, SIGTERM and SIGHUP that arrive inside the block take effect when it ends (their
    handler runs then: ``KeyboardInterrupt`` after the save, not in the middle of it).  A zip
    writer (SB3's, torch's, numpy's) stopped half-way by ``KeyboardInterrupt`` raises its own
    ``ValueError`` while closing; a save is short, so a stop waits for it and the run ends
    with that file complete.  Outside the main thread this does nothing."""
    pending: list[int] = []

    def hold(signum: int, frame: object) -> None:
        pending.append(signum)

    names = ("SIGINT", "SIGTERM", "SIGHUP")
    sigs = [getattr(signal, n) for n in names if hasattr(signal, n)]
    old: dict[int, Any] = {}
    try:
        for sig in sigs:
            current = signal.getsignal(sig)
            # None: a handler Python cannot restore; SIG_IGN: the signal means nothing here
            if current is not None and current != signal.SIG_IGN:
                old[sig] = signal.signal(sig, hold)
    except ValueError:  # not the main thread
        for sig, handler in old.items():
            signal.signal(sig, handler)
        old = {}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if pending:
            sig = pending[0]
            handler = old[sig]
            if callable(handler):
                handler(sig, None)  # e.g. KeyboardInterrupt
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), sig)


def save_checkpoint(model: BaseAlgorithm, directory: PathLike, meta: dict[str, Any]) -> Path:
    """Write ``model`` (and its replay, env and RNG state) to ``directory``, atomically: into
    ``<name>.tmp-<pid>`` beside it, ``manifest.json`` last, then swapped in (see the module
    docstring).  A full or read-only disk is a :class:`ConfigError` naming the file; Ctrl-C
    or SIGTERM during the save take effect once it is complete (:func:`signals_deferred`)."""
    with signals_deferred():
        return _save_checkpoint(model, Path(directory), meta)


def _save_checkpoint(model: BaseAlgorithm, d: Path, meta: dict[str, Any]) -> Path:
    tmp = d.parent / f"{d.name}.tmp-{os.getpid()}"
    try:
        if tmp.exists():  # an earlier save of a process with this pid that did not finish
            shutil.rmtree(tmp)
        tmp.mkdir(parents=True)
    except OSError as exc:
        raise os_error(d, exc) from None
    try:
        with _writing(tmp / "model.zip"):
            model.save(tmp / "model.zip")
        replay = getattr(model, "replay", None)
        if replay is not None and replay.enabled:
            with _writing(tmp / "replay.npz"):
                replay.save(tmp / "replay.npz")
        env = model.get_env()
        if env is not None and getattr(env, "picklable", True):  # not a RayVecEnv (actors)
            import cloudpickle

            with _writing(tmp / "env.pkl"):
                (tmp / "env.pkl").write_bytes(cloudpickle.dumps(env))
        with _writing(tmp / "rng.pt"):
            th.save(th.get_rng_state(), tmp / "rng.pt")
        # SB3's rollout buffer shuffles with numpy's global RNG (PPO, MaskablePPO), exploration
        # code may use Python's: both states, so that a resumed run continues identically
        states = {"numpy": np.random.get_state(), "python": random.getstate()}
        with _writing(tmp / "global_rng.pkl"):
            (tmp / "global_rng.pkl").write_bytes(pickle.dumps(states))
        info = dict(meta)
        info.update({"class": type(model).__name__, "num_timesteps": int(model.num_timesteps)})
        with _writing(tmp / "meta.json"):
            (tmp / "meta.json").write_text(json.dumps(info, indent=2, default=str))
        _write_manifest(tmp, int(model.num_timesteps))
    except BaseException:  # an unfinished save leaves nothing behind (and ``directory`` as is)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _swap_in(tmp, d)
    return d


def copy_checkpoint(source: PathLike, directory: PathLike) -> Path:
    """``directory`` becomes a copy of the checkpoint ``source``, atomically (as a save)."""
    with signals_deferred():
        return _copy_checkpoint(Path(source), Path(directory))


def _copy_checkpoint(src: Path, d: Path) -> Path:
    tmp = d.parent / f"{d.name}.tmp-{os.getpid()}"
    try:
        if tmp.exists():
            shutil.rmtree(tmp)
        shutil.copytree(src, tmp)
        if not (tmp / MANIFEST).is_file():  # a checkpoint from before manifests
            meta = read_meta(tmp)
            _write_manifest(tmp, int(meta.get("num_timesteps", 0)))
        else:
            for f in tmp.iterdir():
                _fsync_file(f)
            fsync_dir(tmp)
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise os_error(d, exc) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _swap_in(tmp, d)
    return d


@contextlib.contextmanager
def _writing(path: Path) -> Iterator[None]:
    """An ``OSError`` writing ``path`` (disk full, read-only) as a ``ConfigError`` naming it."""
    try:
        yield
    except OSError as exc:
        raise os_error(path, exc) from None


def _fsync_file(path: Path) -> None:
    with _writing(path), open(path, "rb") as f:
        os.fsync(f.fileno())


def _write_manifest(tmp: Path, num_timesteps: int) -> None:
    """``tmp/manifest.json``: every file's size and SHA-256 (each file ``fsync``-ed first)."""
    files: dict[str, dict[str, Any]] = {}
    for f in sorted(tmp.iterdir()):
        if f.name == MANIFEST or not f.is_file():
            continue
        _fsync_file(f)
        with _writing(f):
            files[f.name] = {"size": f.stat().st_size, "sha256": sha256_file(f)}
    manifest = {"format": MANIFEST_FORMAT, "num_timesteps": int(num_timesteps), "files": files}
    write_json(tmp / MANIFEST, manifest)  # atomic and fsync-ed, the directory too


def _swap_in(tmp: Path, d: Path) -> None:
    """Replace ``d`` by the complete checkpoint ``tmp``: ``d`` -> ``<name>.prev``, ``tmp`` ->
    ``d``, then ``.prev`` and dead runs' ``.tmp-*`` removed.  At every instant ``d``,
    ``.prev`` or ``tmp`` is complete."""
    prev = d.parent / f"{d.name}.prev"
    try:
        if prev.exists():  # left by a save killed between its renames: ``tmp`` is complete
            shutil.rmtree(prev)
    except OSError as exc:
        raise os_error(prev, exc, "remove") from None
    try:
        if d.exists():
            os.replace(d, prev)
        os.replace(tmp, d)
    except OSError as exc:
        raise os_error(d, exc, "replace") from None
    fsync_dir(d.parent)
    shutil.rmtree(prev, ignore_errors=True)
    for stale in d.parent.glob(f"{glob.escape(d.name)}.tmp-*"):
        pid = stale.name.rsplit("-", 1)[-1]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (another run may be saving beside this one)."""
    if pid == os.getpid():
        return False  # this process's own save is never in flight here
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, another user's
        return True
    return True


@contextlib.contextmanager
def _reading(path: Path, what: str) -> Iterator[None]:
    """Turn a truncated or corrupt checkpoint file's low-level error into one that names it."""
    try:
        yield
    except ConfigError:
        raise
    except (
        zipfile.BadZipFile,
        EOFError,
        pickle.UnpicklingError,
        OSError,
        RuntimeError,
        ValueError,
        KeyError,
        AttributeError,
        TypeError,
        IndexError,
        AssertionError,  # SB3's "No data found in the saved file"
    ) as exc:
        raise ConfigError(
            f"{path}: cannot read {what}: the file is corrupt, truncated or from an "
            f"incompatible setup ({type(exc).__name__}: {str(exc)[:300]})"
        ) from None


def read_meta(d: Path) -> dict[str, Any]:
    """A checkpoint directory's ``meta.json`` (``{}`` without one; a corrupt one, or one that
    does not match the manifest, is a :class:`ConfigError` naming it)."""
    p = d / "meta.json"
    if not p.is_file():
        return {}
    verify_checkpoint(d, names=["meta.json"])
    with _reading(p, "the checkpoint's metadata"):
        meta = json.loads(p.read_text())
    if not isinstance(meta, dict):
        raise ConfigError(f"{p}: expected a JSON object")
    return meta


def read_manifest(d: Path) -> dict[str, Any] | None:
    """``d``'s ``manifest.json`` (``None`` without one: a checkpoint from before manifests,
    or an unfinished save)."""
    p = d / MANIFEST
    if not p.is_file():
        return None
    with _reading(p, _WHAT[MANIFEST]):
        manifest = json.loads(p.read_text())
        if not isinstance(manifest, dict) or not isinstance(manifest["files"], dict):
            raise ValueError("expected a JSON object with a 'files' object")
        for entry in manifest["files"].values():
            int(entry["size"]), str(entry["sha256"])
        int(manifest["num_timesteps"])
    return manifest


def verify_checkpoint(
    directory: PathLike, names: list[str] | None = None, manifest: dict[str, Any] | None = None
) -> dict[str, Any] | None:
    """Check the files of checkpoint ``directory`` (those in ``names``, default all) against
    its manifest: each listed file must exist with its recorded size and SHA-256, else a
    :class:`ConfigError` naming it.  The manifest (``None`` without one: nothing checked)."""
    d = Path(directory)
    if manifest is None:
        manifest = read_manifest(d)
    if manifest is None:
        return None
    for name, entry in manifest["files"].items():
        if names is not None and name not in names:
            continue
        f = d / name
        what = _WHAT.get(name, name)
        if not f.is_file():
            raise ConfigError(
                f"{f}: cannot read {what}: the file is missing (the checkpoint's "
                f"{MANIFEST} lists it)"
            )
        with _reading(f, what):
            size = f.stat().st_size
            digest = sha256_file(f) if size == int(entry["size"]) else None
        if digest != entry["sha256"]:
            raise ConfigError(
                f"{f}: cannot read {what}: checksum mismatch: the file is corrupt or "
                f"truncated ({size} bytes"
                + (f", SHA-256 {digest[:16]}..." if digest else "")
                + f"; the checkpoint's {MANIFEST} says {entry['size']} bytes, SHA-256 "
                f"{str(entry['sha256'])[:16]}...)"
            )
    return manifest


def _inspect(d: Path) -> tuple[int | None, str]:
    """``(num_timesteps, "")`` for a complete checkpoint ``d``, else ``(None, why not)``."""
    if not d.is_dir():
        return None, "no such directory"
    try:
        manifest = read_manifest(d)
        if manifest is None:
            if ".tmp-" in d.name:
                return None, f"an unfinished save (no {MANIFEST})"
            if not (d / "model.zip").is_file():
                return None, "model.zip missing"
            if not (d / "meta.json").is_file():
                return None, "meta.json missing"
            return int(read_meta(d).get("num_timesteps", 0)), ""  # from before manifests
        verify_checkpoint(d, manifest=manifest)
        return int(manifest["num_timesteps"]), ""
    except ConfigError as exc:
        return None, str(exc)
    except (OSError, ValueError, TypeError) as exc:
        return None, f"{type(exc).__name__}: {exc}"


def _is_checkpoint_dir(p: Path) -> bool:
    return any((p / n).exists() for n in ("model.zip", "meta.json", MANIFEST))


def find_checkpoint(path: PathLike) -> tuple[Path, str | None]:
    """The checkpoint that ``resume=path`` continues: ``(directory, note)``.

    ``path`` is a checkpoint directory, a run's ``checkpoints/`` directory or a run
    directory.  Of a named checkpoint and what its saves leave beside it (``<name>.prev``,
    ``<name>.tmp-*`` holding a complete manifest), or of every checkpoint of a
    ``checkpoints/`` directory, the newest complete one (most decisions; at a tie the named
    one, then ``final``).  ``note`` is one line saying which was chosen when it is not the
    named checkpoint (``None`` otherwise).  No complete checkpoint: a :class:`ConfigError`
    saying why."""
    p = Path(path)
    if p.is_file() and p.name == "model.zip":
        p = p.parent
    if (p / "checkpoints").is_dir():  # a run directory
        p = p / "checkpoints"
    named: Path | None = p
    if p.is_dir() and not _is_checkpoint_dir(p):  # a checkpoints/ directory
        named = None
        candidates = sorted(x for x in p.iterdir() if x.is_dir())
    else:
        pattern = glob.escape(p.name)
        siblings = [*p.parent.glob(f"{pattern}.prev"), *p.parent.glob(f"{pattern}.tmp-*")]
        candidates = [p, *sorted(x for x in siblings if x.is_dir())]
    found: list[tuple[tuple[int, int, int], Path]] = []
    why: dict[Path, str] = {}
    for c in candidates:
        steps, reason = _inspect(c)
        if steps is None:
            why[c] = reason
            continue
        rank = 0 if ".tmp-" in c.name else 1 if c.name.endswith(".prev") else 2
        found.append(((steps, int(c == named), rank + int(c.name == "final")), c))
    if not found:
        if named is not None:
            raise ConfigError(f"resume={path}: no complete checkpoint there ({why[named]})")
        raise ConfigError(
            f"resume={path}: no complete checkpoint in {p}"
            + (f" ({'; '.join(f'{c.name}: {r}' for c, r in why.items())})" if why else "")
        )
    (steps, _, _), best = max(found, key=lambda x: x[0])
    if best == named:
        return best, None
    if named is None:
        return best, f"resume={path}: resuming from {best} ({steps} decisions)"
    return best, (
        f"resume={path}: that checkpoint is not complete ({why[named]}); resuming from {best} "
        f"({steps} decisions), the newest complete one beside it"
        if named in why
        else f"resume={path}: resuming from {best} ({steps} decisions), a complete save "
        "newer than the named checkpoint that did not get swapped in"
    )


def load_checkpoint(directory: PathLike, env: Any = None) -> BaseAlgorithm:
    """The model saved in ``directory``, with its replay buffer, env (unless ``env`` is given)
    and torch RNG state restored."""
    d = Path(directory)
    if not (d / "model.zip").is_file():
        raise ConfigError(f"no checkpoint in {d} (model.zip missing)")
    verify_checkpoint(d)  # every file against the manifest, before any is read
    meta = read_meta(d)
    classes = _agent_classes()
    name = meta.get("class", "DL2A2C")
    if name not in classes:
        raise ConfigError(f"{d}: unknown agent class {name!r}; known: {sorted(classes)}")
    restored_env = env is None and (d / "env.pkl").is_file()
    if restored_env:
        with _reading(d / "env.pkl", "the saved training env"):
            env = pickle.loads((d / "env.pkl").read_bytes())
    # with the saved env, keep the saved last observation (SB3 would reset the env)
    with _reading(d / "model.zip", "the model"):
        model = classes[name].load(
            d / "model.zip", env=env, device="cpu", force_reset=not restored_env
        )
    replay = getattr(model, "replay", None)
    if replay is not None and replay.enabled and (d / "replay.npz").is_file():
        with _reading(d / "replay.npz", "the replay buffer"):
            replay.load(d / "replay.npz")
    if (d / "rng.pt").is_file():
        with _reading(d / "rng.pt", "torch's RNG state"):
            th.set_rng_state(th.load(d / "rng.pt"))
    if (d / "global_rng.pkl").is_file():
        with _reading(d / "global_rng.pkl", "numpy's and Python's RNG states"):
            states = pickle.loads((d / "global_rng.pkl").read_bytes())
            np.random.set_state(states["numpy"])
            random.setstate(states["python"])
    return model


def save_policy_weights(policy: th.nn.Module, path: PathLike, meta: dict[str, Any]) -> Path:
    """A pretrained policy: ``policy.pt`` (state dict) and ``policy.json`` (how to rebuild,
    and the ``.pt``'s ``sha256``), each written atomically."""
    p = Path(path).with_suffix(".pt")
    with signals_deferred():
        with atomic_path(p) as tmp:
            th.save(policy.state_dict(), tmp)
            digest = sha256_file(tmp)
        write_json(p.with_suffix(".json"), {**meta, "sha256": digest})
    return p


def load_policy(path: PathLike) -> tuple[Any, dict[str, Any]]:
    """``(policy, meta)`` from a checkpoint directory, a ``model.zip``, a ``Cluster-v0``
    policy file ``policy.npz`` (:mod:`agents.policy_file`) or an older ``policy.pt``.

    ``meta["env"]`` is the env config the policy was trained with (when recorded)."""
    p = Path(path)
    if p.is_dir():
        if (p / "model.zip").is_file():
            verify_checkpoint(p, names=["model.zip"])
            meta = read_meta(p)
            classes = _agent_classes()
            cls = classes.get(meta.get("class", "DL2A2C"), classes["DL2A2C"])
            with _reading(p / "model.zip", "the model"):
                return cls.load(p / "model.zip", device="cpu").policy, meta
        if (p / "policy.npz").is_file():
            p = p / "policy.npz"
        elif (p / "policy.pt").is_file():
            p = p / "policy.pt"
        else:
            raise ConfigError(
                f"{p}: neither a checkpoint (model.zip) nor a policy file (policy.npz, policy.pt)"
            )
    if p.suffix == ".npz":
        from agents.policy_file import load

        loaded = load(p)
        if loaded.meta["net"].get("kind") != "dl2":
            raise ConfigError(
                f"{p}: a {loaded.env_id} policy, not a dlsched/Cluster-v0 network: load it with "
                "agents.policy_file.load (evaluate.py: policy:<path> or contention:<path>)"
            )
        return loaded.net, loaded.meta
    if p.suffix == ".zip":
        if p.name == "model.zip":
            verify_checkpoint(p.parent, names=["model.zip"])
        meta = read_meta(p.parent)
        if "class" not in meta:  # a stock SB3 model (PPO, MaskablePPO, A2C, any activation)
            from agents.policy import policy_from_zip

            return policy_from_zip(p), meta
        classes = _agent_classes()
        cls = classes[meta["class"]] if meta["class"] in classes else classes["DL2A2C"]
        with _reading(p, "the model"):
            return cls.load(p, device="cpu").policy, meta
    if p.suffix == ".pt":
        from agents.policy_file import load as load_file

        loaded = load_file(p)  # the one loader reads the older policy.pt + policy.json too
        assert loaded.original is not None
        return loaded.net, loaded.original
    raise ConfigError(f"{p}: expected a checkpoint directory, model.zip, policy.npz or policy.pt")
