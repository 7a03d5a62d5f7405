"""The per-job policy network (``policy.arch=per_job``, DL²'s job-central representation):
equivariance, masks, save/load, the numpy copy, and training with it."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th

from agents.build import build_agent
from agents.checkpoint import load_checkpoint, load_policy, save_checkpoint, save_policy_weights
from agents.config import AgentConfig
from agents.dl2 import DL2A2C
from agents.exploration import ExplorationConfig
from agents.policy import (
    ARCHS,
    DL2Policy,
    NumpyPolicy,
    PerJobNetwork,
    PolicyConfig,
    masked_logits,
    policy_kwargs,
)
from agents.replay import ReplayConfig
from agents.vec import make_training_vec_env
from envs.gym.factory import EnvConfig, make_env
from envs.sim.errors import ConfigError

SMALL = EnvConfig(setting="small")
TINY = EnvConfig(setting="tiny")
PER_JOB = PolicyConfig(arch="per_job", hidden=16)


def build(env_cfg: EnvConfig = SMALL, config: PolicyConfig = PER_JOB, seed: int = 0):
    env = make_env(env_cfg)
    th.manual_seed(seed)
    policy = DL2Policy(
        env.observation_space, env.action_space, lambda _: 1e-3, **policy_kwargs(config, env.J)
    )
    policy.set_training_mode(False)
    return env, policy


def states(env, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` observations and masks of one episode, acting at random among valid actions."""
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    out_o, out_m = [], []
    while len(out_o) < n:
        mask = env.action_masks()
        out_o.append(obs.copy())
        out_m.append(mask.copy())
        obs, _, term, trunc, _ = env.step(int(rng.choice(np.flatnonzero(mask))))
        if term or trunc:
            obs, _ = env.reset(seed=seed + len(out_o))
    return np.array(out_o), np.array(out_m)


def perturb(policy: DL2Policy) -> None:
    """Large random weights, so that no output is near-constant (the logit layers start at a
    0.01 gain)."""
    g = th.Generator().manual_seed(7)
    with th.no_grad():
        for p in policy.parameters():
            p.copy_(th.randn(p.shape, generator=g) * 0.5)


