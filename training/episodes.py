"""The ``episodes`` pipeline of ``train.py``: one pipeline for every learner that learns from
whole episodes of a decision-point env (:class:`~agents.episode_pg.EpisodePG` and its
subclasses: ``plan_pg``, ``plan_a2c``, ``contention_pg``), in any env the learner supports.

:func:`train_episodes` is the run, the same whatever the env: record the run, build the
network, clone the world's teacher, run the baselines, build the learner through its registry
entry (:data:`agents.learners.LEARNERS`), then :func:`run_iterations` (iterations, validation
every so often, the best and the final checkpoints, Ctrl-C between iterations) with
:class:`EpisodeLog` (learning curve, TensorBoard, console lines), and the summary.  What
differs between envs is an :class:`EpisodeWorld`: :class:`training.plan.PlanWorld`
(``dlsched/ClusterPlan-v0``, DL²'s cluster with the slot's plan as the action) and
:class:`training.contention.ContentionWorld` (``dlsched/Contention-v0``, Ada-SRSF's world).
"""

from __future__ import annotations

import abc
import copy
import csv
import io
import json
import shutil
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch as th

from agents.checkpoint import signals_deferred
from agents.episode_pg import EpisodePG, EpisodePGConfig, clone, save_episode_pg
from agents.learners import learner
from agents.protocol import episode_learner
from envs.files import atomic_path, sha256_file, write_json, write_text
from envs.sim.errors import ConfigError
from training.runinfo import agent_in_use, provenance, run_record, write_run_record

__all__ = [
    "EpisodeLog",
    "EpisodeWorld",
    "Teacher",
    "load_state",
    "run_iterations",
    "save_state",
    "train_episodes",
]

#: a run's training state (:meth:`~agents.episode_pg.EpisodePG.training_state`, torch's
#: format) and its description (``state.json``: the run's config, the curve so far, the best
#: point, the decisions, the state file's SHA-256), in ``checkpoints/final``
STATE, STATE_META = "state.pt", "state.json"
#: the resolved config's keys a resumed run must keep (its ``agent`` block too, but for the
#: iteration counts, which a resumed run raises)
RESUME_KEYS = ("seed", "env_id", "env", "contention", "pretrain", "eval", "mixture", "federated")


#: an iteration's figures logged to TensorBoard (``train/<key>``) when the learner reports
#: them: the policy gradient's (agents/episode_pg.py), the actor-critic's (agents/plan_a2c.py),
#: the optimiser's rate, expert iteration's (agents/expert_iteration.py), the cross-entropy
#: method's (agents/cem.py) and distillation's (agents/selector_distill.py)
TRAIN_KEYS = (
    "return", "entropy", "loss", "pg_loss", "entropy_loss", "clipped",
    "value_loss", "explained_variance", "replayed", "learning_rate",
    "search_regret", "agree", "ties", "accuracy", "labelled",
    "score_mean", "score_best", "best_rule_score", "sigma",
    "labelled_total", "student_acted", "agree_before", "agree_after",
)  # fmt: skip


def _say(line: str) -> None:
    """``line`` and its newline to stderr in one write: a Ctrl-C between ``print``'s two writes
    (the text, then the newline) left the line unended, and train.py's own line after it."""
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


