"""CIFAR/MNIST DataModules run their real torchvision loading code on tiny archives written
here in torchvision's on-disk formats (nothing is downloaded)."""

from __future__ import annotations

import hashlib
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torchvision.datasets as tvd

from helpers import make_module, make_trainer
from lightning_cls.data import (
    CIFAR10DataModule,
    CIFAR100DataModule,
    FashionMNISTDataModule,
    MNISTDataModule,
)

N_TRAIN, N_TEST = 40, 10


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def write_cifar(root: Path, monkeypatch, hundred: bool = False) -> None:
    """The python-pickle CIFAR layout; patch torchvision's md5 table to the files we wrote."""
    cls = tvd.CIFAR100 if hundred else tvd.CIFAR10
    folder = root / cls.base_folder
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    label_key = "fine_labels" if hundred else "labels"
    k = 100 if hundred else 10

    def batch(name: str, n: int) -> list[str]:
        data = rng.integers(0, 256, (n, 3072), dtype=np.uint8)
        labels = [int(i % k) for i in range(n)]
        with open(folder / name, "wb") as fh:
            pickle.dump({"data": data, label_key: labels}, fh)
        return [name, _md5(folder / name)]

    train = [batch(name, N_TRAIN // len(cls.train_list)) for name, _ in cls.train_list]
    test = [batch(name, N_TEST) for name, _ in cls.test_list]
    key = cls.meta["key"]
    names = [f"class{i}" for i in range(k)]
    with open(folder / cls.meta["filename"], "wb") as fh:
        pickle.dump({key: names}, fh)
    monkeypatch.setattr(cls, "train_list", train)
    monkeypatch.setattr(cls, "test_list", test)
    monkeypatch.setattr(cls, "meta", {**cls.meta, "md5": _md5(folder / cls.meta["filename"])})


def write_mnist(root: Path, name: str) -> None:
    """The four uncompressed idx files torchvision's MNIST/FashionMNIST read."""
    raw = root / name / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(0)
    for prefix, n in (("train", N_TRAIN), ("t10k", N_TEST)):
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        labels = (np.arange(n) % 10).astype(np.uint8)
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(
            struct.pack(">IIII", 2051, n, 28, 28) + images.tobytes()
        )
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(
            struct.pack(">II", 2049, n) + labels.tobytes()
        )


CASES = {
    "cifar10": (CIFAR10DataModule, lambda r, mp: write_cifar(r, mp), 3, 32, 10),
    "cifar100": (CIFAR100DataModule, lambda r, mp: write_cifar(r, mp, hundred=True), 3, 32, 100),
    "mnist": (MNISTDataModule, lambda r, mp: write_mnist(r, "MNIST"), 1, 28, 10),
    "fashion": (FashionMNISTDataModule, lambda r, mp: write_mnist(r, "FashionMNIST"), 1, 28, 10),
}


@pytest.mark.parametrize("name", CASES)
@pytest.mark.parametrize("pipeline", ["tensor", "pil"])
def test_fast_dev_run_on_tiny_archive(name, pipeline, tmp_path, monkeypatch):
    cls, write, channels, size, k = CASES[name]
    write(tmp_path, monkeypatch)
    dm = cls(data_dir=str(tmp_path), download=True, val_size=8, batch_size=4, pipeline=pipeline)
    dm.prepare_data()  # archives present and verified: no download attempted
    dm.setup()
    assert (dm.num_channels, dm.image_size, dm.num_classes) == (channels, size, k)
    assert len(dm.splits["test"]) == N_TEST
    assert len(dm.splits["train"]) + len(dm.splits["val"]) == N_TRAIN
    x, y = next(iter(dm.train_dataloader()))  # outside a Trainer: float, normalized
    assert x.shape == (4, channels, size, size) and x.dtype.is_floating_point
    module = make_module(dm, model_name="mlp")
    trainer = make_trainer(fast_dev_run=True)
    trainer.fit(module, datamodule=dm)
    trainer.test(module, datamodule=dm)


def test_cifar100_reads_class_names(tmp_path, monkeypatch):
    write_cifar(tmp_path, monkeypatch, hundred=True)
    dm = CIFAR100DataModule(data_dir=str(tmp_path), download=False, val_size=8)
    # The model is built before the data is loaded: the class count must already be right.
    assert dm.num_classes == 100 and dm.classes[:2] == ["apple", "aquarium_fish"]
    dm.setup()
    assert dm.classes[:2] == ["class0", "class1"] and dm.num_classes == 100


def test_missing_data_without_download_names_data_dir_and_fix(tmp_path):
    dm = CIFAR10DataModule(data_dir=str(tmp_path / "nowhere"), download=False)
    with pytest.raises(
        FileNotFoundError, match=r"CIFAR10 not found in data_dir=.*nowhere.*data\.download=true"
    ):
        dm.prepare_data()


def test_failed_download_names_data_dir(tmp_path, monkeypatch):
    def offline(*args, **kwargs):
        raise OSError("network is unreachable")

    monkeypatch.setattr(tvd.mnist, "download_and_extract_archive", offline)
    monkeypatch.setattr(tvd.MNIST, "mirrors", ["http://127.0.0.1:9/"])
    dm = MNISTDataModule(data_dir=str(tmp_path), download=True)
    with pytest.raises(FileNotFoundError, match=r"MNIST not found in data_dir=.*Download failed"):
        dm.prepare_data()


def test_wrong_num_classes_in_config_is_named(tmp_path, monkeypatch):
    write_cifar(tmp_path, monkeypatch)
    dm = CIFAR10DataModule(data_dir=str(tmp_path), download=False, val_size=8, num_classes=12)
    with pytest.raises(
        ValueError,
        match=r"data\.num_classes=12 but CIFAR10DataModule has num_classes=10; set data\.num_classes=10",
    ):
        dm.setup()
