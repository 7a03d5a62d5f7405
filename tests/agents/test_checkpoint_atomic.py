"""Checkpoints and policy files are atomic and verified: a save killed at any instant leaves a
complete checkpoint that ``resume=`` finds, a flipped byte in any file is an error naming the
file (never a silently wrong network), and older files without checksums still load."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch as th

import agents.checkpoint as ck
from agents.checkpoint import (
    MANIFEST,
    find_checkpoint,
    load_checkpoint,
    load_policy,
    save_checkpoint,
    save_policy_weights,
)
from agents.replay import ReplayConfig
from envs.files import sha256_file
from envs.sim.errors import ConfigError
from tests.agents.test_dl2_agent import TINY, make_model, params

META = {"agent": "a2c", "env": TINY.as_dict()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """A model saved after 64 decisions (``old``) and after 128 (``new``): two states whose
    checkpoints differ, each with model.zip, replay.npz, env.pkl and the RNG states."""
    th.set_num_threads(1)
    model = make_model(seed=3, replay=ReplayConfig(capacity=256, batch_size=32))
    model.learn(64)
    base = tmp_path_factory.mktemp("states")
    save_checkpoint(model, base / "old", META)
    model.learn(64, reset_num_timesteps=False)
    save_checkpoint(model, base / "new", META)
    return {"model": model, "old": base / "old", "new": base / "new"}


def _place(src: Path, dst: Path) -> Path:
    """A copy of the checkpoint ``src`` at ``dst`` (to build the states a killed save leaves)."""
    shutil.copytree(src, dst)
    return dst


def _steps(d: Path) -> int:
    return int(json.loads((d / MANIFEST).read_text())["num_timesteps"])


def _flip(path: Path, offset: int | None = None, bit: int = 0x10) -> None:
    """One bit of ``path`` flipped (at ``offset``, default the middle)."""
    data = bytearray(path.read_bytes())
    at = len(data) // 2 if offset is None else offset
    data[at] ^= bit
    path.write_bytes(bytes(data))


def test_a_save_writes_its_manifest_last_and_leaves_nothing_beside_it(trained, tmp_path) -> None:
    d = save_checkpoint(trained["model"], tmp_path / "latest", META)
    manifest = json.loads((d / MANIFEST).read_text())
    files = {p.name for p in d.iterdir()} - {MANIFEST}
    assert files >= {"model.zip", "replay.npz", "env.pkl", "rng.pt", "global_rng.pkl", "meta.json"}
    assert set(manifest["files"]) == files
    for name, entry in manifest["files"].items():
        assert entry == {"size": (d / name).stat().st_size, "sha256": sha256_file(d / name)}
    assert (
        manifest["num_timesteps"]
        == 128
        == json.loads((d / "meta.json").read_text())["num_timesteps"]
    )
    # saving again replaces it whole; no .tmp-* or .prev is left beside it
    save_checkpoint(trained["model"], d, META)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest"]
    assert load_checkpoint(d).num_timesteps == 128


def test_a_failing_save_keeps_the_previous_checkpoint(trained, tmp_path, monkeypatch) -> None:
    """A save that fails after model.zip, replay.npz and env.pkl are written (here: the disk
    fills up at rng.pt) is one error naming the file; the previous checkpoint is untouched,
    loads, and is what resume= picks; no temporary directory is left."""
    d = _place(trained["old"], tmp_path / "latest")
    before = {p.name: p.read_bytes() for p in d.iterdir()}

    save = th.save

    def full(obj: Any, f: Any, *args: Any, **kw: Any) -> None:
        if isinstance(f, Path) and f.name == "rng.pt":  # SB3 saves model.zip with torch too
            raise OSError(errno.ENOSPC, "No space left on device")
        save(obj, f, *args, **kw)

    monkeypatch.setattr(th, "save", full)
    with pytest.raises(ConfigError, match=r"cannot write .*latest\.tmp-\d+/rng\.pt: no space left"):
        save_checkpoint(trained["model"], d, META)
    monkeypatch.undo()
    assert {p.name: p.read_bytes() for p in d.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest"]
    assert find_checkpoint(d) == (d, None)
    model = load_checkpoint(d)
    assert model.num_timesteps == 64
    assert np.array_equal(params(model), params(load_checkpoint(trained["old"])))


def _kill_self(*args: Any, **kw: Any) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@pytest.mark.parametrize(
    ("stage", "chosen", "steps"),
    [
        ("files written, no manifest yet", "latest", 64),
        ("manifest written, not swapped in", "latest.tmp", 128),
        ("between the two renames", "latest.tmp", 128),
        ("while removing .prev", "latest", 128),
    ],
)
def test_a_save_killed_at_any_instant_leaves_a_complete_checkpoint(
    trained, tmp_path, stage: str, chosen: str, steps: int
) -> None:
    """SIGKILL (no cleanup at all) of a process saving over ``latest`` at each stage of the
    save: among latest, latest.prev and latest.tmp-<pid> a complete checkpoint remains,
    resume= picks the newest complete one (saying so when it is not ``latest``), it loads
    with its decisions, and the next save removes what the dead save left."""
    d = _place(trained["old"], tmp_path / "latest")
    pid = os.fork()
    if pid == 0:  # the saving process, killed at ``stage``
        try:
            if stage == "files written, no manifest yet":
                ck._write_manifest = _kill_self
            elif stage == "manifest written, not swapped in":
                ck._swap_in = _kill_self
            elif stage == "between the two renames":
                rename = os.replace

                def replace(src: Any, dst: Any) -> None:
                    if ".tmp-" in Path(src).name and Path(src).is_dir():
                        _kill_self()
                    rename(src, dst)

                ck.os.replace = replace  # type: ignore[assignment]
            else:
                rmtree = shutil.rmtree

                def partial(path: Any, *a: Any, **kw: Any) -> None:
                    if Path(path).name.endswith(".prev"):
                        (Path(path) / "model.zip").unlink()  # half removed
                        _kill_self()
                    rmtree(path, *a, **kw)

                ck.shutil.rmtree = partial  # type: ignore[assignment]
            save_checkpoint(trained["model"], d, META)
        finally:
            os._exit(3)  # never back into pytest
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    left = sorted(p.name for p in tmp_path.iterdir())
    complete = [n for n in left if ck._inspect(tmp_path / n)[0] is not None]
    assert complete, left
    found, note = find_checkpoint(d)
    assert found.name.startswith(chosen) and _steps(found) == steps, (left, found)
    assert (note is None) == (found == d)
    if note is not None:
        assert str(found) in note and f"({steps} decisions)" in note
    assert load_checkpoint(found).num_timesteps == steps
    # the run dir and its checkpoints/ dir lead to the same checkpoint
    assert find_checkpoint(tmp_path)[0] == found
    # the next save (this process) cleans up after the dead one
    save_checkpoint(trained["model"], d, META)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest"]
    assert load_checkpoint(d).num_timesteps == 128


FILES = {
    "model.zip": "the model",
    "replay.npz": "the replay buffer",
    "env.pkl": "the saved training env",
    "rng.pt": "torch's RNG state",
    "global_rng.pkl": "numpy's and Python's RNG states",
    "meta.json": "the checkpoint's metadata",
}


@pytest.mark.parametrize("name", sorted(FILES))
def test_a_flipped_bit_in_any_checkpoint_file_is_an_error_naming_it(
    trained, tmp_path, name: str
) -> None:
    d = _place(trained["new"], tmp_path / "ck")
    f = d / name
    _flip(f)
    words = rf"{re.escape(str(f))}: cannot read {re.escape(FILES[name])}: checksum mismatch: "
    words += "the file is corrupt"
    with pytest.raises(ConfigError, match=words):
        load_checkpoint(d)
    if name in ("model.zip", "meta.json"):  # what evaluation reads
        with pytest.raises(ConfigError, match=words):
            load_policy(d)
    else:  # evaluation reads only model.zip and meta.json: the rest does not stop it
        load_policy(d)
    # resume= names why, and there is no other checkpoint to fall back on
    with pytest.raises(ConfigError, match=r"no complete checkpoint there \(.*checksum mismatch"):
        find_checkpoint(d)


def test_a_missing_file_of_the_manifest_is_an_error_naming_it(trained, tmp_path) -> None:
    d = _place(trained["new"], tmp_path / "ck")
    (d / "replay.npz").unlink()
    with pytest.raises(ConfigError, match=re.escape(f"{d / 'replay.npz'}: cannot read the replay")):
        load_checkpoint(d)


def test_resume_falls_back_to_the_newest_complete_sibling(trained, tmp_path) -> None:
    """Named ``latest`` is corrupt: resume= takes the newest complete of latest.prev and the
    latest.tmp-* that hold a complete save; an unfinished save (no manifest) never counts,
    however many decisions its meta.json claims."""
    ckpts = tmp_path / "run" / "checkpoints"
    latest = _place(trained["new"], ckpts / "latest")
    _flip(latest / "model.zip")
    _place(trained["old"], ckpts / "latest.prev")
    _place(trained["old"], ckpts / "latest.tmp-11")
    _place(trained["new"], ckpts / "latest.tmp-12")
    unfinished = _place(trained["new"], ckpts / "latest.tmp-13")
    (unfinished / MANIFEST).unlink()
    found, note = find_checkpoint(latest)
    assert found == ckpts / "latest.tmp-12"
    assert (
        note is not None and "checksum mismatch" in note and "latest.tmp-12 (128 decisions)" in note
    )
    assert note.count("\n") == 0
    # with latest.tmp-12 gone, latest.prev and latest.tmp-11 tie (64): the .prev is taken
    shutil.rmtree(found)
    assert find_checkpoint(latest)[0] == ckpts / "latest.prev"
    # a run directory or its checkpoints/ directory: the newest complete checkpoint in it
    _place(trained["new"], ckpts / "final")
    for where in (tmp_path / "run", ckpts):
        found, note = find_checkpoint(where)
        assert found == ckpts / "final"  # 128, as latest.tmp-12 was; final, not latest.tmp-*
        assert note == f"resume={where}: resuming from {found} (128 decisions)"
    # nothing complete: one error saying why
    with pytest.raises(ConfigError, match="no complete checkpoint there"):
        find_checkpoint(tmp_path / "nowhere")


def test_a_checkpoint_from_before_manifests_still_loads(trained, tmp_path) -> None:
    d = _place(trained["new"], tmp_path / "old_style")
    (d / MANIFEST).unlink()
    assert load_checkpoint(d).num_timesteps == 128
    assert find_checkpoint(d) == (d, None)
    load_policy(d)


def test_copy_checkpoint_is_a_verified_copy(trained, tmp_path) -> None:
    d = ck.copy_checkpoint(trained["new"], tmp_path / "latest")
    assert (d / MANIFEST).read_bytes() == (trained["new"] / MANIFEST).read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest"]
    assert load_checkpoint(d).num_timesteps == 128


# --------------------------------------------------------------------------- policy.pt


def _policy_pt(tmp_path: Path) -> Path:
    from agents.policy import DL2Policy, policy_kwargs
    from envs.gym.factory import make_env

    th.manual_seed(0)
    env = make_env(TINY)
    policy = DL2Policy(
        env.observation_space, env.action_space, lambda _: 1e-4, **policy_kwargs(None, env.J)
    )
    return save_policy_weights(policy, tmp_path / "policy.pt", {"env": TINY.as_dict()})


def _first_weight_offset(pt: Path) -> int:
    """Where the first tensor's bytes start in a torch zip (its members are stored)."""
    with zipfile.ZipFile(pt) as z:
        info = next(i for i in z.infolist() if re.search(r"/data/0$", i.filename))
        assert info.compress_type == zipfile.ZIP_STORED
    raw = pt.read_bytes()
    name_len, extra_len = int.from_bytes(raw[info.header_offset + 26 : info.header_offset + 28],
                                         "little"), int.from_bytes(
        raw[info.header_offset + 28 : info.header_offset + 30], "little")  # fmt: skip
    return info.header_offset + 30 + name_len + extra_len


