"""``ModelMeta``: everything a runtime needs to feed an exported classifier, stored with it.

Each artifact carries the same keys: ONNX as ``metadata_props`` (one JSON-encoded value per
key, readable from any language), TorchScript and ``.pt2`` as an extra file ``meta.json``,
checkpoints as Lightning ``hparams``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from lightning_cls.data.augment import normalize

CHANNEL_ORDERS = {1: "L", 3: "RGB"}
PREPROCESSING = "x = (uint8_pixels / 255 - mean) / std, per channel, NCHW float32"
META_FILE = "meta.json"


@dataclass(frozen=True)
class ModelMeta:
    classes: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    image_size: int
    num_channels: int
    channel_order: str = ""
    layout: str = "NCHW"
    preprocessing: str = PREPROCESSING
    model_name: str | None = None  # registry name, to rebuild the network from bare weights
    model_kwargs: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "classes", tuple(str(c) for c in self.classes))
        object.__setattr__(self, "mean", tuple(float(v) for v in self.mean))
        object.__setattr__(self, "std", tuple(float(v) for v in self.std))
        object.__setattr__(self, "image_size", int(self.image_size))
        object.__setattr__(self, "num_channels", int(self.num_channels))
        object.__setattr__(self, "model_kwargs", dict(self.model_kwargs or {}))
        if not self.channel_order:
            object.__setattr__(self, "channel_order", CHANNEL_ORDERS.get(self.num_channels, ""))
        for name in ("mean", "std"):
            if len(getattr(self, name)) != self.num_channels:
                raise ValueError(
                    f"{name} has {len(getattr(self, name))} values but num_channels="
                    f"{self.num_channels}; give one {name} value per channel."
                )
        if not self.classes:
            raise ValueError("ModelMeta needs the class names (classes=[...]), got none.")

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
    def from_dict(cls, d: Mapping[str, Any]) -> ModelMeta:
        missing = [
            k for k in ("classes", "mean", "std", "image_size", "num_channels") if k not in d
        ]
        if missing:
            raise ValueError(
                f"Model metadata lacks {', '.join(missing)}; re-export the model with "
                "lightning_cls.export so the preprocessing travels with it."
            )
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})

    @classmethod
    def from_json(cls, text: str) -> ModelMeta:
        return cls.from_dict(json.loads(text))

    @classmethod
    def from_props(cls, props: Mapping[str, str]) -> ModelMeta:
        return cls.from_dict(
            {k: json.loads(v) for k, v in props.items() if k in cls.__dataclass_fields__}
        )

    @classmethod
    def from_hparams(cls, hparams: Mapping[str, Any]) -> ModelMeta:
        """From ``ClassificationModule.hparams`` (a checkpoint's ``hyper_parameters``)."""
        return cls.from_dict(dict(hparams))


def example_batch(meta: ModelMeta, batch_size: int, seed: int = 0) -> torch.Tensor:
    """A normalized float batch of random images (B, C, H, W) shaped like the model's input."""
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (batch_size, *meta.input_shape), generator=g, dtype=torch.uint8)
    return meta.preprocess(images)


def check_outputs_close(
    expected: torch.Tensor, actual: torch.Tensor, atol: float, rtol: float, what: str
) -> None:
    """Raise ``ExportCheckError`` naming the worst difference if the outputs disagree."""
    if expected.shape != actual.shape:
        raise ExportCheckError(
            f"{what}: output shape {tuple(actual.shape)} != eager {tuple(expected.shape)}."
        )
    if not torch.allclose(actual, expected, atol=atol, rtol=rtol):
        diff = (actual - expected).abs().max().item()
        raise ExportCheckError(
            f"{what}: outputs differ from eager PyTorch by up to {diff:.3g} "
            f"(atol={atol}, rtol={rtol}). The exported file does not compute what the model does."
        )


def check_round_trip(
    net: nn.Module,
    loaded: Callable[[torch.Tensor], torch.Tensor],
    meta: ModelMeta,
    loaded_meta: ModelMeta,
    check_batch_sizes: Sequence[int],
    atol: float,
    rtol: float,
    what: str,
) -> None:
    """A reloaded artifact must carry ``meta`` and match eager ``net`` at each batch size."""
    if loaded_meta != meta:
        raise ValueError(f"Metadata did not survive the round trip: {loaded_meta} != {meta}.")
    for seed, batch_size in enumerate(check_batch_sizes):
        x = example_batch(meta, batch_size, seed=seed)
        with torch.no_grad():
            expected, actual = net(x), loaded(x)
        check_outputs_close(expected, actual, atol, rtol, f"{what} at batch {batch_size}")


class ExportCheckError(RuntimeError):
    """An exported artifact, reloaded, does not reproduce the eager model's outputs."""
