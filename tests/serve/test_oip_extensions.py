"""Triton's model-configuration and statistics extensions (serve/oip.py) on an in-process
``ServeApp``: the config's fields, statistics that move with the requests sent (N good infers
-> success N more, a bad one -> fail one more), 404 for an unknown model, 405 with Allow for
another method than GET; and Triton's own client reading both from a server process."""

from __future__ import annotations

import httpx
import numpy as np
import pytest
from in_process import ask, serve_app

INFER = "/v2/models/tiny/infer"


def _good(spec, n: int = 1) -> dict:
    x = np.zeros((n, *spec.input_shape), np.float32)
    tensor = {
        "name": "input",
        "shape": list(x.shape),
        "datatype": "FP32",
        "data": x.ravel().tolist(),
    }
    return {"inputs": [tensor]}


def _stat(response: httpx.Response) -> dict:
    assert response.status_code == 200, response.text
    (stat,) = response.json()["model_stats"]
    return stat


def test_config_answers_triton_model_config_fields(artifacts):
    app, _ = serve_app(artifacts.paths["onnx"], max_batch_size=8)
    spec = artifacts.spec
    config, versioned, server = ask(
        app,
        [
            ("GET", "/v2/models/tiny/config", {}),
            ("GET", "/v2/models/tiny/versions/abc123/config", {}),
            ("GET", "/v2", {}),
        ],
    )
    assert config.status_code == 200 and versioned.json() == config.json()
    body = config.json()
    assert body["name"] == "tiny" and body["backend"] == "onnx"
    assert body["platform"] == "lightning_cls_onnx" and body["max_batch_size"] == 8
    assert body["input"][0] == {
        "name": "input",
        "data_type": "TYPE_FP32",
        "dims": list(spec.input_shape),
    }
    assert body["input"][1]["data_type"] == "TYPE_STRING" and body["input"][1]["dims"] == [1]
    k = spec.num_classes
    assert {o["name"]: (o["data_type"], o["dims"]) for o in body["output"]}["logits"] == (
        "TYPE_FP32",
        [k],
    )
    assert {"model_configuration", "statistics"} <= set(server.json()["extensions"])


def test_stats_count_good_and_bad_infers_and_model_calls(artifacts):
    app, _ = serve_app(artifacts.paths["onnx"])
    spec = artifacts.spec
    good = ("POST", INFER, {"json": _good(spec, 2)})
    bad = ("POST", INFER, {"json": {"inputs": [{"name": "input", "datatype": "FP64"}]}})
    stats = ("GET", "/v2/models/tiny/stats", {})
    before, *_, after_good, _, after_bad, every, versioned = ask(
        app,
        [stats, good, good, good, stats, bad, stats, ("GET", "/v2/models/stats", {}),
         ("GET", "/v2/models/tiny/versions/abc123/stats", {})],
    )  # fmt: skip
    first, second, third = _stat(before), _stat(after_good), _stat(after_bad)
    assert first["name"] == "tiny" and first["version"] == "abc123"
    assert first["inference_stats"]["success"] == {"count": 0, "ns": 0}
    assert first["inference_count"] == first["execution_count"] == 0
    done = second["inference_stats"]
    assert done["success"]["count"] == 3 and done["success"]["ns"] > 0
    assert done["fail"]["count"] == 0
    assert done["queue"]["count"] == done["compute_infer"]["count"] == 3
    assert done["compute_infer"]["ns"] > 0
    assert second["inference_count"] == 6 and second["execution_count"] == 3  # 2 images each
    assert second["last_inference"] > 0
    assert third["inference_stats"]["fail"]["count"] == 1
    assert third["inference_stats"]["success"]["count"] == 3  # the bad one is not a success
    assert third["inference_count"] == 6  # it reached no model call
    assert _stat(every)["inference_stats"]["fail"]["count"] == 1
    assert _stat(versioned)["name"] == "tiny"


def test_a_predict_request_counts_as_an_inference_too(artifacts):
    app, _ = serve_app(artifacts.paths["onnx"])
    from helpers import png_bytes

    png = png_bytes(artifacts.images[0])
    (predicted, stats) = ask(
        app,
        [
            ("POST", "/predict", {"content": png, "headers": {"content-type": "image/png"}}),
            ("GET", "/v2/models/tiny/stats", {}),
        ],
    )
    assert predicted.status_code == 200, predicted.text
    assert _stat(stats)["inference_stats"]["success"]["count"] == 1


@pytest.mark.parametrize(
    "path",
    [
        "/v2/models/nope/config",
        "/v2/models/nope/stats",
        "/v2/models/tiny/versions/9/config",
        "/v2/models/tiny/versions/9/stats",
    ],
)
def test_an_unknown_model_or_version_is_a_404_naming_it(artifacts, path):
    app, _ = serve_app(artifacts.paths["onnx"])
    (answer,) = ask(app, [("GET", path, {})])
    assert answer.status_code == 404
    assert "unknown model" in answer.json()["error"] and "'tiny'" in answer.json()["error"]


@pytest.mark.parametrize(
    "path", ["/v2/models/tiny/config", "/v2/models/tiny/stats", "/v2/models/stats"]
)
@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_another_method_than_get_is_a_405_with_allow(artifacts, path, method):
    app, _ = serve_app(artifacts.paths["onnx"])
    (answer,) = ask(app, [(method, path, {"content": b"{}"})])
    assert answer.status_code == 405 and answer.headers["allow"] == "GET"
    assert f"takes GET, not {method}" in answer.json()["error"]


def test_tritonclient_reads_config_and_statistics(server, artifacts):
    httpclient = pytest.importorskip("tritonclient.http", exc_type=ImportError)
    name = httpx.get(server.url + "/info").json()["model"]["name"]
    shape = [2, *artifacts.spec.input_shape]
    given = httpclient.InferInput("input", shape, "FP32")
    given.set_data_from_numpy(np.zeros(shape, np.float32))
    with httpclient.InferenceServerClient(server.url.removeprefix("http://")) as client:
        config = client.get_model_config(name)
        before = client.get_inference_statistics(name)["model_stats"][0]
        for _ in range(3):
            client.infer(name, [given])
        with pytest.raises(httpclient.InferenceServerException):
            client.infer(name, [given], model_version="no-such-version")
        after = client.get_inference_statistics(name)["model_stats"][0]
        with pytest.raises(httpclient.InferenceServerException, match="unknown model 'nope'"):
            client.get_model_config("nope")
    assert config["name"] == name and config["input"][0]["data_type"] == "TYPE_FP32"
    assert config["input"][0]["dims"] == list(artifacts.spec.input_shape)
    was, now = before["inference_stats"], after["inference_stats"]
    assert now["success"]["count"] - was["success"]["count"] == 3
    assert after["inference_count"] - before["inference_count"] == 6
