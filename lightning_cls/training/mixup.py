"""``BatchMixer``: batch-level MixUp / CutMix (torchvision.transforms.v2) for training batches.

``ClassificationModule(task={"name": "multiclass", "mixup_alpha": ...})`` applies it in ``training_step``,
on the normalized float batch on its device (after the DataModule's ``on_after_batch_transfer``),
so it works with the uint8 tensor pipeline and the PIL one. Targets become soft ``(B, K)``
probabilities: ``nn.CrossEntropyLoss`` takes them as they are, and the module scores accuracy
against their argmax.

Why the module and not a callback: mixing changes the targets and so the loss, which the module
owns; Lightning offers no documented hook through which a callback replaces the batch that
``training_step`` receives, and it calls only one ``on_after_batch_transfer`` (the DataModule's,
which runs the tensor pipeline) when both the module and the DataModule define it.
"""

from __future__ import annotations

import torch
from torchvision.transforms import v2


class BatchMixer:
    """``(x, y) -> (mixed x, soft y)`` with probability ``prob``, else ``(x, y)`` unchanged.

    ``mixup_alpha``/``cutmix_alpha`` > 0 switch each on; with both, each batch picks one at
    random. Draws come from the global RNG (saved in checkpoints by ``RngState``).
    """

    def __init__(
        self,
        num_classes: int,
        mixup_alpha: float = 0.0,
        cutmix_alpha: float = 0.0,
        prob: float = 1.0,
    ):
        if not 0.0 <= prob <= 1.0:
            raise ValueError(f"mix_prob must be in [0, 1], got {prob}.")
        if mixup_alpha < 0 or cutmix_alpha < 0:
            raise ValueError(
                f"mixup_alpha and cutmix_alpha must be >= 0 (0 = off), got {mixup_alpha} and "
                f"{cutmix_alpha}."
            )
        choices = []
        if mixup_alpha > 0:
            choices.append(v2.MixUp(alpha=mixup_alpha, num_classes=num_classes))
        if cutmix_alpha > 0:
            choices.append(v2.CutMix(alpha=cutmix_alpha, num_classes=num_classes))
        if not choices:
            raise ValueError(
                "BatchMixer needs mixup_alpha > 0 or cutmix_alpha > 0 (e.g. 0.2 / 1.0)."
            )
        self.mixer = choices[0] if len(choices) == 1 else v2.RandomChoice(choices)
        self.prob = prob

    def __call__(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # x (B, C, H, W) float, y (B,) int64 -> (B, C, H, W), (B, K) soft targets
        if self.prob < 1.0 and torch.rand(()) >= self.prob:
            return x, y
        return self.mixer(x, y)
