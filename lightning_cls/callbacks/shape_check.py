"""``ShapeCheck``: before fitting, push one dummy batch of the data's shape through the network.

A model built for other inputs (``image_size``, channels) would otherwise fail deep inside
the first training step with a bare "mat1 and mat2 shapes cannot be multiplied"; this turns it
into a ``ShapeMismatchError`` naming the layer, the layer that fed it and both shapes.
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch

from lightning_cls.shapes import trace


class ShapeCheck(pl.Callback):
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        datamodule = trainer.datamodule
        channels = getattr(datamodule, "num_channels", None)
        size = getattr(datamodule, "image_size", None)
        net = getattr(pl_module, "net", None)
        if net is None or not channels or not size:
            return  # nothing to compare against
        x = torch.zeros(2, channels, size, size, device=pl_module.device)  # (2, C, H, W)
        was_training = net.training
        net.eval()
        try:
            with torch.no_grad():
                trace(net, x)
        finally:
            net.train(was_training)
