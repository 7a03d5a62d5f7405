"""The training pipeline: the typed config of ``train.py`` and ``python -m pretrain``
(:mod:`training.config`), the pretraining stage with its cache (:mod:`training.pretraining`),
the RL run (:mod:`training.run`), its callbacks and logger (:mod:`training.callbacks`) and run
records (:mod:`training.runinfo`).

Layers (imports point downward only; ``tests/test_layers.py`` checks it):

- :mod:`envs` — the simulators and the Gymnasium envs;
- :mod:`agents` — learners, policies, rollouts, checkpoints of learned schedulers;
- :mod:`pretrain` — teacher datasets and behaviour cloning (into :mod:`agents`' policy);
- :mod:`training` (this package) and :mod:`evaluation` — the pipelines, siblings: neither
  imports the other;
- ``train.py``, ``evaluate.py``, ``python -m pretrain``, ``experiments/``, ``benchmarks/`` and
  ``tools/`` — entry points.
"""
