"""Stock SB3 models in ``evaluate.py``: ``PPO``, ``MaskablePPO`` and ``A2C`` with their default
``MlpPolicy`` (Tanh), trained briefly on ``tiny`` and saved with ``model.save``, run as
``policy:<file>.zip`` through the same env as the heuristics; each episode's actions, and so
its figures, are those of a manual loop over the torch model on the same env and seed."""

from __future__ import annotations

import csv
import functools
import json
import math
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from sb3_contrib import MaskablePPO
from sb3_contrib.common.maskable.policies import MaskableActorCriticPolicy
from sb3_contrib.common.maskable.utils import get_action_masks
from stable_baselines3 import A2C, PPO
from stable_baselines3.common.policies import ActorCriticPolicy

import envs.gym  # noqa: F401 - registers the ids
from agents.policy import NumpyPolicy, TorchPolicy, inference_policy, numpy_support
from agents.vec import make_training_vec_env
from envs.gym.factory import EnvConfig, make_env
from evaluation.config import EnvSection, EvaluateConfig, PolicyEvalConfig, WorkloadConfig
from evaluation.pipeline import evaluate
from evaluation.policy import load_network

HORIZON = 60  # slots: a briefly trained policy's argmax may never finish some jobs
SEEDS = [0, 1]
SLOT_S = 1200.0
ALGOS = {"ppo": PPO, "mppo": MaskablePPO, "a2c": A2C}
OBS = spaces.Box(0.0, 1.0, shape=(40,), dtype=np.float32)  # a J = 4 window's shape
ACTIONS = spaces.Discrete(13)


class Cube(th.nn.Module):
    """An activation :class:`NumpyPolicy` does not know: the torch forward acts instead."""

    def forward(self, x: th.Tensor) -> th.Tensor:
        return x**3


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Default-settings models (1,024 decisions each; PPO's rollouts of 512 instead of 2,048
    so that it updates twice) saved as stock ``.zip`` files, and an untrained MaskablePPO
    with the unknown activation."""
    out = tmp_path_factory.mktemp("stock")
    paths = {}
    threads = th.get_num_threads()
    th.set_num_threads(1)  # small networks: one thread is faster on a shared machine
    try:
        for name, cls in ALGOS.items():
            kwargs = {} if cls is A2C else {"n_steps": 512}
            env = gym.make("dlsched/Cluster-v0", setting="tiny")
            model = cls("MlpPolicy", env, seed=0, **kwargs)
            assert model.policy.activation_fn is th.nn.Tanh  # SB3's default
            model.learn(1024)
            model.save(out / f"{name}.zip")
            paths[name] = out / f"{name}.zip"
    finally:
        th.set_num_threads(threads)
    cube = MaskablePPO(
        "MlpPolicy",
        gym.make("dlsched/Cluster-v0", setting="tiny"),
        seed=0,
        policy_kwargs={"activation_fn": Cube},
    )
    cube.save(out / "cube.zip")
    paths["cube"] = out / "cube.zip"
    return paths


def _evaluate(stacks: list[str], out: Path, pe: PolicyEvalConfig) -> dict[tuple[str, str], Any]:
    workload = WorkloadConfig(kind="env", env=EnvSection(setting="tiny", max_slots=HORIZON))
    cfg = EvaluateConfig(
        workload=workload, stacks=stacks, policy_eval=pe, seeds=SEEDS, workers=1, plot=False
    )
    return {(r["stack"], r["seed"]): r for r in evaluate(cfg, out, {})}


def _masked_logits(model: Any, obs: np.ndarray, mask: np.ndarray) -> th.Tensor:
    """The torch model's own action distribution over the valid actions."""
    x = th.as_tensor(obs[None])
    with th.no_grad():
        if isinstance(model, MaskablePPO):
            dist = model.policy.get_distribution(x, action_masks=mask[None])
        else:
            dist = model.policy.get_distribution(x)
        logits = dist.distribution.logits[0].double()
    return logits.masked_fill(~th.as_tensor(mask), -math.inf)


