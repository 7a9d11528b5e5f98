"""``python -m lightning_cls.optimize_data data=imagefolder data.root=... out=...``: convert any
DataModule's splits (decoded once, as for training) into litdata chunks plus ``dataset.json``
(the dataset's description) that ``data=streaming data.input_dir=<out>`` streams. Upload
``out`` to an object store to stream from there. The last line of output is one JSON object
(counts and where they went).
"""

from __future__ import annotations

import json
import logging

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig

from lightning_cls import config_dir
from lightning_cls.cli import run_cli

log = logging.getLogger(__name__)


def optimize(cfg: DictConfig) -> dict:
    """Decode ``cfg.data``'s train/val/test splits and write them to ``cfg.out``."""
    # Imported here: `--help` and a config error load no torch (tests/test_layers.py).
    from lightning_cls.data.base import data_fields
    from lightning_cls.data.chunks import write_streaming

    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    splits = {name: (s.images, s.labels) for name, s in datamodule.splits.items()}
    meta = data_fields(datamodule.spec)  # the data's keys (a plug-in's spec may be a plain dict)
    meta["image_size"] = int(next(iter(splits.values()))[0].shape[-1])  # the stored size
    meta.pop("resize_size", None)  # streaming: from the stored and the training size
    meta["task"] = getattr(datamodule, "task", "multiclass")  # multilabel: multi-hot labels
    out = write_streaming(splits, meta, cfg.out, chunk_bytes=cfg.chunk_bytes)
    result = {
        "task": "optimize",
        "out": str(out),
        "counts": {k: len(v[1]) for k, v in splits.items()},
    }
    log.info(
        "Wrote %s to %s; train with data=streaming data.input_dir=%s", result["counts"], out, out
    )
    return result


@hydra.main(config_path=config_dir(), config_name="optimize", version_base="1.3")
def main(cfg: DictConfig) -> None:
    print(json.dumps(optimize(cfg)))


if __name__ == "__main__":
    run_cli(main)
