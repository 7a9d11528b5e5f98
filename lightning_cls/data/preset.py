"""``AugmentPreset``: a DataModule's training augmentation as one object, handed to it whole.

torchvision's references build one ``ClassificationPresetTrain(crop_size=..., hflip_prob=...,
auto_augment_policy=...)`` and hand it to the dataset; here ``CIFAR10DataModule(augment=...)``
takes an ``AugmentPreset`` (or a registered preset's name), which validates its options once
and builds both pipelines' train transforms: ``batch`` the batched uint8 ``BatchAugment``
(``data.pipeline=tensor``), ``pil`` the per-sample torchvision ``Compose`` (``pipeline=pil``).
The commands take it from the ``augment`` config group (``conf/augment/<name>.yaml``, one file
per registered preset: ``augment=crop_flip augment.hflip=false``).

The options were once DataModule keywords (``hflip=False``, ``data.hflip=false``): those still
work, with a ``DeprecationWarning`` naming the new spelling (``resolve_augment``).
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace

import torch
from torchvision import transforms as T

from lightning_cls.data.augment import FLIPS, TRANSLATE_PADS, BatchAugment
from lightning_cls.data.autoaugment import POLICIES
from lightning_cls.registry import Registry


@dataclass(frozen=True)
class AugmentPreset:
    """What training does to each image before the network sees it (evaluation does none).

    ``crop_padding``: translate by up to this many pixels (pad, then crop back at a random
    offset; ``translate_pad`` fills the border with ``zeros`` or ``reflect``s the edge).
    ``hflip``: mirror left-right, by ``flip``: ``random`` (a coin per image per epoch) or
    ``alternate`` (airbench's: every other epoch). ``random_resized_crop``: torchvision's
    ``RandomResizedCrop`` of the stored image (photos cached at ``data.decode_size``).
    ``auto_augment``: ``randaugment``, ``trivialaugment``, ``autoaugment_cifar10`` or None;
    ``random_erasing``: the probability of erasing a box of the normalized image (0: off).
    """

    crop_padding: int = 0
    hflip: bool = False
    flip: str = "random"
    translate_pad: str = "zeros"
    random_resized_crop: bool = False
    auto_augment: str | None = None
    random_erasing: float = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.crop_padding, bool) or not isinstance(self.crop_padding, int):
            raise TypeError(
                f"augment.crop_padding={self.crop_padding!r} must be a whole number of pixels "
                "(0: no translate)."
            )
        if self.crop_padding < 0:
            raise ValueError(
                f"augment.crop_padding={self.crop_padding} must be >= 0 (0: no translate)."
            )
        for key in ("hflip", "random_resized_crop"):
            value = getattr(self, key)
            if not isinstance(value, bool):
                raise TypeError(f"augment.{key}={value!r} must be true or false.")
        if self.flip not in FLIPS:
            raise ValueError(f"Unknown augment.flip={self.flip!r}; use one of {', '.join(FLIPS)}.")
        if self.flip == "alternate" and not self.hflip:
            raise ValueError(
                "augment.flip=alternate says how to flip, and augment.hflip=false turns flipping "
                "off; set augment.hflip=true (or augment.flip=random)."
            )
        if self.translate_pad not in TRANSLATE_PADS:
            raise ValueError(
                f"Unknown augment.translate_pad={self.translate_pad!r}; use one of "
                f"{', '.join(TRANSLATE_PADS)}."
            )
        if self.auto_augment is not None and self.auto_augment not in POLICIES:
            raise ValueError(
                f"Unknown augment.auto_augment={self.auto_augment!r}; use one of "
                f"{', '.join(POLICIES)} or null."
            )
        erasing = self.random_erasing
        if isinstance(erasing, bool) or not isinstance(erasing, int | float):
            raise TypeError(f"augment.random_erasing={erasing!r} must be a probability in [0, 1].")
        if not 0.0 <= erasing <= 1.0:
            raise ValueError(
                f"augment.random_erasing={erasing} must be a probability in [0, 1] (0: off)."
            )

    def batch(
        self,
        mean: Sequence[float],
        std: Sequence[float],
        image_size: int | None = None,
        channels_last: bool = False,
        dtype: torch.dtype | str = torch.float32,
    ) -> BatchAugment:
        """The batched transform of uint8 (B, C, H, W) batches (``pipeline=tensor``)."""
        return BatchAugment(
            mean,
            std,
            self.crop_padding,
            self.hflip,
            channels_last,
            dtype,
            image_size=image_size,
            random_resized_crop=self.random_resized_crop,
            auto_augment=self.auto_augment,
            random_erasing=self.random_erasing,
            flip=self.flip,
            translate_pad=self.translate_pad,
        )

    def pil(
        self,
        image_size: int,
        mean: Sequence[float],
        std: Sequence[float],
        stored_size: int | None = None,
    ) -> T.Compose:
        """The per-sample transform of PIL images (``pipeline=pil``): the same steps as
        ``batch``, with torchvision's transforms. Photos stored larger than ``image_size``
        (``stored_size``) or ``random_resized_crop`` take a (random resized or centre) crop and
        the flip only, as the PIL pipeline always has."""
        to_tensor = [T.ToTensor(), T.Normalize(mean, std)]
        flip = [T.RandomHorizontalFlip()] if self.hflip else []
        if self.random_resized_crop or stored_size not in (None, image_size):
            crop = (
                T.RandomResizedCrop(image_size)
                if self.random_resized_crop
                else T.CenterCrop(image_size)
            )
            return T.Compose([crop, *flip, *to_tensor])
        steps: list = []
        if self.crop_padding:
            fill = "constant" if self.translate_pad == "zeros" else "reflect"
            steps.append(T.RandomCrop(image_size, padding=self.crop_padding, padding_mode=fill))
        steps += flip + pil_auto_augment(self.auto_augment)
        erase = [T.RandomErasing(self.random_erasing)] if self.random_erasing else []
        return T.Compose(steps + to_tensor + erase)

    def options(self) -> dict:
        """The options as a plain dict (what ``augment.<option>`` sets)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


# The options, in the order of the dataclass (the old DataModule keywords of the same names).
AUGMENT_OPTIONS = tuple(f.name for f in fields(AugmentPreset))


def pil_auto_augment(policy: str | None) -> list:
    """torchvision's transform for ``augment.auto_augment`` (the PIL pipeline's equivalent)."""
    known = {
        None: [],
        "randaugment": [T.RandAugment()],
        "trivialaugment": [T.TrivialAugmentWide()],
        "autoaugment_cifar10": [T.AutoAugment(T.AutoAugmentPolicy.CIFAR10)],
    }
    if policy not in known:
        raise ValueError(
            f"Unknown augment.auto_augment={policy!r}; use one of "
            "randaugment, trivialaugment, autoaugment_cifar10 or null."
        )
    return known[policy]


# -- named presets: conf/augment/<name>.yaml holds the same options ----------------------------
PRESETS = Registry("augmentation preset", "lightning_cls.augment_presets", returns=AugmentPreset)


def register_preset(name: str, **options) -> None:
    """Register ``AugmentPreset(**options)`` as ``name``; ``create_preset(name, hflip=...)``
    builds it with some options changed."""

    def build(**changes) -> AugmentPreset:
        return AugmentPreset(**{**options, **changes})

    build.__qualname__ = build.__name__ = f"preset_{name}"
    PRESETS.register(name)(build)


def create_preset(name: str, **changes) -> AugmentPreset:
    """The preset registered as ``name``, with ``changes`` to its options."""
    return PRESETS.create(name, **changes)


def list_presets(pattern: str | None = None) -> list[str]:
    """Sorted names of the registered presets, optionally filtered by a glob ``pattern``."""
    return PRESETS.names(pattern)


register_preset("none")  # digits, MNIST, Fashion-MNIST, synthetic: no augmentation
register_preset("crop_flip", crop_padding=4, hflip=True)  # CIFAR, small photos
register_preset("flip", hflip=True)  # streamed chunks
register_preset("airbench", crop_padding=2, hflip=True)  # experiment=cifar10_fast
register_preset("photo", random_resized_crop=True, hflip=True)  # fine-tuning on photos


def resolve_augment(
    augment: AugmentPreset | str | Mapping | None,
    default: str,
    old_options: Mapping,
    owner: str,
) -> AugmentPreset:
    """A DataModule's ``augment`` argument as an ``AugmentPreset``: a preset, a registered
    preset's name, a mapping of options, or None (the DataModule's ``default`` preset), with
    ``old_options`` (the deprecated keywords ``hflip=...``, ...) applied over it."""
    if augment is None:
        preset = create_preset(default)
    elif isinstance(augment, str):
        preset = create_preset(augment)
    elif isinstance(augment, AugmentPreset):
        preset = augment
    elif isinstance(augment, Mapping):
        unknown = sorted(set(augment) - set(AUGMENT_OPTIONS) - {"_target_"})
        if unknown:
            raise ValueError(
                f"Unknown augment option(s) {', '.join(unknown)}; the options are "
                f"{', '.join(AUGMENT_OPTIONS)}."
            )
        preset = AugmentPreset(**{k: v for k, v in augment.items() if k != "_target_"})
    else:
        raise TypeError(
            f"augment={augment!r} must be an AugmentPreset, a preset name "
            f"({', '.join(PRESETS.names())}), a mapping of its options or None."
        )
    if old_options:
        preset = replace(preset, **old_options)
        given = ", ".join(f"{k}={v!r}" for k, v in old_options.items())
        whole = ", ".join(
            f"{f.name}={getattr(preset, f.name)!r}"
            for f in fields(preset)
            if getattr(preset, f.name) != f.default
        )
        new = " ".join(f"augment.{k}={_yaml(v)}" for k, v in old_options.items())
        warnings.warn(
            f"{owner}({given}) is deprecated: the augmentation options moved into one preset; "
            f"pass augment=AugmentPreset({whole}) (lightning_cls.data.AugmentPreset), or on "
            f"the command line {new}.",
            DeprecationWarning,
            stacklevel=_outside_this_package(),
        )
    return preset


def _outside_this_package() -> int:
    """The ``stacklevel`` of the first caller outside ``lightning_cls.data`` (the user's line
    that built the DataModule, however many subclasses' ``__init__`` lie between)."""
    frame, level = sys._getframe(1), 1
    while frame is not None and frame.f_globals.get("__name__", "").startswith(__package__):
        frame, level = frame.f_back, level + 1
    return level


def _yaml(value) -> str:
    return (
        "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    )
