"""CIFAR-10/100, MNIST and Fashion-MNIST through torchvision, with download into ``data_dir``.

The official test split is kept for ``test``; validation (5,000 images by default) is carved
from the train split at random with the run's ``seed``: another seed holds out other images.
"""

from __future__ import annotations

from pathlib import Path

from lightning_cls.data.base import ImageDataModule, as_split, check_channels
from lightning_cls.data.registry import register_dataset
from lightning_cls.inference.spec import Split


class TorchvisionDataModule(ImageDataModule):
    dataset_name: str  # class name in torchvision.datasets
    hint: str
    # Per-channel statistics of the training split, used unless mean/std are given.
    default_mean: tuple[float, ...]
    default_std: tuple[float, ...]

    def __init__(
        self,
        data_dir: str = "data",
        download: bool = True,
        val_size: int = 5000,
        mean=None,
        std=None,
        **kwargs,
    ):
        super().__init__(val_size=val_size, **kwargs)
        self.data_dir, self.download = str(data_dir), download
        mean, std = (
            self.default_mean if mean is None else mean,
            self.default_std if std is None else std,
        )
        self.mean = check_channels(mean, self.num_channels, "data.mean")
        self.std = check_channels(std, self.num_channels, "data.std")

    def prepare_data(self) -> None:
        for train in (True, False):
            self._dataset(train)

    def _dataset(self, train: bool):
        import torchvision.datasets as tvd

        cls = getattr(tvd, self.dataset_name)
        try:
            return cls(self.data_dir, train=train, download=self.download)
        except RuntimeError as err:  # torchvision: "Dataset not found or corrupted..."
            raise FileNotFoundError(self._missing_message(err)) from err
        except OSError as err:  # network down during download
            raise FileNotFoundError(self._missing_message(err)) from err

    def _missing_message(self, err: Exception) -> str:
        where = Path(self.data_dir).resolve()
        how = (
            "Download failed; check the network or copy the files there by hand."
            if self.download
            else "Set data.download=true to fetch it, or copy the files there by hand."
        )
        return f"{self.dataset_name} not found in data_dir={where} ({err}). {how} {self.hint}"

    def load_splits(self) -> dict[str, Split]:
        return {"train": self._split(True), "test": self._split(False)}

    def _split(self, train: bool) -> Split:
        ds = self._dataset(train)
        return as_split(_as_numpy(ds.data), _as_numpy(ds.targets))


def _as_numpy(x):
    return x.numpy() if hasattr(x, "numpy") else x


@register_dataset("cifar10")
class CIFAR10DataModule(TorchvisionDataModule):
    dataset_name = "CIFAR10"
    hint = "Expected data_dir/cifar-10-batches-py/ (the python version of the archive)."
    classes = [
        "airplane",
        "automobile",
        "bird",
        "cat",
        "deer",
        "dog",
        "frog",
        "horse",
        "ship",
        "truck",
    ]
    num_channels, image_size = 3, 32
    default_mean, default_std = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
    default_augment = "crop_flip"  # pad-4 random crop + horizontal flip


@register_dataset("cifar100")
class CIFAR100DataModule(CIFAR10DataModule):
    dataset_name = "CIFAR100"
    hint = "Expected data_dir/cifar-100-python/."
    default_mean, default_std = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)
    # The 100 fine labels in the archive's order (its meta file), known before the data is
    # loaded so the model is built with 100 outputs; setup() reads the archive's own names.
    classes = (
        "apple aquarium_fish baby bear beaver bed bee beetle bicycle bottle bowl boy "
        "bridge bus butterfly camel can castle caterpillar cattle chair chimpanzee clock "
        "cloud cockroach couch crab crocodile cup dinosaur dolphin elephant flatfish "
        "forest fox girl hamster house kangaroo keyboard lamp lawn_mower leopard lion "
        "lizard lobster man maple_tree motorcycle mountain mouse mushroom oak_tree orange "
        "orchid otter palm_tree pear pickup_truck pine_tree plain plate poppy porcupine "
        "possum rabbit raccoon ray road rocket rose sea seal shark shrew skunk skyscraper "
        "snail snake spider squirrel streetcar sunflower sweet_pepper table tank "
        "telephone television tiger tractor train trout tulip turtle wardrobe whale "
        "willow_tree wolf woman worm"
    ).split()

    def load_splits(self) -> dict[str, Split]:
        names = list(self._dataset(True).classes)
        if len(names) != len(type(self).classes):
            raise ValueError(
                f"{self.data_dir} holds a CIFAR-100 archive with {len(names)} fine labels, "
                f"expected {len(type(self).classes)}; download it again (data.download=true)."
            )
        self.classes = names
        return super().load_splits()


@register_dataset("mnist")
class MNISTDataModule(TorchvisionDataModule):
    dataset_name = "MNIST"
    hint = "Expected data_dir/MNIST/raw/ with the four idx files."
    classes = [str(d) for d in range(10)]
    num_channels, image_size = 1, 28
    default_mean, default_std = (0.1307,), (0.3081,)


@register_dataset("fashion_mnist")
class FashionMNISTDataModule(MNISTDataModule):
    dataset_name = "FashionMNIST"
    hint = "Expected data_dir/FashionMNIST/raw/ with the four idx files."
    classes = [
        "T-shirt/top",
        "Trouser",
        "Pullover",
        "Dress",
        "Coat",
        "Sandal",
        "Shirt",
        "Sneaker",
        "Bag",
        "Ankle boot",
    ]
    default_mean, default_std = (0.2860,), (0.3530,)
