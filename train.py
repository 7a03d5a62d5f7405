"""``python train.py +agent=a2c``: RL fine-tuning of a DL²-style scheduler (Hydra).

Agents: ``a2c`` (DL²'s recipe: clone, then an actor-critic with a critic, job-aware exploration
and replay, over the slot's plan: agents/plan_a2c.py), ``a2c_increments`` (DL²'s actor-critic
in per-increment actions, SB3), ``reinforce``, ``ppo``, ``maskable_ppo``, ``gppo`` (the group
learner), ``plan_pg`` (one action per slot picks its allocator: training/plan.py);
groups ``env``, ``pretrain``, ``eval``, ``federated`` (see ``conf/train.yaml``).  Each run writes
``runs/<time>_train_<agent>/``: ``run.json``, TensorBoard events (``tb/``), the learning curve,
checkpoints and ``summary.json``.  ``-m`` sweeps, e.g. ``python train.py -m +agent=a2c,plan_pg
seed=0,1``, and then write one table of every job (``sweep.md`` and ``sweep.csv`` in the sweep
directory: :mod:`training.sweep`).

Ctrl-C, SIGTERM or SIGHUP stop a run cleanly: one line says what was saved (the newest
complete checkpoint, or that nothing was) and the command that resumes it, exit status 130;
a disk that is full or read-only is one line naming the file, exit status 2.
"""

from __future__ import annotations

import os
import signal
import sys


def _stopped_while_starting(signum: int, frame: object) -> None:
    """Ctrl-C or SIGTERM while Python imports the project: nothing has run, nothing to keep."""
    name = signal.Signals(signum).name
    print(f"train.py: interrupted ({name}) while starting; nothing was run", file=sys.stderr)
    os._exit(130)


if __name__ == "__main__":  # until the run takes over: a quiet exit, not a traceback
    for _sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(_sig, _stopped_while_starting)

import errno  # after the handlers above
import json
import shlex
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from envs.files import RunLock, os_error, sigterm_as_interrupt
from envs.numerics import use_portable
from training.config import register_configs

CONF = Path(__file__).resolve().parent / "conf"
use_portable()  # before torch runs a kernel: the same bits on every x86-64 machine
register_configs()


def _agents() -> list[str]:
    return sorted(p.stem for p in (CONF / "agent").glob("*.yaml"))


def _report(out: Path, cfg: DictConfig, summary: dict[str, object]) -> str:
    """The learning curve and the final validation table (markdown) of a finished run."""
    import csv

    from evaluation.report import github_table

    def _markdown_table(cells: list[list[str]], head: list[str]) -> str:
        return github_table(cells, head, ["left"] + ["right"] * (len(head) - 1))

    mode = "sampled" if cfg.eval.deterministic is False else "argmax"
    mode = str(summary.get("act", mode))  # a pipeline that always acts one way says so
    unit = str(summary.get("unit", "slots"))  # the avg JCT's (contention_pg: seconds)
    lines = [f"\nValidation workloads (seeds {list(cfg.eval.seeds)}, learned policy {mode}):\n"]
    curve = out / "learning_curve.csv"
    if curve.is_file():
        rows = list(csv.DictReader(curve.open()))
        if rows and "iteration" in rows[0]:  # plan_pg: iterations of one decision per slot
            what = str(summary.get("decisions_are", "slots planned"))
            head = ["iteration", f"decisions ({what})", f"avg JCT ({unit})"]
            cells = [
                [r["iteration"], f"{float(r['timesteps']):,.0f}", f"{float(r['avg_jct']):.2f}"]
                for r in rows
            ]
        else:
            head = ["decisions", "avg JCT (slots)"]
            cells = [[f"{float(r['timesteps']):,.0f}", f"{float(r['avg_jct']):.2f}"] for r in rows]
        lines += [_markdown_table(cells, head), ""]
    final = summary["final"]
    assert isinstance(final, dict)
    table = {"learned (final)": float(final["avg_jct"])}
    clone = summary.get("clone_avg_jct")
    if isinstance(clone, int | float):
        table["clone (before RL)"] = float(clone)
    best = summary.get("best")
    if isinstance(best, dict) and best.get("iteration") != final.get("iteration"):
        table[f"learned (best validation, iteration {best['iteration']})"] = float(best["avg_jct"])
    baselines = summary.get("baselines_avg_jct") or {}
    assert isinstance(baselines, dict)
    table.update({str(k): float(v) for k, v in baselines.items()})
    mine = table["learned (final)"]
    cells = [
        [name, f"{v:.2f}", "" if name.startswith("learned (") else f"{100 * (mine / v - 1):+.1f}%"]
        for name, v in sorted(table.items(), key=lambda kv: kv[1])
    ]
    lines.append(_markdown_table(cells, ["scheduler", f"avg JCT ({unit})", "learned vs it"]))
    clusters = summary.get("clusters")
    if isinstance(clusters, list) and clusters:  # federated plan runs: one row per cluster
        per_cluster: list[list[str]] = []
        for i, c in enumerate(clusters):
            base = c["baselines_avg_jct"]
            name, top = min(base.items(), key=lambda kv: kv[1])
            env = c.get("env") or {}
            label = f"{i}: {env.get('setting', '?')} {env.get('overrides') or ''}".strip()
            clone_jct = c.get("clone_avg_jct")
            per_cluster.append([
                label,
                "" if clone_jct is None else f"{clone_jct:.2f}",
                f"{c['final_avg_jct']:.2f}",
                f"{name} {top:.2f}",
                f"{100 * (c['final_avg_jct'] / top - 1):+.1f}%",
                "" if clone_jct is None else f"{100 * (c['final_avg_jct'] / clone_jct - 1):+.1f}%",
            ])  # fmt: skip
        head = ["cluster", "clone", "learned (final)", "best heuristic", "vs best", "vs clone"]
        lines += ["", "Per cluster (one global policy):", "", _markdown_table(per_cluster, head)]
    return "\n".join(lines)


