"""``python -m pretrain teacher=drf``: behaviour cloning of a heuristic into the RL policy.

Writes ``runs/<time>_pretrain_<teacher>/`` (dataset, ``policy.pt`` + ``.json``, history,
summary, TensorBoard events under ``tb/``, ``run.json``).  Config: ``conf/pretrain_run.yaml``
(schema :class:`agents.config.PretrainRunConfig`); e.g. ``python -m pretrain teacher=srsf
env=tiny bc.steps=500``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from agents.config import register_configs
from envs.sim.errors import ConfigError

CONF = str(Path(__file__).resolve().parent.parent / "conf")
register_configs()


@hydra.main(version_base="1.3", config_path=CONF, config_name="pretrain_run")
def main(cfg: DictConfig) -> None:
    import torch as th

    from agents.policy import PolicyConfig
    from agents.runinfo import run_record, write_run_record
    from envs.gym.factory import coerce_env_config
    from pretrain.bc import BCConfig
    from pretrain.run import PretrainConfig, pretrain

    out = Path(HydraConfig.get().runtime.output_dir)
    th.set_num_threads(int(cfg.torch_threads))
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(resolved, dict)
    write_run_record(out / "run.json", run_record(resolved, int(cfg.bc.seed), kind="pretrain"))
    try:
        config = PretrainConfig(
            teacher=str(cfg.teacher),
            teacher_options=dict(cfg.teacher_options),
            num_workloads=int(cfg.num_workloads),
            seed_offset=int(cfg.seed_offset),
            val_fraction=float(cfg.val_fraction),
            shuffle_copies=int(cfg.shuffle_copies),
            bc=BCConfig(**OmegaConf.to_container(cfg.bc)),  # type: ignore[arg-type]
            eval_seeds=[int(s) for s in cfg.eval_seeds],
            jct_every=int(cfg.jct_every),
            deterministic=bool(cfg.deterministic),
            dataset=cfg.dataset,
        )
        summary = pretrain(
            config,
            coerce_env_config(OmegaConf.to_container(cfg.env)),
            PolicyConfig(**OmegaConf.to_container(cfg.policy)),  # type: ignore[arg-type]
            out,
            progress=bool(cfg.progress_bar),
        )
    except ConfigError as exc:
        print(f"pretrain: {exc}", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(summary, indent=2))
    print(f"\nweights: {summary['policy_path']}\nTensorBoard: tensorboard --logdir {out / 'tb'}")


if __name__ == "__main__":
    main()
