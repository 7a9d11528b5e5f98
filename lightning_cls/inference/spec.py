"""``InputSpec``: the one description of a classifier's input, carried by every artifact.

Classes, per-channel mean/std, square input size, channels (their order follows) and its TTA,
the task entry (its name and how its outputs are decided: threshold, temperature, rejection,
prediction sets), plus the registry name/options that rebuild the network from bare weights. Every other form is derived from
it: a DataModule's ``spec`` and ``ClassificationModule`` hparams hold its keys,
``model_weights.json`` is those hparams, ONNX files store it as ``metadata_props`` (one JSON
value per key), TorchScript and ``.pt2`` as the extra file ``meta.json``. This module is the
input contract (fields, their checks, the preprocessing); the task entry is checked into the
spec's ``decision`` by ``decision.py``. Older artifacts wrote the decision settings as flat keys
(``task`` a name, ``threshold``, ``temperature``, ...): ``legacy_decision`` folds them in.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from lightning_cls.inference.arrays import check_channels, normalize_numpy
from lightning_cls.inference.decision import DecisionError, build_decision
from lightning_cls.inference.tta import LEGACY_KEYS, TTA

if TYPE_CHECKING:
    import torch

    from lightning_cls.inference.tasks import Task

CHANNEL_ORDERS = {1: "L", 3: "RGB"}
PREPROCESSING = "x = (uint8_pixels / 255 - mean) / std, per channel, NCHW float32"
META_FILE = "meta.json"
# Without these an artifact cannot be fed; the rest have defaults.
REQUIRED_KEYS = ("classes", "mean", "std", "image_size", "num_channels")
# The task entry's settings besides its name; an older layout wrote them as flat keys, and
# ``+spec.<key>=...`` still overrides one of them (``legacy_decision``).
DECISION_KEYS = ("threshold", "temperature", "reject", "label_smoothing", "conformal")
# Written for readers of the files, derived from the fields (ignored when read back).
DERIVED_KEYS = ("channel_order",)


@dataclass(frozen=True)
class InputSpec:
    """What a runtime needs to feed a classifier and name its outputs; how the outputs are
    decided (task, threshold, temperature, rejection, prediction sets) is checked into
    ``decision`` by ``inference/decision.py``."""

    classes: tuple[str, ...]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    image_size: int
    num_channels: int
    # Test-time augmentation (inference/tta.py): flip, translate (airbench's levels 1 and 2),
    # and selective TTA's threshold (only images whose max probability after the temperature
    # is below it get the TTA; chosen on validation while training). Its dict in JSON.
    tta: TTA = field(default_factory=TTA)
    layout: str = "NCHW"
    preprocessing: str = PREPROCESSING
    model_name: str | None = None  # registry name, to rebuild the network from bare weights
    model_kwargs: dict[str, Any] = field(default_factory=dict)
    # Photos: shorter side resized to this (aspect kept), then the centre image_size square
    # (torchvision's Resize + CenterCrop); None: resized to image_size.
    resize_size: int | None = None
    # How the outputs are decided, one entry (its dict in JSON, a checkpoint's ``task`` too):
    # {name, threshold, temperature, reject, label_smoothing, conformal}. name: multiclass (one
    # label per image, softmax) or multilabel (a sigmoid per class; every label whose
    # probability reaches ``threshold`` is predicted, the threshold chosen on validation or set
    # by the user). What the answers are worth (inference/trust.py), chosen on validation by
    # calibration: logits / temperature before the probabilities (multi-label: a number or
    # one per label); reject = {score: msp|energy|..., threshold, keep}: below it the answer is
    # ``unknown``. label_smoothing: the one the model was trained with (0: none), which makes
    # its softmax confidence a poorer judge of unknowns. conformal: prediction sets with
    # guaranteed coverage (inference/conformal.py), {method: aps|raps, alpha, qhat, ...} or
    # None. A bare name is taken for {name: ...}; read the checked values from ``decision``.
    task: str | Mapping[str, Any] = "multiclass"
    # sha256 of the files the model was trained on (lightning_cls.data.fingerprint); None:
    # a source without a local index of files (built-in, downloaded, streamed, in memory).
    data_fingerprint: str | None = None

    def __post_init__(self):
        set_ = object.__setattr__  # frozen: normalize the types once, here
        conversions = {
            "classes": lambda v: tuple(str(c) for c in _sequence(v)),
            "mean": lambda v: tuple(float(x) for x in _sequence(v)),
            "std": lambda v: tuple(float(x) for x in _sequence(v)),
            "image_size": _integer,
            "num_channels": _integer,
            "model_kwargs": lambda v: dict(v or {}),
            "data_fingerprint": lambda v: None if v is None else str(v),
        }
        try:
            set_(self, "tta", TTA.from_value(self.tta))
        except (TypeError, ValueError) as err:
            raise SpecError("tta", str(err)) from None
        set_(self, "task", _task_entry(self.task))
        for name, convert in conversions.items():
            value = getattr(self, name)
            try:
                set_(self, name, convert(value))
            except (TypeError, ValueError):
                raise SpecError(
                    name, f"{name}={value!r} is not {_KINDS.get(name, 'valid')}."
                ) from None
        self._validate()

    def _validate(self) -> None:
        """Values a model can be fed with; a ``SpecError`` names the field and the value."""
        if self.num_channels not in CHANNEL_ORDERS:
            raise SpecError(
                "num_channels",
                f"num_channels={self.num_channels} is not supported; use 1 (grayscale) or 3 (RGB).",
            )
        for name in ("mean", "std"):
            values = getattr(self, name)
            if len(values) != self.num_channels:
                raise SpecError(
                    name,
                    f"{name}={list(values)} has {len(values)} values but num_channels="
                    f"{self.num_channels}; give one {name} value per channel.",
                )
        if not all(math.isfinite(v) for v in self.mean):
            raise SpecError("mean", f"mean={list(self.mean)} holds a value that is not finite.")
        if not all(math.isfinite(v) and v > 0 for v in self.std):
            raise SpecError(
                "std",
                f"std={list(self.std)} holds a value that is not a positive number (the "
                "pixels are divided by it: 0 gives infinite inputs and NaN probabilities).",
            )
        if not self.classes:
            raise SpecError("classes", "InputSpec needs the class names (classes=[...]), got none.")
        if self.image_size < 1:
            raise SpecError("image_size", f"image_size must be >= 1, got {self.image_size}.")
        try:  # how the outputs are decided: the task and its trust settings (decision.py)
            decision = self._build_decision()
        except DecisionError as err:
            raise SpecError(err.field, str(err)) from None
        entry = self.task  # the normalised values, as the task holds them (a fresh dict)
        if decision.threshold is not None:
            entry["threshold"] = decision.threshold
        entry.update(temperature=decision.temperature, reject=decision.reject)
        entry["conformal"] = decision.conformal
        self.__dict__["decision"] = decision  # the cached property below, built once

    @functools.cached_property
    def decision(self) -> Task:
        """The task entry as its decision object (``lightning_cls.inference.tasks``):
        probabilities (after the temperature), the labels predicted from them, the threshold,
        the rejection rule, the prediction sets, the score. Predictors and the server ask it.
        Built and checked with the spec (``_validate``)."""
        return self._build_decision()

    def _build_decision(self) -> Task:
        entry = self.task
        return build_decision(
            entry["name"],
            entry["threshold"],
            entry["temperature"],
            entry["reject"],
            entry["conformal"],
            self.num_classes,
        )

    def with_decision(self, **changes: Any) -> InputSpec:
        """This spec with ``changes`` to its task entry (``name``, ``threshold``,
        ``temperature``, ``reject``, ``label_smoothing``, ``conformal``), checked again."""
        unknown = sorted(set(changes) - {"name", *DECISION_KEYS})
        if unknown:
            raise TypeError(
                f"with_decision got {unknown}; the task entry's keys are name, "
                f"{', '.join(DECISION_KEYS)}."
            )
        return replace(self, task={**self.task, **changes})

    @property
    def channel_order(self) -> str:
        """``L`` (one channel) or ``RGB`` (three): what the channels are, from ``num_channels``."""
        return CHANNEL_ORDERS[self.num_channels]

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return (self.num_channels, self.image_size, self.image_size)

    def preprocess(self, images: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
        """uint8 (B, C, H, W) -> normalized float32 (B, C, H, W), exactly as in training; a
        numpy array gives a numpy array (the same numbers), a tensor a tensor."""
        return normalize(images, self.mean, self.std)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)  # tta and the task entry: their dicts
        d["classes"], d["mean"], d["std"] = list(self.classes), list(self.mean), list(self.std)
        if isinstance(self.task["temperature"], tuple):
            d["task"]["temperature"] = list(self.task["temperature"])
        d["channel_order"] = self.channel_order
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
        d = legacy_decision(legacy_tta(d))  # a checkpoint's task: its options are dropped
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
        try:
            return cls(**{k: v for k, v in d.items() if k in known})
        except SpecError as err:
            raise SpecError(err.field, f"{source}: {err} {override_hint(err.field)}") from None

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


def legacy_tta(d: Mapping[str, Any]) -> Mapping[str, Any]:
    """``d`` with an older layout's flat TTA keys (``tta_flip``, ``tta_translate``,
    ``tta_threshold``, ``tta_tolerance``; a checkpoint's ``tta="full"|"selective"``) folded
    into its one ``tta`` entry; they override what the entry holds (``+spec.tta_flip=false``
    on an artifact written with the ``tta`` entry)."""
    flat = {k: d[k] for k in LEGACY_KEYS if k in d}
    if not flat and not isinstance(d.get("tta"), str):
        return d
    rest = {k: v for k, v in d.items() if k not in LEGACY_KEYS}
    try:
        rest["tta"] = TTA.from_value(d.get("tta"), flat)
    except (TypeError, ValueError) as err:
        raise SpecError("tta", str(err)) from None
    return rest


def legacy_decision(d: Mapping[str, Any]) -> Mapping[str, Any]:
    """``d`` with its decision settings in its one ``task`` entry: an older layout's bare task
    name (``task="multilabel"``) becomes ``{name: ...}``, and its flat keys (``threshold``,
    ``temperature``, ``reject``, ``label_smoothing``, ``conformal``) move into the entry,
    overriding what it holds (``+spec.temperature=2`` on an artifact written with the entry)."""
    task = d.get("task")
    flat = {k: d[k] for k in DECISION_KEYS if k in d}
    if not flat and (task is None or isinstance(task, Mapping)):
        return d
    rest = {k: v for k, v in d.items() if k not in DECISION_KEYS}
    rest["task"] = {**_entry(task), **flat}
    return rest


def _entry(task: Any) -> dict[str, Any]:
    """A task entry as given: a mapping, a bare name, or None (no keys: the defaults)."""
    if task is None:
        return {}
    return dict(task) if isinstance(task, Mapping) else {"name": task}


def _task_entry(task: Any) -> dict[str, Any]:
    """The task entry with every key, its types normalised (a checkpoint's task also holds
    its training options, ``pos_weight``, ...: dropped); the values are checked by
    ``build_decision``. A ``SpecError`` names the key."""
    if task is not None and not isinstance(task, (str, Mapping)):
        raise SpecError("task", f"task={task!r} is not {_KINDS['task']}.")
    given = _entry(task)
    entry = {"name": given.get("name") or "multiclass"}
    entry.update({key: given.get(key) for key in DECISION_KEYS})
    conversions = {
        "name": str,
        "threshold": lambda v: None if v is None else float(v),
        "temperature": lambda v: 1.0 if v is None else v,
        "label_smoothing": lambda v: float(v or 0.0),
    }
    for key, convert in conversions.items():
        value = entry[key]
        field_name = "task" if key == "name" else key
        try:
            entry[key] = convert(value)
        except (TypeError, ValueError):
            raise SpecError(
                field_name, f"{field_name}={value!r} is not {_KINDS[field_name]}."
            ) from None
    return entry


def props_to_dict(props: Mapping[str, str], source: str = "Model metadata") -> dict[str, Any]:
    """ONNX ``metadata_props`` -> the spec's keys (other tools' entries are skipped)."""
    known = {*InputSpec.__dataclass_fields__, *LEGACY_KEYS, *DECISION_KEYS}  # older: flat keys
    out = {}
    for key, value in props.items():
        if key not in known:
            continue
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            raise SpecError(
                key,
                f"{source}: {key}={value[:80]!r} is not JSON. {override_hint(key)}",
            ) from None
    return out


_KINDS = {
    "classes": "a list of class names",
    "mean": "a list of numbers, one per channel",
    "std": "a list of numbers, one per channel",
    "image_size": "an integer (pixels)",
    "num_channels": "an integer (1 or 3)",
    "tta": "a test-time augmentation (TTA(...) or its dict)",
    "model_kwargs": "a mapping",
    "task": "a task name or its entry {name, threshold, temperature, reject, ...}",
    "threshold": "a probability",
    "label_smoothing": "a number in [0, 1)",
    "temperature": "a number > 0",
    "reject": "a rejection rule",
    "conformal": "a fitted prediction-set rule",
    "data_fingerprint": "a hex digest",
}


def _sequence(value: Any) -> list:
    """A list of the items of ``value`` (a list, tuple, tensor, ...), not of a string's letters."""
    if isinstance(value, (str, bytes)):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return list(value)