def test_a_flipped_bit_in_policy_pt_is_an_error_not_a_wrong_weight(tmp_path) -> None:
    """torch.load does not check its zip's CRCs: a flipped exponent bit of the first weight
    used to load as a weight of ~1e37.  policy.json records the .pt's SHA-256, so it is now
    an error naming the .pt."""
    pt = _policy_pt(tmp_path)
    meta = json.loads(pt.with_suffix(".json").read_text())
    assert meta["sha256"] == sha256_file(pt)
    good = next(iter(th.load(pt).values())).flatten()[0].item()
    _flip(pt, _first_weight_offset(pt) + 3, 0x40)  # the float32's top exponent bit
    bad = next(iter(th.load(pt).values())).flatten()[0].item()
    assert abs(bad) > 1e30 > abs(good)  # torch itself loads it silently
    with pytest.raises(
        ConfigError, match=re.escape(f"{pt}: checksum mismatch: the file is corrupt")
    ):
        load_policy(pt)
    with pytest.raises(ConfigError, match=re.escape(f"{pt}: checksum mismatch")):
        load_policy(tmp_path)  # the directory that holds it


def test_policy_json_without_sha256_still_loads_and_a_missing_one_is_named(tmp_path) -> None:
    pt = _policy_pt(tmp_path)
    js = pt.with_suffix(".json")
    meta = json.loads(js.read_text())
    del meta["sha256"]  # as the released policies' files (written before checksums)
    js.write_text(json.dumps(meta))
    load_policy(pt)
    js.unlink()
    with pytest.raises(
        ConfigError, match=re.escape(f"{js} (how to rebuild the policy) is missing")
    ):
        load_policy(pt)


