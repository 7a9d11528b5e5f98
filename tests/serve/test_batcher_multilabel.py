"""The server answers a multi-label model with every label above its threshold."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from lightning_cls.inference import load_artifact, predict_files


def test_the_server_answers_the_labels_above_the_threshold(multilabel_run, multilabel_squares):
    from lightning_cls.serve.app import ServeApp
    from lightning_cls.serve.config import ServeConfig
    from lightning_cls.serve.metrics import ServeMetrics

    artifact = Path(multilabel_run["run_dir"]) / "export" / "model.onnx"
    predictor = load_artifact(artifact)
    app = ServeApp(ServeConfig(artifact=str(artifact)), predictor, ServeMetrics(), {"name": "m"})
    files = sorted((multilabel_squares / "images").glob("test_*.png"))[:6]
    expected, _ = predict_files(predictor, files)

    async def ask():
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
            return await asyncio.gather(
                *(
                    client.post(
                        "/predict", content=f.read_bytes(), headers={"content-type": "image/png"}
                    )
                    for f in files
                )
            )

    try:
        answers = asyncio.run(ask())
    finally:
        app.close()
    for answer, want in zip(answers, expected):
        assert answer.status_code == 200, answer.text
        (got,) = answer.json()["predictions"]
        assert got["labels"] == want["labels"]  # all above the threshold, not a top-5
        assert got["probs"] == pytest.approx(want["probs"], abs=1e-5)
