"""``python train.py +agent=a2c``: RL fine-tuning of a DL²-style scheduler (Hydra).

Agents: ``a2c`` (DL²'s actor-critic), ``reinforce``, ``ppo``, ``maskable_ppo``, ``gppo`` (the
group learner), ``plan_pg`` (one action per slot picks its allocator: training/plan.py);
groups ``env``, ``pretrain``, ``eval``, ``federated`` (see ``conf/train.yaml``).  Each run writes
``runs/<time>_train_<agent>/``: ``run.json``, TensorBoard events (``tb/``), the learning curve,
checkpoints and ``summary.json``.  ``-m`` sweeps, e.g. ``python train.py -m +agent=a2c,ppo
seed=0,1``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from training.config import register_configs

CONF = Path(__file__).resolve().parent / "conf"
register_configs()


def _agents() -> list[str]:
    return sorted(p.stem for p in (CONF / "agent").glob("*.yaml"))


def _report(out: Path, cfg: DictConfig, summary: dict[str, object]) -> str:
    """The learning curve and the final validation table (markdown) of a finished run."""
    import csv

    mode = "sampled" if cfg.eval.deterministic is False else "argmax"
    lines = [f"\nValidation workloads (seeds {list(cfg.eval.seeds)}, learned policy {mode}):\n"]
    curve = out / "learning_curve.csv"
    if curve.is_file():
        rows = list(csv.DictReader(curve.open()))
        if rows and "iteration" in rows[0]:  # plan_pg: iterations of one decision per slot
            lines += [
                "| iteration | decisions (slots planned) | avg JCT (slots) |",
                "|---|---|---|",
            ]
            lines += [
                f"| {r['iteration']} | {float(r['timesteps']):,.0f} | {float(r['avg_jct']):.2f} |"
                for r in rows
            ]
        else:
            lines += ["| decisions | avg JCT (slots) |", "|---|---|"]
            lines += [f"| {float(r['timesteps']):,.0f} | {float(r['avg_jct']):.2f} |" for r in rows]
        lines.append("")
    final = summary["final"]
    assert isinstance(final, dict)
    table = {"learned (final)": float(final["avg_jct"])}
    best = summary.get("best")
    if isinstance(best, dict) and best.get("iteration") != final.get("iteration"):
        table[f"learned (best validation, iteration {best['iteration']})"] = float(best["avg_jct"])
    baselines = summary.get("baselines_avg_jct") or {}
    assert isinstance(baselines, dict)
    table.update({str(k): float(v) for k, v in baselines.items()})
    mine = table["learned (final)"]
    lines += ["| scheduler | avg JCT (slots) | learned vs it |", "|---|---|---|"]
    for name, v in sorted(table.items(), key=lambda kv: kv[1]):
        rel = "" if name.startswith("learned") else f"{100 * (mine / v - 1):+.1f}%"
        lines.append(f"| {name} | {v:.2f} | {rel} |")
    return "\n".join(lines)


_failed: list[str] = []  # jobs of a ``-m`` sweep that failed (the others still run)


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
    from envs.sim.errors import DlschedError
    from training.run import to_train_config, train

    hc = HydraConfig.get()
    out = Path(hc.runtime.output_dir)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    try:
        summary = train(to_train_config(cfg), out, resolved)  # type: ignore[arg-type]
    except KeyboardInterrupt:
        print(f"train.py: interrupted; what was saved is in {out}", file=sys.stderr)
        sys.exit(130)
    except DlschedError as exc:  # bad config, workload or trace: one line, no traceback
        print(f"train.py: {exc}", file=sys.stderr)
        if out.is_dir() and {p.name for p in out.iterdir()} <= {".hydra", "run.json"}:
            import shutil  # a run that failed before training leaves no directory behind

            shutil.rmtree(out, ignore_errors=True)
        if hc.mode == RunMode.MULTIRUN:  # one failing job does not end the sweep
            _failed.append(f"job {hc.job.num} ({' '.join(hc.overrides.task)}): {exc}")
            return
        sys.exit(2)
    final = summary.get("final") or {}
    print(
        json.dumps({k: summary[k] for k in ("agent", "timesteps", "baselines_avg_jct")}, indent=2)
    )
    if final:
        print(_report(out, cfg, summary))
        ratios = {k: round(v, 3) for k, v in final.items() if k.startswith("ratio_to_")}
        print(f"final validation avg JCT {final['avg_jct']:.2f} slots; ratios {ratios}")
    print(f"run directory: {out}\nTensorBoard:   tensorboard --logdir {summary['tensorboard']}")


if __name__ == "__main__":
    main()
    if _failed:
        print(f"train.py: {len(_failed)} sweep job(s) failed:", file=sys.stderr)
        for line in _failed:
            print(f"  {line}", file=sys.stderr)
        sys.exit(2)