def test_a_corrupt_cached_pretraining_stage_is_refused(tmp_path) -> None:
    from training.pretraining import _from_cache

    cached = tmp_path / "cache"
    pt = _policy_pt(cached)
    (cached / "summary.json").write_text("{}")
    _flip(pt, _first_weight_offset(pt))
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(ConfigError, match=re.escape(f"{pt}: checksum mismatch")):
        _from_cache(cached, out)
    assert not (out / "policy.pt").exists()


# --------------------------------------------------------------------------- policy.npz, replay


def test_a_flipped_byte_in_a_plan_policy_npz_is_an_error(tmp_path) -> None:
    """numpy's zip keeps a CRC of each array: a flipped byte in the weights is an error naming
    the file (not a silent load)."""
    from agents.episode_pg import MaskedMLP, load_episode_pg, save_episode_pg
    from envs.gym.plan_env import PlanEnv

    env = PlanEnv(config=TINY)
    th.manual_seed(0)
    net = MaskedMLP(env.obs_size, env.K, 16)
    path = save_episode_pg(tmp_path / "policy.npz", net, env, {"seed": 0})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy.npz"]  # no temporary left
    with zipfile.ZipFile(path) as z:
        info = z.getinfo("net.0.weight.npy")
    raw = path.read_bytes()
    start = info.header_offset + 30 + int.from_bytes(raw[info.header_offset + 26 :][:2], "little")
    start += int.from_bytes(raw[info.header_offset + 28 :][:2], "little")
    _flip(path, start + info.file_size - 5)  # inside the array's data, past its header
    with pytest.raises(ConfigError, match=re.escape(f"{path}: cannot read the saved policy")):
        load_episode_pg(path)


