"""The pretraining stage as one function, shared by ``python -m pretrain`` and ``train.py``.

:func:`pretrain` collects teacher traces on ``num_workloads`` training workloads (seeds
``seed_offset ..``), optionally adds job-order-shuffled copies, splits whole workloads off for
validation, clones them into a fresh :data:`~agents.policy.DL2Policy` and scores the clone's
average JCT against the teacher's on held-out workloads (``eval_seeds``).  It writes into
``out_dir``: ``dataset.npz``/``.json``, ``policy.npz`` (the clone in the one policy file
format, :mod:`agents.policy_file`: the weights ``train.py`` loads, and a policy ``evaluate.py``
runs as ``policy:<out_dir>``), ``history.csv`` and ``summary.json``; TensorBoard scalars go to
``out_dir/tb``.

With ``cache_dir``, a stage with the same config (hash of every field that changes the result)
is loaded from the cache instead of recomputed.  Every file is written atomically
(:mod:`envs.files`), the cache's ``summary.json`` last, so a stage killed half-way leaves no
half-written file and no cache entry that looks complete.  A cache entry of an earlier
version (``policy.pt`` + ``policy.json``, whose recorded SHA-256 is checked before the weights
are used) still loads.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch as th

from agents.checkpoint import signals_deferred, verify_policy_weights
from agents.episode_results import aggregate, evaluate_allocator, evaluate_policy
from agents.policy import PolicyConfig, policy_kwargs
from agents.policy_file import save_dl2
from envs.files import atomic_path, write_json, write_text
from envs.gym.factory import EnvConfig, make_env
from envs.provenance import provenance
from envs.sim.elastic.allocators import allocator_name, make_allocator
from envs.sim.errors import ConfigError
from pretrain.bc import BCConfig, behaviour_clone, build_student
from pretrain.dataset import TeacherDataset, collect

__all__ = ["PretrainConfig", "pretrain"]


@dataclass
class PretrainConfig:
    """``teacher`` (``None``/``"none"``: no pretraining), its ``teacher_options``;
    ``num_workloads`` training workloads with seeds ``seed_offset + i``; ``val_fraction`` of
    them held out for decision accuracy; ``shuffle_copies`` job-order-shuffled copies (DL²'s
    augmentation); ``bc`` the cloning run; ``eval_seeds`` held-out workloads for the clone's
    average JCT (computed at the end and every ``jct_every`` BC steps if > 0);
    ``deterministic``: the clone acts by masked argmax (else it samples); ``dataset``: reuse
    a saved teacher dataset (``dataset.npz`` of an earlier run) instead of collecting;
    ``on_mixture``: collect the teacher's traces on workloads drawn from the training run's
    workload mixture (``mixture=...``, :mod:`envs.gym.workloads`; one scenario per workload,
    drawn with the workload's seed) instead of the env's own generator."""

    teacher: Optional[str] = "drf"  # noqa: UP045 (OmegaConf structured config)
    teacher_options: dict[str, Any] = field(default_factory=dict)
    num_workloads: int = 8
    seed_offset: int = 1000
    val_fraction: float = 0.25
    shuffle_copies: int = 0
    bc: BCConfig = field(default_factory=BCConfig)
    eval_seeds: list[int] = field(default_factory=lambda: [100, 101])
    jct_every: int = 0
    deterministic: bool = True
    dataset: Optional[str] = None  # noqa: UP045 (OmegaConf structured config)
    on_mixture: bool = False

    @property
    def enabled(self) -> bool:
        return self.teacher is not None and str(self.teacher).lower() != "none"


def _key(config: PretrainConfig, env: EnvConfig, policy: PolicyConfig, mixture: Any = None) -> str:
    """The cache key: a hash of every field of the stage, the env and the policy (and of the
    workload mixture when the teacher's traces come from it)."""
    parts: dict[str, Any] = {
        "pretrain": asdict(config),
        "env": env.as_dict(),
        "policy": asdict(policy),
    }
    if mixture is not None:
        parts["mixture"] = asdict(mixture)
    blob = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def pretrain(
    config: PretrainConfig,
    env_config: EnvConfig,
    policy_config: PolicyConfig,
    out_dir: str | Path,
    *,
    cache_dir: str | Path | None = None,
    progress: bool = False,
    mixture: Any = None,
) -> dict[str, Any]:
    """Run (or load from the cache) the pretraining stage; its summary (``policy_path`` is
    the weights file).  ``mixture``: the training run's
    :class:`~envs.gym.workloads.MixtureConfig` (used when ``config.on_mixture``)."""
    if not config.enabled:
        raise ConfigError("pretraining disabled (teacher none)")
    teacher = allocator_name(str(config.teacher), role="teacher")
    if config.num_workloads < 1:
        raise ConfigError("pretrain.num_workloads must be >= 1")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if config.on_mixture and (mixture is None or not mixture.enabled):
        raise ConfigError(
            "pretrain.on_mixture needs a workload mixture (mixture=dl2_philly or "
            "mixture.enabled=true)"
        )
    mix = mixture if config.on_mixture else None
    key = _key(config, env_config, policy_config, mix)
    cached = Path(cache_dir) / f"{teacher}_{key}" if cache_dir is not None else None
    if cached is not None and (cached / "summary.json").is_file():
        return _from_cache(cached, out)

    t0 = time.perf_counter()
    data = _teacher_dataset(config, teacher, env_config, mix)
    with signals_deferred():  # numpy's zip writer stopped half-way raises its own errors
        data.save(out / "dataset")
    t_collect = time.perf_counter() - t0
    train, val = data.split(config.val_fraction, seed=config.bc.seed)
    train = train.shuffled(config.shuffle_copies, seed=config.bc.seed)

    th.manual_seed(config.bc.seed)
    env = make_env(env_config)
    student = build_student(
        env.observation_space, env.action_space, policy_kwargs(policy_config, env.J)
    )
    teacher_eval = aggregate(
        evaluate_allocator(
            lambda: make_allocator(teacher, config.teacher_options, role="teacher"),
            env_config,
            config.eval_seeds,
        )
    )

    def clone_jct() -> dict[str, float]:
        res = aggregate(
            evaluate_policy(
                student, env_config, config.eval_seeds, deterministic=config.deterministic
            )
        )
        return {
            "val/avg_jct": res["avg_jct"],
            "val/jct_ratio_to_teacher": res["avg_jct"] / teacher_eval["avg_jct"],
        }

    writer = _writer(out / "tb")

    def log(step: int, row: dict[str, float]) -> None:
        if writer is not None:
            for k, v in row.items():
                if k != "step":
                    writer.add_scalar(k, v, step)

    def on_eval(step: int) -> dict[str, float]:
        if config.jct_every > 0 and step % config.jct_every == 0 and step != config.bc.steps:
            return clone_jct()
        return {}

    t1 = time.perf_counter()
    try:
        history = behaviour_clone(
            student, train, val, config.bc, log=log, on_eval=on_eval, progress=progress
        )
        t_bc = time.perf_counter() - t1
        final = clone_jct()
        log(config.bc.steps, final)
    finally:  # Ctrl-C too: TensorBoard's events so far are flushed
        if writer is not None:
            writer.close()
    _write_history(out / "history.csv", history.rows)
    weights = save_dl2(
        out / "policy.npz",
        student,
        env=env_config.as_dict(),
        policy_config=asdict(policy_config),
        record={"teacher": teacher, "bc": asdict(config.bc), "key": key, **provenance()},
    )
    summary = {
        "teacher": teacher,
        "decisions": len(data),
        "train_decisions": len(train),
        "val_decisions": len(val),
        "void_fraction": float(np.mean(data.actions == data.masks.shape[1] - 1)),
        "val_accuracy": history.last.get("val/accuracy"),
        "val_loss": history.last.get("val/loss"),
        "bc_steps": config.bc.steps,
        "clone_avg_jct": final["val/avg_jct"],
        "teacher_avg_jct": teacher_eval["avg_jct"],
        "jct_ratio_to_teacher": final["val/jct_ratio_to_teacher"],
        "eval_seeds": list(config.eval_seeds),
        "collect_s": round(t_collect, 2),
        "bc_s": round(t_bc, 2),
        "key": key,
    }
    write_json(out / "summary.json", summary)
    if cached is not None:
        for name in _CACHED:  # summary.json last: the cache entry is complete once it exists
            _copy(out / name, cached / name)
    summary["policy_path"] = str(weights)
    return summary


#: the files of a pretraining stage its cache keeps (``summary.json``, which marks a complete
#: entry, last)
_CACHED = ("policy.npz", "history.csv", "summary.json")
#: an entry of an earlier version: its weights as ``policy.pt`` + ``policy.json``
_CACHED_PT = ("policy.pt", "policy.json", "history.csv", "summary.json")


def _copy(src: Path, dst: Path) -> None:
    """``dst`` becomes a copy of ``src``, atomically."""
    with atomic_path(dst) as tmp:  # an OSError (disk full...): a ConfigError naming dst
        shutil.copy2(src, tmp)


def _from_cache(cached: Path, out: Path) -> dict[str, Any]:
    """A cached stage's files copied into ``out`` (the weights checked against their recorded
    SHA-256 first); its summary."""
    names: tuple[str, ...] = _CACHED
    weights = "policy.npz"
    if not (cached / weights).is_file():  # an entry written before the one policy file
        names, weights = _CACHED_PT, "policy.pt"
        verify_policy_weights(cached / weights)
    for name in names:
        if (cached / name).is_file():
            _copy(cached / name, out / name)
    summary: dict[str, Any] = json.loads((out / "summary.json").read_text())
    summary.update({"policy_path": str(out / weights), "cached_from": str(cached)})
    return summary


def _teacher_dataset(
    config: PretrainConfig, teacher: str, env_config: EnvConfig, mix: Any
) -> TeacherDataset:
    """The saved dataset ``config.dataset`` (collected in this env), or the teacher's traces
    on the workloads ``seed_offset ..`` (drawn from the mixture ``mix`` when given)."""
    if config.dataset:
        data = TeacherDataset.load(config.dataset)
        then, now = data.meta.get("env"), env_config.as_dict()
        if then is not None and then != now:
            diff = {
                k: (then.get(k, "<absent>"), now.get(k, "<absent>"))
                for k in sorted(set(then) | set(now))
                if then.get(k, "<absent>") != now.get(k, "<absent>")
            }
            raise ConfigError(
                f"{config.dataset} was collected with another env; differing keys "
                f"(dataset, this run): {diff}"
            )
        return data
    seeds = [config.seed_offset + i for i in range(config.num_workloads)]
    env_for = None
    if mix is not None:
        from envs.gym.workloads import Mixture, scenario_envs

        drawer = Mixture(mix, env_config)

        def env_for(seed: int) -> Any:
            return scenario_envs(env_config, drawer.draw(np.random.default_rng(seed)), 1)[0]

    return collect(
        teacher, env_config, seeds, teacher_options=config.teacher_options, env_for=env_for
    )


def _writer(path: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # pragma: no cover - tensorboard is a dependency
        return None
    return SummaryWriter(str(path))


def _write_history(path: Path, rows: list[dict[str, float]]) -> None:
    keys: list[str] = []
    for row in rows:
        keys.extend(k for k in row if k not in keys)
    buf = io.StringIO(newline="")
    w = csv.DictWriter(buf, fieldnames=keys)
    w.writeheader()
    w.writerows(rows)
    write_text(path, buf.getvalue())


def load_dataset(path: str | Path) -> TeacherDataset:
    """Reuse a saved teacher dataset (``dataset.npz`` of an earlier run)."""
    return TeacherDataset.load(path)
