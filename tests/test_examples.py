import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_plain_loop_example_learns_digits():
    proc = subprocess.run(
        [sys.executable, str(REPO / "examples" / "plain_loop_with_datamodule.py"), "--epochs", "3"],
        capture_output=True,
        text=True,
        check=True,
    )
    last = proc.stdout.strip().splitlines()[-1]
    assert float(last.rsplit(" ", 1)[1]) > 0.8, last  # val accuracy; chance is 0.1


RAY_SERVE = REPO / "examples" / "ray_serve"


def _png(image) -> bytes:
    """uint8 (C, H, W) -> PNG bytes."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(image.permute(1, 2, 0).numpy()).save(buf, format="PNG")
    return buf.getvalue()


def _ray_serve_module(name: str, monkeypatch):
    import importlib

    monkeypatch.syspath_prepend(str(RAY_SERVE))
    return importlib.import_module(name)


def test_ray_serve_batch_function_runs_one_model_call_per_batch(trained, monkeypatch):
    """examples/ray_serve/batching.py without Ray: results in order, bad bodies reported
    one by one, every good image through one model call, probabilities = Predictor's."""
    import torch

    from lightning_cls.inference import Predictor, load_artifact

    batching = _ray_serve_module("batching", monkeypatch)
    loaded = load_artifact(trained.ckpt)
    calls = []

    def counting(x):
        calls.append(len(x))
        return loaded.runtime(x)

    predictor = Predictor(counting, loaded.spec)
    g = torch.Generator().manual_seed(0)
    images = torch.randint(0, 256, (3, *trained.spec.input_shape), generator=g, dtype=torch.uint8)
    bodies = [_png(images[0]), b"not an image", _png(images[1]), _png(images[2])]
    results = batching.classify_batch(predictor, bodies, top_k=2)
    assert len(results) == 4 and results[1] == {"error": "not a readable image"}
    assert not trained.spec.tta_flip and calls == [3]  # the three good images in one call
    probs = loaded.predict_images(images)
    for result, row in zip([results[0], results[2], results[3]], probs):
        (best, second) = result["predictions"]
        top = row.topk(2)
        assert [best["label"], second["label"]] == [trained.spec.classes[i] for i in top.indices]
        assert abs(best["prob"] - top.values[0].item()) < 1e-6
    assert batching.classify_batch(predictor, [b"junk"]) == [{"error": "not a readable image"}]
    assert len(calls) == 1  # no model call for a batch without a readable image


@pytest.mark.slow
def test_ray_serve_app_answers_on_a_local_ray_instance(trained, tmp_path, monkeypatch):
    """examples/ray_serve/app.py on a local Ray instance (the `ray` extra): concurrent
    requests get the batch function's answers, a bad body gets 400."""
    ray = pytest.importorskip("ray")
    import socket
    from concurrent.futures import ThreadPoolExecutor

    import httpx
    import torch
    from ray import serve

    from lightning_cls.export.exporter import ExportConfig, export_model
    from lightning_cls.inference import load_artifact

    model = export_model(trained.net, trained.spec, tmp_path, ExportConfig(["onnx"])).paths["onnx"]
    app = _ray_serve_module("app", monkeypatch)
    batching = _ray_serve_module("batching", monkeypatch)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    g = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (6, *trained.spec.input_shape), generator=g, dtype=torch.uint8)
    bodies = [_png(image) for image in images]
    expected = batching.classify_batch(load_artifact(model), bodies)
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"working_dir": str(RAY_SERVE)},  # replicas import app/batching from it
    )
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        serve.run(
            app.app_builder({"artifact": str(model), "max_batch_size": "8"}), route_prefix="/"
        )
        url = f"http://127.0.0.1:{port}/"
        with ThreadPoolExecutor(len(bodies)) as pool:
            answers = list(pool.map(lambda b: httpx.post(url, content=b, timeout=60), bodies))
        assert [a.status_code for a in answers] == [200] * len(bodies)
        for answer, want in zip(answers, expected):
            got = answer.json()["predictions"]
            assert [p["label"] for p in got] == [p["label"] for p in want["predictions"]]
            for p, q in zip(got, want["predictions"]):
                assert abs(p["prob"] - q["prob"]) < 1e-5
        bad = httpx.post(url, content=b"junk", timeout=60)
        assert (bad.status_code, bad.json()) == (400, {"error": "not a readable image"})
    finally:
        serve.shutdown()
        ray.shutdown()
