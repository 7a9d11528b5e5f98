"""``RichProgressBar``: Lightning's, redrawn at most ``min_interval`` seconds apart in training.

Lightning 2.6's ``RichProgressBar`` redraws after every training batch (its ``refresh_rate``
only switches it on and off): its ``on_train_batch_end`` rebuilt the bar's metrics and redrew
twice, 0.18 ms of CPU per SimpleCNN step at batch 64 on the 2-vCPU EPYC of docs/benchmarks.md
(issue 55), at ~15 steps a second. Here a training batch's update is skipped when the last one
drawn is less than ``min_interval`` seconds old (0.1 s: Rich's own 10 redraws a second), so short
steps pay it ~10 times a second, and steps longer than that (cifar10_fast on a CPU) at every
step as before. The last batch of an epoch is always drawn, and everything else (validation,
the epoch's end, the metrics shown) is Lightning's; ``min_interval=0`` redraws every batch.
"""

from __future__ import annotations

import math
import time

from pytorch_lightning.callbacks import RichProgressBar as _LightningRichProgressBar


class RichProgressBar(_LightningRichProgressBar):
    """Lightning's ``RichProgressBar`` (same arguments), plus ``min_interval``: the fewest seconds
    between two redraws of the training bar (the epoch's last batch is always drawn)."""

    def __init__(self, *args, min_interval: float = 0.1, **kwargs):
        super().__init__(*args, **kwargs)
        if not min_interval >= 0:
            raise ValueError(
                f"RichProgressBar: min_interval must be >= 0 seconds, got {min_interval!r} "
                "(0 redraws after every batch)."
            )
        self.min_interval = min_interval
        self._drawn = -math.inf  # time.monotonic() of the last training redraw

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        now = time.monotonic()
        last = batch_idx + 1 >= self.total_train_batches
        if now - self._drawn < self.min_interval and not last:
            return
        self._drawn = now
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
