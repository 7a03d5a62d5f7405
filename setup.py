"""Build the optional native event loop (``envs.sim._native``).

Everything else is configured in ``pyproject.toml``.  The extension is optional: without a C
compiler the install still succeeds and ``envs.sim`` runs its pure-Python engine.
"""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "envs/sim/_native.c"
# recorded in the module, so that envs.sim.native can tell a build of an older source
SHA = hashlib.sha256((Path(__file__).parent / SOURCE).read_bytes()).hexdigest()

setup(
    ext_modules=[
        Extension(
            "envs.sim._native",
            [SOURCE],
            define_macros=[("DLSCHED_SOURCE_SHA256", f'"{SHA}"')],
            # no fused multiply-add: results must round exactly as the Python engine's
            extra_compile_args=["-O2", "-ffp-contract=off", "-fno-fast-math"],
            optional=True,
        )
    ]
)