def _integer(value: Any) -> int:
    if isinstance(value, bool) or int(value) != float(value):
        raise ValueError(f"expected an integer, got {value!r}")
    return int(value)


def override_hint(field: str) -> str:
    """How a user replaces a bad value of the spec that came with an artifact."""
    return (
        f"Fix it with +spec.{field}=... on the command line (Python: spec={{'{field}': ...}}), "
        "or re-export the model."
    )


class SpecError(ValueError):
    """A bad value in an input spec; ``field`` names the key (``std``, ``classes``, ...)."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def merge_spec(
    stored: Mapping[str, Any] | None, overrides: Mapping[str, Any] | None, source: str
) -> InputSpec:
    """The spec stored in an artifact with ``overrides`` on top (they fill or replace keys)."""
    known = {*InputSpec.__dataclass_fields__, *LEGACY_KEYS, *DECISION_KEYS, *DERIVED_KEYS}
    unknown = sorted(set(overrides or {}) - known)
    if unknown:
        raise ValueError(
            f"Unknown spec key(s) {unknown}; known: {', '.join(InputSpec.__dataclass_fields__)}."
        )
    given = legacy_decision({k: v for k, v in (overrides or {}).items() if v is not None})
    stored = legacy_decision(stored or {})
    merged = {**stored, **given}
    if "task" in given:  # its keys replace the stored entry's (a None one does not)
        task = {k: v for k, v in _entry(given["task"]).items() if v is not None}
        merged["task"] = {**_entry(stored.get("task")), **task}
    return InputSpec.from_dict(merged, source)


def normalize(images, mean: Sequence[float], std: Sequence[float]):
    """uint8 (B, C, H, W) in [0, 255] -> float32 normalized per channel (ToTensor+Normalize).

    The one implementation: training's ``lightning_cls.data.augment.normalize`` calls it, so a
    served image is normalized exactly as in training, without importing Lightning here. A
    numpy array (the ONNX/OpenVINO paths, which never import torch) gives a numpy array, with
    the same constants and operations (``inference.arrays.normalize_numpy``).
    """
    if isinstance(images, np.ndarray):
        return normalize_numpy(images, mean, std)
    import torch  # here, not at the top: the ONNX/OpenVINO paths never import torch

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
    float64 and rounded once. ``channels``: the batch's, checked against mean/std. Cached per
    (mean, std, device): building them cost more than the ONNX Runtime call itself in a
    profile of the server's model thread (docs/serving.md). The tensors are shared: read only.
    """
    import torch  # torch batches only (see normalize)

    check_channels(mean, std, channels)
    return _constants(tuple(map(float, mean)), tuple(map(float, std)), torch.device(device))


@functools.lru_cache(maxsize=64)
def _constants(
    mean: tuple[float, ...], std: tuple[float, ...], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    import torch  # torch batches only (see normalize)

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
    labels: torch.Tensor  # (N,) int64 class indices; multilabel: (N, K) float32 multi-hot

    def __len__(self) -> int:
        return len(self.labels)

    def subset(self, index: torch.Tensor) -> Split:
        return Split(self.images[index], self.labels[index])
