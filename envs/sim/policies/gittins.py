"""Gittins index of a job from an empirical distribution of job sizes (Tiresias §3.2).

The index of a job that has attained service ``a`` is how likely it is to finish within the
next quantum ``Δ`` per unit of service it will use meanwhile; 2D-Gittins runs the job with the
highest index first.  Sizes and ages are in the distribution's own unit (GPU-seconds for
Tiresias's ``yarn-gput1000.csv``); the policy converts.

Two formulas, both at a *fixed* look-ahead Δ (Tiresias's code does not take the supremum):

- ``"textbook"``: ``G(a) = P(S - a <= Δ | S > a) / E[min(S - a, Δ) | S > a]``, exact at any
  age over the empirical samples (``O(log N)`` per call with prefix sums).
- ``"upstream"``: the Tiresias code's (``SymbioticLab/Tiresias@959f9b0``, see the shared
  reference note §1.2): ``p = (j - i) / (N - i)`` and ``e = floor((Σ d[i..j-1] + Δ (N - j)) /
  (N - i))`` with ``i`` the first sample ``> a`` and ``j`` the first sample ``> a + Δ`` (``j =
  N - 1`` when ``a + Δ > d[N-1] - 1``); ``p`` rounded to 5 decimals, index ``p · 10^6 / e``
  rounded to 4 (Python 2 rounding, half away from zero); tabulated at ``a = d[k] - 1``
  and looked up piecewise-constant (the entry of the first sample ``> a``); 0 beyond the
  largest sample.  Its "E" sums raw sizes, not remaining service: reproduced as is.
"""

from __future__ import annotations

import bisect
import csv
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

from envs.sim.errors import ConfigError, WorkloadError

#: the distribution Tiresias's code uses (1,001 YARN job GPU-times, GPU-seconds)
BUILTIN_DISTRIBUTION = "yarn-gput1000.csv"


class GittinsIndex:
    """Gittins index over sorted positive ``samples`` with fixed look-ahead ``delta``."""

    def __init__(self, samples: Sequence[float], delta: float, formula: str = "textbook") -> None:
        d = [float(x) for x in samples]
        check_samples(d, "samples")
        if not (delta > 0 and math.isfinite(delta)):
            raise ConfigError(f"Gittins look-ahead Δ must be a finite number > 0, got {delta}")
        if formula not in ("textbook", "upstream"):
            raise ConfigError(f"Gittins formula must be 'textbook' or 'upstream', not {formula!r}")
        self.samples = d
        self.delta = float(delta)
        self.formula = formula
        self._prefix = [0.0]
        for x in d:
            self._prefix.append(self._prefix[-1] + x)
        self._table = [self._upstream_rank(x - 1.0) for x in d] if formula == "upstream" else []

    def __call__(self, age: float) -> float:
        """Index of a job that has attained ``age`` (distribution units); higher runs first."""
        if self.formula == "upstream":
            k = bisect.bisect_right(self.samples, age)
            return self._table[k] if k < len(self._table) else 0.0
        return self._textbook(age)

    def _textbook(self, a: float) -> float:
        d, n = self.samples, len(self.samples)
        i = bisect.bisect_right(d, a)
        if i >= n:
            return 0.0  # older than every sample: nothing is known, lowest priority
        j = bisect.bisect_right(d, a + self.delta)
        alive = n - i
        p = (j - i) / alive
        e = (self._prefix[j] - self._prefix[i] - a * (j - i) + self.delta * (n - j)) / alive
        return p / e

    def _upstream_rank(self, a: float) -> float:
        d, n, delta = self.samples, len(self.samples), self.delta
        if a > d[-1] - 1:
            return 0.0
        i = bisect.bisect_right(d, a)
        j = n - 1 if a + delta > d[-1] - 1 else bisect.bisect_right(d, a + delta)
        p = _round_half_up((j - i) / (n - i), 5)
        e = math.floor((self._prefix[j] - self._prefix[i] + delta * (n - j)) / (n - i))
        return _round_half_up(p * 1e6 / e, 4) if e > 0 else 0.0


def _round_half_up(x: float, places: int) -> float:
    """Python 2's ``round`` for x >= 0 (half away from zero), as the upstream code rounds."""
    f = 10.0**places
    return math.floor(x * f + 0.5) / f


def check_samples(d: Sequence[float], where: str) -> None:
    """A size distribution must be non-empty, positive, finite and sorted ascending."""
    if not d:
        raise WorkloadError(f"{where}: the job-size distribution is empty")
    for k, x in enumerate(d):
        if not (x > 0 and math.isfinite(x)):
            raise WorkloadError(f"{where}: sample {k} is {x}; sizes must be finite and > 0")
        if k and x < d[k - 1]:
            raise WorkloadError(
                f"{where}: samples must be sorted ascending; sample {k} ({x}) < "
                f"sample {k - 1} ({d[k - 1]})"
            )


def load_distribution(path: str | Path) -> list[float]:
    """Read a one-column CSV of job sizes (header ``duration``, Tiresias's layout; CRLF
    accepted).  Empty, unsorted, non-numeric or non-positive input raises WorkloadError
    naming the file and line."""
    p = Path(path)
    if not p.is_file():
        raise WorkloadError(f"{p.name}: file not found (file: {p})")
    out: list[float] = []
    with p.open(encoding="utf-8-sig", newline="") as fh:
        rows = [(n, r) for n, r in enumerate(csv.reader(fh), 1) if any(c.strip() for c in r)]
    if not rows:
        raise WorkloadError(f"{p.name}: empty file: the job-size distribution is empty")
    for line, row in rows[1:] if _is_header(rows[0][1]) else rows:
        text = row[0].strip()
        try:
            x = float(text)
        except ValueError:
            raise WorkloadError(f"{p.name}, line {line}: not a number: {text!r}") from None
        if not (x > 0 and math.isfinite(x)):
            raise WorkloadError(f"{p.name}, line {line}: size {text!r} must be finite and > 0")
        if out and x < out[-1]:
            raise WorkloadError(
                f"{p.name}, line {line}: sizes must be sorted ascending ({x:g} < {out[-1]:g})"
            )
        out.append(x)
    check_samples(out, p.name)
    return out


def _is_header(row: Sequence[str]) -> bool:
    try:
        float(row[0])
    except ValueError:
        return True
    return False


@contextmanager
def _data_path(name: str) -> Iterator[Path]:
    with resources.as_file(resources.files("envs.sim") / "data" / "tiresias" / name) as p:
        yield p


def builtin_distribution() -> list[float]:
    """Tiresias's GPU-time distribution (``yarn-gput1000.csv``, 1,001 samples, GPU-s)."""
    with _data_path(BUILTIN_DISTRIBUTION) as p:
        return load_distribution(p)
