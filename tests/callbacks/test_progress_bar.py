"""lightning_cls.callbacks.progress_bar.RichProgressBar: training redraws at most min_interval
seconds apart, the epoch's last batch always drawn, Lightning's bar otherwise."""

from __future__ import annotations

import pytest
from pytorch_lightning.callbacks import RichProgressBar as LightningBar

from lightning_cls.callbacks.progress_bar import RichProgressBar


@pytest.fixture
def drawn(monkeypatch):
    """The batch indices Lightning's own on_train_batch_end drew, in order."""
    seen: list[int] = []
    lightning_hook = LightningBar.on_train_batch_end

    def spy(self, trainer, pl_module, outputs, batch, batch_idx):
        seen.append(batch_idx)
        lightning_hook(self, trainer, pl_module, outputs, batch, batch_idx)

    monkeypatch.setattr(LightningBar, "on_train_batch_end", spy)
    return seen


@pytest.mark.parametrize("interval", [3600.0, 0.0])
def test_training_bar_redraws_at_most_every_min_interval_and_always_at_the_epoch_end(
    interval, drawn, tiny_data, tiny_module, tiny_trainer
):
    data = tiny_data()
    bar = RichProgressBar(min_interval=interval)
    trainer = tiny_trainer([bar], max_epochs=2, limit_val_batches=0, enable_progress_bar=True)
    trainer.fit(tiny_module(data), datamodule=data)
    n = trainer.num_training_batches
    assert n >= 3
    if interval:  # an hour apart: each epoch's first batch, then its last
        assert drawn == [0, n - 1, n - 1]  # epoch 1's first: less than an hour after epoch 0's end
    else:
        assert drawn == list(range(n)) * 2
    # the bar shows the epoch's last batch: the count Lightning drew last
    task = bar.progress.tasks[bar.train_progress_bar_id]
    assert task.completed == n


def test_negative_min_interval_is_refused_with_the_fix():
    with pytest.raises(
        ValueError, match=r"min_interval must be >= 0 seconds, got -1\.0 \(0 redraws"
    ):
        RichProgressBar(min_interval=-1.0)
