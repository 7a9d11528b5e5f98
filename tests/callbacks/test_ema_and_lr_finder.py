"""Lightning's EMAWeightAveraging (callbacks=[default,ema]) with our module, and LRFinderPlot."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import EMAWeightAveraging


class WeightSpy(pl.Callback):
    """Listed after the EMA callback: records the raw weights after every optimizer step and
    the weights validation runs with."""

    def __init__(self):
        self.raw: list[dict[str, torch.Tensor]] = []
        self.validated: list[tuple[int, dict[str, torch.Tensor]]] = []

    @staticmethod
    def _weights(pl_module):
        return {k: v.detach().clone() for k, v in pl_module.named_parameters()}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.raw.append(self._weights(pl_module))

    def on_validation_epoch_start(self, trainer, pl_module):
        self.validated.append((len(self.raw), self._weights(pl_module)))


def _ema(raw: list[dict[str, torch.Tensor]], decay: float) -> dict[str, torch.Tensor]:
    """The EMA of the raw weights after each step (the first update copies them)."""
    average = dict(raw[0])
    for weights in raw[1:]:
        average = {k: decay * average[k] + (1 - decay) * weights[k] for k in average}
    return average


def test_ema_weights_are_validated_checkpointed_and_kept(
    tmp_path, tiny_data, tiny_module, tiny_trainer
):
    data = tiny_data()
    module = tiny_module(data)
    spy = WeightSpy()
    trainer = tiny_trainer([EMAWeightAveraging(decay=0.5), spy], max_epochs=2, limit_val_batches=1)
    trainer.fit(module, datamodule=data)
    assert [steps for steps, _ in spy.validated] == [3, 6]
    for steps, weights in spy.validated:  # validation saw the average, not the raw weights
        expected = _ema(spy.raw[:steps], decay=0.5)
        for name, value in weights.items():
            torch.testing.assert_close(value, expected[name])
        assert any(not torch.allclose(weights[k], spy.raw[steps - 1][k]) for k in weights)
    final = _ema(spy.raw, decay=0.5)
    for name, value in module.named_parameters():  # after fit the module holds the average
        torch.testing.assert_close(value.detach(), final[name])
    trainer.save_checkpoint(tmp_path / "ema.ckpt")
    saved = torch.load(tmp_path / "ema.ckpt", weights_only=True)["state_dict"]
    for name, value in final.items():  # and so does a checkpoint written after fit
        torch.testing.assert_close(saved[name], value)


def test_lr_finder_saves_plot_and_suggests(tmp_path, tiny_data, tiny_module, tiny_trainer):
    from lightning_cls.callbacks import LRFinderPlot

    data = tiny_data()
    finder = LRFinderPlot(dirpath=str(tmp_path), num_training_steps=20, early_stop_threshold=None)
    trainer = tiny_trainer([finder], limit_val_batches=0, max_epochs=10)
    trainer.fit(tiny_module(data), datamodule=data)
    assert (tmp_path / "lr_finder.png").read_bytes()[:4] == b"\x89PNG"
    assert finder.suggestion is not None and finder.suggestion > 0
