"""The group learner: input-driven baseline (hand-computed), anchor, batched rollouts, configs."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch as th

from agents.baselines import RewardCurve, group_advantages
from agents.episode_results import evaluate_policy
from agents.group import GroupConfig, GroupPPO, anchor_kl
from agents.policy import DL2Policy, NumpyPolicy, PolicyConfig, policy_kwargs
from agents.rollouts import Batch, run_batched
from agents.vec import make_training_vec_env
from envs.gym.factory import EnvConfig, make_env
from envs.sim.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
TINY = EnvConfig(setting="tiny", reward="jct")


def _policy(arch: str = "mlp", seed: int = 0) -> DL2Policy:
    th.manual_seed(seed)
    env = make_env(TINY)
    return DL2Policy(
        env.observation_space,
        env.action_space,
        lambda _: 1e-3,
        **policy_kwargs(PolicyConfig(arch=arch), env.J),
    )


# ---------------------------------------------------------------- the baseline, by hand
def test_group_advantages_hand_computed() -> None:
    # rollout A: decisions at slots 0, 0, 1, 2; slot rewards -3, -2, -1 at slots 0, 1, 2
    # rollout B: decisions at slots 0, 1, 1;    slot rewards -3, -1    at slots 0, 1
    # G_A = -6, -3, -1 at t = 0, 1, 2; G_B = -4, -1, 0 (B ended) -> baselines -5, -2, -0.5
    rets, advs = group_advantages(
        [[0, 0, 1, 2], [0, 1, 1]], [[0, 1, 2], [0, 1]], [[-3, -2, -1], [-3, -1]], gamma=1.0
    )
    np.testing.assert_allclose(rets[0], [-6, -6, -3, -1])
    np.testing.assert_allclose(rets[1], [-4, -1, -1])
    np.testing.assert_allclose(advs[0], [-1, -1, -1, -0.5])
    np.testing.assert_allclose(advs[1], [1, 1, 1])
    # the advantages of a group at one time sum to 0
    assert advs[0][0] + advs[1][0] == 0.0


def test_reward_curve_discounted_in_simulated_time() -> None:
    c = RewardCurve([0, 1, 2], [-3, -2, -1], gamma=0.5)
    # G(2) = -1; G(1) = -2 + 0.5 * -1 = -2.5; G(0) = -3 + 0.5 * -2.5 = -4.25
    np.testing.assert_allclose(c([0, 1, 2, 3]), [-4.25, -2.5, -1, 0])
    # between reward times: discounted from the next reward time (0.5 ** 0.5 * G(1))
    assert c([0.5])[0] == pytest.approx(math.sqrt(0.5) * -2.5)
    # two rewards at one time merge
    np.testing.assert_allclose(RewardCurve([1, 1], [2, 3])([0, 1, 2]), [5, 5, 0])


def test_reward_curve_rejects_bad_input() -> None:
    with pytest.raises(ConfigError, match="gamma"):
        RewardCurve([0], [1], gamma=0)
    with pytest.raises(ConfigError, match="non-decreasing"):
        RewardCurve([1, 0], [1, 1])
    with pytest.raises(ConfigError, match="finite"):
        RewardCurve([0, 1], [1, float("nan")])


# ---------------------------------------------------------------- anchor
def test_anchor_kl_zero_when_student_is_teacher() -> None:
    g = th.Generator().manual_seed(0)
    logits = th.randn(5, 7, generator=g)
    masks = th.rand(5, 7, generator=g) > 0.3
    masks[:, -1] = True
    masked = logits.masked_fill(~masks, float("-inf"))
    assert th.all(anchor_kl(masked, masked, masks) == 0)
    other = (logits + th.randn(5, 7, generator=g)).masked_fill(~masks, float("-inf"))
    kl = anchor_kl(masked, other, masks)
    assert th.all(kl >= 0) and float(kl.sum()) > 0
    assert th.all(th.isfinite(kl))


def test_anchor_term_zero_at_start_of_fine_tuning() -> None:
    env = make_training_vec_env([TINY] * 4, [0, 1, 2, 3])
    model = GroupPPO(
        env=env,
        group=GroupConfig(groups=1, group_size=4, anchor_coef=1.0),
        policy_kwargs=policy_kwargs(PolicyConfig(), make_env(TINY).J),
        seed=0,
    )
    model.set_anchor()
    anchor = model._anchor_policy()
    assert anchor is not None
    obs = th.as_tensor(np.stack([e.unwrapped._obs() for e in env.envs]))
    masks = th.as_tensor(np.stack([e.unwrapped.action_masks() for e in env.envs]))
    from agents.policy import masked_logits

    with th.no_grad():
        kl = anchor_kl(
            masked_logits(anchor, obs, masks), masked_logits(model.policy, obs, masks), masks
        )
    assert th.all(kl == 0)


def test_anchor_without_teacher_is_a_config_error() -> None:
    env = make_training_vec_env([TINY] * 2, [0, 1])
    model = GroupPPO(
        env=env,
        group=GroupConfig(groups=1, group_size=2, anchor_coef=0.5),
        policy_kwargs=policy_kwargs(PolicyConfig(), make_env(TINY).J),
        seed=0,
    )
    with pytest.raises(ConfigError, match="needs a teacher"):
        model.learn(10)


@pytest.mark.parametrize(
    ("group", "n_envs", "match"),
    [
        (GroupConfig(groups=1, group_size=3), 4, "not a multiple"),
        (GroupConfig(groups=1, group_size=1, baseline="group"), 1, "group_size >= 2"),
        (GroupConfig(baseline="value"), 16, "baseline"),
        (GroupConfig(sample_fraction=0.0), 16, "sample_fraction"),
        (GroupConfig(target_kl=float("nan")), 16, "target_kl"),
        (GroupConfig(groups=0), 16, "groups"),
    ],
)
def test_inconsistent_group_settings(group: GroupConfig, n_envs: int, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        group.check(n_envs)


# ---------------------------------------------------------------- batched rollouts
@pytest.mark.parametrize("arch", ["mlp", "per_job"])
def test_batched_rollouts_reproduce_single_env_runs(arch: str) -> None:
    fast = NumpyPolicy(_policy(arch))
    seeds, samples = [3, 3, 4, 5], [10, 11, 12, 13]
    together = run_batched(
        [make_env(TINY) for _ in seeds],
        seeds,
        fast,
        deterministic=False,
        sample_seeds=samples,
        record=True,
    )
    for e, (seed, sample) in enumerate(zip(seeds, samples, strict=True)):
        alone = run_batched(
            [make_env(TINY)], [seed], fast, deterministic=False, sample_seeds=[sample], record=True
        )
        rows = together.rows(e)
        np.testing.assert_array_equal(together.actions[rows], alone.actions)
        np.testing.assert_array_equal(together.obs[rows], alone.obs)
        np.testing.assert_array_equal(together.times[rows], alone.times)
        np.testing.assert_array_equal(together.episodes[e].rewards, alone.episodes[0].rewards)
        assert together.episodes[e].avg_jct_slots == alone.episodes[0].avg_jct_slots
    # two rollouts of one workload with different draws differ
    assert together.episodes[0].decisions != together.episodes[1].decisions or not np.array_equal(
        together.actions[together.rows(0)], together.actions[together.rows(1)]
    )


def test_subsampled_recording_keeps_informative_choices_with_unbiased_weights() -> None:
    fast = NumpyPolicy(_policy())

    def run(fraction: float) -> Batch:
        return run_batched(
            [make_env(TINY) for _ in range(4)],
            [0, 0, 1, 1],
            fast,
            deterministic=False,
            sample_seeds=[5, 6, 7, 8],
            record=True,
            record_fraction=fraction,
            record_rng=np.random.default_rng(0),
        )

    full, part = run(1.0), run(0.25)
    assert np.all(full.weights == 1.0)
    # the same trajectories, about a quarter of the decisions recorded
    assert [e.decisions for e in part.episodes] == [e.decisions for e in full.episodes]
    assert 0.1 * len(full) < len(part) < 0.5 * len(full)
    # weights are 1 / keep probability, at most 4 / fraction; likelier actions weigh more
    p = 1.0 / part.weights
    assert np.all((p >= 0.25 / 4 - 1e-12) & (p <= 1.0))
    pi = np.exp(part.logp.astype(np.float64))
    order = np.argsort(pi)
    assert np.corrcoef(pi[order], part.weights[order])[0, 1] > 0
    # the weighted count estimates the full count
    assert part.weights.sum() == pytest.approx(len(full), rel=0.1)


def test_tempered_rollouts_record_both_log_probabilities() -> None:
    fast = NumpyPolicy(_policy())
    kw = {"deterministic": False, "sample_seeds": [1, 2], "record": True}
    plain = run_batched([make_env(TINY) for _ in range(2)], [0, 0], fast, **kw)
    np.testing.assert_array_equal(plain.logp, plain.logp_policy)
    hot = run_batched([make_env(TINY) for _ in range(2)], [0, 0], fast, temperature=3.0, **kw)
    z = fast.logits(hot.obs, hot.masks)
    rows = np.arange(len(hot))
    pi = (
        z
        - np.log(np.exp(z - z.max(1, keepdims=True)).sum(1, keepdims=True))
        - z.max(1, keepdims=True)
    )
    np.testing.assert_allclose(hot.logp_policy, pi[rows, hot.actions], rtol=1e-5, atol=1e-5)
    mu = (z / 3.0) - np.log(np.exp(z / 3.0 - (z / 3.0).max(1, keepdims=True)).sum(1, keepdims=True))
    mu -= (z / 3.0).max(1, keepdims=True)
    np.testing.assert_allclose(hot.logp, mu[rows, hot.actions], rtol=1e-5, atol=1e-5)
    with pytest.raises(ConfigError, match="temperature"):
        GroupConfig(temperature=0.5).check(16)


def test_batched_jct_rewards_sum_to_minus_total_jct() -> None:
    fast = NumpyPolicy(_policy())
    envs = [make_env(TINY) for _ in range(3)]
    batch = run_batched(envs, [0, 1, 2], fast, deterministic=False, sample_seeds=[0, 1, 2])
    for ep, env in zip(batch.episodes, envs, strict=True):
        assert ep.terminated
        assert ep.avg_jct_slots is not None
        total = -float(ep.rewards.sum())
        assert total == pytest.approx(ep.avg_jct_slots * len(env.jobs), rel=1e-9)


@pytest.mark.parametrize("arch", ["mlp", "per_job"])
def test_batched_argmax_evaluation_matches_one_at_a_time(arch: str) -> None:
    from agents.episode_results import run_episode

    # a 500-slot horizon (2000 by default): untrained, these policies finish no episode within
    # either (every one is cut at the horizon), so the shorter one runs the same paths
    short = EnvConfig(setting="tiny", reward="jct", max_slots=500)
    policy = _policy(arch)
    fast = NumpyPolicy(policy)
    seeds = [100, 101, 102, 103]
    batched = evaluate_policy(policy, short, seeds, deterministic=True)
    env = make_env(short)
    for r, seed in zip(batched, seeds, strict=True):
        alone = run_episode(
            env, lambda e, o: fast.act(o, e.action_masks(), deterministic=True), seed
        )
        assert r == alone


def test_group_ppo_learn_is_reproducible() -> None:
    def run() -> dict[str, th.Tensor]:
        env = make_training_vec_env([TINY] * 4, [0, 1, 2, 3])
        model = GroupPPO(
            env=env,
            group=GroupConfig(groups=2, group_size=2, batch_size=64),
            policy_kwargs=policy_kwargs(PolicyConfig(), make_env(TINY).J),
            seed=7,
        )
        model.learn(3000)
        return model.policy.state_dict()

    a, b = run(), run()
    for k in a:
        assert th.equal(a[k], b[k]), k


# ---------------------------------------------------------------- the CLI
def test_train_cli_group_ppo_smoke(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "train.py",
            "+agent=gppo",
            "env=tiny",
            "env.reward=jct",
            "pretrain=drf",
            "pretrain.num_workloads=2",
            "pretrain.bc.steps=50",
            "pretrain.bc.eval_every=0",
            "pretrain.eval_seeds=[100]",
            "agent.group.anchor_coef=1.0",
            "agent.group.anchor_half_life=2000",
            "agent.group.batch_size=64",
            "total_timesteps=3000",
            "eval=quick",
            "progress_bar=false",
            f"pretrain_cache={tmp_path / 'cache'}",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "final validation avg JCT" in out.stdout
    # the final table's rows (tabulate pads the cells)
    assert re.search(r"^\| learned \(final\)\s+\|", out.stdout, re.M)
    assert re.search(r"^\| drf\s+\|", out.stdout, re.M)
    final = tmp_path / "run" / "checkpoints" / "final"
    assert (final / "model.zip").is_file()

    # the released files act exactly as the checkpoint's policy
    from agents.checkpoint import load_policy
    from agents.policy_file import FORMAT, read_meta

    sys.path.insert(0, str(ROOT / "tools"))
    from release_policy import release

    path = release(tmp_path / "run", tmp_path / "released")
    assert path.name == "policy.npz" and not (tmp_path / "released" / "policy.pt").exists()
    meta = read_meta(path)  # the one policy file format, no pickle
    assert meta["format"] == FORMAT and meta["layout"]["env_id"] == "dlsched/Cluster-v0"
    assert "+agent=gppo" in meta["training"]["command"]
    assert "hydra.run.dir" not in meta["training"]["command"]
    a = NumpyPolicy(load_policy(final)[0])
    b = NumpyPolicy(load_policy(tmp_path / "released")[0])
    env = make_env(TINY, seed=5)
    obs, _ = env.reset(seed=5)
    for _ in range(200):
        m = env.action_masks()
        act = a.act(obs, m, deterministic=True)
        assert act == b.act(obs, m, deterministic=True)
        obs, _, term, trunc, _ = env.step(act)
        if term or trunc:
            break


def test_n_steps_zero_is_a_config_error() -> None:
    from agents.build import build_agent
    from agents.config import AgentConfig

    env = make_training_vec_env([TINY], [0])
    with pytest.raises(ConfigError, match="n_steps must be >= 1"):
        build_agent(AgentConfig(algo="dl2_a2c", n_steps=0), env, make_env(TINY).J, 0)


def test_train_cli_group_ppo_bad_n_envs(tmp_path: Path) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "train.py",
            "+agent=gppo",
            "env=tiny",
            "pretrain=none",
            "n_envs=6",
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 2
    assert "n_envs=6 disagrees with agent.group" in out.stderr
    assert "Traceback" not in out.stderr


def test_group_ppo_resume_continues_identically(tmp_path: Path) -> None:
    from agents.checkpoint import load_checkpoint, save_checkpoint

    def fresh() -> GroupPPO:
        env = make_training_vec_env([TINY] * 4, [0, 1, 2, 3])
        return GroupPPO(
            env=env,
            group=GroupConfig(groups=2, group_size=2, batch_size=64),
            policy_kwargs=policy_kwargs(PolicyConfig(), make_env(TINY).J),
            seed=3,
        )

    b = fresh()
    b.set_anchor()
    b.learn(1)  # one iteration
    first = b.num_timesteps
    save_checkpoint(b, tmp_path / "ckpt", {"agent": "gppo"})
    resumed = load_checkpoint(tmp_path / "ckpt")
    assert isinstance(resumed, GroupPPO)
    resumed.learn(1, reset_num_timesteps=False)  # the second iteration
    a = fresh()
    a.set_anchor()
    a.learn(first + 1)  # the same two iterations without a break
    assert a.num_timesteps == resumed.num_timesteps
    sa, sr = a.policy.state_dict(), resumed.policy.state_dict()
    for k in sa:
        assert th.equal(sa[k], sr[k]), k
