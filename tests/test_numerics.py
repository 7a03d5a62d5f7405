"""Portable floating point (:mod:`envs.numerics`): the entry points ask PyTorch and MKL for
the paths every x86-64 processor runs the same way, a user's own settings win, the opt-out
works, and under those settings a learner's step gives the same bits whatever MKL may use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envs import numerics

ROOT = Path(__file__).resolve().parents[1]


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in numerics.PORTABLE}
    env.pop(numerics.OPT_OUT, None)
    env.update(extra)
    return env


def test_use_portable_sets_what_is_unset_and_keeps_the_users(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in numerics.PORTABLE:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv(numerics.OPT_OUT, raising=False)
    assert numerics.use_portable() == numerics.PORTABLE
    assert os.environ["ATEN_CPU_CAPABILITY"] == "default"
    assert os.environ["MKL_CBWR"] == "COMPATIBLE"
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")  # the user's choice wins
    assert numerics.use_portable()["ATEN_CPU_CAPABILITY"] == "avx2"
    rec = numerics.record()
    assert rec["ATEN_CPU_CAPABILITY"] == "avx2" and rec["MKL_CBWR"] == "COMPATIBLE"


def test_opt_out_leaves_the_environment_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in numerics.PORTABLE:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(numerics.OPT_OUT, "1")
    assert numerics.use_portable() == {}
    assert not any(os.environ.get(name) for name in numerics.PORTABLE)
    rec = numerics.record()
    assert rec["ATEN_CPU_CAPABILITY"] is None and rec["MKL_CBWR"] is None
    assert rec["portable"] is False


def _run(code: str, *args: str, **env: str) -> dict[str, Any]:
    """``python -c code args`` from the repository root, in an environment without the
    settings (plus ``env``); the JSON object its last line prints."""
    out = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=ROOT,
        env=_clean_env(**env),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    got: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return got


_STATE = """
def state():
    import os, torch
    return {"aten": os.environ.get("ATEN_CPU_CAPABILITY"), "cbwr": os.environ.get("MKL_CBWR"),
            "capability": torch.backends.cpu.get_cpu_capability()}
"""
_PORTABLE = {"aten": "default", "cbwr": "COMPATIBLE", "capability": "DEFAULT"}

_PROBE = (
    _STATE
    + """
import importlib, json, sys
importlib.import_module(sys.argv[1])
print(json.dumps(state()))
"""
)


@pytest.mark.parametrize("module", ["train", "evaluate", "pretrain.__main__"])
def test_entry_points_ask_for_the_portable_paths(module: str) -> None:
    """Importing an entry point (as running it does, before anything runs) from an
    environment without the settings leaves torch on its default kernels and MKL on its
    compatible path; with the opt-out, on the machine's own."""
    assert _run(_PROBE, module) == _PORTABLE
    if module == "train":
        got = _run(_PROBE, module, **{numerics.OPT_OUT: "1"})
        assert got["aten"] is None and got["cbwr"] is None


_FACADE = """
import json, os, sys
import dlsched
light = not any(os.environ.get(k) for k in ("ATEN_CPU_CAPABILITY", "MKL_CBWR"))
light = light and "torch" not in sys.modules
name, path = sorted(dlsched.released_policies().items())[0]
dlsched.load_policy(path)
import torch
print(json.dumps({"light": light, "aten": os.environ.get("ATEN_CPU_CAPABILITY"),
                  "cbwr": os.environ.get("MKL_CBWR"),
                  "capability": torch.backends.cpu.get_cpu_capability()}))
"""


def test_the_facade_asks_for_them_before_loading_a_policy() -> None:
    """``import dlsched`` stays light (nothing set, torch not imported); loading a policy
    through it asks for the portable paths first."""
    assert _run(_FACADE) == {"light": True, **_PORTABLE}


_STEP = """
import hashlib, json, sys
import numpy as np
import torch
from envs.numerics import use_portable
use_portable()
torch.set_num_threads(1)
torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(37, 128), torch.nn.Tanh(), torch.nn.Linear(128, 128),
                          torch.nn.Tanh(), torch.nn.Linear(128, 9))
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
x = torch.as_tensor(np.random.default_rng(1).standard_normal((256, 37)), dtype=torch.float32)
for _ in range(5):
    loss = torch.log_softmax(net(x), dim=1)[:, 3].mean() ** 2
    opt.zero_grad(); loss.backward(); opt.step()
h = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in net.parameters()))
print(json.dumps({"digest": h.hexdigest(), "capability": torch.backends.cpu.get_cpu_capability()}))
"""


def _step(**extra: str) -> dict[str, Any]:
    return _run(_STEP, **extra)


def _has(flag: str) -> bool:
    try:
        return flag in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def test_a_learner_step_on_the_portable_path() -> None:
    """Five Adam steps of the plan policy's network shape.  PyTorch's vectorised kernels give
    other bits than its default ones (what the portable path removes: a machine with other
    instruction sets would get those); on the portable path the bits do not move when MKL is
    limited to narrower instructions (on an Intel processor MKL picks its code by them;
    elsewhere it keeps one path and this part holds trivially)."""
    portable = _step()
    assert portable["capability"] == "DEFAULT"
    for limit in ("SSE4_2", "AVX2"):
        assert _step(MKL_ENABLE_INSTRUCTIONS=limit)["digest"] == portable["digest"]
    if not _has(" avx2"):
        pytest.skip("no AVX2 here: PyTorch has no vectorised kernels to compare with")
    vectorised = _step(ATEN_CPU_CAPABILITY="avx2")
    assert vectorised["capability"] == "AVX2" and vectorised["digest"] != portable["digest"]
