from __future__ import annotations

import logging

import pytest

from lightning_cls.callbacks import DataWaitProfiler, GradNormLogger
from lightning_cls.callbacks.data_profiler import advice


def test_grad_norm_is_logged(tiny_data, tiny_module, tiny_trainer):
    data = tiny_data()
    trainer = tiny_trainer([GradNormLogger(per_layer=True)], limit_val_batches=0)
    trainer.fit(tiny_module(data), datamodule=data)
    metrics = trainer.logged_metrics
    assert float(metrics["train/grad_norm"]) > 0
    assert "train/grad_norm/net.features.0.weight" in metrics


def test_grad_norm_rejects_bad_norm():
    with pytest.raises(ValueError, match="norm_type must be > 0"):
        GradNormLogger(norm_type=0)


def test_profiler_measures_a_slow_loader(tiny_data, tiny_module, tiny_trainer, caplog):
    import time

    data = tiny_data(pipeline="pil")
    loader_factory = data.train_dataloader
    profiler = DataWaitProfiler(skip_first=0)

    class SlowIter:
        def __init__(self, loader):
            self.loader = loader

        def __len__(self):
            return len(self.loader)

        def __iter__(self):
            for batch in self.loader:
                time.sleep(0.05)
                yield batch

    data.train_dataloader = lambda: SlowIter(loader_factory())
    trainer = tiny_trainer([profiler], limit_val_batches=0)
    with caplog.at_level(logging.INFO, logger="lightning_cls"):
        trainer.fit(tiny_module(data), datamodule=data)
    assert profiler.wait_fraction > 0.5
    assert "data.pipeline=tensor" in caplog.text and "data.num_workers" in caplog.text


def test_advice_when_not_bottlenecked():
    assert "not the bottleneck" in advice(0.05, None, threshold=0.2)
