"""``/predict`` and ``/explain`` take an image however the usual snippets send it
(serve/uploads.py): a multipart form (``curl -F file=@x.jpg``), a raw body under any
Content-Type whose bytes are an image (``curl --data-binary @x.jpg``), JSON, ``image/*``; a
wrong method is a 405 with ``Allow``; ``top_k`` is capped at the number of classes."""

from __future__ import annotations

import base64
import io
import json
import re

import httpx
import pytest
from in_process import ask, serve_app
from PIL import Image

from helpers import png_bytes


def _jpeg(image) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image.permute(1, 2, 0).numpy()).save(buffer, "JPEG", quality=95)
    return buffer.getvalue()


def _form(files: dict | list, data: dict | None = None) -> dict:
    """httpx's multipart encoding, as requests and curl -F write it."""
    request = httpx.Request("POST", "http://t/predict", files=files, data=data)
    return {"content": request.read(), "headers": {"content-type": request.headers["content-type"]}}


@pytest.fixture(scope="module")
def onnx_app(artifacts):
    app, _ = serve_app(artifacts.paths["onnx"], max_body_bytes=20_000, top_k=2)
    yield app
    app.close()


def test_forms_and_sniffed_raw_bodies_are_answered_as_the_image_itself(onnx_app, artifacts):
    png, jpeg = png_bytes(artifacts.images[0]), _jpeg(artifacts.images[1])
    calls = [
        {"content": png, "headers": {"content-type": "image/png"}},  # the reference
        _form({"file": ("x.png", png, "image/png")}),  # curl -F file=@x.png
        _form({"photo": ("x.png", png, "application/octet-stream")}),  # any one file field
        {"content": png, "headers": {"content-type": "application/x-www-form-urlencoded"}},
        {"content": png, "headers": {"content-type": "application/octet-stream"}},
        {"content": png},  # no Content-Type at all
        {"content": jpeg, "headers": {"content-type": "image/jpeg"}},  # the reference
        {"content": jpeg, "headers": {"content-type": "application/x-www-form-urlencoded"}},
        _form([("file", ("a.png", png)), ("file", ("b.jpg", jpeg))], {"top_k": "1"}),
    ]
    answers = ask(onnx_app, [("POST", "/predict", kw) for kw in calls], close=False)
    assert [a.status_code for a in answers] == [200] * len(calls), [a.text for a in answers]
    first = [a.json()["predictions"] for a in answers]
    assert first[1:6] == [first[0]] * 5 and first[7] == first[6]
    assert len(first[0][0]["labels"]) == 2  # serve.top_k
    both = first[8]  # two files, in order, top_k from the form's text field
    assert [p["labels"] for p in both] == [first[0][0]["labels"][:1], first[6][0]["labels"][:1]]


BAD_UPLOADS = [
    ({"content": b"hello", "headers": {"content-type": "text/plain"}}, 415,
     r"^unsupported Content-Type 'text/plain' for a body that is not a JPEG, PNG, GIF, BMP, "
     r"TIFF or WebP image; .* curl -F file=@x.jpg"),
    ({"content": b"\x00\x01not an image"}, 415, r"^unsupported Content-Type '\(none\)'"),
    ({"content": b"\xff\xd8\xff but no JPEG", "headers": {"content-type": "application/x-www-form-urlencoded"}},
     400, r"^image: "),
    ({"content": b'--xx\r\nContent-Disposition: form-data; name="note"\r\n\r\nhi\r\n--xx--\r\n',
      "headers": {"content-type": "multipart/form-data; boundary=xx"}}, 422,
     r"^multipart/form-data body holds 0 files; send 1 to 64 images as file fields"),
    (_form({"file": ("x.png", b"\x89PNG")}, {"top_k": "two"}), 422,
     r"""^form field "top_k" must be an integer >= 1, got 'two'"""),
    ({"content": b"--xx\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a\"\r\n\r\nab",
      "headers": {"content-type": "multipart/form-data; boundary=xx"}}, 400,
     r"^multipart/form-data body ends before its closing boundary"),
    ({"content": b"garbage", "headers": {"content-type": "multipart/form-data; boundary=xx"}}, 400,
     r"^multipart/form-data body is not valid \("),
    ({"content": b"--xx--", "headers": {"content-type": "multipart/form-data"}}, 400,
     r"^multipart/form-data without a boundary= in its Content-Type"),
    (_form({"file": ("x.png", b"\x89PNG\r\n\x1a\n" + b"\0" * 30_000)}), 413,
     r"max_body_bytes=20000"),
    ({"content": b"\x89PNG\r\n\x1a\n" + b"\0" * 30_000}, 413, r"max_body_bytes=20000"),
]  # fmt: skip


