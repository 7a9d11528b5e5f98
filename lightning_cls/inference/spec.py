"""``InputSpec``: the one description of a classifier's input, carried by every artifact.

Classes, per-channel mean/std, square input size, channels, channel order and flip TTA, plus
the registry name/options that rebuild the network from bare weights. Every other form is
derived from it: a DataModule's ``meta`` and ``ClassificationModule`` hparams hold its keys,
``model_weights.json`` is those hparams, ONNX files store it as ``metadata_props`` (one JSON
value per key), TorchScript and ``.pt2`` as the extra file ``meta.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch

CHANNEL_ORDERS = {1: "L", 3: "RGB"}
PREPROCESSING = "x = (uint8_pixels / 255 - mean) / std, per channel, NCHW float32"
META_FILE = "meta.json"
# Without these an artifact cannot be fed; the rest have defaults.
REQUIRED_KEYS = ("classes", "mean", "std", "image_size", "num_channels")


@dataclass(frozen=True)
class InputSpec:
    """What a runtime needs to feed a classifier and name its outputs."""

    classes: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    image_size: int
    num_channels: int
    channel_order: str = ""
    tta_flip: bool = False  # average the logits of each image and its mirror (airbench)
    # Also average copies shifted by this many pixels (airbench's TTA level 2); 0: off.
    tta_translate: int = 0
    layout: str = "NCHW"
    preprocessing: str = PREPROCESSING
    model_name: str | None = None  # registry name, to rebuild the network from bare weights
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    # Photos: shorter side resized to this (aspect kept), then the centre image_size square
    # (torchvision's Resize + CenterCrop); None: resized to image_size.
    resize_size: int | None = None

    def __post_init__(self):
        set_ = object.__setattr__  # frozen: normalize the types once, here
        set_(self, "classes", tuple(str(c) for c in self.classes))
        set_(self, "mean", tuple(float(v) for v in self.mean))
        set_(self, "std", tuple(float(v) for v in self.std))
        set_(self, "image_size", int(self.image_size))
        set_(self, "num_channels", int(self.num_channels))
        set_(self, "tta_flip", bool(self.tta_flip))
        set_(self, "tta_translate", int(self.tta_translate or 0))
        set_(self, "model_kwargs", dict(self.model_kwargs or {}))
        if not self.channel_order:
            set_(self, "channel_order", CHANNEL_ORDERS.get(self.num_channels, ""))
        if self.num_channels not in CHANNEL_ORDERS:
            raise ValueError(
                f"num_channels={self.num_channels} is not supported; use 1 (grayscale) or 3 (RGB)."
            )
        for name in ("mean", "std"):
            if len(getattr(self, name)) != self.num_channels:
                raise ValueError(
                    f"{name} has {len(getattr(self, name))} values but num_channels="
                    f"{self.num_channels}; give one {name} value per channel."
                )
        if not self.classes:
            raise ValueError("InputSpec needs the class names (classes=[...]), got none.")
        if self.tta_translate < 0:
            raise ValueError(f"tta_translate must be >= 0 pixels, got {self.tta_translate}.")
        if self.image_size < 1:
            raise ValueError(f"image_size must be >= 1, got {self.image_size}.")

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return (self.num_channels, self.image_size, self.image_size)

    def preprocess(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 (B, C, H, W) -> normalized float32 (B, C, H, W), exactly as in training."""
        return normalize(images, self.mean, self.std)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["classes"], d["mean"], d["std"] = list(self.classes), list(self.mean), list(self.std)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    def to_props(self) -> dict[str, str]:
        """Flat string -> string map (ONNX ``metadata_props``); every value is JSON."""
        return {k: json.dumps(v) for k, v in self.to_dict().items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], source: str = "Model metadata") -> InputSpec:
        """From any mapping holding the keys (unknown keys, e.g. optimizer hparams, ignored).

        ``source`` names where the mapping came from, for the message when keys are missing.
        """
        missing = [k for k in REQUIRED_KEYS if d.get(k) is None]
        if missing:
            raise ValueError(
                f"{source} lacks {', '.join(missing)}. It was written by another tool or "
                "another version of lightning_cls; pass the missing values (Python: "
                f"spec={{{', '.join(repr(k) + ': ...' for k in missing)}}}; command line: "
                f"{' '.join('+spec.' + k + '=...' for k in missing)}), or re-export the model "
                "with lightning_cls.export so the preprocessing travels with it."
            )
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})

    @classmethod
    def from_json(cls, text: str, source: str = "Model metadata") -> InputSpec:
        return cls.from_dict(json.loads(text), source)

    @classmethod
    def from_props(cls, props: Mapping[str, str], source: str = "Model metadata") -> InputSpec:
        return cls.from_dict(props_to_dict(props), source)

    @classmethod
    def from_hparams(cls, hparams: Mapping[str, Any]) -> InputSpec:
        """From ``ClassificationModule.hparams`` (a checkpoint's ``hyper_parameters``)."""
        return cls.from_dict(dict(hparams), "The checkpoint's hyper_parameters")


