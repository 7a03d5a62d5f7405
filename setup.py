"""Build the optional native code: the event loop (``envs.sim._native``) and the slot
allocators of the elastic world (``envs.sim.elastic._alloc_native``).

Everything else is configured in ``pyproject.toml``.  The extensions are optional: without a C
compiler the install still succeeds and ``envs.sim`` runs its pure-Python code.
"""

import hashlib
from pathlib import Path

from setuptools import Extension, setup


def _extension(name: str, source: str) -> Extension:
    # the source's hash is recorded in the module, so that the Python side can tell a build
    # of an older source (envs.sim.native, envs.sim.elastic.native_alloc)
    sha = hashlib.sha256((Path(__file__).parent / source).read_bytes()).hexdigest()
    return Extension(
        name,
        [source],
        define_macros=[("DLSCHED_SOURCE_SHA256", f'"{sha}"')],
        # no fused multiply-add: results must round exactly as the Python code's
        extra_compile_args=["-O2", "-ffp-contract=off", "-fno-fast-math"],
        optional=True,
    )


setup(
    ext_modules=[
        _extension("envs.sim._native", "envs/sim/_native.c"),
        _extension("envs.sim.elastic._alloc_native", "envs/sim/elastic/_alloc_native.c"),
    ]
)