def test_replay_save_is_atomic(tmp_path, monkeypatch) -> None:
    """A replay save that fails half-way leaves the previous file as it was."""
    from agents.replay import ReplayBuffer

    buf = ReplayBuffer(ReplayConfig(capacity=8, batch_size=2), obs_dim=3, n_actions=2)
    path = tmp_path / "replay.npz"
    buf.save(path)
    before = path.read_bytes()

    def boom(f: Any, **arrays: Any) -> None:
        f.write(b"PK half a zip")
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez_compressed", boom)
    with pytest.raises(KeyboardInterrupt):
        buf.save(path)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["replay.npz"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_stop_during_a_save_takes_effect_once_the_save_is_complete(
    trained, tmp_path, monkeypatch, sig: signal.Signals
) -> None:
    """Ctrl-C or SIGTERM (under train.py's handler) arriving while model.zip is being written:
    a zip writer stopped half-way raises its own ValueError, so the stop waits for the save;
    then KeyboardInterrupt, with the new checkpoint complete and nothing left beside it."""
    from envs.files import sigterm_as_interrupt

    d = _place(trained["old"], tmp_path / "latest")
    save = th.save
    sent: list[int] = []

    def stopped(obj: Any, f: Any, *args: Any, **kw: Any) -> None:
        if not sent:  # the first torch write: inside SB3's model.zip
            sent.append(sig)
            os.kill(os.getpid(), sig)
        save(obj, f, *args, **kw)

    monkeypatch.setattr(th, "save", stopped)
    # Ctrl-C as in a terminal, even where this test runs with SIGINT ignored (a background job)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with sigterm_as_interrupt(), pytest.raises(KeyboardInterrupt):
            save_checkpoint(trained["model"], d, META)
    finally:
        signal.signal(signal.SIGINT, before)
    monkeypatch.undo()
    assert sent == [sig]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest"]
    assert find_checkpoint(d) == (d, None)
    assert load_checkpoint(d).num_timesteps == 128