def props_to_dict(props: Mapping[str, str]) -> dict[str, Any]:
    """ONNX ``metadata_props`` -> the spec's keys (other tools' entries are skipped)."""
    known = InputSpec.__dataclass_fields__
    return {k: json.loads(v) for k, v in props.items() if k in known}


def merge_spec(
    stored: Mapping[str, Any] | None, overrides: Mapping[str, Any] | None, source: str
) -> InputSpec:
    """The spec stored in an artifact with ``overrides`` on top (they fill or replace keys)."""
    merged = {**(stored or {}), **{k: v for k, v in (overrides or {}).items() if v is not None}}
    unknown = sorted(set(overrides or {}) - set(InputSpec.__dataclass_fields__))
    if unknown:
        raise ValueError(
            f"Unknown spec key(s) {unknown}; known: {', '.join(InputSpec.__dataclass_fields__)}."
        )
    return InputSpec.from_dict(merged, source)


def normalize(images: torch.Tensor, mean: Sequence[float], std: Sequence[float]) -> torch.Tensor:
    """uint8 (B, C, H, W) in [0, 255] -> float32 normalized per channel (ToTensor+Normalize).

    The one implementation: training's ``lightning_cls.data.augment.normalize`` calls it, so a
    served image is normalized exactly as in training, without importing Lightning here.
    """
    if images.dtype != torch.uint8:
        raise TypeError(f"normalize expects uint8 images in [0, 255], got {images.dtype}.")
    scale, shift = normalize_constants(mean, std, images.shape[1], images.device)
    return images.float().mul_(scale).sub_(shift)  # (B, C, H, W) float32


def normalize_constants(
    mean: Sequence[float],
    std: Sequence[float],
    channels: int,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, shift), each float32 (1, C, 1, 1): ``normalize(x) = x.float() * scale - shift``.

    (x/255 - mean)/std folded into one multiply and one subtract, the constants computed in
    float64 and rounded once. ``channels``: the batch's, checked against mean/std.
    """
    if len(mean) != channels or len(std) != channels:
        raise ValueError(
            f"mean/std have {len(mean)}/{len(std)} values but the batch has {channels} "
            "channels; pass one value per channel."
        )
    mean_t = torch.tensor(mean, dtype=torch.float64)
    std_t = torch.tensor(std, dtype=torch.float64)
    scale = (1.0 / (255.0 * std_t)).to(device, torch.float32).view(1, -1, 1, 1)
    shift = (mean_t / std_t).to(device, torch.float32).view(1, -1, 1, 1)
    return scale, shift


@dataclass
class Split:
    """One split of a DataModule (``datamodule.splits["train"|"val"|"test"]``): what INT8
    calibration, ``export=auto`` and ``stats`` read."""

    images: torch.Tensor  # (N, C, H, W) uint8
    labels: torch.Tensor  # (N,) int64

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, index: torch.Tensor) -> Split:
        return Split(self.images[index], self.labels[index])
