"""``DataWaitProfiler``: what fraction of each training step is spent waiting for data.

Wait = from the end of one step to the start of the next (fetching, collating, host→device
copy, ``on_after_batch_transfer`` augmentation); compute = forward + backward + optimizer.
When the wait fraction is high the accelerator idles, and a bigger GPU will not help.
"""

from __future__ import annotations

import logging
import time

import pytorch_lightning as pl
import torch

log = logging.getLogger(__name__)


def advice(wait_fraction: float, datamodule, threshold: float) -> str:
    """What to change, given the measured fraction and the DataModule's settings."""
    if wait_fraction < threshold:
        return f"Data loading is not the bottleneck ({wait_fraction:.0%} of each step waits)."
    tips = []
    if getattr(datamodule, "pipeline", None) == "pil":
        tips.append("data.pipeline=tensor (batch augmentation on the device, no per-sample work)")
        if not getattr(datamodule, "num_workers", 0):
            tips.append("data.num_workers=4 (or the number of CPU cores)")
        elif not getattr(datamodule, "persistent_workers", False):
            tips.append("data.persistent_workers=true")
    if torch.cuda.is_available() and not getattr(datamodule, "pin_memory", True):
        tips.append("data.pin_memory=true")
    tips.append("a larger data.batch_size (fewer, bigger transfers)")
    return (
        f"The step waits for data {wait_fraction:.0%} of the time: the accelerator idles. "
        "Try " + "; ".join(tips) + "."
    )


class DataWaitProfiler(pl.Callback):
    """Log ``perf/data_wait_fraction`` per epoch and, at the end of fit, advice that fits.

    The first ``skip_first`` steps (warm-up, compilation) are not counted. On CUDA each step
    end synchronizes so compute time is real; the cost is small next to a step.
    """

    def __init__(self, threshold: float = 0.2, skip_first: int = 2):
        self.threshold, self.skip_first = threshold, skip_first
        self.wait = self.compute = 0.0
        self._last_end: float | None = None
        self._start = 0.0
        self._steps = 0

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._last_end = time.perf_counter()  # epoch start: the first fetch counts as a wait

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._start = time.perf_counter()
        if self._last_end is not None and self._steps >= self.skip_first:
            self.wait += self._start - self._last_end

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if pl_module.device.type == "cuda":
            torch.cuda.synchronize(pl_module.device)
        self._last_end = time.perf_counter()
        if self._steps >= self.skip_first:
            self.compute += self._last_end - self._start
        self._steps += 1

    @property
    def wait_fraction(self) -> float:
        total = self.wait + self.compute
        return self.wait / total if total > 0 else 0.0

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        if self.wait + self.compute > 0:
            pl_module.log("perf/data_wait_fraction", self.wait_fraction, on_epoch=True)

    def on_fit_end(self, trainer, pl_module) -> None:
        if self.wait + self.compute > 0 and trainer.is_global_zero:
            log.info(advice(self.wait_fraction, trainer.datamodule, self.threshold))
