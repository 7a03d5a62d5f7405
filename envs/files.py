"""Files that are never half-written: atomic writes, checksums, one run per directory, and
SIGTERM handled like Ctrl-C.

Every artifact dlsched writes (checkpoints, policy files, run records, tables, plots) goes
through :func:`atomic_path` or its shorthands: the bytes go to a temporary file in the same
directory, are flushed and ``fsync``-ed, then renamed over the target, so a reader (or a run
killed half-way) sees the old file or the new one, never a torn one.  A disk that is full or
read-only is a :class:`~envs.sim.errors.ConfigError` naming the file and the cause, not an
``OSError`` traceback.

This module sits in the bottom layer (``envs``) because every layer above writes files.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import signal
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from envs.sim.errors import ConfigError

__all__ = [
    "RunLock",
    "atomic_path",
    "die_with_parent",
    "fsync_dir",
    "os_error",
    "sha256_file",
    "sigterm_as_interrupt",
    "write_bytes",
    "write_json",
    "write_text",
]

PathLike = str | os.PathLike[str]


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


#: a new file's permissions as ``open`` would give them (``mkstemp`` gives 0600)
_MODE = 0o666 & ~_umask()


def os_error(path: PathLike, exc: OSError, doing: str = "write") -> ConfigError:
    """One line for an ``OSError`` on ``path``: which file, what was being done, the cause
    (disk full, read-only file system, permission denied, ...)."""
    cause = exc.strerror or type(exc).__name__
    if exc.errno == errno.ENOSPC:
        cause = "no space left on the device (disk full)"
    elif exc.errno == errno.EROFS:
        cause = "read-only file system"
    return ConfigError(f"cannot {doing} {os.fspath(path)}: {cause}")


def fsync_dir(directory: PathLike) -> None:
    """Make a rename inside ``directory`` durable (best effort: not every file system can)."""
    try:
        fd = os.open(os.fspath(directory), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_path(path: PathLike, *, sync: bool = True) -> Iterator[Path]:
    """A temporary path beside ``path`` to write to; on a clean exit it is flushed and renamed
    over ``path`` (atomic on POSIX), on an error (or Ctrl-C) it is removed and ``path`` is left
    as it was.  ``OSError`` becomes a :class:`ConfigError` naming ``path``."""
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        os.fchmod(fd, _MODE)
        os.close(fd)
    except OSError as exc:
        raise os_error(target, exc) from None
    tmp = Path(tmp_name)
    try:
        yield tmp
        if sync:
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise os_error(target, exc) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync:
        fsync_dir(target.parent)


def write_bytes(path: PathLike, data: bytes) -> Path:
    """``path`` holds ``data``, atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text(path: PathLike, text: str) -> Path:
    """``path`` holds ``text`` (UTF-8), atomically."""
    return write_bytes(path, text.encode())


def write_json(path: PathLike, obj: Any, default: Callable[[Any], Any] | None = str) -> Path:
    """``path`` holds ``obj`` as indented JSON, atomically."""
    return write_text(path, json.dumps(obj, indent=2, default=default) + "\n")


def sha256_file(path: PathLike) -> str:
    """The file's SHA-256, hex."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


class RunLock:
    """An exclusive lock on a run directory (``.lock``, ``flock``): a second run into the same
    directory is refused with a message naming it and the holder's pid.  The kernel drops the
    lock when the holder dies, however it dies, so a killed run never leaves a stale lock."""

    NAME = ".lock"

    def __init__(self, directory: PathLike) -> None:
        self.directory = Path(directory)
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        import fcntl

        path = self.directory / self.NAME
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise os_error(path, exc, "create") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise ConfigError(
                f"{self.directory} is in use by another run (pid {holder}); wait for it or "
                "choose another out_dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)  # closing drops the flock
            self._fd = None
            with contextlib.suppress(OSError):
                (self.directory / self.NAME).unlink()

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Inside the block, SIGTERM (and SIGHUP) raise ``KeyboardInterrupt`` in the main thread,
    so a run stopped by ``kill`` or a closed terminal cleans up as on Ctrl-C.  Outside the main
    thread (where Python cannot install handlers) this does nothing."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    old: dict[signal.Signals, Any] = {}
    try:
        for sig in (signal.SIGTERM, signal.SIGHUP):
            old[sig] = signal.signal(sig, handler)
    except ValueError:  # not the main thread
        pass
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def die_with_parent(parent: int) -> None:
    """In a worker process: be killed (SIGKILL) when the process that started it dies, however
    it dies (``kill -9`` included), so that no worker outlives its run (Linux ``prctl``; a
    no-op elsewhere).  ``parent`` is the parent's pid: if it died before this call, exit now."""
    import ctypes
    import sys

    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):  # pragma: no cover - no prctl
            pass
    if os.getppid() != parent:
        os._exit(1)
