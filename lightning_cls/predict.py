"""``python -m lightning_cls.predict ckpt_path=... inputs=<files or folder>``: batched inference
to a CSV (file, top-k labels, probabilities), using the preprocessing stored in the checkpoint.
Files that are not readable images are listed with the reason, never silently dropped."""

from __future__ import annotations

import logging

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from lightning_cls import config_dir
from lightning_cls.images import find_images, load_image_batch, write_predictions_csv
from lightning_cls.module import ClassificationModule

log = logging.getLogger(__name__)


def predict(cfg: DictConfig) -> list[dict]:
    device = "cuda" if cfg.device == "auto" and torch.cuda.is_available() else cfg.device
    device = "cpu" if device == "auto" else device
    module = ClassificationModule.load_from_checkpoint(cfg.ckpt_path, map_location=device)
    module.eval()
    hp = module.hparams
    inputs = OmegaConf.to_container(cfg.inputs) if OmegaConf.is_list(cfg.inputs) else [cfg.inputs]
    files = find_images(inputs)
    rows, failures = [], []
    for start in range(0, len(files), cfg.batch_size):
        chunk = files[start : start + cfg.batch_size]
        x, ok, bad = load_image_batch(chunk, hp.image_size, hp.num_channels, hp.mean, hp.std)
        failures += bad
        if not ok:
            continue
        with torch.inference_mode():
            probs = torch.softmax(module(x.to(device)).float(), dim=1).cpu()  # (B, K)
        top = probs.topk(min(cfg.top_k, probs.shape[1]), dim=1)
        for path, p, i in zip(ok, top.values.tolist(), top.indices.tolist()):
            rows.append({"file": str(path), "labels": [hp.classes[j] for j in i], "probs": p})
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
