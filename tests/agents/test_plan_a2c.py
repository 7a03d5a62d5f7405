"""DL²'s actor-critic over the slot's plan (:mod:`agents.plan_a2c`) and its job-aware
exploration (:class:`agents.exploration.StarvedJobExploration`): the starving rule on
hand-built rows, the behaviour probabilities the rollouts record, the learner with its
ingredients off equal to EpisodePG bit for bit, the replay buffer's bounds, the critic's fit,
and the settings that cannot work refused with their key."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch as th

from agents.episode_pg import EpisodePG, EpisodePGConfig, MaskedMLP, run_episode
from agents.exploration import StarvedJobExploration
from agents.plan_a2c import PlanA2C, PlanA2CConfig, starved_job_exploration
from envs.gym.factory import EnvConfig
from envs.gym.plan_env import GLOBAL_FEATURES, PlanEnv
from envs.sim.errors import ConfigError

TINY = EnvConfig(setting="tiny", reward="jct")
G = len(GLOBAL_FEATURES)


def _rule(epsilon: float = 0.2) -> StarvedJobExploration:
    # rows of 3 type columns + stay + remaining (+ 3 more), 6 globals
    return StarvedJobExploration(epsilon, row_width=8, type_columns=3, globals=G, stay=0.1)


def _obs(rows: list[tuple[int, float, float]], J: int = 4) -> np.ndarray:
    """A plan observation: per job (type, stay, remaining epochs), empty rows after."""
    out = np.zeros(J * 8 + G, dtype=np.float32)
    for j, (kind, stay, remaining) in enumerate(rows):
        out[j * 8 + kind] = 1.0
        out[j * 8 + 3], out[j * 8 + 4] = stay, remaining
    out[-G:] = 0.5
    return out


def test_a_job_that_waited_without_progress_is_starving_and_nothing_else_is() -> None:
    rule = _rule()
    assert rule.at(_obs([(0, 0.15, 1.0)])) == pytest.approx(0.2)  # waited 15 slots, no epoch
    assert rule.at(_obs([(1, 0.15, 0.7)])) == 0.0  # served: 30% done
    assert rule.at(_obs([(2, 0.05, 1.0)])) == 0.0  # arrived 5 slots ago
    assert rule.at(_obs([(0, 0.02, 1.0), (2, 0.5, 0.995)])) == pytest.approx(0.2)  # 2nd row
    assert rule.at(_obs([])) == 0.0  # an empty window (all-zero rows are no jobs)
    # the window is read off the observation's length: the same rule on J = 9
    assert rule.at(_obs([(0, 0.0, 1.0)] * 8 + [(1, 0.3, 1.0)], J=9)) == pytest.approx(0.2)
    assert _rule(0.0).at(_obs([(0, 0.15, 1.0)])) == 0.0


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        ({"epsilon": 1.0}, "epsilon must be < 1"),
        ({"epsilon": -0.1}, "epsilon must be in"),
        ({"epsilon": math.nan}, "epsilon must be in"),
        ({"stay": math.inf}, "stay must be in"),
        ({"type_columns": 7}, "layout"),
    ],
)
def test_the_rules_bad_settings_are_named(kwargs: dict[str, float], msg: str) -> None:
    base = {"epsilon": 0.1, "row_width": 8, "type_columns": 3, "globals": G}
    with pytest.raises(ConfigError, match=msg):
        StarvedJobExploration(**{**base, **kwargs})  # type: ignore[arg-type]


def test_rollouts_record_the_mixtures_probability_in_starving_slots_only() -> None:
    """Every decision's behaviour log-probability is the policy's where no job starves and
    ``(1 - eps) pi + eps / K`` where one does (the importance weights then stay exact)."""
    th.manual_seed(0)
    env = PlanEnv(config=EnvConfig(setting="small", reward="jct", backlog="bundle"))
    net = MaskedMLP(env.obs_size, env.K, hidden=16)
    with th.no_grad():  # mostly EfficientSRTF's plan, as a clone: its slots can starve a job
        net.net[-1].bias[0] += 6.0
    rule = StarvedJobExploration(0.3, env.row_width, env.inner.L, G, 0.1)
    ep = run_episode(env, 7, net, np.random.default_rng(1), epsilon=rule)
    starving = [rule.starved(o) for o in ep.obs]
    assert any(starving) and not all(starving)  # the test sees both kinds of slot
    for o, lmu, lpi in zip(ep.obs, ep.logp_mu, ep.logp_pi, strict=True):
        mix = 0.7 * math.exp(lpi) + 0.3 / env.K if rule.starved(o) else math.exp(lpi)
        assert lmu == pytest.approx(math.log(mix), abs=1e-9)


def _learners(a2c: PlanA2CConfig) -> tuple[EpisodePG, PlanA2C]:
    env = PlanEnv(config=TINY)
    cfg = EpisodePGConfig(groups=2, group_size=3, lr=1e-3, seed=3, batch_size=64)
    th.manual_seed(0)
    a = MaskedMLP(env.obs_size, env.K, hidden=16)
    b = MaskedMLP(env.obs_size, env.K, hidden=16)
    b.load_state_dict(a.state_dict())
    return EpisodePG(env, a, cfg), PlanA2C(env.replica(), b, cfg, a2c)


def test_with_its_ingredients_off_it_is_episode_pg_bit_for_bit() -> None:
    pg, a2c = _learners(PlanA2CConfig(critic=False, replay=0, explore=0.0))
    pg.learn(2)
    a2c.learn(2)
    for (k, x), y in zip(pg.net.state_dict().items(), a2c.net.state_dict().values(), strict=True):
        assert th.equal(x, y), k


def test_replay_adds_its_share_from_at_most_its_window_of_iterations() -> None:
    _, a2c = _learners(PlanA2CConfig(critic=True, replay=2, replay_share=0.5))
    seen: list[dict[str, float]] = []
    a2c.learn(4, lambda _i, st: seen.append(st))
    assert seen[0]["replayed"] == 0.0  # nothing to replay before the first update
    for st in seen[1:]:
        assert st["replayed"] == round(0.5 * st["decisions"])  # the buffer holds enough
    assert len(a2c.buffer) == 2  # the last two iterations only
    assert all(np.isfinite(st["value_loss"]) for st in seen)
    assert {"explained_variance", "learning_rate", "entropy"} <= set(seen[-1])


def test_the_critic_fits_a_target_its_inputs_decide() -> None:
    """The value network's regression: on targets that are a function of the observation the
    loss falls and the explained variance of a second fit is high."""
    _, a2c = _learners(PlanA2CConfig(critic=True, vf_epochs=40))
    gen = th.Generator().manual_seed(0)
    obs = th.rand((256, a2c.net.obs_size), generator=gen)
    targets = 2.0 * obs[:, 0] - obs[:, 5]
    first = a2c._fit_critic(obs, targets)
    second = a2c._fit_critic(obs, targets)
    assert second["value_loss"] < 0.2 * first["value_loss"]
    assert second["explained_variance"] > 0.6  # (of the targets before the second fit)


@pytest.mark.parametrize(
    ("kwargs", "msg"),
    [
        ({"replay": 24}, "agent.a2c.replay=24 iterations is not less than"),
        ({"replay": -1}, "agent.a2c.replay must be >= 0"),
        ({"replay_share": -0.5}, "agent.a2c.replay_share"),
        ({"replay_share": math.nan}, "agent.a2c.replay_share"),
        ({"explore": 1.0}, "agent.a2c.explore must be in"),
        ({"explore": -0.1}, "agent.a2c.explore must be in"),
        ({"starve_stay": math.inf}, "agent.a2c.starve_stay"),
        ({"vf_epochs": 0}, "agent.a2c.vf_epochs"),
    ],
)
def test_settings_that_cannot_work_together_are_refused(kwargs: dict[str, float], msg: str) -> None:
    with pytest.raises(ConfigError, match=msg):
        PlanA2CConfig(**kwargs).check(iterations=24)  # type: ignore[arg-type]


def test_the_pipelines_rule_matches_the_env_layout() -> None:
    env = PlanEnv(config=EnvConfig(setting="tiny", reward="jct", features="extended"))
    rule = starved_job_exploration(PlanA2CConfig(explore=0.1), env)
    assert rule is not None and rule.row_width == env.inner.L + 7
    assert rule.type_columns == env.inner.L and rule.globals == G
    assert starved_job_exploration(PlanA2CConfig(explore=0.0), env) is None


# ---------------------------------------------------------------- train.py +agent=a2c
_TINY_A2C = [
    "+agent=a2c", "env=tiny", "pretrain.num_workloads=2", "agent.plan.iterations=3",
    "agent.plan.val_every=1", "agent.plan.groups=2", "agent.plan.group_size=2",
    "agent.plan.hidden=16", "agent.plan.bc_epochs=2", "agent.plan.workers=1",
    "agent.a2c.replay=2", "eval.seeds=[100]", "eval.baselines=[drf,esrtf_load]",
]  # fmt: skip


def test_train_a2c_runs_the_plan_actor_critic_and_tells_the_story(tmp_path) -> None:
    """``+agent=a2c``'s defaults are DL²'s recipe over the slot's plan: EfficientSRTF's clone,
    the critic, replay and job-aware exploration, in the env with DL²'s bundle backlog; the
    run's table holds the clone and the heuristics, TensorBoard its losses, KL to the clone and
    learning rate, and the record its a2c settings."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from tests.cli import run_script

    proc = run_script("train.py", *_TINY_A2C, f"hydra.run.dir={tmp_path}")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["agent"] == "a2c" and summary["pretrain"]["teacher"] == "esrtf"
    assert summary["agent_config"]["a2c"]["critic"] is True
    record = json.loads((tmp_path / "run.json").read_text())
    agent = record["config"]["agent"]
    assert agent["algo"] == "plan_a2c" and agent["a2c"]["replay"] == 2
    env = record["config"]["env"]
    assert env["backlog"] == "bundle" and env["reward"] == "jct"
    assert "| clone (before RL) " in proc.stdout and "| esrtf_load " in proc.stdout
    acc = EventAccumulator(str(tmp_path / "tb" / "a2c_1"))
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    want = {"train/value_loss", "train/explained_variance", "train/replayed",
            "train/learning_rate", "train/kl_to_clone", "train/entropy",
            "reference/avg_jct_esrtf_load", "eval/avg_jct"}  # fmt: skip
    assert want <= tags
    assert acc.Scalars("train/replayed")[0].value == 0.0
    assert acc.Scalars("train/learning_rate")[0].value == pytest.approx(3e-4)
    assert (tmp_path / "checkpoints" / "best" / "policy.npz").is_file()


