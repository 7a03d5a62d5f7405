"""The learner protocol (:mod:`agents.protocol`): every learner of the registry, in every env
it trains in, is built, learns, acts, is saved and loaded through the same five calls, and
the loaded learner acts as the saved one did, decision for decision."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from agents.config import AgentConfig
from agents.learners import CONTENTION, LEARNERS
from agents.protocol import LearnerProtocol, build_learner, load_learner
from envs.gym.contention_env import ContentionConfig
from envs.gym.episode import Recorder, run_episode
from envs.gym.factory import EnvConfig, make_env
from envs.gym.plan_env import PlanEnv
from envs.sim.errors import ConfigError

PAIRS = [(algo, env_id) for algo, e in LEARNERS.items() for env_id in e.envs]


def _small(algo: str) -> AgentConfig:
    """Each learner's hyperparameters cut to a few decisions' work."""
    a = AgentConfig(algo=algo, n_steps=8)
    return dataclasses.replace(
        a,
        ppo=dataclasses.replace(a.ppo, batch_size=8, n_epochs=1),
        group=dataclasses.replace(a.group, groups=1, group_size=2),
        plan=dataclasses.replace(a.plan, groups=1, group_size=2, hidden=16, workers=1, epochs=1),
        contention=dataclasses.replace(
            a.contention,
            groups=1,
            group_size=2,
            hidden=16,
            # the cross-entropy method and distillation train the rule selector only
            **({"arch": "selector", "teacher": "none"} if algo in SELECTORS else {}),
        ),
        a2c=dataclasses.replace(a.a2c, replay=0, explore=0.0),
        cem=dataclasses.replace(
            a.cem,
            population=3,
            elite=0.4,
            episodes=1,
            # distillation's rules are its source's (policies/contention_known)
            **({"rules": list(KNOWN_RULES)} if algo == "distill" else {}),
        ),
        distill=dataclasses.replace(a.distill, episodes=1),
    )


#: the learners of the rule selector
SELECTORS = ("cem", "distill")
#: the rules of the released searched selector, distillation's default source
KNOWN_RULES = ("exclusive", "exclusive_backfill", "exclusive_easy", "srsf", "exclusive_overlap")


def _env(env_id: str, algo: str = "") -> Any:
    if env_id == CONTENTION:  # (exclusive_overlap places with ovl)
        extra = {"placements": ["lwf1", "ls", "ff", "ovl"]} if algo == "distill" else {}
        return ContentionConfig(scale="small", num_jobs=8, **extra)
    return EnvConfig(setting="tiny")


def _gym_env(learner: Any, spec: Any) -> Any:
    if learner.env_id == CONTENTION:
        return spec.make()
    if learner.env_id == "dlsched/ClusterPlan-v0":
        return PlanEnv(config=spec, plans=learner.pg.env.labels)
    return make_env(spec)


class Actions(Recorder):
    def __init__(self) -> None:
        self.actions: list[int] = []

    def before(self, obs: Any, action: int, view: Any) -> None:
        self.actions.append(int(action))


def _actions(learner: Any, spec: Any, seed: int) -> tuple[list[int], float]:
    log = Actions()
    run = run_episode(_gym_env(learner, spec), learner.actor(), seed, on_step=log)
    return log.actions, float(run.ret)


@pytest.mark.parametrize(("algo", "env_id"), PAIRS)
def test_every_learner_in_every_env_builds_learns_acts_saves_and_loads(
    algo: str, env_id: str, tmp_path: Path
) -> None:
    spec = _env(env_id, algo)
    learner = build_learner(algo, env_id=env_id, env=spec, agent=_small(algo), seed=3)
    assert isinstance(learner, LearnerProtocol) and learner.env_id == env_id
    assert learner.learn(1 if learner.env_id != "dlsched/Cluster-v0" else 16) is learner
    actions, ret = _actions(learner, spec, 100)
    assert actions and ret == ret  # it acted, and its return is a number (not NaN)
    path = learner.save(tmp_path / "saved")
    again = load_learner(path)
    assert (again.algo, again.env_id) == (algo, env_id)
    assert _actions(again, spec, 100) == (actions, ret)  # the same policy, decision for decision
    again.learn(1 if again.env_id != "dlsched/Cluster-v0" else 8)  # and it learns on


def test_bad_calls_are_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"agent\.algo=ppo does not train in dlsched/Contention"):
        build_learner("ppo", env_id=CONTENTION)
    with pytest.raises(ConfigError, match="takes a ContentionConfig, got EnvConfig"):
        build_learner("contention_pg", env=EnvConfig(setting="tiny"))
    learner = build_learner("contention_pg", env=_env(CONTENTION), agent=_small("contention_pg"))
    with pytest.raises(ConfigError, match="learn budget must be >= 1 iterations, got 0"):
        learner.learn(0)
    with pytest.raises(ConfigError, match="not a saved learner"):
        load_learner(tmp_path)
    (tmp_path / "learner.json").write_text(
        '{"algo": "contention_pg", "env_id": "dlsched/Contention-v0", "agent": {"bogus": 1}}'
    )
    with pytest.raises(ConfigError, match="does not fit AgentConfig: Key 'bogus' not in"):
        load_learner(tmp_path)
    a2c = dataclasses.replace(_small("plan_a2c"), a2c=AgentConfig().a2c)  # explore 0.1
    with pytest.raises(ConfigError, match="dlsched/Contention-v0 has no such rule"):
        build_learner("plan_a2c", env_id=CONTENTION, env=_env(CONTENTION), agent=a2c)
