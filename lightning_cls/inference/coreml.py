"""Core ML runtime for ``.mlpackage`` folders written by ``export=coreml`` (macOS only).

coremltools runs a model only on macOS; elsewhere opening one is a one-line error naming the
formats that run here. On macOS each normalized image is turned back into its pixels (the
model takes an image and does the preprocessing itself) and the classifier's probabilities
come back as log-probabilities times the temperature: logits up to a constant per image, which
the task's softmax maps back to the same probabilities. Not run by the suite (Linux).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from lightning_cls.inference.arrays import call_numpy
from lightning_cls.inference.runtimes import Runtime
from lightning_cls.inference.spec import InputSpec, merge_spec, props_to_dict


class CoreMLRuntime(Runtime):
    """An ``.mlpackage`` classifier through coremltools' ``MLModel.predict`` (macOS)."""

    kind = "coreml"
    arrays = "numpy"

    def __init__(
        self, path, *, spec=None, threads=None, device="cpu", model_name=None, model_kwargs=None
    ):
        path = Path(path)
        if sys.platform != "darwin":
            raise OSError(
                f"{path.name} is a Core ML model, which runs on macOS only (coremltools cannot "
                f"predict on {sys.platform}); predict here with model.onnx, model.pte or "
                "model.tflite."
            )
        import coremltools as ct

        self.device = "cpu"
        self.model = ct.models.MLModel(str(path))
        stored = dict(self.model.get_spec().description.metadata.userDefined)
        self.spec: InputSpec = merge_spec(
            props_to_dict(stored, f"{path.name} (user_defined_metadata)") or None,
            spec,
            f"{path.name} (user_defined_metadata)",
        )

    def __call__(self, x):
        return call_numpy(self._run, x)

    def _run(self, x: np.ndarray) -> np.ndarray:
        from PIL import Image

        mean = np.asarray(self.spec.mean, np.float32).reshape(1, -1, 1, 1)
        std = np.asarray(self.spec.std, np.float32).reshape(1, -1, 1, 1)
        pixels = np.clip(np.rint((x * std + mean) * 255), 0, 255).astype(np.uint8)  # (B,C,H,W)
        mode = "L" if self.spec.num_channels == 1 else "RGB"
        rows = []
        for image in pixels.transpose(0, 2, 3, 1):  # (H, W, C)
            answer = self.model.predict({"image": Image.fromarray(image.squeeze(), mode)})
            probs = answer["classLabel_probs"]
            rows.append([probs[c] for c in self.spec.classes])
        scale = np.asarray(self.spec.decision.temperature, np.float32)
        return np.log(np.maximum(np.asarray(rows, np.float32), 1e-30)) * scale
