"""The head-to-head evaluation behind ``evaluate.py``: schedulers x workload seeds -> tables.

Why a package: ``evaluate.py`` stays a thin Hydra entry point, and the pipeline can be called
from Python without Hydra.  Modules (imports point downward):

- :mod:`evaluation.pipeline` — validate, plan, run, summarise, write the run directory;
  :mod:`evaluation.runner` — a process pool or Ray tasks (``runner=ray``), tqdm progress;
- :mod:`evaluation.kinds` — the scheduler-kind registry (:data:`SCHEDULER_KINDS`,
  :func:`register_scheduler_kind`) and the ``stack:`` and ``elastic:`` kinds;
  :mod:`evaluation.policy` — ``policy:<checkpoint>`` (a trained DL²-style policy);
  :mod:`evaluation.contention` — ``contention:<policy>`` (Contention-v0) and ``bound:solo``;
  :mod:`evaluation.env_runs` — env mode: elastic schedulers through the DL² Gymnasium env;
  :mod:`evaluation.runs` — the kind contract (``RunTask`` -> ``RunOutput``);
- :mod:`evaluation.workloads` — each seed's workload, the cluster and the simulator config;
  :mod:`evaluation.stats` — per-run metrics, means with 95% CIs, paired differences;
  :mod:`evaluation.heldout` — paired held-out comparisons of heuristics and learned policies
  through the env (the experiments' ``headroom`` and ``heldout_eval``);
  :mod:`evaluation.report` — Markdown/CSV tables, per-job CSVs, plots;
  :mod:`evaluation.config` — the config schema (``conf/evaluate.yaml``).

Details (scheduler specs, workload kinds, env mode, run directory, units):
docs/design/evaluation.md#scheduler-specs-workload-kinds-and-the-run-directory
"""
