"""``python -m lightning_cls.inspect_model model=... data=...``: trace one batch through the network.

Composes the same config as training (``conf/train.yaml``), takes one training batch and
prints each layer's input and output shape and parameter count — or, when a layer rejects its
input, which layer, both shapes and the setting that disagrees.
"""

from __future__ import annotations

import logging
import sys

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from lightning_cls import config_dir
from lightning_cls.cli import run_cli
from lightning_cls.cli.resolvers import register_resolvers

log = logging.getLogger(__name__)


def inspect_model(cfg: DictConfig) -> str:
    # Imported here: --help and config errors stay light (tests/test_layers.py).
    import torch

    from lightning_cls.data.base import data_fields
    from lightning_cls.inference.network import build_network
    from lightning_cls.models import fill_input_options
    from lightning_cls.training.shapes import format_table, trace

    datamodule = instantiate(cfg.data)
    datamodule.prepare_data()
    datamodule.setup("fit")
    x, _ = next(iter(datamodule.train_dataloader()))  # (B, C, H, W) float, augmented
    model_kwargs = OmegaConf.to_container(cfg.model, resolve=True)
    name = model_kwargs.pop("name")
    fields = data_fields(datamodule.spec)  # null model options follow the data, as in training
    net = build_network(name, fill_input_options(model_kwargs, fields), fields["classes"])
    net.eval()
    with torch.no_grad():
        records = trace(net, x)
    return f"{cfg.model.name} on {cfg.data.name}, batch {list(x.shape)}\n" + format_table(records)


register_resolvers()  # ${run_stamp:...} in conf/hydra/train.yaml


@hydra.main(config_path=config_dir(), config_name="train", version_base="1.3")
def main(cfg: DictConfig) -> None:
    from lightning_cls.training.shapes import ShapeMismatchError

    try:
        print(inspect_model(cfg))
    except ShapeMismatchError as err:
        print(f"Shape mismatch: {err}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    run_cli(main)
