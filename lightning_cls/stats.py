"""``python -m lightning_cls.stats data=...``: per-channel mean/std of the training split,
printed as a config snippet to paste into the data config before normalizing custom data."""

from __future__ import annotations

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig

from lightning_cls import config_dir
from lightning_cls.cli import run_cli


def stats(cfg: DictConfig) -> dict[str, list[float]]:
    # Imported here: --help and config errors stay light (tests/test_layers.py).
    from lightning_cls.data.stats import channel_stats

    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    train = datamodule.splits["train"]
    mean, std = channel_stats(train.images)
    values = lambda xs: "[" + ", ".join(f"{x:.4f}" for x in xs) + "]"  # noqa: E731
    print(f"# per-channel statistics of data={cfg.data.name}, train split ({len(train)} images)")
    print(
        "# paste into ./conf/data/<yours>.yaml (a conf/ where you run is searched: data=<yours>),\n"
        "# or pass data.mean=... data.std=... on the command line"
    )
    print(f"mean: {values(mean)}")
    print(f"std: {values(std)}")
    return {"mean": mean, "std": std}


@hydra.main(config_path=config_dir(), config_name="stats", version_base="1.3")
def main(cfg: DictConfig) -> None:
    stats(cfg)


if __name__ == "__main__":
    run_cli(main)
