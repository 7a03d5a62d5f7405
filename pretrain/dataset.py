"""Teacher traces: every decision a heuristic makes through the env, recorded for cloning.

:func:`collect` rolls a teacher (any allocator of
:data:`~envs.sim.elastic.allocators.ALLOCATORS`, by name) through
:class:`~envs.gym.cluster_env.ClusterEnv` as an actor (:class:`~envs.gym.actors.AllocatorActor`:
a :class:`~envs.gym.heuristic.HeuristicDriver`), by :func:`envs.gym.episode.collect_decisions`,
and records, for **every** decision, the observation, the action mask and the action, including
the void action that closes each slot.  *Difference from DL²*: its recorder labels only the
teacher's increments and never the skip action (reference-code notes §7.2), so its cloned
policy cannot learn when to stop and relies on the slot ending at the first failed placement;
here the void decision is a sample like any other (a slot that the env closes by itself because
nothing more fits has no void decision to record).  Also different: DL²'s SL states start each
slot from zero allocation while its RL env pre-assigns a bundle per job; here both phases see
the same env, so the state distributions match.

Each decision also gets its slot's reward (DL²'s rule: every decision of a slot is credited
with the slot reward), used to warm the value head.  :meth:`TeacherDataset.shuffled` is DL²'s
job-order augmentation: permute the window rows of a sample and remap its action and mask.
Datasets are saved as ``.npz`` + ``.json`` (the config they were collected with) and reload
with :meth:`TeacherDataset.load`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from envs.files import atomic_path, write_json
from envs.gym.actors import AllocatorActor
from envs.gym.cluster_env import ClusterEnv
from envs.gym.episode import collect_decisions
from envs.gym.factory import EnvConfig, make_env
from envs.sim.elastic.allocators import allocator_name, make_allocator
from envs.sim.errors import ConfigError

__all__ = ["TeacherDataset", "collect"]

PathLike = str | os.PathLike[str]
_ARRAYS = ("obs", "masks", "actions", "episodes", "returns")


@dataclass
class TeacherDataset:
    """``N`` decisions: ``obs`` (N, D) float32, ``masks`` (N, 3J+1) bool, ``actions`` (N,)
    int64, ``episodes`` (N,) int32 (index into ``meta["seeds"]``), ``returns`` (N,) float32
    (the reward of the decision's slot); ``meta``: how it was made (teacher, env config,
    seeds, ``J``, ``L``, the teacher's result per seed)."""

    obs: npt.NDArray[np.float32]
    masks: npt.NDArray[np.bool_]
    actions: npt.NDArray[np.int64]
    episodes: npt.NDArray[np.int32]
    returns: npt.NDArray[np.float32]
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        n = len(self.actions)
        for name in _ARRAYS:
            if len(getattr(self, name)) != n:
                raise ConfigError(
                    f"TeacherDataset: {name} has {len(getattr(self, name))} rows, actions has {n}"
                )
        if n and not np.all(self.masks[np.arange(n), self.actions]):
            raise ConfigError("TeacherDataset: a recorded action is masked invalid")

    def _from(self, *arrays: Any) -> TeacherDataset:
        obs, masks, actions, episodes, returns = arrays
        return TeacherDataset(obs, masks, actions, episodes, returns, meta=dict(self.meta))

    def __len__(self) -> int:
        return len(self.actions)

    @property
    def J(self) -> int:
        return (self.masks.shape[1] - 1) // 3

    def subset(self, index: npt.NDArray[np.int64] | npt.NDArray[np.bool_]) -> TeacherDataset:
        return self._from(*(getattr(self, name)[index] for name in _ARRAYS))

    def split(self, val_fraction: float, seed: int = 0) -> tuple[TeacherDataset, TeacherDataset]:
        """(train, validation): whole episodes go to validation when there are at least two
        (so validation decisions come from workloads never trained on), else random rows."""
        if not 0.0 <= val_fraction < 1.0:
            raise ConfigError(f"val_fraction must be in [0, 1), got {val_fraction}")
        rng = np.random.default_rng(seed)
        episodes = np.unique(self.episodes)
        if val_fraction == 0.0:
            return self, self.subset(np.zeros(len(self), dtype=bool))
        if len(episodes) >= 2:
            k = max(1, round(val_fraction * len(episodes)))
            held = rng.choice(episodes, size=min(k, len(episodes) - 1), replace=False)
            is_val = np.isin(self.episodes, held)
        else:
            is_val = rng.random(len(self)) < val_fraction
        return self.subset(~is_val), self.subset(is_val)

    def shuffled(self, copies: int, seed: int = 0) -> TeacherDataset:
        """This dataset plus ``copies`` copies with the window rows of each sample permuted
        (occupied rows only, among themselves), actions and masks remapped (DL²'s job-order
        shuffling)."""
        if copies <= 0:
            return self
        rng = np.random.default_rng(seed)
        J = self.J
        width = self.obs.shape[1] // J
        parts = [self]
        for _ in range(copies):
            obs = self.obs.reshape(len(self), J, width).copy()
            masks = self.masks.copy()
            actions = self.actions.copy()
            occupied: np.ndarray = np.asarray(obs.any(axis=2))
            for i in range(len(self)):
                rows = np.flatnonzero(occupied[i])
                perm = np.arange(J)
                perm[rows] = rng.permutation(rows)  # new row perm[r] gets old row r
                obs[i, perm] = self.obs[i].reshape(J, width)
                body = self.masks[i, :-1].reshape(J, 3)
                new_body = masks[i, :-1].reshape(J, 3)
                new_body[perm] = body
                a = int(self.actions[i])
                if a < 3 * J:
                    actions[i] = 3 * perm[a // 3] + a % 3
            parts.append(
                self._from(
                    obs.reshape(len(self), -1),
                    masks,
                    actions,
                    self.episodes.copy(),
                    self.returns.copy(),
                )
            )
        return concatenate(parts)

    # ------------------------------------------------------------------ persistence
    def save(self, path: PathLike) -> Path:
        """Write ``path`` (``.npz``) and its ``.json`` config beside it; the ``.npz`` path."""
        p = Path(path).with_suffix(".npz")
        with atomic_path(p) as tmp, open(tmp, "wb") as f:  # atomic: old file or new, never torn
            np.savez_compressed(f, **{name: getattr(self, name) for name in _ARRAYS})
        write_json(p.with_suffix(".json"), self.meta)
        return p

    @classmethod
    def load(cls, path: PathLike) -> TeacherDataset:
        p = Path(path).with_suffix(".npz")
        if not p.is_file():
            raise ConfigError(f"no teacher dataset at {p}")
        meta_path = p.with_suffix(".json")
        meta = json.loads(meta_path.read_text()) if meta_path.is_file() else {}
        with np.load(p) as data:
            missing = [name for name in _ARRAYS if name not in data]
            if missing:
                raise ConfigError(f"{p}: not a teacher dataset (missing {missing})")
            obs, masks, actions, episodes, returns = (data[name] for name in _ARRAYS)
            return cls(obs, masks, actions, episodes, returns, meta=meta)


def concatenate(parts: Sequence[TeacherDataset]) -> TeacherDataset:
    """One dataset from several collected with the same env shape."""
    if not parts:
        raise ConfigError("nothing to concatenate")
    return parts[0]._from(*(np.concatenate([getattr(p, name) for p in parts]) for name in _ARRAYS))


def collect(
    teacher: str,
    env_config: EnvConfig,
    seeds: Sequence[int],
    *,
    teacher_options: dict[str, Any] | None = None,
    env_for: Callable[[int], ClusterEnv] | None = None,
) -> TeacherDataset:
    """Roll ``teacher`` through the env on workload ``seeds``; every decision recorded.
    ``env_for(seed)``: the env of workload ``seed`` (e.g. a drawn mixture scenario's; it is
    reset with ``seed``), instead of one env of ``env_config`` for all."""
    if not seeds:
        raise ConfigError("collect: give at least one workload seed")
    name = allocator_name(teacher, role="teacher")
    options = dict(teacher_options or {})
    env = make_env(env_config)
    actors: list[AllocatorActor] = []

    def episodes() -> Iterator[tuple[ClusterEnv, AllocatorActor, int]]:
        nonlocal env
        for seed in seeds:
            if env_for is not None:
                env = env_for(int(seed))
            actor = AllocatorActor(env, lambda: make_allocator(name, options, role="teacher"))
            actors.append(actor)
            yield env, actor, int(seed)

    log, runs = collect_decisions(episodes())
    results = []
    for run, actor in zip(runs, actors, strict=True):
        info = run.info
        results.append(
            {
                "seed": run.seed,
                # a truncated episode's figure is a lower bound: recorded as None
                "avg_jct_slots": None if info.get("unfinished_jobs") else info.get("avg_jct_slots"),
                "makespan_slots": info.get("makespan_slots"),
                "decisions": run.steps,
                "shortfalls": actor.driver.shortfalls,
                "truncated": run.truncated and not run.terminated,
            }
        )
    meta = {
        "teacher": name,
        "teacher_options": options,
        "env": env_config.as_dict(),
        "seeds": [int(s) for s in seeds],
        "J": env.J,
        "L": env.L,
        "teacher_results": results,
    }
    return TeacherDataset(
        np.asarray(log.obs, dtype=np.float32),
        np.asarray(log.masks, dtype=bool),
        np.asarray(log.actions, dtype=np.int64),
        np.asarray(log.episodes, dtype=np.int32),
        np.asarray(log.returns, dtype=np.float32),
        meta=meta,
    )
