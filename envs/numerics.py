"""Portable floating point for the learners: the same bits on every x86-64 machine.

PyTorch picks its CPU kernels when it first runs one, by the instruction sets the machine has
(``torch.backends.cpu.get_cpu_capability()``: AVX512, AVX2 or the default), and MKL, which
does its matrix products, picks its code path by processor too.  Their sums and
transcendental functions differ in the last bits from one path to the next, and a learner
amplifies those bits: ``make demo`` ended at 68.80 slots on an AVX512 machine, 69.62 with
PyTorch's AVX2 kernels and 68.09 on the previous sessions' machine, from the same commit and
seed.  A figure that a paper quotes should not depend on the reader's processor.

:func:`use_portable` asks both for the one path every x86-64 processor runs the same way:
``ATEN_CPU_CAPABILITY=default`` (PyTorch's kernels compiled for the baseline instruction set)
and ``MKL_CBWR=COMPATIBLE`` (MKL's conditional numerical reproducibility, the same results on
any x86 processor for a given thread count; ``torch_threads`` is 1 by default).  It costs
about a fifth of the training time of ``make demo`` (25 s against 21 s) and nothing in the
simulator, which does not use torch.  Measured on one AVX512 machine, the demo's curve with
these two settings did not change when MKL was limited to SSE4.2
(``MKL_ENABLE_INSTRUCTIONS=SSE4_2``), OpenBLAS to Haswell kernels
(``OPENBLAS_CORETYPE=Haswell``) or numpy to its baseline (``NPY_DISABLE_CPU_FEATURES``); it
did change with PyTorch's AVX2 kernels, hence the first setting.

The entry points call :func:`use_portable` before they run anything (``train.py``,
``evaluate.py``, ``python -m pretrain``, the ``dlsched`` facade's ``simulate``, ``evaluate``
and ``load_policy``, and the test suite), so a
subprocess, a rollout worker and a Ray worker started from them inherit it.  It must run
before PyTorch runs its first kernel, which fixes the capability for the process: it only
sets what the environment does not already set (a user's ``ATEN_CPU_CAPABILITY=avx512``
wins), and ``DLSCHED_NATIVE_NUMERICS=1`` switches it off (the machine's fastest paths,
results tied to the processor).  :func:`record` is what ``run.json`` keeps of it
(``numerics``), the capability PyTorch actually uses included.

Standard library only: nothing here imports torch.
"""

from __future__ import annotations

import os
import sys
from typing import Any

__all__ = ["OPT_OUT", "PORTABLE", "record", "use_portable"]

#: The environment variables of the portable path and their values.
PORTABLE: dict[str, str] = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}
#: Set to ``1`` to keep the machine's fastest (processor-dependent) paths.
OPT_OUT = "DLSCHED_NATIVE_NUMERICS"


def use_portable() -> dict[str, str]:
    """Set :data:`PORTABLE` in ``os.environ`` where unset (nothing when ``OPT_OUT`` is 1);
    the values of its variables now in effect (unset ones left out)."""
    if os.environ.get(OPT_OUT, "").strip() != "1":
        for name, value in PORTABLE.items():
            if not os.environ.get(name):
                os.environ[name] = value
    return {name: os.environ[name] for name in PORTABLE if os.environ.get(name)}


def record() -> dict[str, Any]:
    """What a run record keeps: the variables of :data:`PORTABLE` (``None`` where unset),
    whether they are PyTorch's and MKL's portable paths (``portable``), and PyTorch's CPU
    capability in use (``torch_cpu_capability``; ``None`` if this process has not imported
    torch, so as not to fix the capability by asking)."""
    values: dict[str, Any] = {name: os.environ.get(name) or None for name in PORTABLE}
    capability = None
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            capability = str(torch.backends.cpu.get_cpu_capability())
        except (AttributeError, RuntimeError):  # pragma: no cover - an older torch
            capability = None
    portable = (
        str(values["MKL_CBWR"] or "").upper().startswith("COMPATIBLE")
        and (capability or str(values["ATEN_CPU_CAPABILITY"] or "")).upper() == "DEFAULT"
    )
    return {**values, "torch_cpu_capability": capability, "portable": portable}
