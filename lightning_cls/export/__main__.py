"""``python -m lightning_cls.export ckpt_path=... export=onnx|torchscript|pt2|all|int8|triton``.

Reads top to bottom: load the network and its metadata → data (INT8 only) → export every
requested format, each verified against eager PyTorch → INT8 reports. An INT8 model that
loses more accuracy than ``export.int8.max_acc_drop`` makes the command exit with 1.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig

from lightning_cls import config_dir
from lightning_cls.cli import run_cli
from lightning_cls.cli.run_config import checkpoint_file
from lightning_cls.export.errors import AccuracyDropError

if TYPE_CHECKING:
    from lightning_cls.export.exporter import ExportResult

log = logging.getLogger(__name__)


def export(cfg: DictConfig) -> ExportResult:
    """Run the export described by ``cfg``; raises ``AccuracyDropError`` on an INT8 failure."""
    cfg.ckpt_path = checkpoint_file(cfg.ckpt_path)  # a training run's folder: its best .ckpt
    # Imported here (torch): --help and config errors stay light (tests/test_layers.py).
    from lightning_cls.export.exporter import ExportConfig, export_model
    from lightning_cls.inference.torch_models import load_torch_model

    for chatty in ("onnxscript", "onnx_ir"):  # the ONNX exporter's per-pass INFO lines
        logging.getLogger(chatty).setLevel(logging.WARNING)
    config: ExportConfig = instantiate(cfg.export)
    if not config.enabled:
        raise ValueError(
            "Nothing to export: export=none; choose export=onnx|torchscript|pt2|all|int8|triton."
        )
    net, spec = load_torch_model(cfg.ckpt_path, model_name=cfg.get("model_name"))
    datamodule = instantiate(cfg.data) if cfg.get("data") and config.needs_data else None
    if datamodule is not None:
        datamodule.prepare_data()
    result = export_model(net, spec, Path(cfg.output_dir), config, datamodule)
    for report in result.reports:
        log.info("%s", report.summary())
    log.info("Exported: %s", json.dumps({k: str(v) for k, v in result.paths.items()}))
    return result


@hydra.main(config_path=config_dir(), config_name="export", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        export(cfg)
    except AccuracyDropError as err:
        log.error("INT8 ACCURACY CHECK FAILED\n%s", err)
        sys.exit(1)


if __name__ == "__main__":
    run_cli(main)
