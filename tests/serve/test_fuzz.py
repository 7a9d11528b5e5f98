"""Property-based fuzzing of every body the server takes (hypothesis): ``/predict``,
``/explain`` and the Open Inference Protocol's ``infer`` (JSON, binary tensors, images) and its
other routes, each field of a good request replaced by another JSON type, size, encoding or a
number that is not finite, or removed; raw, form and mangled image uploads; any method.

Whatever comes in: never a 500 (an exception escaping the app is raised here by httpx's ASGI
transport), no error or traceback in the log, no ``null`` where a 200 carries numbers, and a
good request sent right after is still answered with the same numbers. The default runs are
derandomized and small (a few seconds each on 2 cores); ``-m slow`` runs 10x as many, also
derandomized; ``FUZZ_RANDOM=1`` draws new random examples.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
from urllib.parse import quote

import httpx
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from in_process import serve_app

from helpers import png_bytes

INFER = "/v2/models/tiny/infer"
METHODS = ["GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"]
QUICK, LONG = 40, 400  # examples per property: the default run, -m slow
PER_FIELD = 5  # examples per field of a JSON body in the default run (x 10 in the long one)


def _runs():
    return pytest.mark.parametrize(
        "examples", [QUICK, pytest.param(LONG, marks=pytest.mark.slow, id="long")]
    )


# --- what replaces a field ------------------------------------------------------------------
NUMBERS = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64),
    st.floats(),  # NaN and inf too: json.dumps writes them as bare NaN / Infinity
    st.sampled_from([1e40, -1e40, 3.4e38, 1e-45, -0.0, 1e308]),
)
TEXT = st.one_of(
    st.text(max_size=12),
    st.sampled_from(["", "\ud800", "\x00", "AAAA", "!@#$", "x" * 20_000, "1e40", "nan"]),
)
NAMES = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)  # encodable names
LEAVES = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
VALUES = st.one_of(
    st.sampled_from(["x", [1], 1, True, None, {}, [], 1e40, -1e40]),  # the plain wrong types
    st.recursive(
        LEAVES,
        lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=3),
        max_leaves=8,
    ),
    st.integers(0, 3000).map(lambda n: [0.5] * n),  # sizes
    st.integers(1, 40).map(lambda depth: json.loads("[" * depth + "]" * depth)),  # nesting
)


def _paths(doc, prefix=()) -> list[tuple]:
    """Every field of ``doc`` as a path of keys and indices (of a list, its first element:
    a tensor's 432 numbers are alike)."""
    paths = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            paths += _paths(value, (*prefix, key))
    elif isinstance(doc, list) and doc:
        paths += _paths(doc[0], (*prefix, 0))
    return paths


def _mutated(doc, path: tuple, value, remove: bool):
    """A deep copy of ``doc`` with the field at ``path`` replaced by ``value`` (or removed)."""
    if not path:
        return value
    doc = json.loads(json.dumps(doc))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if remove:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return doc


ENCODINGS = ["utf-8", "utf-16", "utf-8-sig", "latin-1"]


def _quoted(text: str) -> str:
    """``text`` percent-encoded: a path segment or header value of any characters."""
    return quote(text, safe="", errors="surrogatepass")


@st.composite
def mangled_json(draw, doc, path: tuple) -> bytes:
    """``doc`` with the field at ``path`` replaced or removed, written in UTF-8 or now and
    then in another of ``ENCODINGS``, sometimes cut short."""
    changed = _mutated(doc, path, draw(VALUES), remove=bool(path) and draw(st.booleans()))
    text = json.dumps(changed, ensure_ascii=draw(st.booleans()))
    encoding = draw(st.sampled_from(ENCODINGS)) if draw(st.integers(0, 5)) == 0 else "utf-8"
    raw = text.encode(encoding, errors="surrogatepass" if encoding[:3] == "utf" else "replace")
    if draw(st.integers(0, 9)) == 0:
        raw = raw[: draw(st.integers(0, len(raw)))]
    return raw


# --- the app, its good requests and the checks ------------------------------------------------
class Served:
    """One app for a module's examples (a PyTorch checkpoint: /explain draws), its good
    requests, and their answers before any hostile one."""

    def __init__(self, artifacts):
        self.app, predictor = serve_app(
            artifacts.paths["ckpt"], max_body_bytes=300_000, max_images_per_request=4
        )
        self.png = png_bytes(artifacts.images[0])
        self.b64 = base64.b64encode(self.png).decode()
        x = predictor.spec.preprocess(artifacts.images[:1].numpy()).astype(np.float32)
        self.x = x  # (1, 3, 12, 12), the model's own input
        self.tensor = {
            "id": "r1",
            "inputs": [{"name": "input", "shape": [1, 3, 12, 12], "datatype": "FP32",
                        "data": x.tolist(), "parameters": {"binary_data_size": None}}],
            "outputs": [{"name": "logits", "parameters": {"binary_data": False}},
                        {"name": "probabilities", "parameters": {"classification": 2}}],
            "parameters": {"binary_data_output": False},
        }  # fmt: skip
        self.image = {
            "inputs": [{"name": "image", "shape": [1], "datatype": "BYTES", "data": [self.b64]}],
            "outputs": [{"name": "label"}, {"name": "prediction"}],
            "parameters": {"top_k": 2},
        }
        self.predict = {"images": [self.b64, self.b64], "top_k": 2}
        self.explain = {"image": self.b64}
        good_predict, good_infer = self.ask([self._good_predict(), self._good_infer()])
        self.predicted = good_predict.json()["predictions"]
        self.logits = good_infer.json()["outputs"][0]["data"]

    def _good_predict(self):
        return ("POST", "/predict", {"content": self.png, "headers": {"content-type": "image/png"}})

    def _good_infer(self):
        return ("POST", INFER, {"json": {"inputs": self.tensor["inputs"][:1]}})

    def ask(self, calls: list[tuple]) -> list[httpx.Response]:
        async def run():
            transport = httpx.ASGITransport(app=self.app)  # raises what escapes the app
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
                return [await client.request(m, p, **kw) for m, p, kw in calls]

        return asyncio.run(run())

    def check(self, caplog, call: tuple) -> httpx.Response:
        """Send ``call`` then the two good requests: the properties of the module."""
        caplog.clear()
        answer, predicted, inferred = self.ask([call, self._good_predict(), self._good_infer()])
        assert answer.status_code < 500, (call[:2], answer.status_code, answer.text[:300])
        if answer.status_code == 200:
            assert _numbers(answer, call[1]), answer.text[:300]
        errors = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
        assert not errors, [r.getMessage() for r in errors]
        assert predicted.status_code == 200 and predicted.json()["predictions"] == self.predicted
        assert inferred.status_code == 200, inferred.text
        np.testing.assert_allclose(inferred.json()["outputs"][0]["data"], self.logits, atol=1e-6)
        return answer


def _numbers(answer: httpx.Response, path: str) -> bool:
    """Whether a 200's numbers are all there (``null`` is how JSON carries NaN)."""
    if answer.headers.get("inference-header-content-length"):
        return True  # binary outputs: raw bytes, checked by the tensor tests
    body = answer.json()
    if path == "/predict":
        return all(None not in p["probs"] for p in body["predictions"])
    if path == "/explain":
        return body["prob"] is not None
    if path.endswith("/infer"):
        return all(None not in np.ravel(o["data"]).tolist() for o in body["outputs"])
    return True


@pytest.fixture(scope="module")
def served(artifacts):
    served = Served(artifacts)
    yield served
    served.app.close()


def _fuzz(examples: int, strategy, run) -> None:
    """Run ``run(value)`` on ``examples`` values of ``strategy``, derandomized: the same examples
    on every run, so a CI run never fails by the luck of its draw (the long run draws 10x as
    many; ``FUZZ_RANDOM=1`` draws new ones for a hunt by hand)."""
    config = settings(
        max_examples=examples,
        deadline=None,
        derandomize=not os.environ.get("FUZZ_RANDOM"),
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    config(given(strategy)(run))()


JSON_TYPES = ["application/json", "application/json; charset=utf-16", "text/plain", ""]


# --- the properties ----------------------------------------------------------------------------
def _each_field(doc, examples: int, run, content_types=("application/json",)) -> None:
    """``run((body, Content-Type))`` on ``examples`` manglings of each field of ``doc`` in
    turn (every field, however many the body has)."""
    for path in _paths(doc):
        _fuzz(examples, st.tuples(mangled_json(doc, path), st.sampled_from(content_types)), run)


@_runs()
def test_each_predict_and_explain_json_field_never_fails_the_server(served, caplog, examples):
    def poster(route: str):
        def run(case):
            raw, content_type = case
            headers = {"content-type": content_type} if content_type else {}
            served.check(caplog, ("POST", route, {"content": raw, "headers": headers}))

        return run

    for route, doc in (("/predict", served.predict), ("/explain", served.explain)):
        _each_field(doc, PER_FIELD * examples // QUICK, poster(route), JSON_TYPES)


@_runs()
def test_each_infer_json_field_never_fails_the_server(served, caplog, examples):
    def run(case):
        served.check(caplog, ("POST", INFER, {"content": case[0]}))

    for doc in (served.tensor, served.image):
        _each_field(doc, PER_FIELD * examples // QUICK, run)


@st.composite
def binary_tensors(draw, x: np.ndarray):
    """Triton's binary form: ``x`` with a few values replaced by any float32 (NaN, inf
    included), a binary_data_size and an Inference-Header-Content-Length that may lie."""
    values = x.copy().reshape(-1)
    for at, value in draw(
        st.lists(st.tuples(st.integers(0, 431), st.floats(width=32)), max_size=4)
    ):
        values[at] = value
    blob = values.astype("<f4").tobytes()
    size = draw(st.one_of(st.just(len(blob)), st.integers(-5, 2000), VALUES))
    head = {"inputs": [{"name": "input", "shape": [1, 3, 12, 12], "datatype": "FP32",
                        "parameters": {"binary_data_size": size}}],
            "parameters": {"binary_data_output": draw(st.booleans())}}  # fmt: skip
    text = json.dumps(head).encode()
    blob = blob[: draw(st.integers(0, len(blob)))] if draw(st.booleans()) else blob
    length = draw(
        st.one_of(st.just(str(len(text))), st.integers(-3, 5000).map(str), TEXT.map(_quoted))
    )
    return text + blob, {"inference-header-content-length": length}


@_runs()
def test_binary_tensors_with_any_values_and_lengths_never_fail_the_server(served, caplog, examples):
    def run(case):
        body, headers = case
        answer = served.check(caplog, ("POST", INFER, {"content": body, "headers": headers}))
        if answer.status_code == 200 and "inference-header-content-length" in answer.headers:
            cut = int(answer.headers["inference-header-content-length"])
            assert np.isfinite(np.frombuffer(answer.content[cut:], "<f4")).all()

    _fuzz(examples, binary_tensors(served.x), run)


@st.composite
def uploads(draw, png: bytes):
    """A PNG, mangled or not, raw under any Content-Type or in a form with any field names."""
    data = png
    if draw(st.booleans()):
        at = draw(st.integers(0, len(png) - 1))
        data = png[:at] + bytes([draw(st.integers(0, 255))]) + png[at + 1 :]
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    path = draw(st.sampled_from(["/predict", "/explain"]))
    if draw(st.booleans()):  # raw
        kind = draw(st.sampled_from(["image/png", "image/jpeg", "application/octet-stream",
                                     "application/x-www-form-urlencoded", "", "text/html"]))  # fmt: skip
        return path, {"content": data, "headers": {"content-type": kind} if kind else {}}
    names = draw(st.lists(NAMES, min_size=0, max_size=3))
    files = [(name, (draw(NAMES), data)) for name in names]
    # a form field is UTF-8 on the wire: a lone surrogate cannot be sent (httpx refuses it)
    field = TEXT.filter(lambda t: not any("\ud800" <= c <= "\udfff" for c in t))
    fields = {"top_k": draw(field | NUMBERS.map(str))} if draw(st.booleans()) else None
    request = httpx.Request("POST", "http://t/", files=files or None, data=fields)
    content_type = request.headers.get("content-type", "")
    if draw(st.booleans()):  # a boundary that does not match, or none
        content_type = draw(
            st.sampled_from(["multipart/form-data", "multipart/form-data; boundary=x"])
        )
    return path, {"content": request.read(), "headers": {"content-type": content_type}}


@_runs()
def test_raw_and_form_uploads_never_fail_the_server(served, caplog, examples):
    def run(case):
        path, kwargs = case
        served.check(caplog, ("POST", path, kwargs))

    _fuzz(examples, uploads(served.png), run)


@st.composite
def routes(draw):
    """Any method on any OIP route (or /predict, /explain), the model name and version in it
    any text, with or without a body."""
    name = draw(st.sampled_from(["tiny"]) | TEXT.filter(bool).map(_quoted))
    version = _quoted(draw(st.sampled_from(["abc123"]) | TEXT.filter(bool)))
    path = draw(st.sampled_from([
        "/v2", "/v2/", "/v2/health/live", "/v2/health/ready", f"/v2/models/{name}",
        f"/v2/models/{name}/ready", f"/v2/models/{name}/versions/{version}",
        f"/v2/models/{name}/versions/{version}/ready", f"/v2/models/{name}/infer",
        f"/v2/models/{name}/config", f"/v2/models/{name}/stats", "/v2/models/stats",
        f"/v2/models/{name}/versions/{version}/config",
        f"/v2/models/{name}/versions/{version}/stats",
        "/predict", "/explain", "/v2/models", "/v2//models/tiny",
    ]))  # fmt: skip
    body = draw(
        st.one_of(st.just(b""), st.binary(max_size=64), VALUES.map(json.dumps).map(str.encode))
    )
    return draw(st.sampled_from(METHODS)), path, body


@_runs()
def test_any_method_on_any_route_never_fails_the_server(served, caplog, examples):
    def run(case):
        method, path, body = case
        answer = served.check(caplog, (method, path, {"content": body}))
        if answer.status_code == 405:
            assert answer.headers["allow"] in ("GET", "POST")

    _fuzz(examples, routes(), run)
