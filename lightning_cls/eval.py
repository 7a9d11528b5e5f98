"""``python -m lightning_cls.eval ckpt_path=... [data=...]``: test metrics of a checkpoint.

The checkpoint carries the preprocessing it was trained with (mean/std); the data config only
says where the test images come from, so any folder with a ``test/`` split can be evaluated.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import hydra
import pytorch_lightning as pl
from hydra.utils import instantiate
from omegaconf import DictConfig

from lightning_cls import config_dir
from lightning_cls.checkpointing import check_same_data
from lightning_cls.cli import run_cli
from lightning_cls.module import ClassificationModule
from lightning_cls.report import to_floats

log = logging.getLogger(__name__)


def evaluate(cfg: DictConfig) -> dict[str, float]:
    pl.seed_everything(cfg.seed, workers=True)
    if not Path(str(cfg.ckpt_path)).is_file():
        raise FileNotFoundError(
            f"Checkpoint not found: ckpt_path={cfg.ckpt_path!r}; pass the path of a .ckpt file "
            "(quote paths containing '=' for Hydra: 'ckpt_path=\"/x/epoch=3.ckpt\"')."
        )
    module = ClassificationModule.load_from_checkpoint(cfg.ckpt_path, map_location="cpu")
    datamodule = instantiate(cfg.data)
    trained = module.hparams
    if trained.get("mean") is not None:
        datamodule.mean, datamodule.std = tuple(trained.mean), tuple(trained.std)
    datamodule.prepare_data()
    datamodule.setup("test")
    where = f"The checkpoint {cfg.ckpt_path}"
    check_same_data(trained, datamodule.meta, where, data_name=f"data={cfg.data.name}")
    loggers = [instantiate(lg) for lg in (cfg.get("logger") or {}).values()]
    trainer: pl.Trainer = instantiate(cfg.trainer, logger=loggers or False)
    metrics = to_floats(trainer.test(module, datamodule=datamodule)[0])
    out = Path(cfg.paths.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(
        json.dumps({"ckpt_path": str(cfg.ckpt_path), "test": metrics}, indent=2) + "\n"
    )
    log.info("Test metrics of %s: %s", cfg.ckpt_path, json.dumps(metrics))
    return metrics


@hydra.main(config_path=config_dir(), config_name="eval", version_base="1.3")
def main(cfg: DictConfig) -> None:
    evaluate(cfg)


if __name__ == "__main__":
    run_cli(main)
