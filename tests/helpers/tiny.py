"""The tiny-data/tiny-module recipe every test that trains starts from (seconds on a CPU).

``make_data(SMALL)`` (the default) trains in about a second; ``make_data(LEARNABLE)`` is data
a SimpleCNN learns well above chance in a few epochs (the shared trained model, exports,
INT8). ``as_overrides(LEARNABLE)`` is the same data as Hydra overrides, for commands that
evaluate or calibrate on what that model learned.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint

from lightning_cls.data import SyntheticDataModule
from lightning_cls.data.base import DATA_FIELDS, ImageDataModule
from lightning_cls.module import ClassificationModule
from lightning_cls.training.checkpoint_io import AtomicCheckpointIO

SMALL = dict(
    num_classes=4,
    num_channels=1,
    image_size=8,
    train_size=64,
    test_size=32,
    val_size=16,
    batch_size=16,
    seed=0,
)
LEARNABLE = dict(
    num_classes=4,
    num_channels=3,
    image_size=16,
    train_size=384,
    test_size=64,
    val_size=128,
    batch_size=32,
    noise=0.8,
    seed=0,
)
ADAM = functools.partial(torch.optim.Adam, lr=3e-3)
SGD = functools.partial(torch.optim.SGD, lr=0.05, momentum=0.9)  # the callback tests'


def make_data(preset: dict = SMALL, **kwargs) -> SyntheticDataModule:
    return SyntheticDataModule(**{**preset, **kwargs})


def as_overrides(preset: dict) -> list[str]:
    """A preset as the Hydra overrides of ``data=synthetic`` (batch size left to the config)."""
    new = {"noise"}  # keys conf/data/synthetic.yaml does not have
    items = [(k, v) for k, v in preset.items() if k not in ("batch_size", "seed")]
    return [
        "data=synthetic",
        *(f"{'+' if k in new else ''}data.{k}={v}" for k, v in items),
        f"seed={preset['seed']}",
    ]


def make_module(
    data: ImageDataModule | None = None,
    model_name: str = "simplecnn",
    optimizer=ADAM,
    module_kwargs: dict | None = None,
    **model_kwargs,
) -> ClassificationModule:
    """The tiny recipe's module: sized for ``data`` (``make_data()`` unless given) and given its
    ``spec``; a SimpleCNN is [4, 8] channels wide unless told. ``model_kwargs`` are the
    network's options (they win over the data's sizes: ``num_classes=None`` is filled from the
    classes, as in model configs); ``module_kwargs`` the module's other arguments (``task``,
    ``scheduler``, ``param_groups``, ``tta``, ...), among them ``net`` (then no network
    is built from a name) and input fields that differ from the data's (``classes``, ...)."""
    data = make_data() if data is None else data
    options = dict(module_kwargs or {})
    differ = {key: options.pop(key) for key in DATA_FIELDS if key in options}
    spec = dataclasses.replace(data.spec, **differ)
    if options.get("net") is None:  # else a hand-made network: no registry name, no options
        kwargs = dict(num_classes=spec.num_classes, in_channels=spec.num_channels)
        kwargs["image_size"] = spec.image_size
        if model_name == "simplecnn":
            kwargs.update(widths=[4, 8], hidden=16)
        options.update(model_name=model_name, model_kwargs={**kwargs, **model_kwargs})
    return ClassificationModule(optimizer=optimizer, spec=spec, **options)


def make_trainer(root: Path | None = None, callbacks=(), **kwargs) -> pl.Trainer:
    """A quiet one-epoch CPU trainer; it checkpoints only when given a ModelCheckpoint (and
    writes nothing without ``root``: no logger, no checkpoint)."""
    options = dict(
        default_root_dir=root,
        accelerator="cpu",
        devices=1,
        max_epochs=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=any(isinstance(c, ModelCheckpoint) for c in callbacks),
        num_sanity_val_steps=0,
        plugins=[AtomicCheckpointIO()],
    )
    options.update(kwargs)
    return pl.Trainer(callbacks=list(callbacks), **options)


def fit(module: ClassificationModule, data: SyntheticDataModule, root: Path, **kwargs) -> Path:
    """Train on CPU (4 epochs unless told) and save a checkpoint; return its path."""
    trainer = make_trainer(root, **{"max_epochs": 4, **kwargs})
    trainer.fit(module, datamodule=data)
    path = Path(root) / "model.ckpt"
    trainer.save_checkpoint(path)
    return path


def fit_plain_simplecnn(split, spec, num_classes: int, steps: int = 60, lr: float = 3e-3):
    """A [8, 16]-wide SimpleCNN fitted on a whole in-memory ``split`` in plain torch (full
    batch Adam, ``steps`` steps, a couple of seconds): the small model the trust tests score.
    Returned in eval mode; seed torch first for a fixed result."""
    from lightning_cls.models import create_model

    net = create_model(
        "simplecnn", num_classes=num_classes, in_channels=spec.num_channels,
        image_size=spec.image_size, widths=[8, 16], hidden=32,
    )  # fmt: skip
    optimizer = torch.optim.Adam(net.parameters(), lr)
    x = spec.preprocess(split.images)
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(net(x), split.labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return net.eval()


def colour_photos(root: Path, per_class: int, size: int = 16, seed: int = 0) -> Path:
    """``root/train/c0..c2/<i>.png``: an ImageFolder of 3 colours (red, green, blue) of noisy
    ``size`` x ``size`` RGB photos, for commands trained on a folder of colour images."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    for c, colour in enumerate(([200, 40, 40], [40, 200, 40], [40, 40, 200])):
        (root / "train" / f"c{c}").mkdir(parents=True)
        for i in range(per_class):
            pixels = rng.normal(colour, 30, (size, size, 3)).clip(0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / "train" / f"c{c}" / f"{i}.png")
    return root