class EpisodeLog:
    """The learning curve (CSV), TensorBoard scalars and console lines of one EpisodePG run
    (``tag``: the learner's name in the lines and the TensorBoard folder; ``unit``: the
    avg JCT's; ``decision``: what one decision is, for the rate).

    TensorBoard (``tb/plan_pg_1``; the step is the number of decisions so far):

    * ``eval/avg_jct``, ``eval/p95_jct``, ``eval/unfinished``, ``eval/ratio_to_<heuristic>``
      at each validation; ``reference/avg_jct_<heuristic>``: each heuristic's validation avg
      JCT, logged at every validation step (a flat line beside the policy's curve; the custom
      scalars tab draws them in one chart, "validation avg JCT vs heuristics");
    * per iteration: ``train/return``, ``train/loss`` (the minimised total), its terms apart
      ``train/pg_loss`` (the clipped policy-gradient term) and ``train/entropy_loss``
      (``-ent_coef x entropy``), ``train/entropy``, ``train/clipped``, ``train/kl_to_clone``
      (mean KL(policy || the frozen clone) over the iteration's states, after the update;
      with pretraining only), ``train/learning_rate``; with the actor-critic
      (:mod:`agents.plan_a2c`) ``train/value_loss``, ``train/explained_variance`` (of the
      targets by the critic before its fit) and ``train/replayed`` (replayed decisions);
      ``time/iteration_s`` (rollouts + update) and
      ``time/slots_per_s`` (decisions, i.e. slots planned, per second of it);
    * ``pretrain/bc_loss`` per cloning epoch (the step is the epoch);
    * the hyperparameters (HPARAMS tab) with the final and best validation avg JCT.
    """

    def __init__(
        self,
        out: Path,
        baselines: dict[str, float],
        tag: str = "plan_pg",
        unit: str = "slots",
        decision: str = "slots",
        scored: bool = False,
    ) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.baselines = baselines
        self.tag, self.unit, self.decision = tag, unit, decision
        self.tb_dir = out / "tb"
        self.writer = SummaryWriter(str(self.tb_dir / f"{tag}_1"))
        self.writer.add_custom_scalars(
            {
                "validation": {
                    "avg JCT vs heuristics": ["Multiline", ["eval/avg_jct", "reference/.*"]],
                    "ratio to heuristics": ["Multiline", ["eval/ratio_to_.*"]],
                },
                "training": {
                    "losses": [
                        "Multiline",
                        ["train/loss", "train/pg_loss", "train/entropy_loss", "train/value_loss"],
                    ],
                },
            }
        )
        self.curve_path = out / "learning_curve.csv"
        cols = ["timesteps", "iteration", "avg_jct", "p95_jct", "unfinished", "wall_s"]
        #: with ``scored``, each validation also has ``score`` (what the best checkpoint is
        #: chosen on: the mean ratio to the best baseline per workload)
        self.scored = scored
        self.cols = cols + (["score"] if scored else []) + [f"ratio_to_{b}" for b in baselines]
        self._csv = self._line(self.cols)
        write_text(self.curve_path, self._csv)
        self.rows: list[dict[str, float]] = []

    def restore(self, rows: Sequence[dict[str, float]]) -> None:
        """The validation rows of the run this one resumes (its curve goes on from them)."""
        self.rows = [dict(r) for r in rows]
        for row in self.rows:
            self._csv += self._line([row[c] for c in self.cols])
        write_text(self.curve_path, self._csv)

    @staticmethod
    def _line(values: Sequence[Any]) -> str:
        buf = io.StringIO(newline="")
        csv.writer(buf).writerow(values)
        return buf.getvalue()

    def validation(self, decisions: int, iteration: int, m: dict[str, float], wall: float) -> None:
        row = {
            "timesteps": decisions,
            "iteration": iteration,
            "avg_jct": m["avg_jct"],
            "p95_jct": m["p95_jct"],
            "unfinished": m["unfinished"],
            "wall_s": round(wall, 1),
        }
        if self.scored:
            row["score"] = m["score"]
        row.update({f"ratio_to_{b}": m["avg_jct"] / v for b, v in self.baselines.items()})
        self.rows.append(row)
        # the whole (small: a row per validation) file rewritten atomically: never a torn row
        self._csv += self._line([row[c] for c in self.cols])
        write_text(self.curve_path, self._csv)
        scalars = ("avg_jct", "p95_jct", "unfinished", *(["score"] if self.scored else []))
        for key in (*scalars, *(c for c in row if c.startswith("ratio"))):
            self.writer.add_scalar(f"eval/{key}", row[key], decisions)
        for b, v in self.baselines.items():  # reference lines: the same value at every step
            self.writer.add_scalar(f"reference/avg_jct_{b}", v, decisions)
        self.writer.flush()
        ratios = ", ".join(f"{b} {row[f'ratio_to_{b}']:.3f}" for b in self.baselines)
        score = f", {m['score']:.4f} of the best baseline per workload" if self.scored else ""
        _say(
            f"[{self.tag}] iteration {iteration}: validation avg JCT {m['avg_jct']:.2f} "
            f"{self.unit}{score} (ratio to {ratios}) after {decisions:,} decisions, {wall:.0f} s"
        )

    def iteration(
        self,
        decisions: int,
        i: int,
        total: int,
        st: dict[str, float],
        wall: float,
        iteration_s: float,
    ) -> None:
        for key in TRAIN_KEYS:
            if key in st:  # what the learner reports (a search-based one has no PG terms)
                self.writer.add_scalar(f"train/{key}", st[key], decisions)
        kl = st.get("kl_to_reference")
        if kl is not None:
            self.writer.add_scalar("train/kl_to_clone", kl, decisions)
        self.writer.add_scalar("time/iteration_s", iteration_s, decisions)
        if iteration_s > 0:
            rate = st["decisions"] / iteration_s
            self.writer.add_scalar(f"time/{self.decision}_per_s", rate, decisions)
        _say(
            f"[{self.tag}] iteration {i}/{total}: "
            + ("" if "return" not in st else f"return {st['return']:.1f}, ")
            + ("" if "entropy" not in st else f"entropy {st['entropy']:.3f}, ")
            + ("" if kl is None else f"KL to the clone {kl:.4f}, ")
            + (
                f"search: regret {st['search_regret']:.2%}, agree {st['agree']:.0%}, "
                f"distilled accuracy {st['accuracy']:.0%}, {int(st['labelled']):,} labelled, "
                if "search_regret" in st
                else ""
            )
            + (
                f"score (ratio to the best rule) of the mean {st['score_mean']:.4f}, of the "
                f"best candidate {st['score_best']:.4f}, of the best rule "
                f"{st['best_rule_score']:.4f}, sigma {st['sigma']:.3f}, "
                if "score_mean" in st
                else ""
            )
            + f"{decisions:,} decisions, {iteration_s:.1f} s ({wall:.0f} s in all)"
        )

    def pretrain(self, losses: Sequence[float]) -> None:
        """The clone's mean loss of each epoch."""
        for epoch, loss in enumerate(losses, 1):
            self.writer.add_scalar("pretrain/bc_loss", loss, epoch)

    def hparams(self, hparams: dict[str, Any], metrics: dict[str, float]) -> None:
        """``hparams`` with the run's final ``metrics``, in this run's own event file (the
        HPARAMS tab; ``SummaryWriter.add_hparams`` would write another run directory)."""
        from torch.utils.tensorboard.summary import hparams as hparams_summary

        exp, ssi, sei = hparams_summary(hparams, metrics)
        file_writer = self.writer._get_file_writer()
        for s in (exp, ssi, sei):
            file_writer.add_summary(s)
        for k, v in metrics.items():
            self.writer.add_scalar(k, v)
        self.writer.flush()


