"""The rule selector's searches: rollouts over its rules on a copy of the env (``search:
drained``, ``known`` or ``sampled``).

Why: the selector's gain over the best rule at paper scale comes from decisions late in an
episode, once every job has arrived (docs/experiments/contention-env.md, "Search where the
future is known").  From then on the engine is an exact model of what follows a decision: the
jobs are known, their lengths are (SRSF's premise, and the rules' key), and the engine is
deterministic given its seeded generators.

- ``drained``: at each decision after the last arrival the search tries the action of every
  rule the selector chooses among, each on a deep copy of the env followed by the selector to
  the episode's end, and takes the one with the lowest avg JCT (the selector's own on a tie):
  the rollout algorithm (Bertsekas) over the learned selector, where its model is exact.
  Before that, it is the selector.  Guarantee (tested): the base is always a candidate and the
  model exact, so the value of the best candidate never rises from one decision to the next,
  and the episode is never worse than the selector's on the same workload.
- ``known``: the same at every decision, on copies that forget the jobs still to arrive (the
  known jobs' future: certainty equivalence).  After the last arrival it is ``drained``;
  before, its model is wrong wherever a later arrival matters, so it has no guarantee.  On
  small clusters with jobs arriving throughout it is far ahead of ``drained`` (the held-out
  VCs' smallest clusters); in an arrival burst (paper scale) it starts jobs the arrivals then
  wait behind.
- ``sampled``: as ``known``, but the copies replace the jobs still to arrive by
  ``samples`` guesses at them (:func:`sample_futures`: as many as are to come, drawn from the
  arrived jobs, at the arrival rate seen), each candidate valued by its mean over the same
  guesses.  Measured worse than ``known`` and the selector at paper scale, at about 1,300x
  the selector's cost (docs/experiments/contention-env.md, "Sampled futures and a margin"):
  one-step gains over the selector before the last arrival are smaller than a guessed
  future's error.
- ``margin`` (``known``, ``sampled``; ``drained`` searches only where its model is exact):
  another action is taken only where it beats the selector's own rollout by that share of
  its value while jobs are still to arrive; once none is, the model is exact and any gain
  counts.  ``margin: 0.9`` makes ``known`` the ``drained`` search (tested).
- ``margin_by: arrivals``: the margin scaled by how many jobs are expected to arrive while a
  job runs (:func:`margin_share`): none on a small cluster with arrivals spread out, where the
  known jobs' model is nearly right and a margin of 0.04% already gives up gains of up to
  20%; all of it in an arrival burst, where the jobs it leaves out queue behind what it
  starts (docs/experiments/contention-env.md, "A margin where arrivals crowd").

No search sees a job before it arrives (tested: two workloads that agree up to a time give the
same decisions before it), unlike :mod:`agents.search` (a clairvoyant measure).  ``drained``
reads that no job is still to arrive
(:meth:`~envs.gym.contention_env.ContentionEnv.jobs_to_arrive`, part of the env's
observation, which the selector's features read too).  The model is the engine at the run's
own fidelity (``model: same``), or at FAST fidelity whatever the run's (``model: fast``: a
FULL run searched on the cheaper engine, its copies gone FAST by
:meth:`~envs.gym.contention_env.ContentionEnv.coarsen` once they have forgotten the jobs still
to arrive, so the merge factor reads none of them; the model is then off by FAST's bias), or
on the FAST engine only where it merges :data:`AUTO_FAST_FROM` or more iterations a step
(``model: auto``: the exact model where it is affordable).  A paper-scale episode at fast
fidelity costs 12.8 CPU-s with ``drained`` and 76.8 s with ``known``, against 0.35 s without
(``benchmarks/bench_search.py``).
"""

from __future__ import annotations

import copy
import hashlib
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Protocol

import numpy as np

from agents.search import best_alternative
from envs.sim.errors import ConfigError

__all__ = [
    "AUTO_FAST_FROM",
    "DEFAULT_SAMPLES",
    "MARGIN_BY",
    "MODELS",
    "SEARCHES",
    "arrivals_per_run",
    "candidates",
    "check_margin",
    "check_margin_by",
    "check_model",
    "check_samples",
    "check_search",
    "drained",
    "margin_share",
    "on_fast_engine",
    "rollout_value",
    "sample_futures",
    "search_action",
    "search_values",
    "state_key",
]

