"""The head-to-head evaluation behind ``evaluate.py``: schedulers x workload seeds -> tables.

Modules (imports point downward):

- :mod:`evaluation.pipeline` — validate, plan, run, summarise, write the run directory;
- :mod:`evaluation.runner` — run the tasks here, in a process pool or as Ray tasks on a
  cluster (``runner=ray``), with a tqdm progress bar;
- :mod:`evaluation.kinds` — the scheduler-kind registry (:data:`SCHEDULER_KINDS`,
  :func:`register_scheduler_kind`) and the ``stack:`` and ``elastic:`` kinds;
- :mod:`evaluation.policy` — the ``policy:<checkpoint>`` kind (a trained DL²-style policy);
- :mod:`evaluation.env_runs` — env mode: elastic schedulers through the DL² Gymnasium env;
- :mod:`evaluation.runs` — the kind contract (``RunTask`` -> ``RunOutput``);
- :mod:`evaluation.workloads` — each seed's workload, the cluster and the simulator config;
- :mod:`evaluation.stats` — per-run metrics, means with 95% CIs, paired differences;
- :mod:`evaluation.heldout` — paired held-out comparisons of heuristics and learned policies
  through the env (the experiments' ``headroom`` and ``heldout_eval``);
- :mod:`evaluation.report` — Markdown/CSV tables, per-job CSVs, plots;
- :mod:`evaluation.config` — the config schema (``conf/evaluate.yaml``).

**Schedulers.**  ``<kind>:<argument>``; a name with no registered kind prefix is a
contention-engine stack (``lwf1_adasrsf``, ``fifo:lwf4_srsf2``, see ``envs/sim/stacks.py``):
``stack:<name>``, ``elastic:<allocator>`` (a name of the one allocator registry,
:data:`envs.sim.elastic.allocators.ALLOCATORS`: ``drf``, ``fifo``, ``srtf``, ``tetris``,
``optimus``, ``esrtf``, ``fixed``, ``bundle``, ``adasrsf``, ``tiresias``; settings under
``elastic.*``) and ``policy:<path>`` (a checkpoint directory, a
``model.zip`` or a pretraining ``policy.pt``; ``policy_eval.deterministic``,
``policy_eval.sample_seed``).

**Workloads** (``workload.kind``): ``ada_srsf_builtin``, ``ada_srsf_csv``, ``generator``,
``trace`` (any layout of :mod:`envs.sim.traces`: normalised CSV, Philly digest / JSON,
Alibaba GPU 2023, Helios, Tiresias; windowing, scaling and repairs under
``workload.trace.*``), ``philly_builtin`` (the shipped 200-job Philly slice), ``dl2``
(DL²'s generator; elastic schedulers only) and ``env`` (the DL² Gymnasium env's own
workload, ``workload.env.*``; elastic and policy schedulers only).

**Env mode.**  A policy sees only the env's window of ``J`` jobs, placed by the env's rule;
``elastic:`` on the slot simulator sees every job.  So when a ``policy:`` scheduler is present,
``elastic.through_env=true``, or the workload kind is ``env``, every elastic scheduler runs
through the same env on the same seeds (:mod:`evaluation.env_runs`).  A job still unfinished
at the env's horizon counts as finishing there: the run's ``censored_jobs`` column says how
many, ``summary.md`` lists such runs, and their seeds are left out of the means and paired
differences (the JCTs are lower bounds).  With ``workload.env.trace`` the default horizon runs
``max_slots`` past the trace's last arrival.

**Run directory:** ``summary.md`` / ``summary.csv`` (one row per scheduler and seed, plus
mean and 95% CI rows over seeds), ``paired.csv`` (differences against ``baseline`` on the same
seed), ``jobs_<scheduler>_seed<k>.csv`` (one row per job: submit, start, finish, JCT,
queueing delay, ideal run time, slowdown; ``:`` and ``/`` in names become ``-``),
``jct_cdf.png``, ``utilisation.png`` and ``utilisation.csv`` (GPU utilisation over time),
``run.json`` (resolved config, versions, git commit, the workload record — rows read,
repaired, skipped and why, every windowing step and conversion rule — and each run's
settings) and Hydra's ``.hydra/``.

Times are seconds: sim ms / 1000, or for traces sim ms / ``time_unit`` (trace seconds); elastic
runs: slots x ``slot_s``.  The Ada-SRSF workloads at their shipped 1/100 scale also get
"paper s" columns (sim ms / 10).
"""