def test_train_a2c_refuses_a_replay_longer_than_the_run(tmp_path) -> None:
    from tests.cli import train_refusal

    err = train_refusal([*_TINY_A2C, "agent.a2c.replay=3"], tmp_path)
    assert "agent.a2c.replay=3 iterations is not less than the run's 3 iterations" in err


# ---------------------------------------------------------------- federated=local
_CLUSTERS = (
    "federated.clusters=[{env:{setting:tiny}},"
    "{env:{setting:tiny,overrides:{num_nodes:3},arrival:poisson}}]"
)


def test_federated_local_trains_one_policy_and_reports_every_cluster(tmp_path) -> None:
    """One global policy over two clusters of different sizes: each iteration takes
    ``groups`` groups from each, validation runs on both, and the summary and table give each
    cluster's clone, learned policy and heuristics (the heuristics' figures are those of the
    cluster's own env, run apart here)."""
    from tests.cli import run_script
    from training.baselines import baseline_jcts

    proc = run_script(
        "train.py", *_TINY_A2C, "federated=local", "env=tiny", _CLUSTERS, "agent.plan.workers=2",
        f"hydra.run.dir={tmp_path}",
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    clusters = summary["clusters"]
    assert len(clusters) == 2
    small = EnvConfig(setting="tiny", reward="jct", arrival="poisson", overrides={"num_nodes": 3})
    for c, env in zip(clusters, (EnvConfig(setting="tiny", reward="jct"), small), strict=True):
        assert c["env"]["reward"] == "jct"  # the run's objective on every cluster
        want = baseline_jcts(["drf", "esrtf_load"], env, [100])
        assert c["baselines_avg_jct"] == pytest.approx(want, rel=1e-12)
        assert {"clone_avg_jct", "final_avg_jct", "best_avg_jct"} <= set(c)
    # the validation mean is the mean over both clusters' workloads
    both = [c["baselines_avg_jct"]["drf"] for c in clusters]
    assert summary["baselines_avg_jct"]["drf"] == pytest.approx(np.mean(both))
    assert "Per cluster (one global policy):" in proc.stdout
    assert summary["best_score"] > 0


def test_the_federated_draw_takes_the_clusters_in_turn() -> None:
    from training.plan import _cluster_draw

    envs = [PlanEnv(config=TINY), PlanEnv(config=TINY)]
    draw = _cluster_draw(envs)
    rng = np.random.default_rng(0)
    got = [draw(rng) for _ in range(6)]
    assert [e is envs[i % 2] for i, (e, _) in enumerate(got)] == [True] * 6
    assert all(10_000 <= s < 2**31 for _, s in got)


@pytest.mark.parametrize(
    ("extra", "msg"),
    [
        (["federated=ray"], "federated=ray is not available to the plan learners"),
        (
            [
                "federated=local",
                "federated.clusters=[{env:{setting:tiny}},{env:{setting:small}}]",
            ],
            "federated clusters must share the network's observation size",
        ),
        (["federated=local", _CLUSTERS, "eval.windows=2"], "leave mixture, eval.settings"),
    ],
)
def test_federated_settings_the_plan_learners_cannot_use_are_refused(
    tmp_path, extra: list[str], msg: str
) -> None:
    from tests.cli import train_refusal

    err = train_refusal([*_TINY_A2C, *extra, "env=tiny"], tmp_path)
    assert msg in err


def test_the_set_network_trains_over_clusters_of_different_windows(tmp_path) -> None:
    from tests.cli import run_script

    proc = run_script(
        "train.py", *_TINY_A2C, "federated=local", "env=tiny", "agent.plan.arch=set",
        "agent.plan.iterations=2", "agent.a2c.replay=1",
        "federated.clusters=[{env:{setting:tiny}},{env:{setting:tiny,overrides:{J:6}}}]",
        f"hydra.run.dir={tmp_path}",
    )  # fmt: skip
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [c["env"]["overrides"] for c in summary["clusters"]] == [{}, {"J": 6}]
