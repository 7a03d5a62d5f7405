"""Teacher datasets (:mod:`pretrain.dataset`: a heuristic's decisions through the env; a
teacher is any allocator of :data:`envs.sim.elastic.allocators.ALLOCATORS`) and behaviour
cloning into the agents' policy (:mod:`pretrain.bc`).  Imports :mod:`envs` and :mod:`agents`
only; the pretraining *stage* (caching, run outputs) and the ``python -m pretrain`` command's
config are the training pipeline's (:mod:`training.pretraining`, :mod:`training.config`):
``pretrain/__main__.py`` is an entry point above both, never imported by the package."""
