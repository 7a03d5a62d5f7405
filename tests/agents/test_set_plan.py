"""The size-agnostic plan network (:mod:`agents.set_plan`, issue 39): one set of weights acts
on any window ``J`` and cluster; permuting the jobs leaves its choice unchanged; batches of
several windows pad to the same logits; a clone of a load-dependent rule through it
reproduces the rule; its saved file acts on another setting in ``evaluate.py``; the plan
observation it reads stays finite and in [0, 1] on extreme clusters and jobs; bad layouts
and configs are one clear error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch as th

from agents.episode_pg import build_net, clone, load_episode_pg, save_episode_pg
from agents.episode_results import run_episode as run_cluster_episode
from agents.plan_policy import PlanPolicy
from agents.set_plan import SetPlanNet
from envs.gym.factory import EnvConfig
from envs.gym.plan_env import GLOBAL_FEATURES, PlanEnv
from envs.sim import ConfigError
from training.plan import plan_net

G = len(GLOBAL_FEATURES)


def _env(setting: str = "tiny", plans: Any = None, **overrides: int) -> PlanEnv:
    return PlanEnv(
        config=EnvConfig(setting=setting, reward="jct", overrides=dict(overrides) or None),
        plans=plans,
    )


def _net(env: PlanEnv, seed: int = 0, hidden: int = 16) -> SetPlanNet:
    th.manual_seed(seed)
    net = plan_net("set", env, hidden)
    assert isinstance(net, SetPlanNet)
    return net


def _rows(obs: np.ndarray, J: int) -> np.ndarray:
    return obs[: obs.size - G].reshape(J, -1)


@pytest.mark.parametrize(
    ("setting", "overrides"),
    [
        ("tiny", {"J": 4}),
        ("medium", {}),  # J = 12
        ("large", {}),  # J = 40, 500 nodes
        ("tiny", {"num_nodes": 1}),
        ("medium", {"num_nodes": 500, "J": 40}),
        ("small", {"num_nodes": 12}),  # J = 20, overloaded
    ],
)
def test_one_set_of_weights_acts_on_any_window_and_cluster(
    setting: str, overrides: dict[str, int]
) -> None:
    """The weights made for tiny (J = 8, 4 nodes) act whole episodes on J = 4 .. 40 and 1 ..
    500 nodes; every plan observation is finite and in [0, 1]; the logits are finite."""
    net = _net(_env("tiny"))
    env = _env(setting, **overrides)
    window = overrides.get("J")
    assert window is None or window == env.inner.J
    obs, _ = env.reset(seed=3)
    steps = 0
    while True:
        assert np.isfinite(obs).all() and obs.min() >= 0.0 and obs.max() <= 1.0
        logits = net.logits_one(obs, env.action_masks())
        assert logits.shape == (env.K,) and th.isfinite(logits).all()
        obs, _, term, trunc, info = env.step(int(logits.argmax()))
        steps += 1
        if term or trunc:
            break
    assert steps > 1 and np.isfinite(info["avg_jct_slots"])


def test_permuting_the_jobs_leaves_the_logits_unchanged() -> None:
    env = _env("medium")
    net = _net(env, 4)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=5)
    seen = 0
    for _ in range(30):
        J = env.inner.J
        rows = _rows(obs, J)
        if (rows != 0).any(1).sum() >= 3:
            perm = rng.permutation(J)
            shuffled = np.concatenate([rows[perm].ravel(), obs[-G:]]).astype(np.float32)
            mask = env.action_masks()
            a, b = net.logits_one(obs, mask), net.logits_one(shuffled, mask)
            assert th.allclose(a, b, atol=1e-6)
            seen += 1
        obs, _, term, trunc, _ = env.step(0)
        if term or trunc:
            break
    assert seen >= 3  # the check ran on windows of several jobs
    # and it is not a network that ignores its input: another observation, other logits
    other, _ = _env("medium").reset(seed=9)
    assert not th.allclose(net.logits_one(obs, mask), net.logits_one(other, mask))


def test_a_batch_of_several_windows_pads_to_the_same_logits() -> None:
    envs = [_env("tiny", J=4), _env("medium"), _env("large")]
    net = _net(envs[0], 2)
    obs = [e.reset(seed=1)[0] for e in envs]
    assert len({o.size for o in obs}) == 3
    batch = net.stack(obs)
    assert batch.shape == (3, max(o.size for o in obs))
    masks = th.ones(3, envs[0].K, dtype=th.bool)
    together = net(th.as_tensor(batch), masks)
    for i, o in enumerate(obs):
        assert th.allclose(together[i], net.logits_one(o, masks[i].numpy()), atol=1e-6)
    # the padded rows are empty positions: the same as the env's own empty rows
    assert not batch[0, obs[0].size - G : batch.shape[1] - G].any()


def test_a_clone_of_a_load_dependent_rule_reproduces_it_on_tiny() -> None:
    """The rule picks EfficientSRTF's efficiency by the number of jobs in the window (as the
    load-aware EfficientSRTF does by active jobs): a function of the job set, which the flat
    MLP must learn per window position and the set network reads off its pooled count.  Its
    clone through the set network makes the rule's choices on workloads it never saw, and so
    its avg JCT."""
    plans = ["esrtf(efficiency=1.0)", "esrtf", "esrtf(efficiency=0.7)"]
    env = _env("tiny", plans=plans)

    def rule(e: PlanEnv) -> int:
        n = len(e.inner.active_jobs)
        return 0 if n <= 2 else 1 if n <= 4 else 2

    net = _net(env, 0, hidden=32)
    clone(net, env, rule, list(range(2000, 2100)), epochs=60, lr=3e-3, seed=0)
    agree = total = 0
    for seed in range(300, 310):
        obs, _ = env.reset(seed=seed)
        while True:
            want = rule(env)
            got = int(net.logits_one(obs, env.action_masks()).argmax())
            agree += got == want
            total += 1
            obs, _, term, trunc, _ = env.step(want)
            if term or trunc:
                break
    assert total > 100 and agree / total >= 0.97, (agree, total)
    policy = PlanPolicy(net, env.plans)
    inner = env.inner
    mine = [run_cluster_episode(inner, policy.actor(inner), s).avg_jct for s in (310, 311, 312)]
    theirs = []
    for s in (310, 311, 312):
        obs, _ = env.reset(seed=s)
        while True:
            obs, _, term, trunc, info = env.step(rule(env))
            if term or trunc:
                break
        theirs.append(info["avg_jct_slots"])
    assert np.mean(mine) == pytest.approx(np.mean(theirs), rel=0.01)
    # a constant plan is not the rule here: the rule's choices differ between plans
    constant = []
    for k in range(3):
        obs, _ = env.reset(seed=310)
        while True:
            obs, _, term, trunc, info = env.step(k)
            if term or trunc:
                break
        constant.append(info["avg_jct_slots"])
    assert len(set(constant)) > 1


def test_saved_set_policy_loads_and_acts_on_another_setting(tmp_path: Path) -> None:
    from evaluation.config import EnvSection, EvaluateConfig, WorkloadConfig
    from evaluation.pipeline import evaluate

    env = _env("tiny")
    net = _net(env, 7)
    path = save_episode_pg(tmp_path / "gen" / "policy.npz", net, env, {"seed": 7})
    loaded, meta = load_episode_pg(path)
    assert isinstance(loaded, SetPlanNet) and meta["net"]["arch"] == "set"
    policy = PlanPolicy.load(path)
    assert policy.any_window
    medium = _env("medium")
    obs, _ = medium.reset(seed=4)
    mask = medium.action_masks()
    assert th.equal(loaded.logits_one(obs, mask), net.logits_one(obs, mask))
    # evaluate.py: trained on tiny (J = 8), run on medium (J = 12) with no extra keys
    cfg = EvaluateConfig(
        workload=WorkloadConfig(kind="env", env=EnvSection(setting="medium")),
        stacks=[f"policy:{tmp_path / 'gen'}", "elastic:esrtf"],
        seeds=[0, 1],
        workers=1,
        plot=False,
    )
    rows = evaluate(cfg, tmp_path / "run", {})
    mine = {r["seed"]: float(r["avg_jct_s"]) for r in rows if r["stack"].startswith("policy:")}
    slot_s = medium.inner.cluster_spec.slot_s
    for seed in (0, 1):
        want = run_cluster_episode(medium.inner, policy.actor(medium.inner), seed).avg_jct
        assert mine[str(seed)] == pytest.approx(want * slot_s, rel=1e-9)


def test_bad_layouts_are_one_clear_error(tmp_path: Path) -> None:
    env = _env("tiny")
    net = _net(env)
    with pytest.raises(ConfigError, match="is not J rows of"):
        net.window_of(env.obs_size + 1)
    # another feature set (two more columns per row): the actor refuses, naming the features
    extended = PlanEnv(config=EnvConfig(setting="tiny", reward="jct", features="extended"))
    with pytest.raises(ConfigError, match="features 'extended'"):
        PlanPolicy(net, env.plans).actor(extended.inner)
    with pytest.raises(ConfigError, match="unknown network arch 'graph'"):
        build_net({"arch": "graph", "hidden": 4})
    with pytest.raises(ConfigError, match="hidden must be >= 1"):
        SetPlanNet(5, 6, 3, 0)
    # another plan count than the env's: not saved
    with pytest.raises(ConfigError, match="does not fit"):
        save_episode_pg(tmp_path / "x.npz", SetPlanNet(net.row_width, G, env.K + 1, 4), env, {})


def test_plan_observations_stay_finite_and_in_range_on_an_extreme_trace(tmp_path: Path) -> None:
    """Durations from 1 s to 10^7 s, requests up to 64 GPUs (clipped), 40 jobs at one
    instant, on 1 and 200 nodes, with the extended features: every plan observation the set
    network reads is finite and in [0, 1], and its logits are finite."""
    from dataclasses import replace as dc_replace

    from envs.gym.workloads import Mixture, MixtureConfig, scenario_envs
    from tests.traces import extreme_trace_windows

    windows = extreme_trace_windows(tmp_path)
    config = EnvConfig(setting="small", reward="jct", features="extended")
    net: SetPlanNet | None = None
    for nodes in (1, 200):
        mixture = Mixture(MixtureConfig(enabled=True, trace_share=1.0, windows=windows), config)
        scenario = mixture.draw(np.random.default_rng(1))
        scenario = dc_replace(scenario, setting=dc_replace(scenario.setting, num_nodes=nodes))
        env = PlanEnv(env=scenario_envs(config, scenario, 1)[0])
        net = net or _net(env, 3)
        obs, _ = env.reset(seed=scenario.seed)
        for _ in range(150):
            assert np.isfinite(obs).all() and obs.min() >= 0.0 and obs.max() <= 1.0
            logits = net.logits_one(obs, env.action_masks())
            assert th.isfinite(logits).all()
            obs, _, term, trunc, _ = env.step(int(logits.argmax()))
            if term or trunc:
                break
