"""Batched rollouts: many env copies stepped in lockstep, one policy forward per step.

:func:`run_batched` runs one episode in each of ``N`` :class:`~envs.gym.cluster_env.ClusterEnv`
copies (each reset with its own workload seed) to its end.  Every step gathers the observations
and masks of the envs still running into one batch, computes the masked logits once
(:class:`~agents.policy.NumpyPolicy`, numpy float64), picks an action per env (masked argmax,
or an inverse-CDF draw from the masked softmax with *that env's own* generator), and steps each
env.  The envs keep their observation and mask in preallocated arrays, so a step makes no
Python call per env beyond ``env.step`` itself.

Because every episode samples from its own generator (seeded by the caller), an episode's
trajectory depends on its workload seed, its sampling seed and the policy only, never on how
many envs run beside it: ``N`` envs in lockstep reproduce ``N`` runs of one env (a test).

Each env steps by :func:`envs.gym.episode.step` (the step of every episode loop; an invalid
action is the env's counted no-op here, as in :func:`agents.episode_results.run_episode`).

With ``record=True`` the result keeps every decision (observation, mask, action, behaviour
log-probability, simulated time) and every reward with its time, episode by episode, which is
what the group learner (:mod:`agents.group`) trains on.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from agents.policy import NumpyPolicy
from envs.gym.cluster_env import ClusterEnv
from envs.gym.episode import step
from envs.sim.errors import ConfigError

__all__ = ["Batch", "Episode", "run_batched"]

_LOG_FLOOR = -69.0  # log(1e-30): a valid action's probability never logs below this


@dataclass
class Episode:
    """One finished (or truncated) episode of a batched run."""

    env_index: int
    seed: int
    decisions: int
    reward_times: npt.NDArray[np.float64]
    rewards: npt.NDArray[np.float64]
    terminated: bool
    avg_jct_slots: float | None  # the env's figure when terminated


@dataclass
class Batch:
    """Every recorded decision of a batched run, episode after episode (rows of episode ``e``
    are ``starts[e] .. starts[e + 1] - 1``, in decision order), and the episodes."""

    obs: npt.NDArray[np.float32]
    masks: npt.NDArray[np.bool_]
    actions: npt.NDArray[np.int64]
    logp: npt.NDArray[np.float32]
    times: npt.NDArray[np.float64]
    episodes: list[Episode] = field(default_factory=list)
    weights: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    logp_policy: npt.NDArray[np.float32] = field(default_factory=lambda: np.zeros(0, np.float32))
    starts: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(1, np.int64))

    def __len__(self) -> int:
        return len(self.actions)

    def rows(self, e: int) -> slice:
        return slice(int(self.starts[e]), int(self.starts[e + 1]))


def _log_softmax_at(logits: npt.NDArray[np.float64], a: npt.NDArray[np.int64]) -> npt.NDArray:
    """``log softmax(logits)[i, a[i]]`` per row (masked entries are ``-inf``)."""
    z = logits - logits.max(axis=1, keepdims=True)
    logp = z[np.arange(len(a)), a] - np.log(np.exp(z).sum(axis=1))
    return np.maximum(logp, _LOG_FLOOR)


def _pick(
    logits: npt.NDArray[np.float64],
    deterministic: bool,
    rngs: Sequence[np.random.Generator],
    active: Sequence[int],
    temperature: float = 1.0,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Actions and their log-probabilities for a batch of masked logits (sampled from the
    softmax of ``logits / temperature``; the log-probabilities are of that distribution)."""
    if temperature != 1.0:
        logits = logits / temperature
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    total = e.sum(axis=1)
    n, width = logits.shape
    if deterministic:
        a = np.argmax(logits, axis=1)
    else:
        c = np.cumsum(e / total[:, None], axis=1)
        u = np.fromiter((rngs[i].random() for i in active), dtype=np.float64, count=n)
        a = (c <= (u * c[:, -1])[:, None]).sum(axis=1)
        np.minimum(a, width - 1, out=a)
    rows = np.arange(n)
    logp = z[rows, a] - np.log(total)
    np.maximum(logp, _LOG_FLOOR, out=logp)
    return a.astype(np.int64), logp


