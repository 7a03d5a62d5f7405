"""MaskablePPO in ``dlsched/Contention-v0``: behaviour cloning of the SRSF rule into the
policy, then PPO, keeping the best validation point (``experiments/contention_h2h.py
--train``).

The recipe: ``n_envs`` training envs (``make_env("train")``, each reset with seed
``10_000 + 1000 * seed + rank``) under sb3-contrib's ``MaskablePPO`` (MLP policy,
``n_steps`` per env, batch 256, learning rate 3e-4, ``gamma = 1``, GAE 0.95, no entropy
bonus); the policy cloned (:func:`clone_masked`) on the SRSF rule's decisions on
``bc_workloads`` workloads drawn from [10,000, 2^31) by the generator ``[seed, 7]``; then
``every`` decisions at a time up to ``decisions``, the masked argmax validated after each
block (mean avg JCT, s, over ``validation_seeds`` of ``make_env("validation")``).
``train.py +agent=contention_pg`` (:mod:`training.contention`) is the EpisodePG recipe of the
same env.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from agents.cloning import CloneConfig, CloneData, fit_clone
from agents.episode_pg import run_episode, teacher_data
from envs.gym.contention_env import ContentionEnv, srsf_teacher

__all__ = ["clone_masked", "episode_jcts", "policy_actor", "train_maskable_ppo"]

#: an actor ``(env, obs) -> action``
Act = Callable[[ContentionEnv, npt.NDArray[np.float32]], int]


def episode_jcts(env: ContentionEnv, seed: int, act: Act) -> npt.NDArray[np.float64]:
    """The per-job JCTs (s) of one episode of workload ``seed``, ``act`` deciding."""
    result = run_episode(env, seed, act=act).info["result"]
    return np.array([r.jct_ms for r in result.records]) / 1000.0


def policy_actor(model: Any) -> Act:
    """``model``'s (a ``MaskablePPO``) masked argmax as an actor."""

    def act(e: ContentionEnv, obs: npt.NDArray[np.float32]) -> int:
        a, _ = model.predict(obs, action_masks=e.action_masks(), deterministic=True)
        return int(a)

    return act


def clone_masked(model: Any, data: tuple[npt.NDArray[Any], ...], epochs: int, seed: int) -> None:
    """Behaviour cloning of a ``MaskablePPO``'s policy on a teacher's ``(obs, masks,
    actions)`` (:func:`~agents.episode_pg.teacher_data`): the one cloner
    (:func:`agents.cloning.fit_clone`, schedule ``"epochs"``: masked cross-entropy, Adam at
    1e-3, batches of 256 in an order drawn by ``th.Generator().manual_seed(seed)``; the
    script's old loop, bit for bit: ``tests/agents/test_cloning.py``)."""
    fit_clone(model.policy, CloneData(*data), CloneConfig(epochs=epochs, lr=1e-3, seed=seed))


def _say(line: str) -> None:
    print(line, file=sys.stderr)


def train_maskable_ppo(
    make_env: Callable[[str], ContentionEnv],
    seed: int,
    *,
    decisions: int,
    every: int = 20_000,
    n_envs: int = 8,
    n_steps: int = 256,
    bc_workloads: int = 40,
    bc_epochs: int = 20,
    validation_seeds: Sequence[int] = (500, 501, 502, 503, 504),
    log: Callable[[str], None] = _say,
) -> dict[str, Any]:
    """One training seed of the recipe (module docstring): ``{"model", "bc_state",
    "best_state", "curve"}`` (the curve: ``(decisions, validation avg JCT)`` from 0)."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    def make(rank: int) -> Any:
        def f() -> ContentionEnv:
            e = make_env("train")
            e.reset(seed=10_000 + 1000 * seed + rank)
            return e

        return f

    venv = DummyVecEnv([make(i) for i in range(n_envs)])
    model = MaskablePPO(
        "MlpPolicy", venv, n_steps=n_steps, batch_size=256, learning_rate=3e-4,
        gamma=1.0, gae_lambda=0.95, ent_coef=0.0, seed=seed, verbose=0, device="cpu",
    )  # fmt: skip
    rng = np.random.default_rng([seed, 7])
    env = make_env("train")
    bc_seeds = [int(s) for s in rng.integers(10_000, 2**31, size=bc_workloads)]
    clone_masked(model, teacher_data(env, srsf_teacher, bc_seeds), bc_epochs, seed)
    val = make_env("validation")

    def validate() -> float:
        act = policy_actor(model)
        return float(np.mean([episode_jcts(val, s, act).mean() for s in validation_seeds]))

    def weights() -> dict[str, Any]:
        """A copy of the policy's weights now (``state_dict`` alone holds the live tensors,
        which PPO goes on updating: the clone and best rows showed the final model)."""
        return {k: v.clone() for k, v in model.policy.state_dict().items()}

    curve = [(0, validate())]
    bc_state = weights()
    best = (curve[0][1], bc_state)
    done = 0
    while done < decisions:
        model.learn(every, reset_num_timesteps=False)
        done += every
        curve.append((done, validate()))
        log(f"  seed {seed}: {done} decisions, validation avg JCT {curve[-1][1]:.1f} s")
        if curve[-1][1] < best[0]:
            best = (curve[-1][1], weights())
    return {"model": model, "bc_state": bc_state, "best_state": best[1], "curve": curve}