def logits_and_values(policy: DL2Policy, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    with th.no_grad():
        o = th.as_tensor(obs, dtype=th.float32)
        return masked_logits(policy, o, None).numpy(), policy.predict_values(o)[:, 0].numpy()


def test_permuting_job_rows_permutes_the_per_job_logits() -> None:
    env, policy = build()
    perturb(policy)
    obs, _ = states(env, 40)
    J, width = env.J, obs.shape[1] // env.J
    assert np.any(obs.reshape(len(obs), J, width).sum(-1) == 0)  # some rows are empty
    rng = np.random.default_rng(0)
    perm = rng.permutation(J)
    permuted = obs.reshape(len(obs), J, width)[:, perm].reshape(len(obs), -1)
    z, v = logits_and_values(policy, obs)
    zp, vp = logits_and_values(policy, permuted)
    jobs, jobs_p = z[:, :-1].reshape(-1, J, 3), zp[:, :-1].reshape(-1, J, 3)
    np.testing.assert_allclose(jobs_p, jobs[:, perm], rtol=0, atol=1e-5)  # row j -> perm[j]
    np.testing.assert_allclose(zp[:, -1], z[:, -1], rtol=0, atol=1e-5)  # void: invariant
    np.testing.assert_allclose(vp, v, rtol=0, atol=1e-5)  # value: invariant
    # and the outputs do depend on the rows (the test is not vacuous)
    assert np.ptp(jobs[:, :, 0][obs.reshape(len(obs), J, width).sum(-1) > 0]) > 0.1
    # a row's logits are a function of that row and the pooled context: the same row at a
    # different position of the same window gets the same logits
    i = int(np.argmax((obs.reshape(len(obs), J, width).sum(-1) > 0).sum(1)))
    present = np.flatnonzero(obs[i].reshape(J, width).sum(-1) > 0)
    a, b = present[0], present[-1]
    swapped = obs[i].reshape(J, width).copy()
    swapped[[a, b]] = swapped[[b, a]]
    zs, _ = logits_and_values(policy, swapped.reshape(1, -1))
    np.testing.assert_allclose(zs[0, 3 * b : 3 * b + 3], z[i, 3 * a : 3 * a + 3], atol=1e-5)


def test_empty_rows_do_not_enter_the_context() -> None:
    env, policy = build()
    perturb(policy)
    obs, _ = states(env, 40)
    J, width = env.J, obs.shape[1] // env.J
    rows = obs.reshape(len(obs), J, width)
    k = int(np.argmin((rows.sum(-1) > 0).sum(1)))  # the window with the fewest jobs
    assert (rows[k].sum(-1) == 0).any()
    z, v = logits_and_values(policy, obs[k : k + 1])
    net = policy.mlp_extractor
    assert isinstance(net, PerJobNetwork)
    # an empty row embedded by the row MLP is not zero (biases) but is multiplied out: the
    # void logit and value equal those computed from the non-empty rows alone
    present = rows[k].sum(-1) > 0
    with th.no_grad():
        x = th.as_tensor(rows[k][present], dtype=th.float32)[None]
        emb = net.pi_rows(x)
        n = float(present.sum())
        pooled = th.cat([emb.mean(1), emb.max(1).values, emb.sum(1) / J, th.tensor([[n / J]])], 1)
        void = net.pi_void(net.pi_ctx(pooled))
    assert float(void) == pytest.approx(float(z[0, -1]), abs=1e-5)
    assert np.isfinite(v).all()


def test_masks_are_respected() -> None:
    env, policy = build()
    perturb(policy)
    obs, masks = states(env, 60)
    o, m = th.as_tensor(obs), th.as_tensor(masks)
    with th.no_grad():
        logits = masked_logits(policy, o, m)
        dist = policy.get_distribution(o, action_masks=masks)
        probs = dist.distribution.probs.numpy()
    assert np.all(np.isneginf(logits.numpy()[~masks]))
    assert np.all(probs[~masks] == 0) and np.allclose(probs.sum(1), 1)
    assert masks[np.arange(len(masks)), logits.argmax(1).numpy()].all()
    fast = NumpyPolicy(policy)
    rng = np.random.default_rng(0)
    for k in range(len(obs)):
        for _ in range(20):
            assert masks[k, fast.act(obs[k], masks[k], deterministic=False, rng=rng)]
        assert masks[k, fast.act(obs[k], masks[k], deterministic=True)]


def test_numpy_copy_matches_torch() -> None:
    env, policy = build(config=PolicyConfig(arch="per_job", hidden=24, layers=2))
    perturb(policy)
    obs, masks = states(env, 50)
    with th.no_grad():
        o = th.as_tensor(obs)
        logits = masked_logits(policy, o, th.as_tensor(masks)).numpy()
        probs = th.softmax(masked_logits(policy, o, th.as_tensor(masks)).double(), 1).numpy()
        values = policy.predict_values(o)[:, 0].numpy()
    fast = NumpyPolicy(policy)
    fin = np.isfinite(logits)
    np.testing.assert_array_equal(np.isfinite(fast.logits(obs, masks)), fin)
    np.testing.assert_allclose(fast.logits(obs, masks)[fin], logits[fin], rtol=0, atol=1e-5)
    np.testing.assert_allclose(fast.probs(obs, masks), probs, rtol=0, atol=1e-5)
    np.testing.assert_allclose(fast.value(obs), values, rtol=0, atol=1e-5)
    for k in range(0, 50, 7):  # one observation at a time, as rollouts call it
        np.testing.assert_allclose(fast.probs(obs[k], masks[k]), probs[k], atol=1e-5)
        assert fast.value(obs[k]) == pytest.approx(values[k], abs=1e-5)
    # sync follows the torch weights
    with th.no_grad():
        policy.mlp_extractor.pi_void.bias += 3.0  # type: ignore[union-attr, operator]
    fast.sync()
    assert fast.logits(obs[0], masks[0])[-1] == pytest.approx(logits[0, -1] + 3.0, abs=1e-5)


def test_saved_weights_reproduce_probabilities(tmp_path) -> None:
    env, policy = build(TINY, PolicyConfig(arch="per_job", hidden=8))
    perturb(policy)
    meta = {"env": TINY.as_dict(), "policy": {"arch": "per_job", "hidden": 8}}
    loaded, _ = load_policy(save_policy_weights(policy, tmp_path / "policy.pt", meta))
    assert isinstance(loaded.mlp_extractor, PerJobNetwork)
    obs, masks = states(env, 30)
    o, m = th.as_tensor(obs), th.as_tensor(masks)
    with th.no_grad():
        assert th.equal(masked_logits(policy, o, m), masked_logits(loaded, o, m))
    # weights saved before policy.arch existed (no "arch" in their meta) are MLPs
    _, mlp = build(TINY, PolicyConfig())
    old = {"env": TINY.as_dict(), "policy": {"hidden": 0, "layers": 1, "ortho_init": True}}
    back, _ = load_policy(save_policy_weights(mlp, tmp_path / "old.pt", old))
    assert not isinstance(back.mlp_extractor, PerJobNetwork)


def per_job_model(seed: int = 0) -> DL2A2C:
    return DL2A2C(
        env=make_training_vec_env([TINY], [seed]),
        policy_kwargs=policy_kwargs(PolicyConfig(arch="per_job", hidden=8), 8),
        seed=seed,
        n_steps=64,
        learning_rate=1e-3,
        exploration=ExplorationConfig(),
        replay=ReplayConfig(capacity=512, batch_size=32),
    )


def test_dl2_agent_trains_and_checkpoints_the_per_job_policy(tmp_path) -> None:
    model = per_job_model(seed=2)
    assert isinstance(model.policy.mlp_extractor, PerJobNetwork)
    before = th.cat([p.detach().flatten() for p in model.policy.parameters()]).clone()
    model.learn(512)
    after = th.cat([p.detach().flatten() for p in model.policy.parameters()])
    assert th.isfinite(after).all() and not th.equal(before, after)
    save_checkpoint(model, tmp_path / "ck", {"note": "test"})
    resumed = load_checkpoint(tmp_path / "ck")
    assert isinstance(resumed.policy.mlp_extractor, PerJobNetwork)
    env = make_env(TINY)
    obs, masks = states(env, 20)
    o, m = th.as_tensor(obs), th.as_tensor(masks)
    with th.no_grad():
        assert th.equal(
            masked_logits(model.policy, o, m),  # type: ignore[arg-type]
            masked_logits(resumed.policy, o, m),  # type: ignore[arg-type]
        )
    # the numpy copy the rollouts use is the trained network
    np.testing.assert_allclose(
        model._fast.value(obs), model.policy.predict_values(o)[:, 0].detach().numpy(), atol=1e-5
    )


def test_maskable_ppo_takes_the_per_job_policy_and_ppo_refuses_it() -> None:
    env = make_training_vec_env([TINY], [0])
    cfg = AgentConfig(name="maskable_ppo", algo="maskable_ppo", n_steps=64)
    cfg.ppo.batch_size = 32
    cfg.policy = PolicyConfig(arch="per_job", hidden=8)
    model = build_agent(cfg, env, J=8, seed=0)
    assert isinstance(model.policy.mlp_extractor, PerJobNetwork)
    model.learn(64)
    cfg = AgentConfig(name="ppo", algo="ppo", policy=PolicyConfig(arch="per_job"))
    with pytest.raises(ConfigError, match="per_job needs a DL2Policy learner"):
        build_agent(cfg, env, J=8, seed=0)


def test_bad_configs_are_named() -> None:
    expected = r"unknown policy\.arch 'transformer'; known: mlp, per_job"
    with pytest.raises(ConfigError, match=expected):
        policy_kwargs(PolicyConfig(arch="transformer"), 8)
    assert ARCHS == ("mlp", "per_job")
    env = make_env(TINY)
    with pytest.raises(ConfigError, match="Discrete\\(3J \\+ 1\\)"):
        DL2Policy(
            env.observation_space,
            env.action_space,
            lambda _: 1e-3,
            **policy_kwargs(PolicyConfig(arch="per_job"), env.J + 1),
        )


def test_mlp_arch_is_unchanged_sb3_policy() -> None:
    """``arch: mlp`` builds exactly sb3-contrib's policy (same modules and initial weights)."""
    from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy

    env = make_env(TINY)
    kwargs = policy_kwargs(PolicyConfig(), env.J)
    th.manual_seed(3)
    ours = DL2Policy(env.observation_space, env.action_space, lambda _: 1e-3, **kwargs)
    th.manual_seed(3)
    theirs = MaskableActorCriticPolicy(
        env.observation_space, env.action_space, lambda _: 1e-3, **kwargs
    )
    a, b = ours.state_dict(), theirs.state_dict()
    assert a.keys() == b.keys() and all(th.equal(a[k], b[k]) for k in a)


def test_position_feature_breaks_ties_by_window_order(tmp_path) -> None:
    """``position=True``: two identical rows at different window positions can get different
    logits (arrival-order tie-breaks become learnable); numpy copy and save/load follow."""
    config = PolicyConfig(arch="per_job", hidden=16, position=True)
    env, policy = build(config=config)
    perturb(policy)
    obs, masks = states(env, 30)
    J, width = env.J, obs.shape[1] // env.J
    rows = obs[5].reshape(J, width).copy()
    present = np.flatnonzero(rows.sum(-1) > 0)
    a, b = present[0], present[-1]
    rows[b] = rows[a]  # the same job features at two positions
    z, _ = logits_and_values(policy, rows.reshape(1, -1))
    assert not np.allclose(z[0, 3 * a : 3 * a + 3], z[0, 3 * b : 3 * b + 3], atol=1e-3)
    _, plain = build(config=PolicyConfig(arch="per_job", hidden=16))
    zp, _ = logits_and_values(plain, rows.reshape(1, -1))
    np.testing.assert_allclose(zp[0, 3 * a : 3 * a + 3], zp[0, 3 * b : 3 * b + 3], atol=1e-6)
    fast = NumpyPolicy(policy)
    with th.no_grad():
        o = th.as_tensor(obs)
        probs = th.softmax(masked_logits(policy, o, th.as_tensor(masks)).double(), 1).numpy()
        values = policy.predict_values(o)[:, 0].numpy()
    np.testing.assert_allclose(fast.probs(obs, masks), probs, rtol=0, atol=1e-5)
    np.testing.assert_allclose(fast.value(obs), values, rtol=0, atol=1e-5)
    meta = {"env": SMALL.as_dict(), "policy": {"arch": "per_job", "hidden": 16, "position": True}}
    loaded, _ = load_policy(save_policy_weights(policy, tmp_path / "policy.pt", meta))
    with th.no_grad():
        m = th.as_tensor(masks)
        assert th.equal(masked_logits(policy, o, m), masked_logits(loaded, o, m))
    with pytest.raises(ConfigError, match="per_job only"):
        policy_kwargs(PolicyConfig(position=True), J)


def test_numpy_copy_acts_on_another_window_as_the_network_built_for_it() -> None:
    """A per-job network's weights do not depend on ``J``: the numpy copy of a policy built
    for small (J = 20) acts on medium's observations (J = 12) exactly as the same weights in
    a policy built for medium (the oracle); with the position column it refuses."""
    _, policy = build(SMALL, PolicyConfig(arch="per_job", hidden=24, layers=2))
    perturb(policy)
    net = PolicyConfig(arch="per_job", hidden=24, layers=2)
    medium_env, oracle = build(EnvConfig(setting="medium"), net)
    oracle.load_state_dict(policy.state_dict())
    obs, masks = states(medium_env, 40)
    with th.no_grad():
        want = masked_logits(oracle, th.as_tensor(obs), th.as_tensor(masks)).numpy()
        values = oracle.predict_values(th.as_tensor(obs))[:, 0].numpy()
    fast = NumpyPolicy(policy)
    assert fast.any_window
    got = fast.logits(obs, masks)
    fin = np.isfinite(want)
    np.testing.assert_array_equal(np.isfinite(got), fin)
    np.testing.assert_allclose(got[fin], want[fin], rtol=0, atol=1e-5)
    np.testing.assert_allclose(fast.value(obs), values, rtol=0, atol=1e-5)
    _, positioned = build(SMALL, PolicyConfig(arch="per_job", hidden=8, position=True))
    fixed = NumpyPolicy(positioned)
    assert not fixed.any_window
    with pytest.raises(ConfigError, match="takes 20 rows of"):
        fixed.logits(obs[0], masks[0])


def test_released_per_job_policy_runs_on_another_setting(tmp_path) -> None:
    """``evaluate.py`` runs ``small_esrtf_gppo`` (trained at J = 20) on medium (J = 12) with
    no extra keys; each seed's figure is its numpy copy's argmax episode through medium."""
    from agents.episode_results import run_episode
    from evaluation.config import EnvSection, EvaluateConfig, WorkloadConfig
    from evaluation.pipeline import evaluate
    from tests.cli import ROOT

    path = ROOT / "policies" / "small_esrtf_gppo"
    cfg = EvaluateConfig(
        workload=WorkloadConfig(kind="env", env=EnvSection(setting="medium")),
        stacks=[f"policy:{path}", "elastic:esrtf"],
        seeds=[0],
        workers=1,
        plot=False,
    )
    rows = evaluate(cfg, tmp_path / "run", {})
    mine = [float(r["avg_jct_s"]) for r in rows if r["stack"].startswith("policy:")]
    policy, meta = load_policy(str(path))
    fast = NumpyPolicy(policy.policy if hasattr(policy, "policy") else policy)
    env = make_env(EnvConfig(**{**meta["env"], "setting": "medium"}))
    want = run_episode(env, lambda e, o: fast.act(o, e.action_masks(), deterministic=True), 0)
    assert mine == [pytest.approx(want.avg_jct * env.cluster_spec.slot_s, rel=1e-9)]