def run_iterations(
    pg: EpisodePG,
    log: EpisodeLog,
    measure: Callable[[], dict[str, float]],
    save: Callable[[str, dict[str, Any]], Path],
    iterations: int,
    val_every: int,
    hparams: dict[str, Any],
    val_key: str,
    resumed: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], KeyboardInterrupt | None]:
    """Validate (``measure()``: ``avg_jct``, ``p95_jct``, ``unfinished``, and maybe
    ``score``), save ``best``, then ``iterations`` of ``pg`` validating every ``val_every`` (and
    after the last), saving ``best`` whenever the validation ``score`` (where measured, else the
    avg JCT) improves (recorded as ``val_key``); ``final`` at the end, however the learning
    ended (Ctrl-C stops between iterations).  The rollout workers are closed.  ``resumed``
    (``decisions``, ``best``: ``[value, iteration]``, from the state of the run this one
    continues; the log already holds its rows): no first validation, and the learner goes on
    from its iteration to ``iterations``.  Returns the summary's fields and the interrupt to
    re-raise once the caller has written its summary (``None``: it ran to the end)."""
    decisions = 0 if resumed is None else int(resumed["decisions"])
    t_train = time.perf_counter()
    t_iteration = t_train  # when the running iteration started (after the last validation)

    def validate(iteration: int) -> float:
        m = measure()
        log.validation(decisions, iteration, m, time.perf_counter() - t_train)
        return m.get("score", m["avg_jct"])

    best = (float("inf"), 0)  # (validation avg JCT, iteration), set by the first validation

    def on_iteration(i: int, st: dict[str, float]) -> None:
        nonlocal decisions, best, t_iteration
        now = time.perf_counter()
        decisions += int(st["decisions"])
        log.iteration(decisions, i, iterations, st, now - t_train, now - t_iteration)
        try:
            if i % val_every and i != iterations:
                return
            v = validate(i)
            if v < best[0]:
                best = (v, i)
                save("best", {"iteration": i, val_key: v})
        finally:
            t_iteration = time.perf_counter()

    interrupted: KeyboardInterrupt | None = None
    try:
        if resumed is None:
            best = (validate(0), 0)
            save("best", {"iteration": 0, val_key: best[0]})
        else:
            best = (float(resumed["best"][0]), int(resumed["best"][1]))
        t_iteration = time.perf_counter()
        try:
            pg.learn(iterations - pg.iteration, on_iteration)
        except KeyboardInterrupt as exc:  # stop between iterations; train.py says what was saved
            interrupted = exc
    finally:
        pg.close()  # the rollout workers, however the run ends
    final = save("final", {"iteration": pg.iteration})
    curve = log.rows
    best_row = next(r for r in curve if r["iteration"] == best[1])
    log.hparams(
        hparams,
        {
            "hparam/final_avg_jct": float(curve[-1]["avg_jct"]),
            "hparam/best_avg_jct": float(best_row["avg_jct"]),
        },
    )
    log.writer.close()
    fields = {
        "best_point": [best[0], best[1]],  # (what a resumed run continues from)
        "timesteps": decisions,
        "iterations": pg.iteration,
        "interrupted": interrupted is not None,
        "train_s": round(time.perf_counter() - t_train, 1),
        "initial": curve[0],
        "final": curve[-1],
        "best": {**best_row},
        "best_avg_jct": float(best_row["avg_jct"]),
        **({"best_score": best[0]} if log.scored else {}),
        "tensorboard": str(log.tb_dir),
        "checkpoint": str(final.parent),
    }
    return fields, interrupted