def run_batched(
    envs: Sequence[ClusterEnv],
    seeds: Sequence[int],
    policy: NumpyPolicy,
    *,
    deterministic: bool,
    sample_seeds: Sequence[int | Sequence[int]] | None = None,
    record: bool = False,
    record_fraction: float = 1.0,
    record_rng: np.random.Generator | None = None,
    temperature: float = 1.0,
    on_step: Callable[[int], bool] | None = None,
) -> Batch:
    """One episode per env (``envs[i]`` reset with workload ``seeds[i]``), in lockstep.

    ``sample_seeds[i]`` seeds env ``i``'s action draws (needed unless ``deterministic``).
    ``on_step(n)`` is called after every lockstep step with the number of decisions it made;
    returning False stops the run (the episodes are then reported as not terminated).
    Without ``record`` the batch holds only the episodes (no per-decision arrays); with
    ``record_fraction = f < 1`` it keeps about ``f`` of each step's decisions, decision ``i``
    with probability ``p_i = clip(c (1 - pi_i), f / 4, 1)`` where ``pi_i`` is the probability
    of its action and ``c`` makes the mean ``f`` (drawn from ``record_rng``; the rewards are
    always kept whole); ``Batch.weights`` is ``1 / p_i`` (an unbiased estimate of the full
    batch's sums).  This bounds the memory of long episodes without changing any trajectory:
    a near-uniform policy is subsampled uniformly, and a confident one (a behaviour clone)
    keeps its rare off-mode choices, where nearly all of its policy gradient is
    (``grad log pi ~ 0`` as ``pi -> 1``).

    ``temperature`` > 1 samples from the softmax of ``logits / temperature`` (exploration);
    ``Batch.logp`` is then the behaviour's log-probability and ``Batch.logp_policy`` the
    policy's own (temperature 1), which a learner needs for its importance weights."""
    n = len(envs)
    if n < 1 or len(seeds) != n:
        raise ConfigError(f"run_batched needs one seed per env; got {n} envs, {len(seeds)} seeds")
    if not deterministic and (sample_seeds is None or len(sample_seeds) != n):
        raise ConfigError("sampled batched rollouts need one sample seed per env")
    # a seed is an int or a sequence of ints (numpy's SeedSequence entropy)
    rngs = [np.random.default_rng(s) for s in (sample_seeds or [0] * n)]
    obs_dim = envs[0].observation_space.shape[0]  # type: ignore[index]
    n_act = int(envs[0].action_space.n)  # type: ignore[attr-defined]
    for env in envs:
        if env.observation_space.shape != (obs_dim,) or int(env.action_space.n) != n_act:  # type: ignore[attr-defined]
            raise ConfigError("batched rollouts need envs of one observation and action size")
    obs = np.zeros((n, obs_dim), dtype=np.float32)
    masks = np.zeros((n, n_act), dtype=bool)
    active: list[int] = []
    for i, env in enumerate(envs):
        o, _ = env.reset(seed=int(seeds[i]))
        obs[i] = o
        masks[i] = env.live_mask
        if not env.ended and env.slot_open:
            active.append(i)
    counts = [0] * n
    r_times: list[list[float]] = [[] for _ in range(n)]
    r_vals: list[list[float]] = [[] for _ in range(n)]
    terminated = [bool(env.sim is not None and env.sim.done) for env in envs]
    rec: list[tuple[npt.NDArray[np.int64], ...]] = []
    rec_f: list[tuple[npt.NDArray, ...]] = []
    stopped = False
    subsample = record and record_fraction < 1.0
    if subsample and record_rng is None:
        raise ConfigError("record_fraction < 1 needs a record_rng")
    while active:
        idx = np.asarray(active, dtype=np.int64)
        o_b = obs[idx]
        m_b = masks[idx]
        logits = policy.logits(o_b, m_b)
        actions, logp = _pick(logits, deterministic, rngs, active, temperature)
        logp_pi = logp if temperature == 1.0 else _log_softmax_at(logits, actions)
        if record:
            times = np.fromiter((envs[i].slot for i in active), dtype=np.float64, count=len(idx))
            ints, floats = _recorded(
                (idx, actions), (o_b, m_b, logp, times, logp_pi), record_fraction, record_rng
            )
            rec.append(ints)
            rec_f.append(floats)
        still: list[int] = []
        for k, i in enumerate(active):
            env = envs[i]
            o, r, term, trunc, info = step(env, int(actions[k]), env, strict=False)
            counts[i] += 1
            if info["slot_ended"]:
                r_times[i].append(float(info["closed_slot"]))
                r_vals[i].append(float(r))
            if term or trunc:
                terminated[i] = bool(term)
                continue
            obs[i] = o
            masks[i] = env.live_mask
            still.append(i)
        active = still
        if on_step is not None and not on_step(len(idx)):
            stopped = True
            break
    episodes = [
        Episode(
            env_index=i,
            seed=int(seeds[i]),
            decisions=counts[i],
            reward_times=np.asarray(r_times[i], dtype=np.float64),
            rewards=np.asarray(r_vals[i], dtype=np.float64),
            terminated=terminated[i] and not (stopped and i in active),
            avg_jct_slots=(
                float(envs[i].sim.result().avg_jct_slots)  # type: ignore[union-attr]
                if terminated[i] and not (stopped and i in active)
                else None
            ),
        )
        for i in range(n)
    ]
    return (
        _batch(rec, rec_f, episodes, obs_dim, n_act)
        if record
        else _empty_batch(episodes, obs_dim, n_act)
    )


