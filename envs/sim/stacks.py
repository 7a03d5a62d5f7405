"""Scheduler stacks: one job order + one placer + one communication scheduler, by name.

This module is the only place where config names become policy classes.  Stack names are
``<placement>_<comm>`` with an optional ``<order>:`` prefix, e.g. ``lwf1_adasrsf``
(SRSF order, LWF-1 placement, AdaDUAL), ``ff_adasrsf``, ``ls_adasrsf``, ``rand_adasrsf``,
``lwf1_srsf1``, ``fifo:lwf4_srsf2``.

- placement: ``rand`` | ``ff`` | ``ls`` | ``lwf<κ>`` (any κ >= 1) | ``count`` (Tiresias
  count-only, exclusive GPUs) | ``skew`` (Tiresias consolidate-if-skewed, exclusive GPUs)
- comm: ``adasrsf`` (AdaDUAL) | ``srsf<n>`` (n >= 1) | ``fs`` (no admission limit: fair share)
- order: ``srsf`` (default) | ``fifo`` | preemptive (``PreemptiveOrder``): ``psrsf``
  (preemptive SRSF), ``las`` (continuous 2D-LAS, 60 s quantum), ``dlas`` / ``dgittins``
  (Tiresias's discretised 2D-LAS / 2D-Gittins, the paper's defaults: K = 2, 3,600 GPU-s,
  PROMOTEKNOB 8), ``dlas-upstream`` / ``dgittins-upstream`` (the public code's defaults:
  K = 3, 3,250 / 7,200 GPU-s, knob off, Gittins as coded)
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from envs.sim.config import TiresiasConfig
from envs.sim.errors import ConfigError
from envs.sim.policies.base import CommScheduler, JobOrder, Placer
from envs.sim.policies.comm import AdaDual, FairShare, SRSFn
from envs.sim.policies.job_order import FIFO, SRSF
from envs.sim.policies.placement import LWF, FirstFit, ListScheduling, RandomPlacer
from envs.sim.policies.preemptive import LAS2D, PreemptiveSRSF
from envs.sim.policies.skew import CountPlacer, SkewPlacer
from envs.sim.policies.tiresias import DiscretizedGittins, DiscretizedLAS

ORDERS: dict[str, Callable[[], JobOrder]] = {
    "srsf": SRSF,
    "fifo": FIFO,
    "psrsf": PreemptiveSRSF,
    "las": lambda: LAS2D(quantum_ms=60_000.0),
    "dlas": lambda: DiscretizedLAS(TiresiasConfig.paper()),
    "dlas-upstream": lambda: DiscretizedLAS(TiresiasConfig.upstream()),
    "dgittins": lambda: DiscretizedGittins(TiresiasConfig.paper()),
    "dgittins-upstream": lambda: DiscretizedGittins(TiresiasConfig.upstream()),
}

#: Tiresias stacks (exclusive GPUs; ``fs``: multi-server all-reduces share NICs freely) and
#: the baselines they are compared with.
TIRESIAS_STACKS: dict[str, str] = {
    "dlas:skew_fs": "Tiresias 2D-LAS, paper defaults, consolidate-if-skewed",
    "dlas:count_fs": "Tiresias 2D-LAS, paper defaults, count-only",
    "dlas-upstream:count_fs": "Tiresias 2D-LAS, upstream-code defaults, count-only",
    "dgittins:skew_fs": "Tiresias 2D-Gittins, paper defaults, consolidate-if-skewed",
    "dgittins-upstream:count_fs": "Tiresias 2D-Gittins, upstream-code defaults, count-only",
    "psrsf:count_fs": "preemptive SRSF (Tiresias's shortest-gpu), count-only",
    "srsf:count_fs": "SRSF order, non-preemptive, count-only",
    "fifo:count_fs": "FIFO, non-preemptive, skip-ahead (Tiresias's fjf), count-only",
}

#: The stacks of the Ada-SRSF paper's Tables IV and V, with their paper names.
STACKS: dict[str, str] = {
    "lwf1_adasrsf": "LWF-1 + Ada-SRSF",
    "ff_adasrsf": "FF + Ada-SRSF",
    "ls_adasrsf": "LS + Ada-SRSF",
    "rand_adasrsf": "RAND + Ada-SRSF",
    "lwf1_srsf1": "LWF-1 + SRSF(1)",
    "lwf1_srsf2": "LWF-1 + SRSF(2)",
    "lwf1_srsf3": "LWF-1 + SRSF(3)",
}
#: The same stacks as named by the reference code (``place-pick-schedule-thres-adaDual``;
#: FF is ``bp``, LS is ``lwf32``), the column names of its shipped results.
REFERENCE_ALGO: dict[str, str] = {
    "lwf1_adasrsf": "ssf-lwf1-srsf-1-true",
    "ff_adasrsf": "ssf-bp-srsf-1-true",
    "ls_adasrsf": "ssf-lwf32-srsf-1-true",
    "rand_adasrsf": "ssf-random-srsf-1-true",
    "lwf1_srsf1": "ssf-lwf1-srsf-0-false",
    "lwf1_srsf2": "ssf-lwf1-srsf-1-false",
    "lwf1_srsf3": "ssf-lwf1-srsf-2-false",
}
TABLE_IV = ("rand_adasrsf", "ff_adasrsf", "ls_adasrsf", "lwf1_adasrsf")
TABLE_V = ("lwf1_srsf1", "lwf1_srsf2", "lwf1_srsf3", "lwf1_adasrsf")

_NAME = re.compile(r"^(?:(?P<order>[a-z][a-z0-9-]*):)?(?P<place>[a-z]+\d*)_(?P<comm>[a-z]+\d*)$")


@dataclass
class SchedulerStack:
    """Fresh policy instances for one simulation (placers may keep state)."""

    name: str
    order: JobOrder
    placer: Placer
    comm: CommScheduler


def _placer(token: str, lwf_comm_ms_per_mb: float | None) -> Placer:
    if token == "rand":
        return RandomPlacer()
    if token == "ff":
        return FirstFit()
    if token == "count":
        return CountPlacer()
    if token == "skew":
        return SkewPlacer()
    if token == "ls":
        return ListScheduling(lwf_comm_ms_per_mb)
    m = re.fullmatch(r"lwf(\d+)", token)
    if m:
        return LWF(int(m.group(1)), lwf_comm_ms_per_mb)
    raise ConfigError(
        f"unknown placement {token!r}; known: rand, ff, ls, lwf<κ> (e.g. lwf1), count, skew"
    )


def _comm(token: str, adadual_inclusive: bool) -> CommScheduler:
    if token == "adasrsf":
        return AdaDual(inclusive=adadual_inclusive)
    if token == "fs":
        return FairShare()
    m = re.fullmatch(r"srsf(\d+)", token)
    if m:
        return SRSFn(int(m.group(1)))
    raise ConfigError(f"unknown communication scheduler {token!r}; known: adasrsf, fs, srsf<n>")


def make_stack(
    name: str, *, lwf_comm_ms_per_mb: float | None = None, adadual_inclusive: bool = False
) -> SchedulerStack:
    """Build a stack from its name; unknown parts raise :class:`ConfigError` naming them."""
    m = _NAME.match(name)
    if not m:
        raise ConfigError(
            f"malformed stack name {name!r}; expected '<placement>_<comm>' such as "
            f"{', '.join(STACKS)}"
        )
    order_name = m.group("order") or "srsf"
    if order_name not in ORDERS:
        raise ConfigError(f"unknown job order {order_name!r} in {name!r}; known: {sorted(ORDERS)}")
    return SchedulerStack(
        name=name,
        order=ORDERS[order_name](),
        placer=_placer(m.group("place"), lwf_comm_ms_per_mb),
        comm=_comm(m.group("comm"), adadual_inclusive),
    )
