"""DL²'s elastic world: jobs whose workers and parameter servers are re-decided every time
slot by an allocator, with training speed from a speed model (DL²'s measured table).

Units here follow DL²: time in slots of ``slot_s`` seconds, work in epochs, resources in
per-node CPU and GPU slots.  Standard library + numpy only, like the rest of ``envs.sim``.
"""
