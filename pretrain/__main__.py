"""``python -m pretrain teacher=drf``: behaviour cloning of a heuristic into the RL policy.

Writes ``runs/<time>_pretrain_<teacher>/`` (dataset, ``policy.npz``: the one policy file, history,
summary, TensorBoard events under ``tb/``, ``run.json``).  Config: ``conf/pretrain_run.yaml``
(schema :class:`training.config.PretrainRunConfig`); e.g. ``python -m pretrain teacher=srsf
env=tiny bc.steps=500``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf

from envs.numerics import use_portable
from envs.sim.errors import ConfigError
from training.config import register_configs

CONF = str(Path(__file__).resolve().parent.parent / "conf")
use_portable()  # before torch runs a kernel (envs/numerics.py)
register_configs()


@hydra.main(version_base="1.3", config_path=CONF, config_name="pretrain_run")
def main(cfg: DictConfig) -> None:
    import torch as th

    from training.config import PretrainRunConfig
    from training.pretraining import pretrain
    from training.runinfo import run_record, write_run_record

    out = Path(HydraConfig.get().runtime.output_dir)
    th.set_num_threads(int(cfg.torch_threads))
    resolved = OmegaConf.to_container(cfg, resolve=True)
    assert isinstance(resolved, dict)
    write_run_record(out / "run.json", run_record(resolved, int(cfg.bc.seed), kind="pretrain"))
    try:
        config = OmegaConf.to_object(cfg)
        assert isinstance(config, PretrainRunConfig)
        summary = pretrain(config, config.env, config.policy, out, progress=config.progress_bar)
    except ConfigError as exc:
        print(f"pretrain: {exc}", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(summary, indent=2))
    print(f"\nweights: {summary['policy_path']}\nTensorBoard: tensorboard --logdir {out / 'tb'}")


if __name__ == "__main__":
    main()
