import pytorch_lightning as pl

from lightning_cls.callbacks import WallClock


def test_elapsed_time_is_logged_and_grows(tiny_data, tiny_module, tiny_trainer):
    data = tiny_data()
    clock = WallClock()
    seen = []

    class Record(pl.Callback):
        def on_validation_epoch_end(self, trainer, pl_module):
            seen.append(float(trainer.callback_metrics["time/elapsed_s"]))

    trainer = tiny_trainer([clock, Record()], max_epochs=3)
    trainer.fit(tiny_module(data), datamodule=data)
    assert len(seen) == 3 and 0 < seen[0] < seen[1] < seen[2]


def test_resumed_clock_continues_from_saved_time():
    clock = WallClock()
    clock.load_state_dict({"elapsed_s": 100.0})
    clock.on_fit_start(None, None)
    assert 100.0 <= clock.elapsed() < 101.0
    assert clock.state_dict()["elapsed_s"] >= 100.0
