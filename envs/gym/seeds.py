"""Seed checks shared by the envs and their factory (a module of its own, below both, so that
the env does not import the factory that builds it)."""

from __future__ import annotations

import numpy as np

from envs.sim.errors import ConfigError

__all__ = ["SEED_LIMIT", "check_seed"]

#: Seeds of a contention-engine run are below this: it seeds MT19937 as CPython does,
#: ``init_by_array([seed])`` of 32-bit words (:func:`envs.sim.engine.core._make_rng`), which
#: refuses ``2**32`` and above.  numpy's ``default_rng`` (the workload generators, the DL² env)
#: takes any integer >= 0.
SEED_LIMIT = 2**32


def check_seed(seed: object, key: str, limit: int | None = SEED_LIMIT) -> int:
    """``seed`` as an ``int`` if it is an integer in ``0 <= seed < limit`` (``limit`` a
    power of two, or ``None``: no upper bound), else a one-line :class:`ConfigError` naming
    ``key``, the seed and the range, e.g. ``seeds: -1 is out of range (0 <= seed < 2**32)``
    (numpy would raise a ``TypeError`` or ``ValueError`` from deep inside the seeding)."""
    valid = "seed >= 0" if limit is None else f"0 <= seed < 2**{limit.bit_length() - 1}"
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ConfigError(f"{key}: {seed!r} is not an integer seed ({valid})")
    value = int(seed)
    if value < 0 or (limit is not None and value >= limit):
        raise ConfigError(f"{key}: {value} is out of range ({valid})")
    return value
