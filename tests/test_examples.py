from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_plain_loop_example_learns_digits(fork_server, fork_env, tmp_path):
    # `python examples/plain_loop_with_datamodule.py --epochs 3`, forked from the pre-imported
    # server (what the example imports is not checked here).
    script = str(REPO / "examples" / "plain_loop_with_datamodule.py")
    proc = fork_server.run([script, "--epochs", "3"], tmp_path, fork_env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
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


def _module_from(path: Path):
    import importlib.util

    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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
    assert not trained.spec.tta.flip and calls == [3]  # the three good images in one call
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
    """examples/ray_serve/app.py on a local Ray instance (the `ray` extra), started and stopped
    by startup_time.py's ``serving`` (the script docs/guides/cluster-serving.md runs; one Ray
    start for both): concurrent requests get the batch function's answers, a bad body gets
    400, and the script's timings are all there."""
    pytest.importorskip("ray")
    from concurrent.futures import ThreadPoolExecutor

    import httpx
    import torch

    from lightning_cls.export.exporter import ExportConfig, export_model
    from lightning_cls.inference import load_artifact

    model = export_model(trained.net, trained.spec, tmp_path, ExportConfig(["onnx"])).paths["onnx"]
    batching = _ray_serve_module("batching", monkeypatch)
    startup_time = _ray_serve_module("startup_time", monkeypatch)
    g = torch.Generator().manual_seed(1)
    images = torch.randint(0, 256, (6, *trained.spec.input_shape), generator=g, dtype=torch.uint8)
    bodies = [_png(image) for image in images]
    expected = batching.classify_batch(load_artifact(model), bodies)
    timings = {}
    with startup_time.serving(model, timings, max_batch_size=8) as url:
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
    assert set(timings) == {"import+ray.init", "serve.run", "shutdown"}
    assert all(0 < seconds < 600 for seconds in timings.values())


KSERVE = REPO / "examples" / "kserve"


def test_kserve_inference_service_serves_the_triton_repository_export_writes(trained, tmp_path):
    """examples/kserve: the InferenceService names KServe's Triton runtime and a repository
    laid out as export=triton_e2e writes it; v2_request.py's body fits the model and gives
    lightning_cls's own predictions."""
    import json
    import re
    import shutil

    import numpy as np
    import torch
    import yaml
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    from lightning_cls import config_dir
    from lightning_cls.export.exporter import export_model
    from lightning_cls.inference import load_artifact, predict_files
    from lightning_cls.inference.runtimes import make_session

    text = (KSERVE / "inference_service.yaml").read_text()
    service = yaml.safe_load(text)
    assert (service["apiVersion"], service["kind"]) == (
        "serving.kserve.io/v1beta1",
        "InferenceService",
    )
    model = service["spec"]["predictor"]["model"]
    assert model["modelFormat"] == {"name": "triton"} and model["protocolVersion"] == "v2"
    assert model["runtime"] == "kserve-tritonserver" and "://" in model["storageUri"]
    assert "nvidia.com/gpu" not in json.dumps(model["resources"])  # KIND_CPU instances
    assert "export=triton_e2e" in text
    (name,) = set(re.findall(r"/v2/models/(\w+)/infer", text))

    with initialize_config_dir(config_dir=config_dir(), version_base="1.3"):
        cfg = compose("export", [f"paths.root_dir={tmp_path}", "export=triton_e2e"])
    paths = export_model(
        trained.net, trained.spec, tmp_path / "export", instantiate(cfg.export)
    ).paths
    # KServe's storage initializer copies storageUri to /mnt/models, Triton's --model-store.
    models = tmp_path / "mnt" / "models"
    shutil.copytree(paths["triton"].parent, models)
    assert sorted(p.name for p in models.iterdir()) == [name]
    assert (models / name / "config.pbtxt").is_file() and (models / name / "labels.txt").is_file()
    assert (models / name / "1" / "model.onnx").read_bytes() == paths["onnx_e2e"].read_bytes()

    g = torch.Generator().manual_seed(2)
    files = []
    for i in range(2):
        files.append(tmp_path / f"img{i}.png")
        files[-1].write_bytes(
            _png(torch.randint(0, 256, (3, 20, 24), generator=g, dtype=torch.uint8))
        )
    v2_request = _module_from(KSERVE / "v2_request.py")
    body = json.loads(json.dumps(v2_request.v2_request(str(paths["onnx_e2e"]), files, top_k=2)))
    assert body["outputs"] == [{"name": "probabilities", "parameters": {"classification": 2}}]
    (tensor,) = body["inputs"]
    session = make_session(models / name / "1" / "model.onnx")
    (inp,) = session.get_inputs()
    assert (tensor["name"], tensor["datatype"], inp.type) == (inp.name, "UINT8", "tensor(uint8)")
    assert tensor["shape"] == [2, *inp.shape[1:]]
    pixels = np.asarray(tensor["data"], np.uint8).reshape(tensor["shape"])
    (probs,) = session.run(None, {inp.name: pixels})
    rows, failures = predict_files(load_artifact(trained.ckpt), files, top_k=1)
    assert not failures
    for row, p in zip(rows, probs):
        assert trained.spec.classes[int(p.argmax())] == row["labels"][0]
        assert abs(float(p.max()) - row["probs"][0]) < 1e-5
