"""Exact resume: 2 epochs straight == 1 epoch + resume from last.ckpt + 1 epoch."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_cls.callbacks import EarlyStopping, RngState

# The train loader's position travels in the DataModule's state (ImageDataModule.state_dict),
# which Lightning restores even for end-of-epoch checkpoints.


def _fit(tiny_data, tiny_module, tmp_path, max_epochs, ckpt_path=None):
    pl.seed_everything(7, workers=True)
    # Random crop + flip make the run depend on the global RNG as well as the loader order.
    data = tiny_data(crop_padding=1, hflip=True)
    module = tiny_module(data, dropout=0.2)
    trainer = _trainer(tmp_path, max_epochs, [], limit_val_batches=1)
    trainer.fit(module, datamodule=data, ckpt_path=ckpt_path)
    return module, trainer


def _trainer(root, max_epochs: int, callbacks: list, **options) -> pl.Trainer:
    """A deterministic CPU trainer that writes last.ckpt every epoch (+ RngState)."""
    checkpoint = ModelCheckpoint(dirpath=root / "ckpt", save_last=True, save_top_k=0)
    return pl.Trainer(
        default_root_dir=root,
        accelerator="cpu",
        devices=1,
        max_epochs=max_epochs,
        deterministic=True,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        callbacks=[*callbacks, checkpoint, RngState()],
        **options,
    )


def test_resume_reproduces_the_uninterrupted_run(tiny_data, tiny_module, tmp_path):
    straight, _ = _fit(tiny_data, tiny_module, tmp_path / "a", max_epochs=2)
    _, first = _fit(tiny_data, tiny_module, tmp_path / "b", max_epochs=1)
    last = tmp_path / "b" / "ckpt" / "last.ckpt"
    assert last.is_file()
    resumed, trainer = _fit(tiny_data, tiny_module, tmp_path / "c", max_epochs=2, ckpt_path=last)
    assert trainer.current_epoch == 2
    a, b = straight.net.state_dict(), resumed.net.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=f"{key} differs")


def test_without_rng_state_augmented_resume_diverges(tiny_data, tiny_module, tmp_path):
    """Guards the test above: it must be sensitive to the RNG, or RngState proves nothing."""
    straight, _ = _fit(tiny_data, tiny_module, tmp_path / "a", max_epochs=2)
    _fit(tiny_data, tiny_module, tmp_path / "b", max_epochs=1)
    ckpt = torch.load(tmp_path / "b" / "ckpt" / "last.ckpt", weights_only=True)
    ckpt["callbacks"] = {k: v for k, v in ckpt["callbacks"].items() if "RngState" not in k}
    torch.save(ckpt, tmp_path / "no_rng.ckpt")
    resumed, _ = _fit(tiny_data, tiny_module, tmp_path / "c", 2, ckpt_path=tmp_path / "no_rng.ckpt")
    a, b = straight.net.state_dict(), resumed.net.state_dict()
    assert any(not torch.equal(a[k], b[k]) for k in a)


# Early stopping (callbacks=[default,early_stopping]): its counters travel in the checkpoint,
# so a run resumed from last.ckpt stops at the epoch the uninterrupted run stopped at.
def _fit_until_stopped(tiny_data, tiny_module, root, max_epochs, ckpt_path=None):
    pl.seed_everything(7, workers=True)
    data = tiny_data(crop_padding=1, hflip=True)
    module = tiny_module(data, dropout=0.2)
    # val/acc of 16 images stops improving after a few epochs.
    stop = EarlyStopping(monitor="val/acc", mode="max", patience=3)
    trainer = _trainer(root, max_epochs, [stop])
    trainer.fit(module, datamodule=data, ckpt_path=ckpt_path)
    return module, trainer, stop


def test_resume_with_early_stopping_stops_at_the_same_epoch(tiny_data, tiny_module, tmp_path):
    straight, trainer, stop = _fit_until_stopped(tiny_data, tiny_module, tmp_path / "a", 20)
    assert 4 <= stop.stopped_epoch < 19  # it did stop early
    # Interrupted two epochs before the stop, inside the patience window (wait_count 1).
    resume_at = stop.stopped_epoch - 1
    _, _, first = _fit_until_stopped(tiny_data, tiny_module, tmp_path / "b", resume_at)
    assert first.wait_count >= 1  # the resume point sits inside a patience window
    last = tmp_path / "b" / "ckpt" / "last.ckpt"
    resumed, trainer_r, stop_r = _fit_until_stopped(
        tiny_data, tiny_module, tmp_path / "c", 20, last
    )
    assert stop_r.stopped_epoch == stop.stopped_epoch
    assert trainer_r.current_epoch == trainer.current_epoch
    assert stop_r.state_dict() == stop.state_dict()
    a, b = straight.net.state_dict(), resumed.net.state_dict()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=f"{key} differs")


def test_without_its_state_early_stopping_resumes_late(tiny_data, tiny_module, tmp_path):
    """Guards the test above: losing the counters changes the stopping epoch."""
    _, _, stop = _fit_until_stopped(tiny_data, tiny_module, tmp_path / "a", 20)
    _fit_until_stopped(tiny_data, tiny_module, tmp_path / "b", stop.stopped_epoch - 1)
    ckpt = torch.load(tmp_path / "b" / "ckpt" / "last.ckpt", weights_only=True)
    ckpt["callbacks"] = {k: v for k, v in ckpt["callbacks"].items() if "EarlyStopping" not in k}
    torch.save(ckpt, tmp_path / "no_es.ckpt")
    _, _, stop_r = _fit_until_stopped(
        tiny_data, tiny_module, tmp_path / "c", 20, tmp_path / "no_es.ckpt"
    )
    assert stop_r.stopped_epoch > stop.stopped_epoch


def test_a_run_resumed_after_its_stop_stays_stopped(tiny_data, tiny_module, tmp_path):
    # A requeued job killed while testing resumes from the checkpoint of the epoch it stopped at.
    straight, trainer, stop = _fit_until_stopped(tiny_data, tiny_module, tmp_path / "a", 20)
    last = tmp_path / "a" / "ckpt" / "last.ckpt"
    resumed, trainer_r, stop_r = _fit_until_stopped(
        tiny_data, tiny_module, tmp_path / "c", 20, last
    )
    assert (trainer_r.current_epoch, trainer_r.global_step) == (
        trainer.current_epoch,
        trainer.global_step,
    )  # Lightning's own EarlyStopping trains one more epoch here
    assert stop_r.state_dict() == stop.state_dict()
    a, b = straight.net.state_dict(), resumed.net.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
