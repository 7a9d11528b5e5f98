"""``ShapeCheck``: before fitting, push one dummy batch of the data's shape through the network.

A model built for other inputs (``image_size``, channels) would otherwise fail deep inside
the first training step with a bare "mat1 and mat2 shapes cannot be multiplied"; this turns it
into a ``ShapeMismatchError`` naming the layer, the layer that fed it and both shapes.
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch

from lightning_cls.training.shapes import trace


class ShapeCheck(pl.Callback):
    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        datamodule = trainer.datamodule
        channels = getattr(datamodule, "num_channels", None)
        size = getattr(datamodule, "image_size", None)
        net = getattr(pl_module, "net", None)
        if net is None or not channels or not size:
            return  # nothing to compare against
        # The network's own dtype: under bf16-true/16-true its weights are already converted.
        param = next(net.parameters(), None)
        dtype = param.dtype if param is not None and param.is_floating_point() else torch.float32
        shape = (2, channels, size, size)  # (B, C, H, W)
        x = torch.zeros(shape, device=pl_module.device, dtype=dtype)
        was_training = net.training
        net.eval()
        try:
            with torch.no_grad():
                trace(net, x)
        finally:
            net.train(was_training)
