"""LightningDataModules for image classification; importable and usable without Hydra.

Every built-in DataModule is in the dataset registry under its config's name
(``list_datasets()``); plug-ins add theirs through the ``lightning_cls.datasets`` entry points.
"""

from lightning_cls.data.base import ImageDataModule
from lightning_cls.data.digits import DigitsDataModule
from lightning_cls.data.imagefolder import ImageFolderDataModule
from lightning_cls.data.multilabel import MultiLabelDataModule
from lightning_cls.data.preset import AugmentPreset, create_preset, list_presets
from lightning_cls.data.registry import create_dataset, list_datasets, register_dataset
from lightning_cls.data.streaming import StreamingDataModule
from lightning_cls.data.synthetic import SyntheticDataModule
from lightning_cls.data.torchvision_sets import (
    CIFAR10DataModule,
    CIFAR100DataModule,
    FashionMNISTDataModule,
    MNISTDataModule,
)
from lightning_cls.inference.spec import Split

__all__ = [
    "AugmentPreset",
    "CIFAR10DataModule",
    "CIFAR100DataModule",
    "DigitsDataModule",
    "FashionMNISTDataModule",
    "ImageDataModule",
    "ImageFolderDataModule",
    "MNISTDataModule",
    "MultiLabelDataModule",
    "Split",
    "StreamingDataModule",
    "SyntheticDataModule",
    "create_dataset",
    "create_preset",
    "list_datasets",
    "list_presets",
    "register_dataset",
]
