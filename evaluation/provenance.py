"""What produced an evaluation run (``run.json``): :func:`envs.provenance.provenance`, the one
provenance of every record the project writes (``git_commit``, ``git_dirty``, ``versions``,
``command``; training's ``run.json`` carries the same keys through :mod:`training.runinfo`)."""

from __future__ import annotations

from envs.provenance import provenance

__all__ = ["provenance"]
