"""The batch function of the Ray Serve example: raw image bytes -> top-k labels, one model call.

Kept free of Ray so it can be tested (and reused) without a Ray cluster: ``app.py`` wraps it in
``@serve.batch``, which hands it the request bodies Ray has gathered.
"""

from __future__ import annotations

import numpy as np
import torch

from lightning_cls.inference import Predictor, decode_image, top_k_labels
from lightning_cls.inference.images import DECODE_ERRORS, decode_error_reason


def classify_batch(predictor: Predictor, bodies: list[bytes], top_k: int = 5) -> list[dict]:
    """One result per body, in order: ``{"predictions": [{"label", "prob"}, ...]}`` (best
    first) or ``{"error": reason}`` for a body that is not a readable image.

    Every readable image is decoded and resized as in training (``decode_image``) and the
    batch goes through the model in one ``predict_images`` call (the artifact's TTA included);
    one bad image does not fail the others.
    """
    spec = predictor.spec
    results: list[dict] = [{} for _ in bodies]
    images, where = [], []
    for i, body in enumerate(bodies):
        try:
            image = decode_image(body, spec.image_size, spec.num_channels, spec.resize_size)
        except DECODE_ERRORS as err:
            results[i] = {"error": decode_error_reason(err)}
            continue
        images.append(image)  # (C, H, W) uint8
        where.append(i)
    if images:
        probs = predictor.predict_images(torch.from_numpy(np.stack(images)), len(images))
        for i, top in zip(where, top_k_labels(spec, probs, top_k)):
            results[i] = {"predictions": top}
    return results