#: the selector's searches: ``none`` (it acts as its rule scored highest), ``drained`` (this
#: module's rollouts once every job has arrived), ``known`` (at every decision, over the jobs
#: that have arrived), ``sampled`` (at every decision, over sampled futures)
SEARCHES = ("none", "drained", "known", "sampled")

#: ``sampled``: the futures each decision's candidates are rolled out on, unless the selector
#: says (the same ones for every candidate: common random numbers)
DEFAULT_SAMPLES = 2


class RuleSelector(Protocol):
    """What the searches need of a selector (:class:`agents.rule_selector.RuleSelector`,
    which imports this module): its rules, their actions, its own action without a search,
    its search and the search's memo."""

    rules: tuple[str, ...]
    search: str
    samples: int
    margin: float
    margin_by: str
    model: str
    search_memo: tuple[float, set[Any]] | None

    def rule(self, name: str) -> Any: ...

    def choose(self, env: Any) -> int: ...

    def base_act(self, env: Any) -> int: ...


def check_search(search: str) -> str:
    """``search`` if it is one of :data:`SEARCHES`; else one :class:`ConfigError` naming them."""
    if search not in SEARCHES:
        raise ConfigError(f"unknown rule-selector search {search!r}; known: {list(SEARCHES)}")
    return search


def check_samples(samples: Any) -> int:
    """``samples`` (futures per decision of the ``sampled`` search) as an int >= 1; else one
    :class:`ConfigError` saying why (a budget of 0 rolls nothing out)."""
    try:
        k = int(samples)
        whole = k == samples
    except (TypeError, ValueError, OverflowError):
        k, whole = 0, False
    if not whole or isinstance(samples, bool) or k < 1:
        raise ConfigError(
            f"the sampled search's samples (futures per decision) must be an integer >= 1, "
            f"got {samples!r}"
        )
    return k


#: How the margin applies before the last arrival: in full (``always``), or by the share
#: :func:`margin_share` gives (``arrivals``: scaled by the arrivals expected while a job runs)
MARGIN_BY = ("always", "arrivals")


def check_margin_by(margin_by: Any) -> str:
    """``margin_by`` if it is one of :data:`MARGIN_BY`, else one :class:`ConfigError`."""
    if margin_by not in MARGIN_BY:
        raise ConfigError(f"margin_by must be one of {list(MARGIN_BY)}, got {margin_by!r}")
    return str(margin_by)


#: The engine the rollouts run: at the run's own fidelity (``same``), or at FAST fidelity
#: whatever the run's (``fast``: a FULL run searched on the cheaper engine, 6.7x cheaper for the
#: drained search at paper scale, benchmarks/bench_search.py; its model is then off by FAST's
#: bias, envs.sim.config.Fidelity), or the FAST engine only where it saves an order of
#: magnitude (``auto``: where it would merge at least :data:`AUTO_FAST_FROM` iterations a step,
#: the run's own below, where the exact model costs at most a few times more)
MODELS = ("same", "fast", "auto")

#: ``model: auto`` rolls out on the FAST engine where a FAST run of the jobs seen merges at
#: least this many iterations a step (its ``K``: the shortest seen job's iterations / 50;
#: the paper-scale generator's jobs have K >= 20, the Philly windows' capped at 200 iterations
#: K <= 4)
AUTO_FAST_FROM = 10


def check_model(model: Any) -> str:
    """``model`` if it is one of :data:`MODELS`, else one :class:`ConfigError`."""
    if model not in MODELS:
        raise ConfigError(
            f"the search's model must be one of {list(MODELS)} (the engine its rollouts run "
            f"at), got {model!r}"
        )
    return str(model)


def check_margin(margin: Any) -> float:
    """``margin`` (the share of the selector's own rollout value another candidate must
    beat it by) as a float in [0, 1); else one :class:`ConfigError` saying why."""
    try:
        m = float(margin)
    except (TypeError, ValueError, OverflowError):
        m = math.nan
    if isinstance(margin, bool) or not 0.0 <= m < 1.0:
        raise ConfigError(
            f"the search's margin (share of the selector's own value another action must "
            f"beat it by) must be a number in [0, 1), got {margin!r}"
        )
    return m