_failed: list[str] = []  # jobs of a ``-m`` sweep that failed (the others still run)
#: a ``-m`` sweep's jobs, finished or failed: (sweep dir, the job's row of the sweep table)
_sweep: list[tuple[Path, dict[str, Any]]] = []


def _forked_child_signals() -> None:
    """In a forked child (plan_pg's rollout workers): SIGTERM and SIGHUP ignored, as the
    workers ignore Ctrl-C; the learner decides and stops them (``RolloutPool.close``), and
    they die with it however it dies (``envs.files.die_with_parent``).  Without this, a
    SIGTERM to the whole process group (a job scheduler, ``kill -- -<pgid>``) raised the
    learner's ``KeyboardInterrupt`` in each worker, or killed it mid-transfer: tracebacks."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)


#: an ``OSError`` with one of these is the disk's or the permissions' fault: one line, no
#: traceback (envs.files already turns its own into ConfigErrors; this catches the writes of
#: SB3's logger and TensorBoard)
_DISK_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EACCES, errno.EPERM}


def _interrupted(out: Path, cfg: DictConfig, task: list[str], exc: KeyboardInterrupt) -> str:
    """One line: the run was stopped (by what), what it saved, the command that resumes it."""
    from agents.checkpoint import find_checkpoint, read_meta
    from envs.sim.errors import ConfigError

    how = f"interrupted ({exc.args[0]})" if exc.args else "interrupted (Ctrl-C)"
    again = shlex.join(["python", "train.py", *task])
    from agents.learners import CONTENTION, env_for, learner

    if learner(cfg.agent.algo).pipeline == "episodes":  # policy files; the state at the end
        final = out / "checkpoints" / "final" / "policy.npz"
        best = out / "checkpoints" / "best" / "policy.npz"
        # evaluate.py's scheduler kind for it: contention:<dir> in Contention-v0
        contention = env_for(cfg.agent.algo, cfg.get("env_id")) == CONTENTION
        kind = "contention" if contention else "policy"
        if final.is_file():
            try:
                iterations = json.loads((out / "summary.json").read_text())["iterations"]
            except (OSError, ValueError, KeyError):
                iterations = "?"
            if (final.parent / "state.json").is_file():  # its training state: resumable
                task_on = [a for a in task if not a.startswith("resume=")]
                resume = shlex.join(["python", "train.py", *task_on, f"resume={out}"])
                return (
                    f"train.py: {how}; saved {final} (the policy after {iterations} "
                    f"iteration(s), with its training state) and {best} (the best validation "
                    f"point); evaluate with {kind}:{final.parent}, or resume with: {resume}"
                )
            return (
                f"train.py: {how}; saved {final} (the policy after {iterations} iteration(s)) "
                f"and {best} (the best validation point); evaluate with {kind}:{final.parent}, "
                f"or start again with: {again}"
            )
        if best.is_file():
            return (
                f"train.py: {how}; saved {best} (the policy before RL); start again with: {again}"
            )
        return f"train.py: {how}; nothing was saved; start again with: {again}"
    try:
        ckpt, _ = find_checkpoint(out / "checkpoints")
        decisions = read_meta(ckpt).get("num_timesteps", "?")
    except ConfigError:
        return (
            f"train.py: {how} before the first checkpoint (checkpoint_every="
            f"{cfg.get('checkpoint_every')} decisions): nothing was saved; start again with: "
            f"{again}"
        )
    resume = shlex.join(
        ["python", "train.py", *(a for a in task if not a.startswith("resume=")), f"resume={ckpt}"]
    )
    return (
        f"train.py: {how}; the newest complete checkpoint is {ckpt} ({decisions} decisions); "
        f"resume with: {resume}"
    )


def _check_keys(cfg: DictConfig) -> None:
    """Refuse keys the schemas do not have, also those added with ``+`` (e.g. ``+seeds=3``
    instead of ``seed=3``, or ``+agent.lr=1e-3``): they would be accepted and ignored."""
    from agents.config import AgentConfig
    from envs.configkeys import check_known_keys
    from training.config import TrainConfig

    data = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(data, dict)
    agent = data.pop("agent", None)
    check_known_keys(data, TrainConfig, where="conf/train.yaml (schema: training/config.py)")
    if isinstance(agent, dict):
        check_known_keys(agent, AgentConfig, "agent.", "agents/config.py AgentConfig")


@hydra.main(version_base="1.3", config_path=str(CONF), config_name="train")
def main(cfg: DictConfig) -> None:
    if cfg.get("agent") is None:
        print(
            "train.py: choose an agent with +agent=<name>; available: "
            + ", ".join(_agents())
            + "\n  e.g.  python train.py +agent=a2c",
            file=sys.stderr,
        )
        sys.exit(2)
    hc = HydraConfig.get()
    out = Path(hc.runtime.output_dir)
    lock = _own_run_dir(out)
    try:
        _run(cfg, hc, out)
    finally:
        lock.release()


def _own_run_dir(out: Path) -> RunLock:
    """Lock the run directory, refusing one that another run holds or has written (two runs
    started in the same second with the same agent get the same default directory)."""
    from envs.sim.errors import ConfigError

    try:
        lock = RunLock(out).acquire()
    except ConfigError as exc:
        print(f"train.py: {exc}", file=sys.stderr)
        sys.exit(2)
    theirs = sorted(p.name for p in out.iterdir() if p.name in _RUN_FILES)
    if theirs:
        lock.release()
        print(
            f"train.py: {out} already holds another run's files ({', '.join(theirs)}); give "
            "this run its own directory (run_name=<suffix>, or hydra.run.dir=<dir>)",
            file=sys.stderr,
        )
        sys.exit(2)
    return lock


#: what marks a directory as a training run's (its ``.hydra`` is rewritten by Hydra first)
_RUN_FILES = frozenset({"run.json", "summary.json", "learning_curve.csv"})


def _run(cfg: DictConfig, hc: Any, out: Path) -> None:
    from envs.sim.errors import DlschedError
    from training.run import to_train_config, train
    from training.sweep import job_row

    multirun = hc.mode == RunMode.MULTIRUN
    task = list(hc.overrides.task)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    try:
        with sigterm_as_interrupt():  # SIGTERM/SIGHUP stop the run as Ctrl-C does
            _check_keys(cfg)
            summary = train(to_train_config(cfg), out, resolved)  # type: ignore[arg-type]
    except KeyboardInterrupt as exc:  # whatever was running: SB3's learn, plan_pg, pretraining
        print(_interrupted(out, cfg, list(hc.overrides.task), exc), file=sys.stderr, flush=True)
        sys.exit(130)
    except OSError as exc:
        if exc.errno not in _DISK_ERRNOS:
            raise
        print(f"train.py: {os_error(exc.filename or out, exc)}", file=sys.stderr)
        sys.exit(2)
    except DlschedError as exc:  # bad config, workload or trace: one line, no traceback
        print(f"train.py: {exc}", file=sys.stderr)
        if out.is_dir() and {p.name for p in out.iterdir()} <= {".hydra", ".lock", "run.json"}:
            import shutil  # a run that failed before training leaves no directory behind

            shutil.rmtree(out, ignore_errors=True)
        if multirun:  # one failing job does not end the sweep
            _failed.append(f"job {hc.job.num} ({' '.join(task)}): {exc}")
            row = job_row(int(hc.job.num), task, int(cfg.seed), out, error=str(exc))
            _sweep.append((Path(hc.sweep.dir), row))
            return
        sys.exit(2)
    if multirun:
        row = job_row(int(hc.job.num), task, int(cfg.seed), out, summary)
        _sweep.append((Path(hc.sweep.dir), row))
    final = summary.get("final") or {}
    print(
        json.dumps({k: summary[k] for k in ("agent", "timesteps", "baselines_avg_jct")}, indent=2)
    )
    if final:
        print(_report(out, cfg, summary))
        ratios = {k: round(v, 3) for k, v in final.items() if k.startswith("ratio_to_")}
        unit = summary.get("unit", "slots")
        print(f"final validation avg JCT {final['avg_jct']:.2f} {unit}; ratios {ratios}")
    print(f"run directory: {out}\nTensorBoard:   tensorboard --logdir {summary['tensorboard']}")


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.register_at_fork(after_in_child=_forked_child_signals)
    try:
        with sigterm_as_interrupt():
            main()
    except KeyboardInterrupt as exc:  # before or after the run (its own handler is in main)
        how = f" ({exc.args[0]})" if exc.args else ""
        print(f"train.py: interrupted{how}", file=sys.stderr)
        sys.exit(130)
    if _sweep:  # after a ``-m`` sweep: one table of every job
        from envs.sim.errors import ConfigError
        from training.sweep import write_sweep_table

        try:
            _, md = write_sweep_table(_sweep[0][0], [row for _, row in _sweep])
        except ConfigError as exc:  # a full or read-only disk: one line
            print(f"train.py: the sweep table: {exc}", file=sys.stderr)
            sys.exit(2)
        print(f"sweep table: {md} (and {md.with_suffix('.csv').name})")
    if _failed:
        print(f"train.py: {len(_failed)} sweep job(s) failed:", file=sys.stderr)
        for line in _failed:
            print(f"  {line}", file=sys.stderr)
        sys.exit(2)