def _recorded(
    ints: tuple[npt.NDArray[np.int64], ...],
    floats: tuple[npt.NDArray, ...],
    record_fraction: float,
    record_rng: np.random.Generator | None,
) -> tuple[tuple[npt.NDArray[np.int64], ...], tuple[npt.NDArray, ...]]:
    """One lockstep step's recorded decisions (``ints``: env indices and actions; ``floats``:
    observations, masks, behaviour log-probabilities, times, the policy's log-probabilities):
    all of them with weight 1, or with ``record_fraction < 1`` the subsample
    :func:`run_batched` describes, each with its weight ``1 / p_keep``; the floats come back
    as (obs, masks, logp, times, weights, logp_policy)."""
    idx, actions = ints
    o_b, m_b, logp, times, logp_pi = floats
    if record_fraction >= 1.0:
        return (idx, actions), (o_b, m_b, logp, times, np.ones(len(idx)), logp_pi)
    q = 1.0 - np.exp(logp_pi)
    c = record_fraction * len(q) / max(float(q.sum()), 1e-12)
    p_keep = np.clip(c * q, record_fraction / 4, 1.0)
    kept = record_rng.random(len(idx)) < p_keep  # type: ignore[union-attr]
    return (idx[kept], actions[kept]), (
        o_b[kept],
        m_b[kept],
        logp[kept],
        times[kept],
        1.0 / p_keep[kept],
        logp_pi[kept],
    )


def _empty_batch(episodes: list[Episode], obs_dim: int, n_act: int) -> Batch:
    """The episodes alone (a run without ``record``)."""
    return Batch(
        np.zeros((0, obs_dim), np.float32),
        np.zeros((0, n_act), bool),
        np.zeros(0, np.int64),
        np.zeros(0, np.float32),
        np.zeros(0, np.float64),
        episodes,
        np.zeros(len(episodes) + 1, np.int64),
    )


def _batch(
    rec: list[tuple[npt.NDArray[np.int64], ...]],
    rec_f: list[tuple[npt.NDArray, ...]],
    episodes: list[Episode],
    obs_dim: int,
    n_act: int,
) -> Batch:
    """The recorded decisions of every step, episode by episode, each in decision order."""
    n = len(episodes)
    env_of = np.concatenate([r[0] for r in rec]) if rec else np.zeros(0, np.int64)
    order = np.argsort(env_of, kind="stable")  # episode by episode, each in decision order
    return Batch(
        obs=np.concatenate([r[0] for r in rec_f]).astype(np.float32)[order],
        masks=np.concatenate([r[1] for r in rec_f])[order],
        actions=np.concatenate([r[1] for r in rec])[order],
        logp=np.concatenate([r[2] for r in rec_f]).astype(np.float32)[order],
        times=np.concatenate([r[3] for r in rec_f])[order],
        episodes=episodes,
        weights=np.concatenate([r[4] for r in rec_f])[order],
        logp_policy=np.concatenate([r[5] for r in rec_f]).astype(np.float32)[order],
        starts=np.concatenate([[0], np.cumsum(np.bincount(env_of, minlength=n))]).astype(np.int64),
    )
