"""``python -m lightning_cls.predict ckpt_path=<any model artifact> inputs=<files or folder>``:
batched inference to a CSV (file, top-k labels, probabilities), using the preprocessing stored
with the artifact. ``ckpt_path`` may be a ``.ckpt``, a ``model_weights.pt`` (+ ``model_name=``
if nothing beside it says which network), a ``.torchscript``, an ``.onnx`` (fp32 or int8) or a
``.pt2``. Files that are not readable images are listed with the reason, never silently dropped."""

from __future__ import annotations

import logging

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from lightning_cls import config_dir
from lightning_cls.export.artifacts import load_artifact, predict_files
from lightning_cls.images import find_images, write_predictions_csv

log = logging.getLogger(__name__)


def predict(cfg: DictConfig) -> list[dict]:
    device = "cuda" if cfg.device == "auto" and torch.cuda.is_available() else cfg.device
    device = "cpu" if device == "auto" else device
    predictor = load_artifact(cfg.ckpt_path, model_name=cfg.get("model_name"), device=device)
    log.info("Loaded %s", predictor)
    inputs = OmegaConf.to_container(cfg.inputs) if OmegaConf.is_list(cfg.inputs) else [cfg.inputs]
    files = find_images(inputs)
    rows, failures = predict_files(predictor, files, cfg.batch_size, cfg.top_k)
    write_predictions_csv(cfg.output, rows, failures, cfg.top_k)
    log.info("Wrote %d predictions to %s", len(rows), cfg.output)
    for path, reason in failures:
        log.warning("Skipped %s: %s", path, reason)
    return rows


@hydra.main(config_path=config_dir(), config_name="predict", version_base="1.3")
def main(cfg: DictConfig) -> None:
    predict(cfg)


if __name__ == "__main__":
    main()
