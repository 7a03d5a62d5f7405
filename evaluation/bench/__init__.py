"""dlsched-bench: a frozen, versioned suite of scenarios (:mod:`.scenarios`), run cell by cell
with a cache (:mod:`.run`), and its leaderboard (:mod:`.board`).  ``python -m evaluation.bench``
(``docs/bench.md``)."""

from evaluation.bench.scenarios import SUITES, V1, Scenario, suite_version

__all__ = ["SUITES", "V1", "Scenario", "suite_version"]
