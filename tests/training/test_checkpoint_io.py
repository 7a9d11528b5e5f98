"""AtomicCheckpointIO: every write is temp file + fsync + rename; failures keep the old file."""

from __future__ import annotations

import os

import pytest
import torch

from lightning_cls.training.checkpoint_io import AtomicCheckpointIO


def test_save_replaces_the_file_and_leaves_no_temp_file(tmp_path):
    io = AtomicCheckpointIO()
    target = tmp_path / "sub" / "last.ckpt"
    io.save_checkpoint({"step": 1}, target)
    io.save_checkpoint({"step": 2}, target)
    assert io.load_checkpoint(target, weights_only=True) == {"step": 2}
    assert sorted(p.name for p in target.parent.iterdir()) == ["last.ckpt"]


def test_a_failed_write_keeps_the_previous_checkpoint(tmp_path):
    class Failing(AtomicCheckpointIO):
        def write(self, checkpoint, path):
            path.write_bytes(b"half a checkpoint")
            raise OSError("disk full")

    target = tmp_path / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"step": 1}, target)
    with pytest.raises(OSError, match="disk full"):
        Failing().save_checkpoint({"step": 2}, target)
    assert torch.load(target, weights_only=True) == {"step": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]


def test_temp_files_of_a_killed_writer_are_removed_at_the_next_save(tmp_path):
    stale = tmp_path / f".last.ckpt.{os.getpid() + 1}.tmp"  # another (dead) process's temp file
    other = tmp_path / ".best.ckpt.1.tmp"  # another checkpoint's: left alone
    stale.write_bytes(b"truncated")
    other.write_bytes(b"truncated")
    AtomicCheckpointIO().save_checkpoint({"step": 3}, tmp_path / "last.ckpt")
    assert not stale.exists() and other.exists()


def test_storage_options_are_refused_with_the_fix(tmp_path):
    with pytest.raises(TypeError, match="storage_options=.*without storage_options"):
        AtomicCheckpointIO().save_checkpoint({}, tmp_path / "x.ckpt", storage_options={"a": 1})


@pytest.mark.parametrize("trainer", ["default", "cpu", "ddp_sim"])
def test_every_trainer_config_writes_through_the_plugin(trainer, tmp_path):
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from lightning_cls import config_dir

    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        overrides = [
            f"trainer={trainer}",
            f"paths.output_dir={tmp_path}",
            "trainer.accelerator=cpu",
        ]
        cfg = compose("train", overrides=overrides)
    built = instantiate(cfg.trainer, logger=False)
    assert isinstance(built.strategy.checkpoint_io, AtomicCheckpointIO)
