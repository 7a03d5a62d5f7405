"""Scheduler stacks: one job order + one placer + one communication scheduler, by name.

This module is the only place where config names become policy classes: each placement and
communication token is registered once (:func:`register_placement`, :func:`register_comm`:
:data:`PLACEMENT_TOKENS`, :data:`COMM_TOKENS`), the job orders are :data:`ORDERS`.  Stack names are
``<placement>_<comm>`` with an optional ``<order>:`` prefix, e.g. ``lwf1_adasrsf``
(SRSF order, LWF-1 placement, AdaDUAL), ``ff_adasrsf``, ``ls_adasrsf``, ``rand_adasrsf``,
``lwf1_srsf1``, ``fifo:lwf4_srsf2``.

- placement: ``rand`` | ``ff`` | ``ls`` | ``lwf<κ>`` (any κ >= 1) | ``ovl`` (single-server
  jobs time-share with jobs that span servers rather than with computing ones) | ``count`` (Tiresias
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
from typing import Any

from envs.sim.config import TiresiasConfig
from envs.sim.errors import ConfigError
from envs.sim.policies.base import CommScheduler, JobOrder, Placer
from envs.sim.policies.comm import AdaDual, FairShare, SRSFn
from envs.sim.policies.job_order import FIFO, SRSF
from envs.sim.policies.placement import LWF, FirstFit, ListScheduling, Overlap, RandomPlacer
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


#: A stack part's registry: ``(pattern, label, factory)``, the token matched whole by
#: ``pattern`` and built by ``factory(match, option)``; ``label`` is how errors list it.
_Registry = list[tuple["re.Pattern[str]", str, Callable[[re.Match[str], Any], Any]]]

#: placement tokens (the option: ``lwf_comm_ms_per_mb``)
PLACEMENT_TOKENS: _Registry = []
#: communication-scheduler tokens (the option: ``adadual_inclusive``)
COMM_TOKENS: _Registry = []


def _part(
    registry: _Registry, pattern: str, label: str | None = None
) -> Callable[[Callable[[re.Match[str], Any], Any]], Callable[[re.Match[str], Any], Any]]:
    """Register a stack part: the decorated ``factory(match, option)`` builds the tokens
    ``pattern`` matches whole (``label``, default the pattern, names them in errors)."""

    def register(
        factory: Callable[[re.Match[str], Any], Any],
    ) -> Callable[[re.Match[str], Any], Any]:
        registry.append((re.compile(pattern), label or pattern, factory))
        return factory

    return register


def register_placement(
    pattern: str, label: str | None = None
) -> Callable[[Callable[[re.Match[str], Any], Any]], Callable[[re.Match[str], Any], Any]]:
    """Register a placement token: the decorated ``factory(match, lwf_comm_ms_per_mb)``
    returns a fresh :class:`~envs.sim.policies.base.Placer` for the tokens ``pattern``
    matches whole (letters with an optional number, e.g. ``mine`` or ``mine(\\d+)``);
    ``<token>_<comm>`` is then a stack name everywhere (``evaluate.py``, the env's core
    placer)."""
    return _part(PLACEMENT_TOKENS, pattern, label)


def register_comm(
    pattern: str, label: str | None = None
) -> Callable[[Callable[[re.Match[str], Any], Any]], Callable[[re.Match[str], Any], Any]]:
    """Register a communication-scheduler token: ``factory(match, adadual_inclusive)`` returns
    a fresh :class:`~envs.sim.policies.base.CommScheduler`."""
    return _part(COMM_TOKENS, pattern, label)


@_part(PLACEMENT_TOKENS, "rand")
def _rand(m: re.Match[str], lwf_comm: float | None) -> Placer:
    return RandomPlacer()


@_part(PLACEMENT_TOKENS, "ff")
def _ff(m: re.Match[str], lwf_comm: float | None) -> Placer:
    return FirstFit()


@_part(PLACEMENT_TOKENS, "ls")
def _ls(m: re.Match[str], lwf_comm: float | None) -> Placer:
    return ListScheduling(lwf_comm)


@_part(PLACEMENT_TOKENS, r"lwf(\d+)", "lwf<κ> (e.g. lwf1)")
def _lwf(m: re.Match[str], lwf_comm: float | None) -> Placer:
    return LWF(int(m.group(1)), lwf_comm)


@_part(PLACEMENT_TOKENS, "ovl")
def _ovl(m: re.Match[str], lwf_comm: float | None) -> Placer:
    return Overlap(lwf_comm)


@_part(PLACEMENT_TOKENS, "count")
def _count(m: re.Match[str], lwf_comm: float | None) -> Placer:
    return CountPlacer()


@_part(PLACEMENT_TOKENS, "skew")
def _skew(m: re.Match[str], lwf_comm: float | None) -> Placer:
    return SkewPlacer()


@_part(COMM_TOKENS, "adasrsf")
def _adasrsf(m: re.Match[str], inclusive: bool) -> CommScheduler:
    return AdaDual(inclusive=inclusive)


@_part(COMM_TOKENS, "fs")
def _fs(m: re.Match[str], inclusive: bool) -> CommScheduler:
    return FairShare()


@_part(COMM_TOKENS, r"srsf(\d+)", "srsf<n>")
def _srsf(m: re.Match[str], inclusive: bool) -> CommScheduler:
    return SRSFn(int(m.group(1)))


def _build(registry: _Registry, what: str, token: str, option: Any) -> Any:
    """The part ``token`` names in ``registry``; an unknown token is a :class:`ConfigError`
    listing the known ones."""
    for pattern, _label, factory in registry:
        m = pattern.fullmatch(token)
        if m:
            return factory(m, option)
    known = ", ".join(label for _p, label, _f in registry)
    raise ConfigError(f"unknown {what} {token!r}; known: {known}")


def _placer(token: str, lwf_comm_ms_per_mb: float | None) -> Placer:
    placer: Placer = _build(PLACEMENT_TOKENS, "placement", token, lwf_comm_ms_per_mb)
    return placer


def _comm(token: str, adadual_inclusive: bool) -> CommScheduler:
    comm: CommScheduler = _build(COMM_TOKENS, "communication scheduler", token, adadual_inclusive)
    return comm


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
