"""Exact resume: 2 epochs straight == 1 epoch + resume from last.ckpt + 1 epoch."""

from __future__ import annotations

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_cls.callbacks import RngState

# The train loader's position travels in the DataModule's state (ImageDataModule.state_dict),
# which Lightning restores even for end-of-epoch checkpoints.


def _fit(tiny_data, tiny_module, tmp_path, max_epochs, ckpt_path=None):
    pl.seed_everything(7, workers=True)
    # Random crop + flip make the run depend on the global RNG as well as the loader order.
    data = tiny_data(crop_padding=1, hflip=True)
    module = tiny_module(data, dropout=0.2)
    checkpoint = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True, save_top_k=0)
    trainer = pl.Trainer(
        default_root_dir=tmp_path,
        accelerator="cpu",
        devices=1,
        max_epochs=max_epochs,
        deterministic=True,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_val_batches=1,
        callbacks=[checkpoint, RngState()],
    )
    trainer.fit(module, datamodule=data, ckpt_path=ckpt_path)
    return module, trainer


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