def _tolerance(selector: RuleSelector, env: Any, base_value: float) -> float:
    """How far below the selector's own rollout value another candidate's must be to be
    taken: ``margin`` of it while jobs are still to arrive (the model is a guess), times
    :func:`margin_share` with ``margin_by: arrivals``; 1e-9 s once none is (the model is exact; a
    tie keeps the selector's own)."""
    if drained(env):
        return 1e-9
    share = selector.margin * (margin_share(env) if selector.margin_by == "arrivals" else 1.0)
    return max(1e-9, share * base_value)


def arrivals_per_run(env: Any) -> float | None:
    """How many of ``env``'s jobs still to arrive are expected to arrive while a job runs,
    from what has been seen: the arrival rate so far (``(n - 1) / span`` for ``n`` arrivals
    over ``span``) times the arrived jobs' mean run time alone (GPU compute over GPUs), at
    most the jobs still to arrive; ``None`` while fewer than two jobs have arrived or they
    arrived at one instant (no rate seen)."""
    seen = _seen(env)
    if len(seen) < 2:
        return None
    span = float(seen[-1].submit_ms - seen[0].submit_ms)
    if not span > 0.0:
        return None
    run_ms = float(np.mean([float(s.total_compute_ms) / s.num_gpus for s in seen]))
    return min(float(env.jobs_to_arrive()), (len(seen) - 1) / span * run_ms)


#: ``margin_by: arrivals``: none of the margin applies where fewer jobs than the first are
#: expected to arrive while a job runs, all of it from the second on, linear between (chosen on
#: validation: the paper-scale generator's burst has about 27-37 until its last 35 arrivals,
#: the training VCs' 30-job windows at 4 x 4 GPUs under 16 but where their rate would bring
#: more than the window's 30 jobs; there a margin of 0.0004 already gives up gains of up to 20%)
NO_MARGIN_ARRIVALS, FULL_MARGIN_ARRIVALS = 16.0, 32.0


def margin_share(env: Any) -> float:
    """The share of the margin that applies at ``env``'s decision with ``margin_by:
    arrivals``: 0 up to :data:`NO_MARGIN_ARRIVALS` expected while a job runs
    (:func:`arrivals_per_run`), 1 from :data:`FULL_MARGIN_ARRIVALS` on, linear between (the
    known jobs' model leaves out the jobs that arrive while the decision's jobs run: a few
    barely matter, an arrival burst does); none while no arrival rate has been seen (no
    sign yet that more jobs come soon)."""
    e = arrivals_per_run(env)
    if e is None:
        return 0.0
    lo, hi = NO_MARGIN_ARRIVALS, FULL_MARGIN_ARRIVALS
    return min(1.0, max(0.0, (e - lo) / (hi - lo)))


def drained(env: Any) -> bool:
    """Whether every job of ``env``'s episode has arrived (the search's model is exact)."""
    return int(env.jobs_to_arrive()) == 0


def candidates(selector: RuleSelector, env: Any, acts: list[int] | None = None) -> list[int]:
    """The actions the search tries at ``env``'s decision: the selector's own first, then
    each other rule's, in the selector's rule order, each once (each rule asked once: the
    rules read the env and change nothing; ``acts``: each rule's action, if already asked)."""
    if acts is None:
        acts = [int(selector.rule(name)(env)) for name in selector.rules]
    out = [acts[selector.choose(env)]]
    for a in acts:
        if a not in out:
            out.append(a)
    return out


def state_key(env: Any) -> tuple[Any, ...]:
    """What identifies ``env``'s decision: the env's settings, the workload, the time, the
    decisions taken, the window and where each running job runs."""
    sim, c = env.sim, env.cluster
    running = tuple(sorted((j.spec.job_id, tuple(j.gpus)) for j in sim.running))
    window = tuple(j.spec.job_id for j in env.window)
    where = (env.fidelity, env.comm, c.num_servers, c.gpus_per_server, tuple(env.placements))
    arrived = int(env.n) - int(env.jobs_to_arrive())
    return (where, sim.workload.name, sim.now, env.decisions, arrived, window, running)


