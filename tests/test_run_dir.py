"""``evaluate.py``'s run directory cannot mix two runs (refused, locked, resumed or overwritten
on purpose), its artifacts are atomic with ``summary.md`` last, and config typos are refused
(issue "nothing lost, nothing left running")."""

from __future__ import annotations

import csv
import errno
import os
from pathlib import Path

import pytest

from envs import files
from envs.files import RunLock, atomic_path, write_text
from envs.sim import ConfigError
from evaluation.rundir import RunDir
from tests.cli import run_script

#: a fast evaluation: two DL² allocators on two seeds of DL²'s small setting, 20 jobs a
#: workload (60 by default; what these tests check does not depend on it)
FAST = [
    "workload=dl2",
    "workload.dl2.num_jobs=20",
    "cluster=dl2_small",
    "stacks=[elastic:drf,elastic:srtf]",
    "seeds=[0,1]",
    "plot=false",
    "workers=1",
]


def _table(run_dir: Path) -> list[dict[str, str]]:
    """``summary.csv`` without its wall-clock columns (the only ones that differ run to run)."""
    with (run_dir / "summary.csv").open() as f:
        return [
            {k: v for k, v in r.items() if not k.startswith("wall_s")} for r in csv.DictReader(f)
        ]


def _one_line_error(out: object, *parts: str) -> None:
    assert out.returncode == 2, out.stderr[-3000:]  # type: ignore[attr-defined]
    err = out.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in err
    for part in parts:
        assert part in err, err[-2000:]


# ----------------------------------------------------------------- atomic files and the lock


def test_atomic_write_leaves_the_old_file_when_the_writer_fails(tmp_path: Path) -> None:
    target = tmp_path / "summary.md"
    write_text(target, "old\n")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed while writing")
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["summary.md"]  # no temporary left


def test_a_full_disk_is_one_error_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def full(src: object, dst: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(files.os, "replace", full)
    with pytest.raises(ConfigError, match=r"cannot write .*run\.json: no space left .*disk full"):
        write_text(tmp_path / "run.json", "{}")
    assert list(tmp_path.iterdir()) == []


def test_atomic_files_get_the_usual_permissions(tmp_path: Path) -> None:
    p = write_text(tmp_path / "a.csv", "x\n")
    mask = os.umask(0)
    os.umask(mask)
    assert p.stat().st_mode & 0o777 == 0o666 & ~mask


def test_a_second_holder_of_the_lock_is_refused_with_the_first_pid(tmp_path: Path) -> None:
    busy = rf"in use by another run \(pid {os.getpid()}\)"
    with RunLock(tmp_path), pytest.raises(ConfigError, match=busy):
        RunLock(tmp_path).acquire()
    with RunLock(tmp_path):  # released: free again
        pass


# ---------------------------------------------------------------------------- RunDir rules


def test_rundir_refuses_a_foreign_folder_even_to_overwrite(tmp_path: Path) -> None:
    (tmp_path / "thesis.tex").write_text("precious")
    for resume, overwrite in [(False, False), (True, False), (False, True)]:
        with pytest.raises(ConfigError, match=r"already holds files|not an evaluation's"):
            RunDir(tmp_path, {}, resume, overwrite).open()
    assert (tmp_path / "thesis.tex").read_text() == "precious"


def test_rundir_resume_with_another_config_names_the_keys(tmp_path: Path) -> None:
    d = RunDir(tmp_path, {"mode": "correct", "seeds": [0]}, False, False).open()
    d.close()
    (tmp_path / "summary.md").write_text("done")
    with pytest.raises(ConfigError, match=r"another config \(mode differ"):
        RunDir(tmp_path, {"mode": "reference", "seeds": [0, 1]}, True, False).open()
    # seeds are free: a resume may add seeds
    RunDir(tmp_path, {"mode": "correct", "seeds": [0, 1]}, True, False).open().close()
    with pytest.raises(ConfigError, match="contradict"):
        RunDir(tmp_path, {}, True, True)


# ------------------------------------------------------------------------- evaluate.py runs


def test_second_run_into_a_used_out_dir_is_refused_resumed_or_overwritten(tmp_path: Path) -> None:
    out = tmp_path / "run"
    first = run_script("evaluate.py", *FAST, f"out_dir={out}")
    assert first.returncode == 0, first.stderr[-3000:]
    summary = _table(out)
    jobs = {p.name: p.read_bytes() for p in out.glob("jobs_*.csv")}
    assert len(jobs) == 4

    again = run_script("evaluate.py", *FAST, f"out_dir={out}")
    _one_line_error(again, f"out_dir {out} already holds files", "resume=true", "overwrite=true")
    assert _table(out) == summary  # the first run's results are intact

    # a run killed after 3 of 4 runs: the fourth's record and per-job file are missing
    (out / ".runs" / "elastic-srtf_seed1.pkl").unlink()
    (out / "jobs_elastic-srtf_seed1.csv").unlink()
    resumed = run_script("evaluate.py", *FAST, f"out_dir={out}", "resume=true")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resume: 3 of 4 runs already finished" in resumed.stderr
    assert "running the 1 missing" in resumed.stderr
    assert _table(out) == summary  # the same table as the whole run
    assert {p.name: p.read_bytes() for p in out.glob("jobs_*.csv")} == jobs

    (out / "stale_from_elsewhere.csv").write_text("x")
    fresh = run_script("evaluate.py", *FAST, f"out_dir={out}", "overwrite=true")
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    assert not (out / "stale_from_elsewhere.csv").exists()
    assert _table(out) == summary


def test_summary_md_is_written_last(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A disk that fills while the run's files are written: one error naming the file, and no
    ``summary.md`` that would read as a complete result."""
    from hydra import compose, initialize_config_dir

    import evaluate as cli

    real = files.os.replace

    def full_at_run_json(src: object, dst: object) -> None:
        if str(dst).endswith("run.json"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real(src, dst)  # type: ignore[arg-type]

    monkeypatch.setattr(files.os, "replace", full_at_run_json)
    conf = Path(cli.__file__).resolve().parent / "conf"
    with initialize_config_dir(config_dir=str(conf), version_base=None):
        dcfg = compose("evaluate", overrides=[*FAST[:-3], "seeds=[0]", "plot=false"])
    with pytest.raises(ConfigError, match=r"cannot write .*run\.json: no space left"):
        cli.evaluate(dcfg, tmp_path / "run")
    assert (tmp_path / "run" / "summary.csv").is_file()
    assert not (tmp_path / "run" / "summary.md").exists()


@pytest.mark.parametrize(
    ("args", "key"),
    [
        (["+max_wall=5"], "max_wall"),
        (["workload=trace", "workload.path=x.csv", "+workload.trace.max_job=5"],
         "workload.trace.max_job"),
    ],
)  # fmt: skip
def test_unknown_keys_are_refused_even_with_plus(tmp_path: Path, args: list[str], key: str) -> None:
    out = run_script("evaluate.py", *args, f"out_dir={tmp_path / 'run'}")
    _one_line_error(out, f"unknown config key '{key}'")
    assert not (tmp_path / "run").exists()


def test_an_empty_out_dir_is_refused(tmp_path: Path) -> None:
    out = run_script("evaluate.py", "out_dir=")
    _one_line_error(out, "out_dir is empty")


def test_an_unwritable_out_dir_is_one_line(tmp_path: Path) -> None:
    """Hydra would make the directory first and fail with an ``OSError`` traceback."""
    (tmp_path / "file").write_text("x")
    out = run_script("evaluate.py", f"out_dir={tmp_path / 'file' / 'run'}")
    _one_line_error(out, "error: cannot write to", "(out_dir)")
