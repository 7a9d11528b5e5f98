"""``python -m lightning_cls.stats data=...``: per-channel mean/std of the training split,
printed as a config snippet to paste into the data config before normalizing custom data."""

from __future__ import annotations

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig

from lightning_cls import config_dir
from lightning_cls.data.stats import channel_stats


@hydra.main(config_path=config_dir(), config_name="stats", version_base="1.3")
def main(cfg: DictConfig) -> None:
    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    mean, std = channel_stats(datamodule.splits["train"].images)
    fmt = ", ".join
    print(f"# per-channel statistics of {cfg.data.name} train ({len(datamodule.splits['train'])} images)")
    print(f"mean: [{fmt(f'{m:.4f}' for m in mean)}]")
    print(f"std: [{fmt(f'{s:.4f}' for s in std)}]")


if __name__ == "__main__":
    main()