def _seen(env: Any) -> list[Any]:
    """The specs of ``env``'s jobs that have arrived, in arrival order."""
    now = env.sim.now
    return sorted((j.spec for j in env.sim.jobs if j.spec.submit_ms <= now),
                  key=lambda s: (s.submit_ms, s.job_id))  # fmt: skip


def _rng(*what: Any) -> np.random.Generator:
    """A generator seeded by ``what`` (a stable digest of its repr)."""
    digest = hashlib.sha256(repr(what).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:16], "little"))


def sample_futures(env: Any, k: int) -> list[list[Any]] | None:
    """``k`` guesses at the jobs of ``env``'s episode still to arrive, from what has been
    seen only: as many as are still to arrive (the env's observation has their share), each
    a copy of an arrived job drawn at random (its model, GPUs and iterations), arriving at
    exponential gaps of the mean gap between the arrivals so far (a Poisson process at the
    rate seen) after the last arrival, and after now (memoryless: a draw whose first arrival
    is not after now is drawn again from now).  ``None`` while fewer than two jobs have
    arrived (no rate seen yet); ``[[]] * k`` once every job has.

    Seeded by the arrived jobs (ids, GPUs, iterations, arrival times), so the decisions
    between two arrivals see the same futures while they stay possible (the search's memo
    reuses a rollout then), the search repeats itself, and two workloads that agree so far
    draw the same futures."""
    m = int(env.jobs_to_arrive())
    if m == 0:
        return [[] for _ in range(k)]
    sim = env.sim
    now = float(sim.now)
    seen = _seen(env)
    if len(seen) < 2 or not seen[-1].submit_ms > seen[0].submit_ms:
        return None
    gap = (seen[-1].submit_ms - seen[0].submit_ms) / (len(seen) - 1)
    key = tuple((s.job_id, s.num_gpus, s.iterations, s.submit_ms) for s in seen)
    next_id = max(s.job_id for s in seen) + 1  # the copies forget the later jobs first
    out = []
    for i in range(k):
        rng = _rng(key, i)
        times = seen[-1].submit_ms + np.cumsum(rng.exponential(gap, m))
        if not times[0] > now:
            rng = _rng(key, i, now)
            times = now + np.cumsum(rng.exponential(gap, m))
        picks = rng.integers(len(seen), size=m)
        out.append([
            replace(seen[int(p)], job_id=next_id + n, submit_ms=float(t), name="")
            for n, (p, t) in enumerate(zip(picks, times, strict=True))
        ])  # fmt: skip
    return out


def _rollout(
    selector: RuleSelector, env: Any, action: int, future: list[Any] | None = None
) -> tuple[float, set[Any]]:
    """:func:`rollout_value`, and the :func:`state_key` of every decision the rollout
    passes through after the action (where the selector decides).  ``future``: the jobs
    still to arrive are replaced by these (a sampled future) instead of forgotten."""
    e = copy.deepcopy(env)
    if future is not None:
        e.replace_future(future)
    elif not drained(e):
        e.forget_future()
    if on_fast_engine(selector, e):  # after forgetting: K reads no job still to arrive
        e.coarsen()
    a = int(action)
    path: set[Any] = set()
    while True:
        _, _, term, trunc, info = e.step(a)
        if trunc:
            return math.inf, set()
        if term:
            jct = float(info["avg_jct_s"])
            if not math.isfinite(jct):
                raise ConfigError(f"a rollout's avg JCT is {jct}: the engine gave a non-finite one")
            return jct, path
        path.add(state_key(e))
        a = selector.base_act(e)


def on_fast_engine(selector: RuleSelector, env: Any) -> bool:
    """Whether the selector's rollouts from ``env`` (a copy, its jobs still to arrive already
    forgotten or replaced) run on the FAST engine: always with ``model: fast``, with
    ``model: auto`` where that engine would merge at least :data:`AUTO_FAST_FROM` iterations
    a step, never with ``model: same``."""
    if selector.model == "fast":
        return True
    return selector.model == "auto" and int(env.fast_factor()) >= AUTO_FAST_FROM


def rollout_value(
    selector: RuleSelector, env: Any, action: int, future: list[Any] | None = None
) -> float:
    """The avg JCT (s) of ``env``'s episode if ``action`` is taken now and the selector
    (without search) decides from then on, on a deep copy (``env`` is not stepped) without
    the jobs still to arrive, if any (their avg JCT then), or with ``future`` (a sampled
    future: :func:`sample_futures`) in their place; ``inf`` when the copy is truncated (the
    action or the selector got stuck)."""
    return _rollout(selector, env, action, future)[0]


