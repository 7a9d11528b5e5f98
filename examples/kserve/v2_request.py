"""Image files -> an Open Inference Protocol (v2) request for the end-to-end model.

    python examples/kserve/v2_request.py model_e2e.onnx cat.jpg dog.png > request.json

Triton and KServe take this body at ``POST /v2/models/<model_name>/infer``. Each image is
decoded and resized as in training (``decode_image``, the spec stored in the ONNX file) and
sent as uint8 NHWC pixels; the model does the rest. ``classification`` asks Triton's
classification extension for the top-k ``"prob:index:label"`` strings (from labels.txt).
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from lightning_cls.export.onnx import read_metadata
from lightning_cls.export.onnx_e2e import INPUT_NAME, OUTPUT_NAME
from lightning_cls.inference import decode_image


def v2_request(model_path: str, images: list[str], top_k: int = 0) -> dict:
    """The request body: one ``UINT8`` tensor (N, H, W, C), optionally top-k labels."""
    spec = read_metadata(model_path)
    pixels = np.stack(
        [
            decode_image(path, spec.image_size, spec.num_channels, spec.resize_size)
            for path in images
        ]
    ).transpose(0, 2, 3, 1)  # (N, C, H, W) -> (N, H, W, C)
    output: dict = {"name": OUTPUT_NAME}
    if top_k:
        output["parameters"] = {"classification": top_k}
    return {
        "inputs": [
            {
                "name": INPUT_NAME,
                "shape": list(pixels.shape),
                "datatype": "UINT8",
                "data": pixels.reshape(-1).tolist(),
            }
        ],
        "outputs": [output],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="the model_e2e.onnx that the server runs")
    parser.add_argument("images", nargs="+", help="image files")
    parser.add_argument("--top-k", type=int, default=0, help="top-k labels instead of probs")
    args = parser.parse_args()
    json.dump(v2_request(args.model, args.images, args.top_k), sys.stdout)


if __name__ == "__main__":
    main()