@dataclass
class Teacher:
    """What a world's run clones first: ``rule(env) -> action`` on ``workloads``, for
    ``epochs`` epochs with label smoothing ``smoothing``; ``label`` names it in the summary."""

    rule: Callable[[Any], int]
    label: str
    workloads: list[int]
    epochs: int
    smoothing: float


@dataclass
class EpisodeWorld(abc.ABC):
    """One env a learner of the ``episodes`` pipeline trains in: everything
    :func:`train_episodes` needs that depends on the env.  A subclass sets the class fields
    and implements the methods; ``setup`` runs after the run's torch seed (the network's
    initial weights are the run's first draws) and fills ``env`` (the training env, also the
    one saved with the policy) and ``net``.

    ``env_id``: the Gymnasium id; ``unit``: the avg JCT's (``slots`` or ``s``);
    ``decision``: what one decision is (for the rate); ``act``: how the saved policy acts and
    is validated (``argmax`` or ``sampled``); ``val_key``: the best checkpoint's recorded
    validation figure; ``scored``: whether validation returns a ``score`` (the mean ratio to
    the best baseline per workload) on which the best checkpoint is chosen."""

    cfg: Any  # training.config.TrainConfig
    env: Any = None
    net: Any = None
    scored: bool = False
    summary: dict[str, Any] = field(default_factory=dict)
    env_id: ClassVar[str] = ""
    #: the ``agent`` block of the learner's schedule, network and teacher in this world
    block: ClassVar[str] = ""
    unit: ClassVar[str] = "slots"
    decision: ClassVar[str] = "slots"
    act: str = "argmax"
    val_key: str = "val_avg_jct"

    @abc.abstractmethod
    def check(self) -> None:
        """One clear error per setting this world cannot use, before anything runs."""

    @abc.abstractmethod
    def setup(self) -> None:
        """Build ``env`` and ``net`` (after the run's torch seed)."""

    @abc.abstractmethod
    def teacher(self) -> Teacher | None:
        """The rule the network clones first (``None``: random weights)."""

    @abc.abstractmethod
    def baselines(self) -> dict[str, float]:
        """Each baseline's mean validation avg JCT (run once, before learning)."""

    @abc.abstractmethod
    def pg_config(self) -> EpisodePGConfig:
        """The learner's config (its schedule of rollouts and updates)."""

    @property
    @abc.abstractmethod
    def iterations(self) -> int:
        """The learner's iterations."""

    @property
    @abc.abstractmethod
    def val_every(self) -> int:
        """Validate every this many iterations (and after the last)."""

    def attach(self, pg: EpisodePG) -> None:  # noqa: B027 (most worlds need nothing more)
        """Anything the learner needs from the world beyond its env (e.g. where each group's
        workload is drawn)."""

    @abc.abstractmethod
    def measure(self, pg: EpisodePG) -> dict[str, float]:
        """The network's validation figures (``avg_jct``, ``p95_jct``, ``unfinished``, and
        ``score`` where ``scored``)."""

    def agent_blocks(self) -> dict[str, dict[str, Any]]:
        """The learner's settings by block: the world's (:attr:`block`) and, for a learner
        that reads it (the actor-critic), ``a2c``."""
        agent = self.cfg.agent
        blocks = {self.block: asdict(getattr(agent, self.block))}
        for extra in ("a2c", "expert"):  # the actor-critic's, expert iteration's
            if extra in learner(agent.algo).keys:
                blocks[extra] = asdict(getattr(agent, extra))
        return blocks

    def agent_config(self) -> dict[str, Any]:
        """The summary's ``agent_config``: the world's block, with ``a2c`` inside it."""
        blocks = self.agent_blocks()
        return blocks.pop(self.block) | blocks

    def hparams(self) -> dict[str, Any]:
        """The run's hyperparameters for TensorBoard's HPARAMS tab (scalars; lists as text):
        seed, optimiser, the learner's blocks and the world's own (:meth:`env_hparams`)."""
        agent = self.cfg.agent
        out: dict[str, Any] = {"seed": int(self.cfg.seed),
                               "learning_rate": float(agent.learning_rate),
                               "ent_coef": float(agent.ent_coef), **self.env_hparams()}  # fmt: skip
        for block, values in self.agent_blocks().items():
            for key, v in values.items():
                out[f"{block}.{key}"] = v if isinstance(v, int | float | str | bool) else str(v)
        return out

    @abc.abstractmethod
    def env_hparams(self) -> dict[str, Any]:
        """The world's hyperparameters (its env's settings) for :meth:`hparams`."""

    @abc.abstractmethod
    def finish(self, fields: dict[str, Any], out: Path) -> dict[str, Any]:
        """The summary's world-specific fields, once learning has ended (``fields``: the
        loop's)."""


