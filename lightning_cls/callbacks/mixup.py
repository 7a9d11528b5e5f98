"""``MixupCutmix``: batch-level MixUp / CutMix (torchvision.transforms.v2) on training batches.

Runs on the device, on the normalized float batch (after the DataModule's
``on_after_batch_transfer``), so it works with the uint8 tensor pipeline and the PIL one.
Targets become soft ``(B, K)`` probabilities: ``nn.CrossEntropyLoss`` takes them as they are,
and ``ClassificationModule`` scores accuracy against their argmax.
"""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from torchvision.transforms import v2


def build_mixer(num_classes: int, mixup_alpha: float, cutmix_alpha: float):
    choices = []
    if mixup_alpha > 0:
        choices.append(v2.MixUp(alpha=mixup_alpha, num_classes=num_classes))
    if cutmix_alpha > 0:
        choices.append(v2.CutMix(alpha=cutmix_alpha, num_classes=num_classes))
    if not choices:
        raise ValueError("MixupCutmix needs mixup_alpha > 0 or cutmix_alpha > 0 (e.g. 0.2 / 1.0).")
    return choices[0] if len(choices) == 1 else v2.RandomChoice(choices)


class MixupCutmix(pl.Callback):
    """Mix each training batch with probability ``prob``; validation/test batches are untouched.

    Lightning hands ``training_step`` an immutable ``(x, y)`` tuple, so the callback wraps the
    module's ``training_step`` for the duration of the fit (undone in ``teardown``).
    """

    def __init__(self, mixup_alpha: float = 0.2, cutmix_alpha: float = 1.0, prob: float = 1.0):
        if not 0.0 <= prob <= 1.0:
            raise ValueError(f"prob must be in [0, 1], got {prob}.")
        self.mixup_alpha, self.cutmix_alpha, self.prob = mixup_alpha, cutmix_alpha, prob
        self._original = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if stage != "fit" or self._original is not None:
            return
        num_classes = _num_classes(pl_module)
        mixer = build_mixer(num_classes, self.mixup_alpha, self.cutmix_alpha)
        original = self._original = pl_module.training_step

        def training_step(batch, batch_idx, *args, **kwargs):
            return original(self.mix(batch, mixer), batch_idx, *args, **kwargs)

        pl_module.training_step = training_step

    def mix(self, batch, mixer):
        x, y = batch  # (B, C, H, W) float, (B,) int64
        if y.ndim != 1 or (self.prob < 1.0 and torch.rand(()) >= self.prob):
            return x, y
        return mixer(x, y)  # (B, C, H, W), (B, K) soft targets

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self._original is not None and stage == "fit":
            del pl_module.training_step  # drop the instance attribute: the class method returns
            self._original = None


def _num_classes(pl_module: pl.LightningModule) -> int:
    hparams = getattr(pl_module, "hparams", {}) or {}
    if hparams.get("classes"):
        return len(hparams["classes"])
    num = (hparams.get("model_kwargs") or {}).get("num_classes")
    if not num:
        raise ValueError("MixupCutmix cannot tell the number of classes: pass classes to the module.")
    return int(num)
