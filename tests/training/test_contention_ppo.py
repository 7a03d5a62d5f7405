"""MaskablePPO in ``dlsched/Contention-v0`` (:mod:`training.contention_ppo`, the recipe of
``experiments/contention_h2h.py --train``), on a small cluster and few workloads."""

from __future__ import annotations

import numpy as np
import pytest

from agents.episode_pg import run_episode, teacher_data
from envs.gym.contention_env import ContentionEnv, srsf_teacher
from training.contention_ppo import (
    clone_masked,
    episode_jcts,
    policy_actor,
    train_maskable_ppo,
)


def small(_split: str = "train") -> ContentionEnv:
    return ContentionEnv(scale="small", num_jobs=16, comm="srsf1")


def test_episode_jcts_are_the_episodes_jobs() -> None:
    env = small()
    jcts = episode_jcts(env, 3, lambda e, _o: srsf_teacher(e))
    info = run_episode(env, 3, act=lambda e, _o: srsf_teacher(e)).info
    assert len(jcts) == 16 and np.all(jcts > 0)
    assert float(jcts.mean()) == pytest.approx(info["avg_jct_s"], rel=1e-12)
    assert float(np.percentile(jcts, 95)) == pytest.approx(info["p95_jct_s"], rel=1e-12)


def test_cloning_makes_the_policy_act_as_its_teacher() -> None:
    """Masked cross-entropy on the SRSF rule's decisions: the policy's masked argmax agrees
    with the rule on (nearly) every decision it was cloned on, far more than before."""
    from sb3_contrib import MaskablePPO

    env = small()
    model = MaskablePPO("MlpPolicy", env, n_steps=32, batch_size=32, seed=0, device="cpu")
    obs, masks, acts = teacher_data(env, srsf_teacher, [10_001, 10_002, 10_003, 10_004])

    def agreement() -> float:
        pairs = zip(obs, masks, strict=True)
        got = [model.predict(o, action_masks=m, deterministic=True)[0] for o, m in pairs]
        return float(np.mean(np.asarray(got) == acts))

    before = agreement()
    clone_masked(model, (obs, masks, acts), epochs=40, seed=0)
    after = agreement()
    assert after >= 0.9 > before


def test_train_maskable_ppo_validates_after_each_block() -> None:
    """The curve: the clone's validation avg JCT at 0 decisions, then one point per block of
    ``every`` decisions, each the mean over the validation workloads."""
    out = train_maskable_ppo(small, 0, decisions=64, every=64, n_envs=2, n_steps=32,
                             bc_workloads=2, bc_epochs=5, validation_seeds=(500, 501),
                             log=lambda _line: None)  # fmt: skip
    assert [d for d, _ in out["curve"]] == [0, 64]
    val = small("validation")
    model = out["model"]  # after the last block: its figure is the curve's last point
    last = float(np.mean([episode_jcts(val, s, policy_actor(model)).mean() for s in (500, 501)]))
    assert last == pytest.approx(out["curve"][-1][1], rel=1e-12)
    # the clone's weights are a copy taken before PPO (they once were the live tensors, so the
    # clone's row showed the final model): PPO moved the network away from them
    live = model.policy.state_dict()
    assert any(not (out["bc_state"][k] == v).all() for k, v in live.items())
    assert all(out["bc_state"][k] is not v for k, v in live.items())
    if out["curve"][-1][1] >= out["curve"][0][1]:  # no better point: the best is the clone
        assert all((out["best_state"][k] == out["bc_state"][k]).all() for k in live)


def test_clone_masked_is_the_scripts_old_loop_bit_for_bit() -> None:
    """The recipe clones through the one cloner; its weights are the old loop's, bit for bit."""
    import copy

    import torch as th
    from sb3_contrib import MaskablePPO

    from tests.agents.test_cloning import old_h2h_clone

    env = small()
    model = MaskablePPO("MlpPolicy", env, n_steps=32, batch_size=32, seed=0, device="cpu")
    data = teacher_data(env, srsf_teacher, [10_001, 10_002, 10_003])
    ref = copy.deepcopy(model)
    old_h2h_clone(ref, data, epochs=5, seed=3)
    clone_masked(model, data, epochs=5, seed=3)
    a, b = ref.policy.state_dict(), model.policy.state_dict()
    assert list(a) == list(b) and all(th.equal(a[k], b[k]) for k in a)