def test_each_bad_upload_gets_its_status_and_a_message_naming_the_fix(onnx_app, artifacts):
    png = {"content": png_bytes(artifacts.images[0]), "headers": {"content-type": "image/png"}}
    calls = [("POST", "/predict", kw) for kw, _, _ in BAD_UPLOADS] + [("POST", "/predict", png)]
    *answers, good = ask(onnx_app, calls, close=False)
    for (_, status, message), answer in zip(BAD_UPLOADS, answers):
        assert answer.status_code == status, answer.text
        assert re.search(message, answer.json()["detail"]), answer.json()
    assert good.status_code == 200  # negative control


def test_a_wrong_method_on_predict_and_explain_is_a_405_with_allow(onnx_app):
    calls = [("GET", "/predict"), ("PUT", "/predict"), ("GET", "/explain"), ("POST", "/health")]
    answers = ask(onnx_app, [(m, p, {}) for m, p in calls], close=False)
    for (method, path), answer in zip(calls[:3], answers):
        assert answer.status_code == 405, answer.text
        assert answer.headers["allow"] == "POST"
        assert answer.json()["detail"].startswith(f"{path} takes POST, not {method}")
    assert answers[3].status_code == 405 and "GET" in answers[3].headers["allow"]


def test_top_k_above_the_number_of_classes_answers_every_class(onnx_app, artifacts):
    png = png_bytes(artifacts.images[0])
    image = {"name": "image", "shape": [1], "datatype": "BYTES"}
    body = {"inputs": [{**image, "data": [base64.b64encode(png).decode()]}]}
    body["parameters"] = {"top_k": 10**12}
    by_form, by_oip = ask(
        onnx_app,
        [
            ("POST", "/predict", _form({"file": ("x.png", png)}, {"top_k": "1000"})),
            ("POST", "/v2/models/tiny/infer", {"json": body}),
        ],
        close=False,
    )
    labels = by_form.json()["predictions"][0]["labels"]
    assert sorted(labels) == sorted(artifacts.spec.classes)  # 3 classes, not 1000
    prediction = json.loads(by_oip.json()["outputs"][1]["data"][0])
    assert prediction["labels"] == labels


def test_explain_takes_a_form_and_a_raw_upload_like_json(artifacts):
    png = png_bytes(artifacts.images[0])
    app, _ = serve_app(artifacts.paths["ckpt"])  # a PyTorch network: heat maps
    as_json, by_form, raw, two = ask(
        app,
        [
            ("POST", "/explain", {"json": {"image": base64.b64encode(png).decode()}}),
            ("POST", "/explain", _form({"file": ("x.png", png)})),
            ("POST", "/explain", {"content": png}),
            ("POST", "/explain", _form([("file", ("a.png", png)), ("file", ("b.png", png))])),
        ],
    )
    assert as_json.status_code == 200, as_json.text
    assert by_form.json() == as_json.json() and raw.json() == as_json.json()
    assert two.status_code == 422
    assert two.json()["detail"].startswith("multipart/form-data body holds 2 files; send 1 to 1")
