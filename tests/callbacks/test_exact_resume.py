"""Exact resume: 2 epochs straight == 1 epoch + resume from last.ckpt + 1 epoch.

The uninterrupted and the interrupted runs are trained once per module (fixtures) and only
read by the tests; each test trains just its own resumed run.
"""

from __future__ import annotations

import pytest
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from helpers import SGD, SMALL, make_data, make_module, make_trainer
from lightning_cls.callbacks import EarlyStopping, RngState
from lightning_cls.data.preset import AugmentPreset

# The train loader's position travels in the DataModule's state (ImageDataModule.state_dict),
# which Lightning restores even for end-of-epoch checkpoints.


def _fit(root, max_epochs, ckpt_path=None, stop: EarlyStopping | None = None):
    """A deterministic run writing last.ckpt every epoch (+ RngState, + ``stop`` if given)."""
    pl.seed_everything(7, workers=True)
    # Random crop + flip make the run depend on the global RNG as well as the loader order.
    data = make_data(SMALL, augment=AugmentPreset(crop_padding=1, hflip=True))
    module = make_module(data, optimizer=SGD, dropout=0.2)
    checkpoint = ModelCheckpoint(dirpath=root / "ckpt", save_last=True, save_top_k=0)
    callbacks = [*([stop] if stop else []), checkpoint, RngState()]
    options = {} if stop else {"limit_val_batches": 1}
    trainer = make_trainer(root, callbacks, max_epochs=max_epochs, deterministic=True, **options)
    trainer.fit(module, datamodule=data, ckpt_path=ckpt_path)
    return module, trainer


@pytest.fixture(scope="module")
def two_epochs(tmp_path_factory):
    """(the 2-epoch run's module, the last.ckpt of a run stopped after epoch 1)."""
    root = tmp_path_factory.mktemp("exact_resume")
    straight, _ = _fit(root / "a", max_epochs=2)
    _fit(root / "b", max_epochs=1)
    return straight, root / "b" / "ckpt" / "last.ckpt"


def test_resume_reproduces_the_uninterrupted_run(two_epochs, tmp_path):
    straight, last = two_epochs
    assert last.is_file()
    resumed, trainer = _fit(tmp_path / "c", max_epochs=2, ckpt_path=last)
    assert trainer.current_epoch == 2
    a, b = straight.net.state_dict(), resumed.net.state_dict()
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=f"{key} differs")


def test_without_rng_state_augmented_resume_diverges(two_epochs, tmp_path):
    """Guards the test above: it must be sensitive to the RNG, or RngState proves nothing."""
    straight, last = two_epochs
    ckpt = torch.load(last, weights_only=True)
    ckpt["callbacks"] = {k: v for k, v in ckpt["callbacks"].items() if "RngState" not in k}
    torch.save(ckpt, tmp_path / "no_rng.ckpt")
    resumed, _ = _fit(tmp_path / "c", 2, ckpt_path=tmp_path / "no_rng.ckpt")
    a, b = straight.net.state_dict(), resumed.net.state_dict()
    assert any(not torch.equal(a[k], b[k]) for k in a)


# Early stopping (callbacks=[default,early_stopping]): its counters travel in the checkpoint,
# so a run resumed from last.ckpt stops at the epoch the uninterrupted run stopped at.
def _fit_until_stopped(root, max_epochs, ckpt_path=None):
    # val/acc of 16 images stops improving after a few epochs.
    stop = EarlyStopping(monitor="val/acc", mode="max", patience=3)
    module, trainer = _fit(root, max_epochs, ckpt_path, stop)
    return module, trainer, stop


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """The run that stops early by itself (root "a") and one interrupted two epochs before its
    stop (root "b"): (module, trainer, its EarlyStopping, the interrupted run's)."""
    root = tmp_path_factory.mktemp("early_stop")
    straight, trainer, stop = _fit_until_stopped(root / "a", 20)
    _, _, first = _fit_until_stopped(root / "b", stop.stopped_epoch - 1)
    return root, straight, trainer, stop, first


def test_resume_with_early_stopping_stops_at_the_same_epoch(stopped, tmp_path):
    root, straight, trainer, stop, first = stopped
    assert 4 <= stop.stopped_epoch < 19  # it did stop early
    # Interrupted two epochs before the stop, inside the patience window (wait_count 1).
    assert first.wait_count >= 1  # the resume point sits inside a patience window
    last = root / "b" / "ckpt" / "last.ckpt"
    resumed, trainer_r, stop_r = _fit_until_stopped(tmp_path / "c", 20, last)
    assert stop_r.stopped_epoch == stop.stopped_epoch
    assert trainer_r.current_epoch == trainer.current_epoch
    assert stop_r.state_dict() == stop.state_dict()
    a, b = straight.net.state_dict(), resumed.net.state_dict()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=0, msg=f"{key} differs")


def test_without_its_state_early_stopping_resumes_late(stopped, tmp_path):
    """Guards the test above: losing the counters changes the stopping epoch."""
    root, _, _, stop, _ = stopped
    ckpt = torch.load(root / "b" / "ckpt" / "last.ckpt", weights_only=True)
    ckpt["callbacks"] = {k: v for k, v in ckpt["callbacks"].items() if "EarlyStopping" not in k}
    torch.save(ckpt, tmp_path / "no_es.ckpt")
    _, _, stop_r = _fit_until_stopped(tmp_path / "c", 20, tmp_path / "no_es.ckpt")
    assert stop_r.stopped_epoch > stop.stopped_epoch


def test_a_run_resumed_after_its_stop_stays_stopped(stopped, tmp_path):
    # A requeued job killed while testing resumes from the checkpoint of the epoch it stopped at.
    root, straight, trainer, stop, _ = stopped
    last = root / "a" / "ckpt" / "last.ckpt"
    resumed, trainer_r, stop_r = _fit_until_stopped(tmp_path / "c", 20, last)
    assert (trainer_r.current_epoch, trainer_r.global_step) == (
        trainer.current_epoch,
        trainer.global_step,
    )  # Lightning's own EarlyStopping trains one more epoch here
    assert stop_r.state_dict() == stop.state_dict()
    a, b = straight.net.state_dict(), resumed.net.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
