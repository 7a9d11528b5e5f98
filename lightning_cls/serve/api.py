"""``ClassifierAPI``: the LitServe API — decoded pixels in, dynamic batch through the
``Predictor``, top-k labels out.

Requests reach it already checked and decoded by ``RequestGate`` (``gate.py``) as
``{"pixels": base64 uint8 (N, C, H, W), "count": N, "top_k": k}``, so nothing here can fail
for one request's input. The batch loop (``loop.py``) collects up to ``max_batch_size`` requests
(after the first, waiting at most ``batch_timeout`` seconds for more) and calls ``predict`` once
for all their images.
"""

from __future__ import annotations

import base64
import logging
import os
from pathlib import Path
from typing import Any

import litserve as ls
import torch

from lightning_cls.inference.predictor import Predictor, load_artifact, top_k_labels
from lightning_cls.inference.spec import InputSpec
from lightning_cls.serve.loop import BlockingBatchLoop
from lightning_cls.serve.metrics import ServeMetrics

log = logging.getLogger(__name__)


class ClassifierAPI(ls.LitAPI):
    """Serves one artifact (any suffix ``load_artifact`` knows) with ``threads`` per worker."""

    def __init__(
        self,
        artifact: str | Path,
        spec: InputSpec,
        model_info: dict[str, Any],
        metrics: ServeMetrics,
        threads: int,
        max_batch_size: int = 16,
        batch_timeout: float = 0.0,
        api_path: str = "/predict",
        model_name: str | None = None,
        warmup: bool = True,
        batch_loop: str = "blocking",
    ):
        super().__init__(
            max_batch_size=max_batch_size,
            batch_timeout=batch_timeout,
            api_path=api_path,
            # LitServe's own loop for batch 1 (it blocks on its queue); ours when batching.
            loop=BlockingBatchLoop() if max_batch_size > 1 and batch_loop == "blocking" else "auto",
        )
        self.artifact, self.input_spec, self.model_info = str(artifact), spec, model_info
        self.metrics, self.threads, self.model_name = metrics, threads, model_name
        self.warmup = warmup
        self.predictor: Predictor | None = None
        # Not ``self.spec``: LitAPI uses that name for its LitSpec (OpenAI-style APIs).

    def setup(self, device: str) -> None:
        # Runs in the worker process: PyTorch's pool is process-wide, ORT's is per session;
        # both get this worker's share of the cores (ServeConfig: cores // workers).
        torch.set_num_threads(self.threads)
        self.predictor = load_artifact(
            self.artifact,
            model_name=self.model_name,
            spec=self.input_spec,
            threads=self.threads,
            device="cpu" if device == "cpu" else device,
        )
        if self.warmup:  # /health says ready only after this: first requests are not slow
            for size in sorted({1, self.max_batch_size}):
                self.predictor.predict_images(
                    torch.zeros(size, *self.input_spec.input_shape, dtype=torch.uint8), size
                )
        self.metrics.worker_ready(os.getpid())
        log.info("Worker ready: %s, %d thread(s)", self.predictor, self.threads)

    def decode_request(self, request: dict) -> tuple[torch.Tensor, int]:
        raw = bytearray(base64.b64decode(request["pixels"]))  # writable copy for torch
        images = torch.frombuffer(raw, dtype=torch.uint8).view(
            request["count"], *self.input_spec.input_shape
        )
        return images, int(request["top_k"])  # (N, C, H, W) uint8

    def batch(self, inputs: list) -> list:
        return list(inputs)  # requests hold different numbers of images: concatenated in predict

    def predict(self, x):
        single = self.max_batch_size == 1  # LitServe's unbatched loop passes one request
        requests = [x] if single else x
        images = torch.cat([imgs for imgs, _ in requests])  # (sum N, C, H, W)
        probs = self.predictor.predict_images(images, batch_size=len(images))  # (sum N, classes)
        self.metrics.batch_size.observe(len(images))
        outputs, start = [], 0
        for imgs, top_k in requests:
            outputs.append((probs[start : start + len(imgs)], top_k, len(images)))
            start += len(imgs)
        return outputs[0] if single else outputs

    def unbatch(self, output: list) -> list:
        return output

    def encode_response(self, output) -> dict[str, Any]:
        probs, top_k, batch_images = output
        rows = top_k_labels(self.input_spec, probs, top_k)
        return {
            "predictions": [
                {"labels": [r["label"] for r in row], "probs": [r["prob"] for r in row]}
                for row in rows
            ],
            "model": self.model_info,
            "batch_images": batch_images,  # images in the model call that served this request
        }
