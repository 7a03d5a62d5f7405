"""Teacher traces and behaviour cloning (issue 5)."""

from __future__ import annotations

import numpy as np
import pytest
import torch as th

from agents.checkpoint import load_policy, save_policy_weights
from agents.policy import NumpyPolicy, PolicyConfig, masked_logits, policy_kwargs
from envs.gym.factory import EnvConfig, make_env
from envs.sim.elastic.allocators import SRTF, AdaSRSF, UniformDemand, make_allocator
from envs.sim.errors import ConfigError
from pretrain.bc import BCConfig, behaviour_clone, build_student, score
from pretrain.dataset import TeacherDataset, collect
from training.pretraining import PretrainConfig, pretrain

TINY = EnvConfig(setting="tiny")


@pytest.fixture(scope="module")
def drf_data() -> TeacherDataset:
    return collect("drf", TINY, [1000, 1001, 1002, 1003])


def replay_actions(data: TeacherDataset, episode: int, seed: int) -> dict:
    env = make_env(TINY)
    obs, _ = env.reset(seed=seed)
    rows = np.flatnonzero(data.episodes == episode)
    info: dict = {}
    for k in rows:
        assert np.array_equal(obs, data.obs[k])  # same state as recorded
        assert np.array_equal(env.action_masks(), data.masks[k])
        obs, _, term, trunc, info = env.step(int(data.actions[k]))
        assert not info["invalid_action"]
    assert term or trunc
    return info


@pytest.mark.parametrize(
    "teacher", ["drf", "optimus", "esrtf", "esrtf_load", "adasrsf", "tiresias"]
)
def test_collected_decisions_replay_to_the_teachers_result(teacher: str) -> None:
    data = collect(teacher, TINY, [1000, 1001])
    for e, seed in enumerate(data.meta["seeds"]):
        info = replay_actions(data, e, seed)
        assert info["avg_jct_slots"] == pytest.approx(
            data.meta["teacher_results"][e]["avg_jct_slots"], rel=0, abs=1e-12
        )


def test_void_decisions_are_recorded() -> None:
    # Optimus stops when no increment helps: that stop is the void action, and it is recorded
    data = collect("optimus", TINY, [1000])
    void = data.masks.shape[1] - 1
    assert (data.actions == void).sum() > 0
    # each slot's decisions share the slot's reward
    assert data.returns.shape == data.actions.shape


def test_teachers_by_name() -> None:
    """A teacher is an allocator of the one registry, aliases included."""
    assert isinstance(make_allocator("srsf", role="teacher"), SRTF)
    teacher = make_allocator("ADA-SRSF", role="teacher")
    assert isinstance(teacher, AdaSRSF) and isinstance(teacher, UniformDemand)
    assert (teacher.workers, teacher.order) == (4, "srsf")
    with pytest.raises(ConfigError, match=r"unknown teacher 'sjf'; known: .*adasrsf.*bundle"):
        make_allocator("sjf", role="teacher")
    with pytest.raises(ConfigError, match="workers must be"):
        make_allocator("adasrsf", {"workers": 0}, role="teacher")
    with pytest.raises(ConfigError, match="teacher 'drf': bad options"):
        make_allocator("drf", {"workers": 2}, role="teacher")


