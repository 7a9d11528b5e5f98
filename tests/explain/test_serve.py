"""``POST /explain`` and ``/info``'s ``model.explain``: the heat map of a dropped image where the
served model is a PyTorch checkpoint, a 501 with the reason where it is an exported graph."""

from __future__ import annotations

import asyncio
import base64
import io

import httpx
from PIL import Image

from helpers import png_bytes
from lightning_cls.inference import Predictor, load_artifact
from lightning_cls.serve.app import ServeApp
from lightning_cls.serve.config import ServeConfig
from lightning_cls.serve.metrics import ServeMetrics


def _ask(predictor, path: str, requests: list[tuple[str, bytes | None]]) -> list[httpx.Response]:
    app = ServeApp(ServeConfig(artifact=path), predictor, ServeMetrics(), {"name": "m"})

    async def ask():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            out = []
            for url, body in requests:
                headers = {"content-type": "image/png"}
                call = client.get(url) if body is None else client.post(url, content=body, headers=headers)  # fmt: skip
                out.append(await call)
            return out

    try:
        return asyncio.run(ask())
    finally:
        app.close()


def test_a_served_checkpoint_draws_the_heat_map_of_its_prediction(trained):
    image = png_bytes(trained.data.splits["test"].images[0])
    predictor = load_artifact(trained.ckpt)
    info, predicted, explained = _ask(
        predictor, str(trained.ckpt), [("/info", None), ("/predict", image), ("/explain", image)]
    )
    assert info.json()["model"]["explain"] == {
        "supported": True,
        "method": "gradcam",
        "layer": "features",
    }
    answer = explained.json()
    assert explained.status_code == 200, answer
    assert answer["label"] == predicted.json()["predictions"][0]["labels"][0]
    head, data = answer["overlay"].split(",", 1)
    assert head == "data:image/png;base64"
    overlay = Image.open(io.BytesIO(base64.b64decode(data)))
    assert overlay.size == (128, 128) and overlay.mode == "RGB"  # 16 px drawn 8 times larger


def test_an_exported_graph_says_it_has_no_heat_maps(trained):
    predictor = Predictor(trained.net, trained.spec, kind="onnx")  # as an ONNX file is served
    info, explained = _ask(predictor, "model.onnx", [("/info", None), ("/explain", b"x")])
    reason = "Heat maps are not supported for this onnx model: its graph outputs logits only"
    assert info.json()["model"]["explain"]["supported"] is False
    assert info.json()["model"]["explain"]["reason"].startswith(reason)
    assert explained.status_code == 501 and explained.json()["detail"].startswith(reason)
