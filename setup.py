"""Build the optional native event loop (``envs.sim._native``).

Everything else is configured in ``pyproject.toml``.  The extension is optional: without a C
compiler the install still succeeds and ``envs.sim`` runs its pure-Python engine.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "envs.sim._native",
            ["envs/sim/_native.c"],
            # no fused multiply-add: results must round exactly as the Python engine's
            extra_compile_args=["-O2", "-ffp-contract=off", "-fno-fast-math"],
            optional=True,
        )
    ]
)