def search_action(selector: RuleSelector, env: Any) -> int:
    """The action of the selector's search (``drained``, ``known`` or ``sampled``, module
    docstring) at ``env``'s decision.  The selector's own action is not rolled out again
    where the rollout the last search chose passes through this very decision with the same
    jobs arrived: following the selector from here is that rollout's rest, so its value is
    the one found then."""
    if selector.search == "drained" and not drained(env):
        return selector.base_act(env)
    cands = candidates(selector, env)
    if len(cands) == 1:
        return cands[0]
    if selector.search == "sampled" and not drained(env):
        return _sampled_action(selector, env, cands)
    return _choose(selector, env, cands, state_key(env), lambda a: _rollout(selector, env, a))


def search_values(selector: RuleSelector, env: Any) -> tuple[list[int], list[float], int] | None:
    """What the selector's ``known`` or ``drained`` search weighs at ``env``'s decision, for
    distilling it (:mod:`agents.selector_distill`): each rule's action (the selector's rule
    order), the rollout value of each rule's action (:func:`rollout_value`; rules that take
    the same action share its value) and the action the search takes (the same as
    :func:`search_action`'s with no memo: the memo's value of the selector's own action
    comes from a rollout begun at an earlier decision, and can differ from a fresh one's,
    which this takes).  ``None``
    where the search does not search (``drained`` before the last arrival) or every rule
    takes the same action (nothing to choose).  ``sampled`` is one :class:`ConfigError`
    (its values are means over guessed futures: not distilled here)."""
    if selector.search not in ("known", "drained"):
        raise ConfigError(
            f"only the known and drained searches can be distilled, not {selector.search!r}"
        )
    if selector.search == "drained" and not drained(env):
        return None
    acts = [int(selector.rule(name)(env)) for name in selector.rules]
    cands = candidates(selector, env, acts)
    if len(cands) == 1:
        return None
    value = {a: rollout_value(selector, env, a) for a in cands}
    values = [value[a] for a in cands]
    chosen = cands[best_alternative(values, _tolerance(selector, env, values[0]))]
    return acts, [value[a] for a in acts], chosen


def _choose(
    selector: RuleSelector,
    env: Any,
    cands: list[int],
    key: Any,
    roll: Callable[[int], tuple[float, set[Any]]],
) -> int:
    """The candidate of lowest value (``roll(action)``: its value and the keys of the
    decisions its rollouts passed through), the selector's own unless another beats it by
    the tolerance; the selector's own is not rolled out again where ``key`` is on the last
    chosen candidate's path (its value then is the one found then)."""
    memo = selector.search_memo
    reuse = memo is not None and key in memo[1]
    values, paths = [], []
    for i, a in enumerate(cands):
        if i == 0 and reuse:
            assert memo is not None
            v, path = memo
        else:
            v, path = roll(a)
        values.append(v)
        paths.append(path)
    best = best_alternative(values, _tolerance(selector, env, values[0]))
    selector.search_memo = (values[best], paths[best])
    return cands[best]


def _sampled_action(selector: RuleSelector, env: Any, cands: list[int]) -> int:
    """``sampled`` before the last arrival: each candidate rolled out on the same
    ``selector.samples`` sampled futures (:func:`sample_futures`); the lowest mean avg JCT wins
    (the selector's own on a tie); the selector's action while no arrival rate has been
    seen.  The selector's own action is not rolled out again where every rollout of the
    last chosen candidate passed through this decision on the same futures."""
    futures = sample_futures(env, selector.samples)
    if futures is None:
        return cands[0]
    mark = tuple(tuple((s.submit_ms, s.iterations, s.num_gpus, s.model.name) for s in f)
                 for f in futures)  # fmt: skip

    def roll(a: int) -> tuple[float, set[Any]]:
        runs = [_rollout(selector, env, a, f) for f in futures]
        value = float(np.mean([r[0] for r in runs]))
        return value, {(p, mark) for p in set.intersection(*(r[1] for r in runs))}

    return _choose(selector, env, cands, (state_key(env), mark), roll)
