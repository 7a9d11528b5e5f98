"""``python -m lightning_cls.train``: fit a classifier, then test its best checkpoint.

Reads top to bottom: compose config → data → module → callbacks/loggers → trainer → fit →
test → results.json. Everything below this file takes plain Python objects.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import hydra
import pytorch_lightning as pl
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from pytorch_lightning.utilities import rank_zero_only
from omegaconf import DictConfig, OmegaConf

from lightning_cls import config_dir
from lightning_cls.checkpointing import check_compatible, resolve_ckpt_path
from lightning_cls.export.callback import ExportCallback
from lightning_cls.module import ClassificationModule
from lightning_cls.report import print_config, to_floats

log = logging.getLogger(__name__)


def train(cfg: DictConfig) -> dict:
    """Run one training job described by ``cfg``; return what goes into results.json."""
    started = time.time()
    if rank_zero_only.rank == 0:
        print_config(OmegaConf.to_container(cfg, resolve=True))
    pl.seed_everything(cfg.seed, workers=True)

    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")

    model_kwargs = OmegaConf.to_container(cfg.model, resolve=True)
    module = ClassificationModule(
        model_name=model_kwargs.pop("name"),
        model_kwargs=model_kwargs,
        optimizer=instantiate(cfg.optimizer),
        scheduler=instantiate(cfg.scheduler) if cfg.get("scheduler") else None,
        label_smoothing=cfg.label_smoothing,
        tta_flip=cfg.tta_flip,
        **datamodule.meta,
    )
    if cfg.data.get("channels_last"):
        module = module.to(memory_format=torch.channels_last)  # weights too, not just inputs

    callbacks = [instantiate(c) for c in (cfg.get("callbacks") or {}).values()]
    export_config = instantiate(cfg.export) if cfg.get("export") else None
    if export_config is not None and export_config.enabled:
        callbacks.append(ExportCallback(export_config, dirpath=Path(cfg.paths.output_dir) / "export"))
    loggers = [instantiate(lg) for lg in (cfg.get("logger") or {}).values()]
    trainer: pl.Trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)

    ckpt_path = resolve_ckpt_path(cfg.get("ckpt_path"), Path(cfg.paths.ckpt_root))
    if ckpt_path:
        check_compatible(ckpt_path, module)  # names differing keys/shapes before fit starts
    for checkpoint in trainer.checkpoint_callbacks if ckpt_path else []:
        # A resumed run keeps writing next to the checkpoint it continues, so its best/last
        # bookkeeping carries on instead of starting over in a new folder.
        checkpoint.dirpath = str(Path(ckpt_path).parent)
    if cfg.train:
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
    fit_metrics = to_floats(trainer.callback_metrics)

    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    test_metrics: dict = {}
    if cfg.test:
        # The best checkpoint of this fit; without a fit (train=false), the given checkpoint.
        results = trainer.test(module, datamodule=datamodule, ckpt_path=best or ckpt_path)
        test_metrics = to_floats(results[0]) if results else {}

    output_dir = Path(cfg.paths.output_dir)
    summary = {
        "run_dir": str(output_dir),
        "best_ckpt": best,
        "best_val_acc": _best_score(trainer),
        "val": {k: v for k, v in fit_metrics.items() if k.startswith("val/")},
        "test": test_metrics,
        "wall_time_s": round(time.time() - started, 2),
        "overrides": list(HydraConfig.get().overrides.task) if HydraConfig.initialized() else [],
    }
    if trainer.is_global_zero:
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / "results.json").write_text(json.dumps(summary, indent=2) + "\n")
        OmegaConf.save(cfg, output_dir / "config_resolved.yaml", resolve=True)
        log.info("Run directory: %s", output_dir)
        log.info("Best checkpoint: %s", best or "(none)")
        log.info("Final metrics: %s", json.dumps({**summary["val"], **test_metrics}))
    return summary


def _best_score(trainer: pl.Trainer) -> float | None:
    score = getattr(trainer.checkpoint_callback, "best_model_score", None)
    return float(score) if score is not None else None


@hydra.main(config_path=config_dir(), config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    summary = train(cfg)
    # Returned for sweepers that optimize a value (e.g. Optuna): the best val accuracy.
    return summary["best_val_acc"]


if __name__ == "__main__":
    main()
