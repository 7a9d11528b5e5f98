"""``OOMAdvisor``: turn an out-of-memory error into the settings that avoid it.

Halving the batch and doubling ``accumulate_grad_batches`` keeps the effective batch (and so
the learning-rate schedule) the same while halving activation memory.
"""

from __future__ import annotations

import logging

import pytorch_lightning as pl
import torch

log = logging.getLogger(__name__)


def is_out_of_memory(err: BaseException) -> bool:
    return isinstance(err, torch.OutOfMemoryError) or (
        isinstance(err, RuntimeError) and "out of memory" in str(err).lower()
    )


def oom_advice(batch_size: int | None, accumulate: int) -> str:
    if not batch_size or batch_size < 2:
        return (
            "Out of memory even at data.batch_size=1: use a smaller model or data.image_size, "
            "trainer.precision=bf16-mixed, or model.checkpoint_activations=true (simplecnn, "
            "resnet18)."
        )
    half = batch_size // 2
    return (
        f"Out of memory at data.batch_size={batch_size}. Try data.batch_size={half} "
        f"trainer.accumulate_grad_batches={accumulate * 2} (same effective batch of "
        f"{batch_size * accumulate}), or find the largest batch that fits with tuner=batch_size. "
        "trainer.precision=bf16-mixed and model.checkpoint_activations=true (simplecnn, "
        "resnet18) also save memory."
    )


class OOMAdvisor(pl.Callback):
    """On an OOM error, log the advice and attach it to the exception as a note."""

    def on_exception(self, trainer: pl.Trainer, pl_module, exception: BaseException) -> None:
        if not is_out_of_memory(exception):
            return
        datamodule = trainer.datamodule
        batch_size = getattr(datamodule, "batch_size", None)
        advice = oom_advice(batch_size, int(trainer.accumulate_grad_batches))
        log.error(advice)
        if hasattr(exception, "add_note"):  # Python >= 3.11: shown under the traceback
            exception.add_note(advice)
