"""``TTA``: an artifact's test-time augmentation as one object, and the functions that apply it.

``TTA(flip=True)`` averages each image's logits with its mirror's (airbench's flip TTA);
``translate=p`` also averages copies shifted by p pixels (airbench's level 2). ``mode``:
``full`` gives every evaluated image the TTA; ``selective`` only the images whose plain
confidence is below ``threshold``, chosen on validation while training (the least TTA share
within ``tolerance`` of full TTA's accuracy; ``training/selective_tta.py``). Built from the
``conf/tta/`` group by ``train``, handed to ``ClassificationModule(tta=...)``, saved in
checkpoints and carried by every artifact's spec (``InputSpec.tta``), so the module's
evaluation, ``Predictor``, the server and the end-to-end ONNX graph apply the same TTA.

Older layouts kept the options flat (``tta_flip``, ``tta_translate``, ``tta_threshold``,
``tta_tolerance`` and ``tta="full"|"selective"``); ``TTA.from_value`` reads both.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from lightning_cls.inference import arrays

if TYPE_CHECKING:
    import torch

MODES = ("full", "selective")
# The flat keys of older checkpoints, specs and module calls -> the TTA field each became.
LEGACY_KEYS = {
    "tta_flip": "flip",
    "tta_translate": "translate",
    "tta_threshold": "threshold",
    "tta_tolerance": "tolerance",
}


@dataclass(frozen=True)
class TTA:
    """Test-time augmentation: ``flip``, ``translate`` (pixels, 0: off), ``mode`` (full |
    selective), ``threshold`` (selective's, chosen on validation; None: every image gets the
    TTA) and ``tolerance`` (the validation accuracy selective may give up against full)."""

    flip: bool = False
    translate: int = 0
    mode: str = "full"
    threshold: float | None = None
    tolerance: float = 0.002

    def __post_init__(self):
        set_ = object.__setattr__  # frozen: normalise the types once, here
        if not isinstance(self.flip, bool):
            raise ValueError(f"tta.flip={self.flip!r} is not a boolean; use true or false.")
        translate = self.translate if self.translate is not None else 0
        if isinstance(translate, bool) or not isinstance(translate, int) or translate < 0:
            raise ValueError(
                f"tta.translate={self.translate!r} is not a pixel shift; use an int >= 0 "
                "(0: none, 1: airbench's level 2)."
            )
        set_(self, "translate", translate)
        if self.mode not in MODES:
            raise ValueError(f"Unknown tta.mode={self.mode!r}; use one of {', '.join(MODES)}.")
        if self.mode == "selective" and not self.active:
            raise ValueError(
                "tta.mode=selective chooses which images get the TTA of tta.flip/tta.translate, "
                "and both are off; set tta.flip=true (and/or tta.translate=1), or tta.mode=full."
            )
        if self.threshold is not None:
            try:
                set_(self, "threshold", float(self.threshold))
            except (TypeError, ValueError):
                raise ValueError(
                    f"tta.threshold={self.threshold!r} is not a probability; use a number in "
                    "(0, 1], or null for every image."
                ) from None
        tolerance = self.tolerance
        if isinstance(tolerance, bool) or not isinstance(tolerance, (int, float)):
            tolerance = math.nan
        if not 0.0 <= tolerance < 1.0:
            raise ValueError(
                f"tta.tolerance={self.tolerance!r} must be an accuracy difference in [0, 1), "
                "e.g. 0.002."
            )
        set_(self, "tolerance", float(tolerance))

    @property
    def active(self) -> bool:
        """Whether any augmentation is on (else evaluation runs one plain pass)."""
        return self.flip or self.translate > 0

    def with_threshold(self, threshold: float | None) -> TTA:
        return replace(self, threshold=threshold)

    def to_dict(self) -> dict[str, Any]:
        """Plain containers (checkpoints' hyperparameters, specs' JSON)."""
        return asdict(self)

    @classmethod
    def from_value(cls, value: Any = None, legacy: Mapping[str, Any] | None = None) -> TTA:
        """A ``TTA`` from a ``TTA``, its dict, None (no TTA), or an older layout's mode string
        (``"full"``/``"selective"``); ``legacy``: older flat keys (``tta_flip``, ...), which
        override (``tta_threshold=None``: every image). Unknown keys name the known ones."""
        if isinstance(value, TTA):
            fields = value.to_dict()
        elif value is None:
            fields = {}
        elif isinstance(value, str):
            fields = {"mode": value}
        elif isinstance(value, Mapping):
            fields = dict(value)
        else:
            raise TypeError(
                f"tta={value!r} is not a TTA; pass TTA(flip=..., translate=...), its dict, or "
                "None (no TTA)."
            )
        unknown = sorted(set(fields) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(
                f"Unknown tta option(s) {unknown}; known: {', '.join(cls.__dataclass_fields__)}."
            )
        for key, name in LEGACY_KEYS.items():
            if key in (legacy or {}):
                fields[name] = legacy[key]
        if isinstance(fields.get("flip"), int):  # 0/1 from older JSON
            fields["flip"] = bool(fields["flip"])
        return cls(**fields)

    def logits(
        self,
        forward: Callable[[torch.Tensor], torch.Tensor],
        x: torch.Tensor,
        confidence: Callable | None = None,
    ):
        """(B, K) logits of a normalized batch with this TTA: one pass when it is off, full
        TTA without a threshold, else ``selective_tta`` (``confidence`` maps logits to (B,))."""
        if not self.active:
            return forward(x)
        if self.threshold is None:
            return tta(forward, x, self.flip, self.translate)
        return selective_tta(forward, x, self.flip, self.translate, self.threshold, confidence)[0]


def warn_legacy(legacy: Mapping[str, Any], where: str) -> None:
    """A deprecation warning naming the flat TTA keys given (``where``: how they were given)."""
    if legacy:
        keys = sorted(legacy)
        new = ", ".join(f"tta.{LEGACY_KEYS.get(k, 'mode')}" for k in keys)
        warnings.warn(
            f"{where} {', '.join(keys)}: deprecated; TTA options live in one TTA object now "
            f"({new}; lightning_cls.inference.tta.TTA, conf/tta/).",
            DeprecationWarning,
            stacklevel=3,
        )


def flip_tta(forward: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> torch.Tensor:
    """Mean logits of ``x`` and its horizontal mirror (airbench's flip TTA). (B, C, H, W) -> (B, K)."""
    return (forward(x) + forward(arrays.flip_lr(x))) / 2


def tta(
    forward: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    flip: bool = False,
    translate: int = 0,
) -> torch.Tensor:
    """Test-time augmentation of a normalized (B, C, H, W) batch -> (B, K) logits.

    ``flip``: the mean of each image's and its mirror's logits. ``translate`` = p > 0
    (airbench's TTA level 2): half that, plus half the mean over two copies shifted by p pixels
    up-left and down-right (edges reflect-padded), each also flip-averaged when ``flip``.
    The one implementation: ``ClassificationModule``'s evaluation calls it too. ``x`` is a
    tensor or a numpy array, as ``forward`` takes.
    """
    if translate < 0:
        raise ValueError(f"tta.translate must be >= 0 pixels, got {translate}.")
    return _augmented(forward, x, flip, translate, forward(x))


def _augmented(forward, x, flip: bool, translate: int, plain):
    """``tta`` given the plain pass's logits ``plain`` (not computed twice)."""
    once = (lambda v: flip_tta(forward, v)) if flip else forward
    logits = (plain + forward(arrays.flip_lr(x))) / 2 if flip else plain
    if translate:
        p, (h, w) = translate, x.shape[-2:]
        padded = arrays.reflect_pad(x, p)
        shifted = once(padded[..., :h, :w]) + once(padded[..., 2 * p :, 2 * p :])
        logits = (logits + shifted / 2) / 2
    return logits


def selective_tta(
    forward: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    flip: bool,
    translate: int,
    threshold: float,
    confidence: Callable,
    plain=None,
):
    """``tta`` only for the images whose plain prediction is unsure: (B, K) logits and the
    (B,) bool mask of the images that got it. ``confidence`` maps (B, K) logits to (B,)
    (the task's max probability after its temperature); an image below ``threshold`` gets
    the TTA, the rest keep their one plain pass (on a CPU the level-2 TTA costs 6 passes).
    ``plain``: that pass's logits when the caller has them already."""
    plain = forward(x) if plain is None else plain  # (B, K)
    low = confidence(plain) < threshold  # (B,)
    if not low.any():
        return plain, low
    logits = plain.copy() if arrays.is_numpy(plain) else plain.clone()
    logits[low] = _augmented(forward, x[low], flip, translate, plain[low])
    return logits, low
