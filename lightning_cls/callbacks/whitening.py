"""``WhiteningInit``: set a network's frozen patch-whitening stem from the training data.

airbench's first layer is a 2x2 conv whose filters whiten the data's 2x2 patches (the
eigenvectors of their covariance, scaled by 1/sqrt(eigenvalue)). Its weights are frozen and
computed once, at fit start, from a few thousand training images; only its bias trains, and
only for the first ``bias_epochs`` epochs. The network must have an
``init_whitening(images)`` method (``AirbenchNet(whiten=True)``).
"""

from __future__ import annotations

import logging

import pytorch_lightning as pl
import torch
from torch import nn

log = logging.getLogger(__name__)


class WhiteningInit(pl.Callback):
    """Call ``net.init_whitening`` on ``num_images`` normalized training images at fit start.

    ``bias_epochs``: epochs during which the whitening conv's bias trains (then frozen);
    ``None`` leaves it trainable throughout.
    """

    def __init__(self, num_images: int = 5000, bias_epochs: int | None = 3) -> None:
        if num_images < 1:
            raise ValueError(f"WhiteningInit needs num_images >= 1, got num_images={num_images}.")
        if bias_epochs is not None and bias_epochs < 0:
            raise ValueError(
                f"bias_epochs must be >= 0 or None (always train the bias), got {bias_epochs}."
            )
        self.num_images, self.bias_epochs = num_images, bias_epochs
        self._done = False

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        net = _whitened_net(pl_module)
        if trainer.ckpt_path:  # resumed: the checkpoint already holds the fitted filters
            self._done = True
        if self._done:
            return
        images = training_images(trainer.datamodule, self.num_images)
        net.init_whitening(images.to(net.stem.weight.device))
        self._done = True
        log.info("Whitening stem set from %d training images.", len(images))

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        bias = getattr(_whitened_net(pl_module).stem, "bias", None)
        if bias is not None and self.bias_epochs is not None:
            bias.requires_grad_(trainer.current_epoch < self.bias_epochs)

    def state_dict(self) -> dict:
        return {"done": self._done}

    def load_state_dict(self, state_dict: dict) -> None:
        self._done = bool(state_dict.get("done", False))


def _whitened_net(pl_module: pl.LightningModule) -> nn.Module:
    net = getattr(pl_module, "net", pl_module)
    if not callable(getattr(net, "init_whitening", None)):
        raise TypeError(
            f"WhiteningInit needs a network with init_whitening(); {type(net).__name__} has "
            "none. Use model=airbench model.whiten=true, or drop callbacks.whitening."
        )
    return net


def training_images(datamodule, num_images: int) -> torch.Tensor:
    """The first ``num_images`` training images, normalized as the model sees them at eval
    time (no augmentation): (N, C, H, W) float32."""
    splits = getattr(datamodule, "splits", None)
    if datamodule is None or not splits or "train" not in splits:
        raise ValueError(
            "WhiteningInit reads the training images from the DataModule's splits['train'] "
            "(lightning_cls ImageDataModule); fit with such a datamodule."
        )
    images = splits["train"].images[:num_images]  # (N, C, H, W) uint8
    return datamodule.batch_augment()(images, train=False).float()