def train_episodes(
    cfg: Any, out: Path, resolved: dict[str, Any], world: EpisodeWorld
) -> dict[str, Any]:
    """One run of an ``episodes``-pipeline learner in ``world`` into ``out`` (module
    docstring); its summary (``summary.json``)."""
    agent = cfg.agent
    world.check()
    th.set_num_threads(max(int(cfg.torch_threads), 1))
    th.manual_seed(cfg.seed)
    write_run_record(out / "run.json", run_record(resolved, cfg.seed, kind="train"))
    world.setup()
    env, net = world.env, world.net
    summary: dict[str, Any] = {"run_dir": str(out), "agent": agent.name, "env_id": world.env_id}
    bc_losses: list[float] = []
    resumed = load_state(cfg.resume, resolved) if cfg.resume else None
    teacher = world.teacher() if resumed is None else None  # (a resumed run has its clone)
    if teacher is not None:
        t0 = time.perf_counter()
        loss = clone(net, env, teacher.rule, teacher.workloads, epochs=teacher.epochs,
                     seed=cfg.seed, smoothing=teacher.smoothing,
                     on_epoch=lambda _epoch, x: bc_losses.append(x))  # fmt: skip
        summary["pretrain"] = {"teacher": teacher.label, "workloads": teacher.workloads,
                               "loss": loss}  # fmt: skip
        summary["pretrain_s"] = round(time.perf_counter() - t0, 1)
    t0 = time.perf_counter()
    baselines = world.baselines()
    summary["baselines_avg_jct"] = baselines
    summary["baselines_s"] = round(time.perf_counter() - t0, 1)
    log = EpisodeLog(out, baselines, tag=agent.name, unit=world.unit, decision=world.decision,
                     scored=world.scored)  # fmt: skip
    log.pretrain(bc_losses)
    pg = episode_learner(agent.algo, agent, env, net, world.pg_config())
    if teacher is not None:  # the clone, frozen: each iteration's KL to it (no random draw)
        pg.reference = copy.deepcopy(net).requires_grad_(False)
    if resumed is not None:  # weights, optimiser, generators, iteration, clone: as they were
        pg.load_training_state(resumed["state"])
        log.restore(resumed["meta"]["curve"])
        summary["resumed_from"] = str(resumed["dir"])
        for name in ("best", "clone"):  # the resumed run's policies, so far
            src = resumed["dir"].parent / name / "policy.npz"
            if src.is_file():
                with atomic_path(out / "checkpoints" / name / "policy.npz") as tmp:
                    shutil.copy2(src, tmp)
    world.attach(pg)
    record = {"config": agent_in_use(resolved), "seed": cfg.seed, **provenance()}

    def save(name: str, extra: dict[str, Any]) -> Path:
        """The network's current weights as ``checkpoints/<name>/policy.npz`` (a Ctrl-C
        during the save takes effect after it)."""
        with signals_deferred():
            return save_episode_pg(out / "checkpoints" / name / "policy.npz", net, env,
                                   {**record, **extra}, act=world.act)  # fmt: skip

    if teacher is not None:
        save("clone", {"iteration": 0})  # the clone itself, whatever RL makes of it
    if resumed is not None and world.iterations <= pg.iteration:
        raise ConfigError(
            f"resume={cfg.resume} is at iteration {pg.iteration}: set the world's iterations "
            f"(now {world.iterations}) above it to go on"
        )
    fields, interrupted = run_iterations(
        pg, log, lambda: world.measure(pg), save, world.iterations, world.val_every,
        world.hparams(), world.val_key, resumed=None if resumed is None else resumed["meta"],
    )  # fmt: skip
    with signals_deferred():  # what resume= continues from (a Ctrl-C waits for it)
        save_state(out / "checkpoints" / "final", pg, resolved, log.rows, fields)
    if pg.reference is not None:  # iteration 0 is the clone: its figure in train.py's table
        fields["clone_avg_jct"] = float(fields["initial"]["avg_jct"])
    summary.update(fields)
    summary["best_checkpoint"] = str(out / "checkpoints" / "best")
    summary.update(world.summary)  # what the world noted on the way (plans, windows, ...)
    summary.update(world.finish(fields, out))
    summary["agent_config"] = world.agent_config()
    write_json(out / "summary.json", summary)
    if interrupted is not None:  # Ctrl-C or SIGTERM (its name: train.py's message says which)
        raise interrupted
    return summary


