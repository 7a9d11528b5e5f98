"""A tiny flip-TTA SimpleCNN checkpoint and its exports, shared by tests/inference and tests/serve."""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytorch_lightning as pl
import torch
from PIL import Image

from lightning_cls.data import SyntheticDataModule
from lightning_cls.export.exporter import ExportConfig, export_model
from lightning_cls.inference import InputSpec
from lightning_cls.inference.network import network_state_dict
from lightning_cls.module import ClassificationModule


@dataclass
class Artifacts:
    module: ClassificationModule
    spec: InputSpec
    paths: dict[str, Path]  # kind -> file
    images: torch.Tensor  # uint8 (N, 3, 12, 12) validation images


def make_artifacts(root: Path, tta_flip: bool = True, tta_translate: int = 1) -> Artifacts:
    """Train a 3-class SimpleCNN for a few steps (flip + translate TTA on), save .ckpt, weights
    and exports."""
    torch.manual_seed(0)
    data = SyntheticDataModule(
        num_classes=3,
        num_channels=3,
        image_size=12,
        train_size=96,
        test_size=16,
        val_size=32,
        batch_size=16,
        seed=0,
    )
    module = ClassificationModule(
        model_name="simplecnn",
        model_kwargs=dict(num_classes=3, in_channels=3, image_size=12, widths=[4, 8], hidden=16),
        optimizer=functools.partial(torch.optim.Adam, lr=3e-3),
        tta_flip=tta_flip,
        tta_translate=tta_translate,
        **data.spec,
    )
    trainer = pl.Trainer(
        default_root_dir=root,
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        limit_val_batches=0,
    )
    trainer.fit(module, datamodule=data)
    ckpt = root / "model.ckpt"
    trainer.save_checkpoint(ckpt)
    module.eval()
    weights = root / "weights" / "model_weights.pt"
    weights.parent.mkdir()
    torch.save(network_state_dict(module.state_dict()), weights)
    hparams = {
        k: v
        for k, v in module.hparams.items()
        if isinstance(v, (str, int, float, bool, list, dict, type(None)))
    }
    weights.with_suffix(".json").write_text(json.dumps(hparams))
    spec = InputSpec.from_hparams(module.hparams)
    config = ExportConfig(formats=["onnx", "torchscript", "pt2"], torchscript_modes=["trace"])
    exported = export_model(module.net, spec, root / "export", config).paths
    paths = {
        "ckpt": ckpt,
        "weights": weights,
        "onnx": exported["onnx"],
        "torchscript": exported["torchscript_trace"],
        "pt2": exported["pt2"],
    }
    return Artifacts(module, spec, paths, data.splits["val"].images[:16].clone())


def png_bytes(image: torch.Tensor) -> bytes:
    """uint8 (C, H, W) -> PNG file bytes (lossless, so decoding gives the same pixels)."""
    import io

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image.permute(1, 2, 0).numpy())).save(buf, "PNG")
    return buf.getvalue()


# A tiny SimpleCNN trained for a few seconds on synthetic data (the `trained` fixture).
# The same data as Hydra overrides, for commands that export or evaluate that model (INT8
# calibrates and validates on what it learned): keep the two in step.
SYNTHETIC_OVERRIDES = [
    "data=synthetic",
    "data.num_classes=4",
    "data.image_size=16",
    "data.train_size=384",
    "data.test_size=64",
    "data.val_size=128",
    "+data.noise=0.8",
    "seed=0",
]


def make_data(**kwargs) -> SyntheticDataModule:
    options = dict(
        num_classes=4,
        num_channels=3,
        image_size=16,
        train_size=384,
        test_size=64,
        batch_size=32,
        val_size=128,
        noise=0.8,
        seed=0,
    )
    options.update(kwargs)
    return SyntheticDataModule(**options)


def make_module(
    data: SyntheticDataModule, model_name: str = "simplecnn", **model_kwargs
) -> ClassificationModule:
    kwargs = dict(
        num_classes=data.num_classes, in_channels=data.num_channels, image_size=data.image_size
    )
    if model_name == "simplecnn":
        kwargs.update(widths=[8, 16], hidden=32)
    kwargs.update(model_kwargs)
    return ClassificationModule(
        model_name=model_name,
        model_kwargs=kwargs,
        optimizer=functools.partial(torch.optim.Adam, lr=3e-3),
        **data.spec,
    )


def fit(
    module: ClassificationModule, data: SyntheticDataModule, root: Path, **trainer_kwargs
) -> Path:
    """Train on CPU and save a checkpoint; return its path."""
    options = dict(
        default_root_dir=root,
        accelerator="cpu",
        devices=1,
        max_epochs=4,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
    )
    options.update(trainer_kwargs)
    trainer = pl.Trainer(**options)
    trainer.fit(module, datamodule=data)
    path = root / "model.ckpt"
    trainer.save_checkpoint(path)
    return path


@dataclass
class Trained:
    ckpt: Path
    module: ClassificationModule
    data: SyntheticDataModule
    spec: InputSpec

    @property
    def net(self) -> torch.nn.Module:
        return self.module.net.eval()
