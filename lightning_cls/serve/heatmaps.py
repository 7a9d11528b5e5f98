"""``POST /explain``: the Grad-CAM heat map of one image, drawn over it, for a served PyTorch
network (``.ckpt`` or ``model_weights.pt``).

An exported graph (ONNX, OpenVINO, TorchScript, .pt2) outputs logits only: ``/info`` says
``"explain": {"supported": false, "reason": ...}`` and ``/explain`` answers 501 with the
reason; nothing here imports torch for such a model. The explainer works on its own copy of
the network: its hooks must not see the batcher's forward passes, which run concurrently.
"""

from __future__ import annotations

import base64
import copy
import threading
from typing import Any

from lightning_cls.explain import TORCH_KINDS, unsupported_reason
from lightning_cls.inference.predictor import Predictor

METHOD = "gradcam"


class HeatMaps:
    def __init__(self, predictor: Predictor):
        self.explainer, self.reason = None, None
        self.lock = threading.Lock()  # one explanation at a time on the copy
        if predictor.kind not in TORCH_KINDS:
            self.reason = unsupported_reason(predictor.kind)
            return
        from lightning_cls.explain import Explainer

        net = copy.deepcopy(getattr(predictor.runtime, "net", predictor.runtime))
        try:
            self.explainer = Explainer(net, predictor.spec, METHOD)
        except ValueError as err:  # no feature map (an MLP)
            self.reason = f"Heat maps are not supported for this model: {err}"

    def describe(self) -> dict[str, Any]:
        """What ``/info`` says under ``model.explain``."""
        if self.explainer is None:
            return {"supported": False, "reason": self.reason}
        return {"supported": True, "method": METHOD, "layer": self.explainer.layer}

    def explain(self, image) -> dict[str, Any]:
        """uint8 (C, H, W) -> the explained label, its probability and the overlay as a PNG
        data URL (enlarged to at least 128 pixels)."""
        from lightning_cls.explain import blend
        from lightning_cls.figures.overlay import png_bytes

        with self.lock:
            found = self.explainer.explain(image[None])
        label = found.label[0]
        side = max(image.shape[-2:])
        picture = png_bytes(blend(image, found.maps[0].numpy()), scale=max(1, -(-128 // side)))
        return {
            "label": self.explainer.spec.classes[label],
            "prob": float(found.probs[0, label]),
            "method": METHOD,
            "layer": self.explainer.layer,
            "overlay": "data:image/png;base64," + base64.b64encode(picture).decode(),
        }