def test_shuffled_copies_keep_each_decision_consistent(drf_data: TeacherDataset) -> None:
    base = drf_data.subset(np.arange(300))
    aug = base.shuffled(2, seed=3)
    assert len(aug) == 3 * len(base)
    J, width = base.J, base.obs.shape[1] // base.J
    void = 3 * J
    moved = 0
    for copy in (1, 2):
        part = aug.subset(np.arange(copy * len(base), (copy + 1) * len(base)))
        for i in range(len(base)):
            a_old, a_new = int(base.actions[i]), int(part.actions[i])
            assert part.masks[i, a_new]
            if a_old == void:
                assert a_new == void
                continue
            old_row = base.obs[i].reshape(J, width)[a_old // 3]
            new_row = part.obs[i].reshape(J, width)[a_new // 3]
            assert np.array_equal(old_row, new_row) and a_old % 3 == a_new % 3
            moved += a_old != a_new
            # the same multiset of rows
            assert sorted(map(tuple, base.obs[i].reshape(J, width))) == sorted(
                map(tuple, part.obs[i].reshape(J, width))
            )
    assert moved > 0


def test_dataset_round_trip(tmp_path, drf_data: TeacherDataset) -> None:
    path = drf_data.save(tmp_path / "ds")
    back = TeacherDataset.load(path)
    for name in ("obs", "masks", "actions", "episodes", "returns"):
        assert np.array_equal(getattr(back, name), getattr(drf_data, name))
    assert back.meta["teacher"] == "drf" and back.meta["env"] == TINY.as_dict()
    with pytest.raises(ConfigError, match="no teacher dataset"):
        TeacherDataset.load(tmp_path / "missing")


def test_split_holds_out_whole_workloads(drf_data: TeacherDataset) -> None:
    train, val = drf_data.split(0.25, seed=0)
    assert len(train) + len(val) == len(drf_data)
    assert not set(np.unique(train.episodes)) & set(np.unique(val.episodes))


@pytest.mark.parametrize("arch", ["mlp", "per_job"])
def test_behaviour_cloning_learns_the_teacher(drf_data: TeacherDataset, arch: str) -> None:
    th.manual_seed(0)
    env = make_env(TINY)
    kwargs = policy_kwargs(PolicyConfig(arch=arch), env.J)
    student = build_student(env.observation_space, env.action_space, kwargs)
    train, val = drf_data.split(0.25, seed=0)
    before = score(student, val)
    history = behaviour_clone(student, train, val, BCConfig(steps=300, eval_every=100, lr=5e-3))
    after = history.last
    chance = float(np.mean(1.0 / val.masks.sum(axis=1)))
    assert after["val/loss"] < 0.5 * before["loss"]
    assert after["val/accuracy"] > 0.85 > 3 * chance
    assert after["val/accuracy"] > before["accuracy"] + 0.3


def test_saved_weights_reproduce_action_probabilities(tmp_path) -> None:
    th.manual_seed(1)
    env = make_env(TINY)
    pol = build_student(env.observation_space, env.action_space, policy_kwargs(None, env.J))
    path = save_policy_weights(pol, tmp_path / "policy.pt", {"env": TINY.as_dict(), "policy": {}})
    loaded, meta = load_policy(path)
    obs, _ = env.reset(seed=5)
    mask = env.action_masks()
    o = th.as_tensor(obs)[None]
    m = th.as_tensor(mask)[None]
    with th.no_grad():
        p1 = th.softmax(masked_logits(pol, o, m), 1)
        p2 = th.softmax(masked_logits(loaded, o, m), 1)
    assert th.equal(p1, p2)
    assert meta["env"]["setting"] == "tiny"
    assert np.allclose(NumpyPolicy(loaded).probs(obs, mask), p1[0].numpy(), atol=1e-6)


def test_pretrain_stage_writes_weights_and_uses_the_cache(tmp_path) -> None:
    cfg = PretrainConfig(
        teacher="drf",
        num_workloads=3,
        bc=BCConfig(steps=150, eval_every=50),
        eval_seeds=[100],
    )
    first = pretrain(cfg, TINY, PolicyConfig(), tmp_path / "a", cache_dir=tmp_path / "cache")
    assert (tmp_path / "a" / "policy.npz").is_file()
    assert (tmp_path / "a" / "dataset.npz").is_file()
    assert first["val_accuracy"] > 0.5
    assert first["clone_avg_jct"] > 0 and first["teacher_avg_jct"] > 0
    second = pretrain(cfg, TINY, PolicyConfig(), tmp_path / "b", cache_dir=tmp_path / "cache")
    assert "cached_from" in second and second["clone_avg_jct"] == first["clone_avg_jct"]
    with pytest.raises(ConfigError, match="disabled"):
        pretrain(PretrainConfig(teacher="none"), TINY, PolicyConfig(), tmp_path / "c")


def test_pretrain_stage_with_the_per_job_network(tmp_path) -> None:
    """``policy.arch=per_job`` end to end: a new cache entry, weights that load as the per-job
    network (also through the training path's loader) and reproduce the clone's decisions."""
    from agents.build import load_pretrained_weights
    from agents.dl2 import DL2A2C
    from agents.policy import PerJobNetwork
    from agents.vec import make_training_vec_env

    cfg = PretrainConfig(
        teacher="drf", num_workloads=3, bc=BCConfig(steps=150, eval_every=50), eval_seeds=[100]
    )
    net = PolicyConfig(arch="per_job", hidden=16)
    mlp = pretrain(cfg, TINY, PolicyConfig(), tmp_path / "m", cache_dir=tmp_path / "cache")
    out = pretrain(cfg, TINY, net, tmp_path / "p", cache_dir=tmp_path / "cache")
    assert "cached_from" not in out and out["key"] != mlp["key"]
    assert out["val_accuracy"] > 0.5
    loaded, meta = load_policy(out["policy_path"])
    assert meta["net"]["policy"]["arch"] == "per_job"  # (the one policy file: its network)
    assert isinstance(loaded.mlp_extractor, PerJobNetwork)
    model = DL2A2C(
        env=make_training_vec_env([TINY], [0]),
        policy_kwargs=policy_kwargs(net, 8),
        seed=0,
        n_steps=64,
    )
    load_pretrained_weights(model, out["policy_path"])
    env = make_env(TINY)
    obs, _ = env.reset(seed=100)
    mask = env.action_masks()
    o, m = th.as_tensor(obs)[None], th.as_tensor(mask)[None]
    with th.no_grad():
        assert th.equal(masked_logits(loaded, o, m), masked_logits(model.policy, o, m))
    assert np.allclose(
        model._fast.probs(obs, mask), NumpyPolicy(loaded).probs(obs, mask), atol=1e-12
    )
