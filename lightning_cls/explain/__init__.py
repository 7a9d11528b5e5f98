"""Where the model looked: Grad-CAM and CAM heat maps of PyTorch networks, and overlays.

- ``Explainer(net, spec, method="gradcam"|"cam", layer=None)``: heat maps of uint8 images for
  the predicted class (each predicted label of a multi-label model) or a given one.
- ``load_explainer(path, ...)``: the same from a ``.ckpt`` or ``model_weights.pt``.
- ``default_layer`` / ``resolve_layer`` (``layers``): the layer a map is read from.
- ``blend`` / ``save_overlay`` (``lightning_cls.figures.overlay``): the map drawn over the
  image (drawing lives in ``figures/``; the names stay here, the guides import them).
- ``explain_files`` (``files``): image files -> overlays, a CSV and a mosaic.

No Lightning, no Hydra. Names load on first use (PEP 562), so ``python -m
lightning_cls.explain --help`` imports no torch.
"""

from __future__ import annotations

import importlib

_WHERE = {
    "Explainer": "explainer",
    "Explanation": "explainer",
    "load_explainer": "explainer",
    "default_layer": "layers",
    "resolve_layer": "layers",
    "blend": "lightning_cls.figures.overlay",  # public names of the explain guide
    "save_overlay": "lightning_cls.figures.overlay",
    "explain_files": "files",
    "METHODS": "methods",
}

# The artifacts whose network an Explainer reads (an eager ``Predictor(net, spec)`` too).
TORCH_KINDS = ("ckpt", "weights", "eager")


def unsupported_reason(kind: str) -> str:
    """Why an artifact of ``kind`` cannot be explained, and what to use instead."""
    return (
        f"Heat maps are not supported for this {kind} model: its graph outputs logits "
        "only, not the feature maps a heat map is read from. Use the run's .ckpt (or "
        "model_weights.pt) for heat maps."
    )


def __getattr__(name: str):
    if name in _WHERE:
        where = _WHERE[name]
        module = importlib.import_module(
            where if where.startswith("lightning_cls.") else f"lightning_cls.explain.{where}"
        )
        return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = sorted([*_WHERE, "TORCH_KINDS", "unsupported_reason"])
