"""``GradNormLogger``: log the gradient norm each optimizer step (before clipping).

A norm that grows step after step precedes a loss spike or NaN; one that sits far above
``trainer.gradient_clip_val`` means clipping is doing most of the work (lower the LR).
"""

from __future__ import annotations

import pytorch_lightning as pl
from pytorch_lightning.utilities import grad_norm


class GradNormLogger(pl.Callback):
    """Log ``train/grad_norm`` (total ``norm_type``-norm); ``per_layer=True`` adds one metric per
    parameter (``train/grad_norm/<name>``)."""

    def __init__(self, norm_type: float = 2.0, per_layer: bool = False):
        if norm_type <= 0:
            raise ValueError(f"norm_type must be > 0 (2.0 for the L2 norm), got {norm_type}.")
        self.norm_type, self.per_layer = float(norm_type), per_layer

    def on_before_optimizer_step(self, trainer, pl_module: pl.LightningModule, optimizer) -> None:
        norms = grad_norm(pl_module, norm_type=self.norm_type)
        total_key = f"grad_{self.norm_type}_norm_total"
        if total_key not in norms:  # no parameter has a gradient yet
            return
        metrics = {"train/grad_norm": norms[total_key]}
        if self.per_layer:
            prefix = f"grad_{self.norm_type}_norm/"
            metrics.update(
                {
                    f"train/grad_norm/{k[len(prefix) :]}": v
                    for k, v in norms.items()
                    if k != total_key
                }
            )
        pl_module.log_dict(metrics, on_step=True, on_epoch=False)
