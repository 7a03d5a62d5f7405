"""DL²'s elastic world: jobs whose workers and parameter servers are re-decided every time
slot by an allocator, with training speed from a speed model (DL²'s measured table).

Units here follow DL²: time in slots of ``slot_s`` seconds, work in epochs, resources in
per-node CPU and GPU slots.  Standard library + numpy only, like the rest of ``envs.sim``.
"""

# The allocator registry (ALLOCATORS, ALIASES) is filled where each allocator class is defined;
# importing the allocators here makes it complete (and in its order) whichever submodule is
# imported first.
from envs.sim.elastic import allocators as _allocators  # noqa: F401