def _manual_episode(
    model: Any, seed: int, deterministic: bool, sample_seed: int = 0
) -> dict[str, Any]:
    """One episode of ``model`` through the env as a user would run it: ``model.predict``
    with the env's masks (MaskablePPO), or the model's own distribution masked (PPO and A2C
    have no masks in ``predict``); samples by inverse CDF from ``default_rng([sample_seed,
    seed])``, ``evaluate.py``'s documented draw."""
    env = make_env(EnvConfig(setting="tiny", max_slots=HORIZON))
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng([sample_seed, seed])
    while True:
        mask = env.action_masks()
        if deterministic and isinstance(model, MaskablePPO):
            action, _ = model.predict(obs, action_masks=mask, deterministic=True)
        elif deterministic:
            action = int(th.argmax(_masked_logits(model, obs, mask)))
        else:
            p = th.softmax(_masked_logits(model, obs, mask), dim=0).numpy()
            c = np.cumsum(p)
            action = int(np.searchsorted(c, rng.random() * c[-1], side="right"))
        obs, _, term, trunc, info = env.step(int(action))
        if term or trunc:
            return info


def _check_rows(rows: dict[tuple[str, str], Any], specs: dict[str, Any], **kwargs: Any) -> None:
    for spec, model in specs.items():
        for seed in SEEDS:
            row = rows[(spec, str(seed))]
            info = _manual_episode(model, seed, **kwargs)
            assert math.isfinite(row["avg_jct_s"]) and row["avg_jct_s"] > 0
            assert math.isfinite(row["makespan_s"])
            # the same actions: the same figures (censored ones too: the same convention)
            assert row["avg_jct_s"] == pytest.approx(info["avg_jct_s"], rel=1e-9)
            assert row["avg_jct_slots"] == pytest.approx(info["avg_jct_slots"], rel=1e-9)
            assert row["makespan_s"] == pytest.approx(info["makespan_slots"] * SLOT_S, rel=1e-9)
            assert row["censored_jobs"] == info["unfinished_jobs"]


def test_stock_models_run_masked_argmax_as_model_predict(
    models: dict[str, Path], tmp_path: Path
) -> None:
    specs = {f"policy:{models[n]}": cls.load(models[n]) for n, cls in ALGOS.items()}
    rows = _evaluate([*specs, "elastic:drf"], tmp_path / "argmax", PolicyEvalConfig(True))
    _check_rows(rows, specs, deterministic=True)
    record = json.loads((tmp_path / "argmax" / "run.json").read_text())
    for run in record["runs"]:
        if run["stack"].startswith("policy:"):
            assert run["policy"]["inference"] == "numpy" and run["policy"]["deterministic"]
            assert run["policy"]["meta"] == {}  # a stock zip records nothing else
    # unfinished jobs are flagged, never averaged in silently
    censored = [k for k, r in rows.items() if r["censored_jobs"] > 0]
    text = (tmp_path / "argmax" / "summary.md").read_text()
    for stack, seed in censored:
        assert f"- seed {seed}: " in text and f"`{stack}`" in text
    assert ("**Censored runs**" in text) == bool(censored)


def test_stock_model_sampled_actions_draw_as_documented(
    models: dict[str, Path], tmp_path: Path
) -> None:
    specs = {f"policy:{models['mppo']}": MaskablePPO.load(models["mppo"])}
    pe = PolicyEvalConfig(deterministic=False, sample_seed=3)
    rows = _evaluate(list(specs), tmp_path / "sampled", pe)
    _check_rows(rows, specs, deterministic=False, sample_seed=3)
    # the default for a stock zip (no recorded ``act``) is sampled
    default = _evaluate(list(specs), tmp_path / "default", PolicyEvalConfig(sample_seed=3))
    assert [r["avg_jct_s"] for r in default.values()] == [r["avg_jct_s"] for r in rows.values()]


