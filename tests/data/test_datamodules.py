"""Digits and synthetic DataModules, both pipelines, with and without a Trainer."""

import sys

import numpy as np
import pytest
import pytorch_lightning as pl
import torch

from helpers import make_module, make_trainer
from lightning_cls.callbacks import ShapeCheck
from lightning_cls.data import DigitsDataModule, SyntheticDataModule
from lightning_cls.data.base import data_fields
from lightning_cls.data.preset import AugmentPreset
from lightning_cls.inference.spec import InputSpec


@pytest.mark.parametrize("cls", [DigitsDataModule, SyntheticDataModule])
@pytest.mark.parametrize("pipeline", ["tensor", "pil"])
def test_fast_dev_run(cls, pipeline):
    dm = cls(batch_size=16, pipeline=pipeline)
    dm.setup()
    module = make_module(dm)
    trainer = make_trainer(fast_dev_run=True)
    trainer.fit(module, datamodule=dm)
    assert trainer.state.finished


def test_digits_splits_are_real_and_fixed():
    a, b = DigitsDataModule(), DigitsDataModule()
    a.setup(), b.setup()
    sizes = {k: len(v) for k, v in a.splits.items()}
    assert sum(sizes.values()) == 1797 and sizes["test"] == 359
    assert torch.equal(a.splits["val"].labels, b.splits["val"].labels)
    described = {
        "classes": [str(i) for i in range(10)],
        "mean": [0.3057],
        "std": [0.3761],
        "image_size": 8,
        "num_channels": 1,
    }
    # an InputSpec, from the DataModule on (the module takes it: spec=dm.spec)
    assert a.spec == InputSpec(**described) and type(a.spec) is InputSpec
    assert data_fields(a.spec) == {**described, "resize_size": None}


def test_embedded_digits_are_scikit_learns_and_load_without_it(monkeypatch):
    from sklearn.datasets import load_digits

    from lightning_cls.data.digits import load_digits_arrays

    images, labels = load_digits_arrays()
    reference = load_digits()
    assert images.dtype == labels.dtype == np.uint8
    assert np.array_equal(images, reference.images) and np.array_equal(labels, reference.target)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)  # importing it now fails
    dm = DigitsDataModule()
    dm.setup()
    assert len(dm.splits["test"]) == 359
    # The fixed split: the first test images' labels, as the scikit-learn loader gave them.
    assert dm.splits["test"].labels[:10].tolist() == [6, 5, 5, 7, 9, 9, 8, 4, 6, 8]


def test_pipelines_give_the_same_eval_batches():
    tensor, pil = DigitsDataModule(pipeline="tensor"), DigitsDataModule(pipeline="pil")
    xt, yt = next(iter(tensor.val_dataloader()))
    xp, yp = next(iter(pil.val_dataloader()))
    assert torch.equal(yt, yp)
    torch.testing.assert_close(xt, xp, atol=1e-6, rtol=0)


def test_plain_pytorch_loop_learns_synthetic_task():
    torch.manual_seed(0)
    dm = SyntheticDataModule(
        num_classes=4, image_size=16, train_size=256, test_size=128, batch_size=32
    )
    dm.setup()
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(3 * 16 * 16, 4))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    for _ in range(3):
        net.train()
        for x, y in dm.train_dataloader():
            opt.zero_grad()
            torch.nn.functional.cross_entropy(net(x), y).backward()
            opt.step()
    net.eval()
    with torch.no_grad():
        correct = sum((net(x).argmax(1) == y).sum().item() for x, y in dm.test_dataloader())
    assert correct / 128 > 0.9  # chance is 0.25


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="Unknown pipeline 'fast'; use one of tensor, pil"):
        DigitsDataModule(pipeline="fast")
    with pytest.raises(ValueError, match="set pipeline='pil'"):
        DigitsDataModule(train_transform=lambda x: x)
    with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
        DigitsDataModule(batch_size=0)
    with pytest.raises(
        ValueError,
        match=r"data\.image_size=32 but DigitsDataModule has image_size=8; set data\.image_size=8",
    ):
        DigitsDataModule(image_size=32).setup()


def test_val_size_error_names_the_fix():
    dm = SyntheticDataModule(train_size=20, test_size=8, val_size=20)
    with pytest.raises(
        ValueError,
        match=r"data\.val_size=20 leaves no train or no val data out of 20 training images; "
        r"set data\.val_size to a fraction in \(0, 1\) or a count from 1 to 19\.",
    ):
        dm.setup()


class _InputDtypes(pl.Callback):
    def __init__(self):
        self.dtypes: list[torch.dtype] = []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.dtypes.append(batch[0].dtype)


def test_bf16_true_hands_the_model_a_bf16_batch():
    # Lightning casts the input before on_after_batch_transfer, i.e. the uint8 batch; the
    # augmented float batch must be cast again, or a bf16 network gets float32 and fails.
    dm = SyntheticDataModule(
        num_classes=3,
        image_size=8,
        train_size=32,
        test_size=8,
        batch_size=8,
        augment=AugmentPreset(crop_padding=1, hflip=True),
    )
    module = make_module(dm, hidden=8)
    dtypes = _InputDtypes()
    trainer = make_trainer(None, [ShapeCheck(), dtypes], fast_dev_run=True, precision="bf16-true")
    trainer.fit(module, datamodule=dm)
    assert trainer.state.finished
    assert dtypes.dtypes == [torch.bfloat16]
