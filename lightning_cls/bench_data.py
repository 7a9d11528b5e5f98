"""``python -m lightning_cls.bench_data data=... [data.pipeline=tensor|pil]``: images per second
(and peak RSS) for loading + augmentation alone — the classic "loop over the loader, no forward/backward"
test. The last line of output is one JSON object with the figures."""

from __future__ import annotations

import json
import logging
import resource
import statistics
import time

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig

from lightning_cls import config_dir
from lightning_cls.cli import run_cli

log = logging.getLogger(__name__)


def bench(cfg: DictConfig) -> dict:
    """Time ``cfg.epochs`` passes over the train loader of ``cfg.data``; return the figures."""
    import torch  # here: --help and config errors stay light (tests/test_layers.py)

    torch.manual_seed(cfg.seed)
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    loader = datamodule.train_dataloader()  # outside a Trainer: batches arrive augmented

    batches = iter(loader)
    for _ in range(cfg.warmup_batches):  # worker start-up, first-touch of a memory map
        next(batches, None)
    # Close the warm-up iterator: its (non-persistent) workers would otherwise keep running
    # and prefetching beside the timed passes' own.
    del batches

    # Whole passes include what a real epoch pays (e.g. starting non-persistent workers);
    # the per-batch median is robust to other jobs stealing the CPU for a moment.
    images, seconds, per_batch = 0, 0.0, []
    for _ in range(cfg.epochs):
        started = last = time.perf_counter()
        for i, (x, _) in enumerate(loader):
            now = time.perf_counter()
            per_batch.append(x.shape[0] / (now - last))
            images, last = images + x.shape[0], now
            if cfg.max_batches is not None and i + 1 >= cfg.max_batches:
                break
        seconds += time.perf_counter() - started

    result = {
        "task": "bench_data",
        "data": cfg.data.name,
        "pipeline": datamodule.pipeline,
        "batch_size": datamodule.batch_size,
        "num_workers": datamodule.num_workers,
        "torch_threads": torch.get_num_threads(),
        "images": images,
        "seconds": round(seconds, 4),
        "img_s": round(images / seconds, 1) if seconds else None,
        "img_s_median_batch": round(statistics.median(per_batch), 1) if per_batch else None,
        "image_size": int(x.shape[-1]) if images else None,
        # Peak resident memory of this process and (separately) of its largest finished
        # DataLoader worker: the per-sample pipeline's workers each hold their own copies.
        "peak_rss_mb": _peak_rss_mb(resource.RUSAGE_SELF),
        "peak_worker_rss_mb": _peak_rss_mb(resource.RUSAGE_CHILDREN),
    }
    log.info(
        "%s (%s pipeline): %.0f img/s load+augment",
        cfg.data.name,
        datamodule.pipeline,
        result["img_s"] or 0,
    )
    return result


def _peak_rss_mb(who: int) -> float:
    return round(resource.getrusage(who).ru_maxrss / 1024, 1)  # ru_maxrss is in KiB on Linux


@hydra.main(config_path=config_dir(), config_name="bench_data", version_base="1.3")
def main(cfg: DictConfig) -> None:
    print(json.dumps(bench(cfg)))


if __name__ == "__main__":
    run_cli(main)
