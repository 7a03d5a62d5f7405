"""An evaluation's run directory: one run at a time, never two runs' files mixed, resumable.

* A lock (:class:`envs.files.RunLock`) stops a second run sharing the directory.
* A directory that already holds files is refused unless the run **resumes** it
  (``resume=true``: the runs it finished are kept and only the missing ones run) or
  **overwrites** it (``overwrite=true``: its files are removed first).  Either needs the
  directory to be an evaluation's (``run.json``, ``summary.md`` or ``.runs/``): dlsched never
  deletes or mixes into a folder it did not write.
* Each finished run is recorded in ``.runs/<scheduler>_seed<k>.pkl`` (written atomically,
  after its per-job CSV), with the config it ran under; a resume checks that the config is the
  same (but for keys that do not change a run's result) and names the keys that differ.
* ``summary.md`` and ``run.json`` describe a complete run only: a resume removes the old ones
  first, and the pipeline writes ``summary.md`` last.
"""

from __future__ import annotations

import pickle
import shutil
import sys
from pathlib import Path
from typing import Any

from envs.files import RunLock, os_error, write_bytes, write_json
from envs.sim import ConfigError
from evaluation.report import safe_name
from evaluation.runs import RunOutput, RunTask

__all__ = ["RunDir", "run_key"]

#: Config keys that never change one run's result (how many workers, where, what is plotted,
#: which other schedulers and seeds are in the table): a resume may change them.
FREE_KEYS = frozenset(
    {"out_dir", "resume", "overwrite", "workers", "runner", "progress_s", "max_wall_s", "plot",
     "seeds", "stacks", "baseline"}
)  # fmt: skip
#: What marks a directory as an evaluation's.
MARKERS = ("run.json", "summary.md", ".runs")
RECORDS = ".runs"
#: Hydra's own record of this command and the lock: present in a directory this run just made.
OWN = frozenset({".hydra", RunLock.NAME})


def run_key(scheduler: str, seed: int) -> str:
    """The file name of a run's record."""
    return f"{safe_name(scheduler)}_seed{seed}.pkl"


def _diff(old: Any, new: Any, prefix: str = "") -> list[str]:
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[str] = []
        for k in sorted(set(old) | set(new), key=str):
            out += _diff(old.get(k), new.get(k), f"{prefix}{k}.")
        return out
    return [] if old == new else [prefix.rstrip(".")]


class RunDir:
    """Open with :meth:`open` (takes the lock, checks or prepares the directory), then
    :meth:`finished` gives the runs a resume keeps, :meth:`record` saves each new run, and
    :meth:`close` drops the lock."""

    def __init__(self, path: Path, config: dict[str, Any], resume: bool, overwrite: bool) -> None:
        if resume and overwrite:
            raise ConfigError("resume=true and overwrite=true contradict each other: choose one")
        self.path = path
        self.config = {k: v for k, v in config.items() if k not in FREE_KEYS}
        self.resume = resume
        self.overwrite = overwrite
        self.lock = RunLock(path)
        self.kept = 0

    def _theirs(self) -> list[Path]:
        return sorted(p for p in self.path.iterdir() if p.name not in OWN)

    def open(self) -> RunDir:
        self.lock.acquire()
        try:
            self._prepare()
        except BaseException:
            self.lock.release()
            raise
        return self

    def _prepare(self) -> None:
        theirs = self._theirs()
        if theirs and not (self.resume or self.overwrite):
            names = ", ".join(p.name for p in theirs[:4]) + (", ..." if len(theirs) > 4 else "")
            raise ConfigError(
                f"out_dir {self.path} already holds files ({names}); add resume=true to finish "
                "the runs it lacks, overwrite=true to start it afresh, or choose another out_dir"
            )
        if theirs and not any((self.path / m).exists() for m in MARKERS):
            raise ConfigError(
                f"out_dir {self.path} holds files but is not an evaluation's run directory "
                f"(no {', '.join(MARKERS)}): dlsched will not "
                + ("resume into" if self.resume else "overwrite")
                + " it; choose another out_dir"
            )
        records = self.path / RECORDS
        try:
            if self.overwrite:
                for p in theirs:
                    shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
                if theirs:
                    print(f"overwrite: removed {len(theirs)} file(s) of the earlier run in "
                          f"{self.path}", file=sys.stderr)  # fmt: skip
            elif self.resume:
                saved = records / "config.json"
                if saved.is_file():
                    import json

                    old = json.loads(saved.read_text())
                    changed = _diff(old, json.loads(json.dumps(self.config, default=str)))
                    if changed:
                        raise ConfigError(
                            f"resume=true: {self.path} was run with another config "
                            f"({', '.join(changed[:6])} differ); resume with the same settings "
                            "or use overwrite=true"
                        )
                for stale in ("summary.md", "run.json"):  # they describe an earlier state
                    (self.path / stale).unlink(missing_ok=True)
            records.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise os_error(self.path, exc, "prepare") from None
        write_json(records / "config.json", self.config)

    def finished(self, tasks: list[RunTask]) -> dict[int, RunOutput]:
        """The runs of ``tasks`` (by index) a resume keeps: those with a readable record."""
        if not self.resume:
            return {}
        kept: dict[int, RunOutput] = {}
        for i, task in enumerate(tasks):
            p = self.path / RECORDS / run_key(task.scheduler, task.prepared.seed)
            if not p.is_file():
                continue
            try:
                out = pickle.loads(p.read_bytes())
            except Exception:  # a record we cannot read: run it again
                continue
            if isinstance(out, RunOutput) and out.scheduler == task.scheduler:
                kept[i] = out
        self.kept = len(kept)
        if tasks:
            print(
                f"resume: {len(kept)} of {len(tasks)} runs already finished in {self.path} "
                f"(kept); running the {len(tasks) - len(kept)} missing",
                file=sys.stderr,
            )
        return kept

    def saved(self, tasks: list[RunTask]) -> int:
        """How many of ``tasks`` have a record on disk (a resume would keep them)."""
        return sum(
            (self.path / RECORDS / run_key(t.scheduler, t.prepared.seed)).is_file() for t in tasks
        )

    def record(self, out: RunOutput) -> None:
        """Save a finished run's output (after its per-job CSV: the record marks it done)."""
        write_bytes(self.path / RECORDS / run_key(out.scheduler, out.seed), pickle.dumps(out))

    def close(self) -> None:
        self.lock.release()