def _resume_key(resolved: dict[str, Any]) -> dict[str, Any]:
    """What of the resolved config a resumed run must keep (:data:`RESUME_KEYS`)."""
    agent = dict(agent_in_use(resolved).get("agent") or {})
    for block in ("plan", "contention"):
        if isinstance(agent.get(block), dict):
            agent[block] = {k: v for k, v in agent[block].items() if k != "iterations"}
    return {"agent": agent, **{k: resolved.get(k) for k in RESUME_KEYS}}


def save_state(
    d: Path, pg: EpisodePG, resolved: dict[str, Any], rows: Sequence[dict[str, float]],
    fields: dict[str, Any],
) -> None:  # fmt: skip
    """``pg``'s training state into ``d`` (``state.pt``, then ``state.json`` last: a state
    without its description is never read), each written atomically."""
    with atomic_path(d / STATE) as tmp:
        th.save(pg.training_state(), tmp)
        digest = sha256_file(tmp)
    meta = {"key": _resume_key(resolved), "curve": list(rows), "best": fields["best_point"],
            "decisions": fields["timesteps"], "iteration": pg.iteration,
            "sha256": digest}  # fmt: skip
    write_json(d / STATE_META, meta)


def load_state(resume: str, resolved: dict[str, Any]) -> dict[str, Any]:
    """The training state ``resume=`` names (a run directory, or the ``checkpoints/final`` of
    one), checked: complete, its SHA-256, and the same config but for the iteration counts
    (one :class:`ConfigError` listing what differs)."""
    d = Path(resume)
    if not (d / STATE_META).is_file() and (d / "checkpoints" / "final" / STATE_META).is_file():
        d = d / "checkpoints" / "final"
    try:
        meta = json.loads((d / STATE_META).read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(
            f"resume={resume}: no training state there ({STATE_META} of a run's "
            f"checkpoints/final, written when a run of this pipeline ends or is stopped): {exc}"
        ) from None
    try:
        digest = sha256_file(d / STATE)
    except OSError as exc:
        raise ConfigError(f"resume={resume}: {d / STATE} unreadable: {exc}") from None
    if digest != meta.get("sha256"):
        raise ConfigError(f"resume={resume}: {d / STATE} is corrupt (SHA-256 mismatch)")
    then, now = meta.get("key", {}), _resume_key(resolved)
    if then != now:
        diff = sorted(k for k in {*then, *now} if then.get(k) != now.get(k))
        raise ConfigError(
            f"resume={resume} was trained with other settings ({', '.join(diff)} differ); a "
            "resumed run keeps its config and may only raise the iterations"
        )
    state = th.load(d / STATE, weights_only=False)  # (our own file, its SHA-256 checked)
    return {"dir": d, "meta": meta, "state": state}