def test_a_network_numpy_cannot_mirror_acts_with_torch(
    models: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    load_network.cache_clear()
    fast, meta = load_network(str(models["cube"]))
    assert isinstance(fast, TorchPolicy) and "unsupported layer Cube" in fast.reason
    assert meta == {}
    assert "acts with its torch network" in capsys.readouterr().err
    spec = f"policy:{models['cube']}"
    model = MaskablePPO.load(models["cube"])
    rows = _evaluate([spec], tmp_path / "cube", PolicyEvalConfig(True))
    _check_rows(rows, {spec: model}, deterministic=True)
    record = json.loads((tmp_path / "cube" / "run.json").read_text())
    assert record["runs"][0]["policy"]["inference"] == "torch"
    assert "Cube" in record["runs"][0]["policy"]["inference_reason"]


@pytest.mark.parametrize(
    "activation",
    [
        th.nn.Tanh,
        th.nn.ReLU,
        functools.partial(th.nn.LeakyReLU, 0.2),
        th.nn.ELU,
        functools.partial(th.nn.CELU, 0.5),
        th.nn.SELU,
        th.nn.GELU,
        functools.partial(th.nn.GELU, approximate="tanh"),
        th.nn.SiLU,
        th.nn.Sigmoid,
        functools.partial(th.nn.Softplus, 2.0, 1.0),
        th.nn.Mish,
        th.nn.LogSigmoid,
        th.nn.Softsign,
        th.nn.Tanhshrink,
        th.nn.Hardtanh,
        th.nn.ReLU6,
        th.nn.Hardsigmoid,
        th.nn.Hardswish,
        functools.partial(th.nn.Threshold, 0.1, -0.5),
        functools.partial(th.nn.Hardshrink, 0.3),
        functools.partial(th.nn.Softshrink, 0.3),
        th.nn.RReLU,
        th.nn.PReLU,
        th.nn.Identity,
    ],
)
@pytest.mark.parametrize("algo", ["ppo", "mppo"])
def test_numpy_forward_equals_torch_forward(activation: Any, algo: str) -> None:
    """Logits (masked) and values of the numpy copy equal the torch policy's own forward on
    random observations (float32 rounding), for SB3's and sb3-contrib's policies."""
    cls = MaskableActorCriticPolicy if algo == "mppo" else ActorCriticPolicy
    th.manual_seed(1)
    policy = cls(OBS, ACTIONS, lambda _: 0.0, net_arch=[32, 16], activation_fn=activation)
    policy.set_training_mode(False)  # as SB3 predicts (RReLU draws its slopes in training)
    with th.no_grad():  # larger weights: every region of each activation is reached
        for p in policy.parameters():
            p.mul_(3.0)
    fast = inference_policy(policy)
    assert isinstance(fast, NumpyPolicy) and numpy_support(policy) is None
    rng = np.random.default_rng(0)
    obs = rng.normal(0.0, 2.0, size=(64, OBS.shape[0])).astype(np.float32)
    mask = rng.random((64, ACTIONS.n)) < 0.6
    mask[:, -1] = True
    x = th.as_tensor(obs)
    with th.no_grad():
        dist = policy.get_distribution(x)
        logits = dist.distribution.logits.double().numpy()
        values = policy.predict_values(x)[:, 0].double().numpy()
    # torch's Categorical normalises its logits: compare up to the constant per row
    ours = fast.logits(obs, mask)
    ref = np.where(mask, logits, -np.inf)
    shift = ours[:, -1:] - ref[:, -1:]  # void is always valid
    np.testing.assert_allclose(
        np.where(mask, ours - shift, 0.0), np.where(mask, ref, 0.0), rtol=1e-5, atol=1e-4
    )
    np.testing.assert_allclose(fast.value(obs), values, rtol=1e-5, atol=1e-4)
    np.testing.assert_allclose(fast.probs(obs, mask), TorchPolicy(policy).probs(obs, mask),
                               atol=1e-6)  # fmt: skip
    for i in range(8):  # single observations, and the same argmax
        assert fast.act(obs[i], mask[i], deterministic=True) == int(np.argmax(ref[i]))


def test_vec_env_masks_are_sb3_contribs() -> None:
    """``get_action_masks`` of the training vec env (what the federated hosts send) is every
    env's own ``action_masks()``, stacked, after steps that changed them."""
    vec = make_training_vec_env([EnvConfig(setting="tiny")] * 3, [0, 1, 2])
    vec.reset()
    rng = np.random.default_rng(0)
    for _ in range(30):
        masks = get_action_masks(vec)
        ref = np.stack([e.unwrapped.action_masks() for e in vec.envs])  # type: ignore[attr-defined]
        assert masks.dtype == np.bool_ and np.array_equal(masks, ref)
        vec.step(np.array([rng.choice(np.flatnonzero(m)) for m in masks]))


def test_summary_csv_flags_censored_stock_runs(models: dict[str, Path], tmp_path: Path) -> None:
    """A horizon too short for anyone: every run is in the table with its censored count, no
    mean is taken, and the JCTs stay finite lower bounds."""
    spec = f"policy:{models['mppo']}"
    workload = WorkloadConfig(kind="env", env=EnvSection(setting="tiny", max_slots=4))
    cfg = EvaluateConfig(
        workload=workload,
        stacks=[spec, "elastic:drf"],
        policy_eval=PolicyEvalConfig(True),
        seeds=SEEDS,
        workers=1,
        plot=False,
    )
    evaluate(cfg, tmp_path / "short", {})
    with open(tmp_path / "short" / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert {r["seed"] for r in rows} == {"0", "1"}  # no mean rows
    for r in rows:
        assert float(r["censored_jobs"]) > 0 and math.isfinite(float(r["avg_jct_s"]))
        assert float(r["avg_jct_s"]) <= 4 * SLOT_S
