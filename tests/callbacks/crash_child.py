"""Child process of test_crash_safety.py: trains, checkpointing every step, writing slowly.

argv: out_dir checkpoint_class ("atomic" | "plain"). Files ``<out>/saving-<n>`` and
``<out>/step-<n>`` tell the parent when the n-th save starts and the n-th step ends.
"""

import sys
import time
from pathlib import Path

sys.path.insert(1, str(Path(__file__).resolve().parents[1]))  # tests/: helpers/

import pytorch_lightning as pl
import torch
from lightning_fabric.plugins.io import torch_io
from pytorch_lightning.callbacks import ModelCheckpoint

from helpers import SGD, make_data, make_module, make_trainer
from lightning_cls.training.checkpoint_io import AtomicCheckpointIO

out, kind = Path(sys.argv[1]), sys.argv[2]
saves = 0


def slow_save(checkpoint, filepath):
    """Write the checkpoint in small chunks with pauses, so a kill lands mid-write."""
    global saves
    saves += 1
    buffer = __import__("io").BytesIO()
    torch.save(checkpoint, buffer)
    data = buffer.getvalue()
    with open(filepath, "wb") as f:
        for i in range(0, len(data), 512):
            f.write(data[i : i + 512])
            f.flush()
            if i == 0:  # the file now holds a first chunk, and ~30 more are to come
                (out / f"saving-{saves}").touch()
            time.sleep(0.01)


class SlowAtomicCheckpointIO(AtomicCheckpointIO):
    def write(self, checkpoint, path):
        slow_save(checkpoint, path)


class StepMarker(pl.Callback):
    def on_train_batch_end(self, trainer, *args):
        (out / f"step-{trainer.global_step}").touch()
        time.sleep(0.05)


torch_io._atomic_save = slow_save  # Lightning's writer, used by the "plain" control run
torch.set_num_threads(1)
pl.seed_everything(0)
plugins = [SlowAtomicCheckpointIO()] if kind == "atomic" else []
checkpoint = ModelCheckpoint(
    dirpath=out / "ckpt", save_last=True, save_top_k=0, every_n_train_steps=1
)
data = make_data()
trainer = make_trainer(
    out, [checkpoint, StepMarker()], max_epochs=1000, limit_val_batches=0, plugins=plugins
)
trainer.fit(make_module(data, optimizer=SGD), datamodule=data)
