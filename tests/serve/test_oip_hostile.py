"""The Open Inference Protocol (serve/oip.py) under bodies a client should not send: a
``parameters`` that is not an object, numbers that are not finite float32 (in JSON or in
binary), inputs whose logits overflow, wrong methods; and the temperature in the answered
probabilities."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from in_process import ask, serve_app

INFER = "/v2/models/tiny/infer"


def _tensor(x: np.ndarray, **fields) -> dict:
    return {
        "name": "input",
        "shape": list(x.shape),
        "datatype": "FP32",
        "data": x.tolist(),
        **fields,
    }


@pytest.fixture(scope="module")
def x(artifacts) -> np.ndarray:
    """Two images as the model's own normalized input, float32 (2, 3, 12, 12)."""
    spec = artifacts.spec
    return np.ascontiguousarray(spec.preprocess(artifacts.images[:2].numpy()), np.float32)


@pytest.mark.parametrize("value", ["x", [1], 3, True])
def test_a_parameters_that_is_not_an_object_is_a_400_naming_where(artifacts, x, value):
    cases = [
        ({"inputs": [_tensor(x)], "parameters": value}, "of the request"),
        ({"inputs": [_tensor(x, parameters=value)]}, "of input 'input'"),
        ({"inputs": [_tensor(x)], "outputs": [{"name": "logits", "parameters": value}]},
         "of output 'logits'"),
        ({"inputs": [_tensor(x)], "parameters": None}, None),  # null: none, answered
    ]  # fmt: skip
    app, _ = serve_app(artifacts.paths["onnx"])
    answers = ask(app, [("POST", INFER, {"json": body}) for body, _ in cases])
    for (_, where), answer in zip(cases, answers):
        if where is None:
            assert answer.status_code == 200, answer.text
            continue
        assert answer.status_code == 400, answer.text
        kind = {str: "string", list: "list", int: "number", bool: "boolean"}[type(value)]
        message = f'"parameters" {where} is a {kind}; send an object'
        assert answer.json()["error"].startswith(message), answer.json()


def test_inputs_that_are_not_finite_float32_are_a_400_and_never_null_in_a_200(artifacts, x):
    """1e40 overflows float32 in JSON; NaN and inf come in binary (JSON has no literal)."""
    big = x.tolist()
    big[0][0][0][0] = 1e40
    bad = x.copy()
    bad[1, 2, 3, 4], bad[0, 0, 0, 1] = np.nan, -np.inf
    head = json.dumps(
        {"inputs": [{"name": "input", "shape": [2, 3, 12, 12], "datatype": "FP32",
                     "parameters": {"binary_data_size": bad.nbytes}}]}
    ).encode()  # fmt: skip
    binary = {
        "content": head + bad.tobytes(),
        "headers": {"inference-header-content-length": str(len(head))},
    }
    app, _ = serve_app(artifacts.paths["onnx"])
    too_big, not_numbers, good = ask(
        app,
        [
            ("POST", INFER, {"json": {"inputs": [{**_tensor(x), "data": big}]}}),
            ("POST", INFER, binary),
            ("POST", INFER, {"json": {"inputs": [_tensor(x)]}}),
        ],
    )
    message = r"input 'input' holds {} values that are not finite float32 numbers \(NaN, inf"
    assert too_big.status_code == 400 and re.match(message.format(1), too_big.json()["error"])
    assert not_numbers.status_code == 400
    assert re.match(message.format(2), not_numbers.json()["error"])
    assert good.status_code == 200 and "null" not in good.text  # negative control


@pytest.mark.parametrize("kind", ["onnx", "ckpt"])
def test_finite_inputs_whose_logits_overflow_are_a_422_not_null_logits(artifacts, x, kind):
    signs = np.random.default_rng(0).choice([-1.0, 1.0], x.shape)
    huge = (signs * 3e38).astype(np.float32)  # finite float32; the network's sums overflow
    app, predictor = serve_app(artifacts.paths[kind])
    assert not np.isfinite(predictor.tta_logits(huge)).all()  # the premise
    (answer,) = ask(app, [("POST", INFER, {"json": {"inputs": [_tensor(huge)]}})])
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"].startswith(
        "the model's logits for input 'input' are not finite (NaN or inf)"
    )


def test_probabilities_are_the_softmax_of_the_logits_over_the_temperature(artifacts, x):
    """An artifact calibrated to temperature 2.5: OIP's probabilities are softmax(logits / T),
    as /predict's, not softmax(logits)."""
    app, predictor = serve_app(artifacts.paths["onnx"], spec={"temperature": 2.5})
    assert predictor.spec.decision.temperature == 2.5
    (answer,) = ask(app, [("POST", INFER, {"json": {"inputs": [_tensor(x)]}})])
    assert answer.status_code == 200, answer.text
    outputs = {o["name"]: np.reshape(o["data"], (2, -1)) for o in answer.json()["outputs"]}
    scaled = outputs["logits"] / 2.5
    expected = np.exp(scaled - scaled.max(1, keepdims=True))
    expected /= expected.sum(1, keepdims=True)
    np.testing.assert_allclose(outputs["probabilities"], expected, rtol=0, atol=1e-6)
    plain = np.exp(outputs["logits"]) / np.exp(outputs["logits"]).sum(1, keepdims=True)
    assert np.abs(plain - expected).max() > 1e-3  # the temperature shows at this precision
    np.testing.assert_allclose(
        outputs["probabilities"], predictor.predict_images(artifacts.images[:2]), atol=1e-5
    )


def test_a_wrong_method_is_a_405_with_allow_on_every_route(artifacts):
    app, _ = serve_app(artifacts.paths["onnx"])
    routes = [
        ("POST", "/v2", "GET"),
        ("DELETE", "/v2/health/live", "GET"),
        ("PUT", "/v2/health/ready", "GET"),
        ("POST", "/v2/models/tiny", "GET"),
        ("GET", INFER, "POST"),
    ]
    answers = ask(app, [(method, path, {}) for method, path, _ in routes])
    for (method, path, allow), answer in zip(routes, answers):
        assert answer.status_code == 405, (path, answer.text)
        assert answer.headers["allow"] == allow
        assert answer.json()["error"] == f"{path} takes {allow}, not {method}"
