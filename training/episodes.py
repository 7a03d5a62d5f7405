"""What the EpisodePG pipelines share (:mod:`training.plan`, :mod:`training.contention`): the
run's log (:class:`EpisodeLog`: learning curve, TensorBoard, console lines) and its loop
(:func:`run_iterations`: iterations, validation every so often, the best and the final
checkpoints, Ctrl-C between iterations)."""

from __future__ import annotations

import csv
import io
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agents.episode_pg import EpisodePG
from envs.files import write_text

__all__ = ["EpisodeLog", "run_iterations"]


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
        for key in ("return", "entropy", "loss", "pg_loss", "entropy_loss", "clipped"):
            self.writer.add_scalar(f"train/{key}", st[key], decisions)
        for key in ("value_loss", "explained_variance", "replayed", "learning_rate"):
            if key in st:  # the actor-critic's (agents/plan_a2c.py) and the optimiser's rate
                self.writer.add_scalar(f"train/{key}", st[key], decisions)
        kl = st.get("kl_to_reference")
        if kl is not None:
            self.writer.add_scalar("train/kl_to_clone", kl, decisions)
        self.writer.add_scalar("time/iteration_s", iteration_s, decisions)
        if iteration_s > 0:
            rate = st["decisions"] / iteration_s
            self.writer.add_scalar(f"time/{self.decision}_per_s", rate, decisions)
        _say(
            f"[{self.tag}] iteration {i}/{total}: return {st['return']:.1f}, entropy "
            f"{st['entropy']:.3f}"
            + ("" if kl is None else f", KL to the clone {kl:.4f}")
            + f", {decisions:,} decisions, {iteration_s:.1f} s ({wall:.0f} s in all)"
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
) -> tuple[dict[str, Any], KeyboardInterrupt | None]:
    """Validate (``measure()``: ``avg_jct``, ``p95_jct``, ``unfinished``, and maybe
    ``score``), save ``best``, then
    ``iterations`` of ``pg`` validating every ``val_every`` (and after the last), saving
    ``best`` whenever the validation ``score`` (where measured, else the avg JCT) improves
    (recorded as ``val_key``); ``final`` at
    the end, however the learning ended (Ctrl-C stops between iterations).  The rollout
    workers are closed.  Returns the summary's fields and the interrupt to re-raise once the
    caller has written its summary (``None``: it ran to the end)."""
    decisions = 0
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
        best = (validate(0), 0)
        save("best", {"iteration": 0, val_key: best[0]})
        t_iteration = time.perf_counter()
        try:
            pg.learn(iterations, on_iteration)
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
