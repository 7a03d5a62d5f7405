"""Small per-process memos for work that is read-only and costly: reading a trace corpus,
building a scenario's workloads, reading a policy file's metadata.

A memo is an ``OrderedDict`` owned by its module, filled by :func:`memo`, which keeps the
:data:`MEMO_SIZE` most recently used values.  A key that depends on a file includes
:func:`file_stamp` (its absolute path, size and mtime), so an edited file is read again.  Only
immutable values (frozen dataclasses, tuples) or values copied for each caller are memoised.

This module sits in the bottom layer (``envs``): the trace readers (``envs.sim.traces``) and
the evaluation harness both use it.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Callable, Hashable
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["MEMO_SIZE", "file_stamp", "memo"]

_T = TypeVar("_T")

#: How many values each of this process's memos keeps (the most recently used).
MEMO_SIZE = 4


def memo(store: OrderedDict[Hashable, Any], key: Hashable, make: Callable[[], _T]) -> _T:
    """``store[key]``, made by ``make()`` on a miss; ``store`` keeps the :data:`MEMO_SIZE`
    most recently used values.  A ``make`` that raises stores nothing."""
    if key in store:
        store.move_to_end(key)
        return store[key]
    value = make()
    store[key] = value
    while len(store) > MEMO_SIZE:
        store.popitem(last=False)
    return value


def file_stamp(path: str | Path) -> tuple[str, int, int] | None:
    """``(absolute path, size, mtime in ns)`` of a file, the part of a memo's key that makes
    an edited file read again; ``None`` if it cannot be read (then nothing is memoised)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (os.path.abspath(path), st.st_size, st.st_mtime_ns)
