"""Open Inference Protocol v2 tensors: a request body -> checked arrays, arrays -> an answer.

A request is JSON (``{"inputs": [{"name", "shape", "datatype", "data"}], "outputs": [...],
"parameters": {...}}``), or, with the binary-data extension (Triton's
``binary_tensor_data``), that JSON followed by raw tensor bytes: the
``Inference-Header-Content-Length`` header gives the JSON's length, each input's
``parameters.binary_data_size`` its share of the rest, in the order of ``inputs``. FP32 data
is little-endian float32; BYTES elements are each a 4-byte little-endian length and the bytes.
In JSON, a BYTES element is a string: here base64 (an encoded image, as ``/predict``'s JSON
takes it). Every check names the field and the fix and is a 400 ``Reject``, before any work.
"""

from __future__ import annotations

import base64
import binascii
import math
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lightning_cls.serve.inputs import Reject
from lightning_cls.serve.responses import dumps

try:
    from orjson import JSONDecodeError
    from orjson import loads as _loads
except ImportError:  # pragma: no cover - orjson is in the serve extra
    from json import JSONDecodeError
    from json import loads as _loads


@dataclass(frozen=True)
class TensorSpec:
    """One input or output the model offers: name, datatype, shape (-1: any size)."""

    name: str
    datatype: str
    shape: tuple[int, ...]

    def metadata(self) -> dict:
        return {"name": self.name, "datatype": self.datatype, "shape": list(self.shape)}


@dataclass
class Request:
    """A checked request: its one input's name and data (float32 array or encoded bytes),
    the outputs asked for ({name: their parameters}; empty: all), request parameters, id."""

    input: str
    data: Any
    outputs: dict[str, dict] = field(default_factory=dict)
    parameters: dict = field(default_factory=dict)
    id: str | None = None


def header_length(value: bytes | None) -> int | None:
    """``Inference-Header-Content-Length`` -> the JSON's length in bytes (None: all JSON)."""
    if value is None:
        return None
    if not value.isdigit():
        raise Reject(
            400,
            f"Inference-Header-Content-Length={value.decode('latin-1')!r} is not "
            "a byte count; send the length of the JSON part, or leave it out",
        )
    return int(value)


def parse_request(
    raw: bytes, json_length: int | None, inputs: dict[str, TensorSpec], max_batch: int
) -> Request:
    """A request body -> ``Request`` with exactly one of ``inputs``, checked against it."""
    if json_length is not None and json_length > len(raw):
        raise Reject(
            400,
            f"Inference-Header-Content-Length={json_length} is longer than the "
            f"{len(raw)}-byte body",
        )
    head = raw if json_length is None else raw[:json_length]
    try:
        body = _loads(head)
    except (JSONDecodeError, UnicodeDecodeError, RecursionError) as err:
        raise Reject(400, f"request JSON is not valid ({err})") from err
    if not isinstance(body, dict) or not isinstance(body.get("inputs"), list):
        raise Reject(400, 'request JSON must be an object with an "inputs" list')
    if len(body["inputs"]) != 1 or not isinstance(body["inputs"][0], dict):
        raise Reject(400, f"send exactly one input, {_known(inputs)}; got {len(body['inputs'])}")
    tensor = body["inputs"][0]
    name = tensor.get("name")
    spec, shape = checked_input(
        name, tensor.get("datatype"), tensor.get("shape"), inputs, max_batch
    )
    size = _parameters(tensor, f"input '{name}'").get("binary_data_size")
    if size is not None:
        rest = len(raw) - (json_length or len(raw))
        whole = isinstance(size, int) and not isinstance(size, bool)
        if json_length is None or not whole or not 0 <= size <= rest:
            raise Reject(
                400,
                f"input '{name}': binary_data_size={size!r} but {rest} bytes "
                "follow the JSON (Inference-Header-Content-Length gives its length)",
            )
        data = from_binary(raw[json_length : json_length + size], spec, shape)
    elif "data" in tensor:
        data = _from_json(tensor["data"], spec, shape)
    else:
        raise Reject(400, f"input '{name}' has neither \"data\" nor binary_data_size")
    outputs = body.get("outputs")
    outputs = [] if outputs is None else outputs
    if not isinstance(outputs, list) or not all(
        isinstance(o, dict) and isinstance(o.get("name"), str) for o in outputs
    ):
        raise Reject(400, '"outputs" must be a list of {"name": ...} objects')
    parameters = _parameters(body, "the request")
    asked = {o["name"]: _parameters(o, f"output '{o['name']}'") for o in outputs}
    return Request(name, data, asked, parameters, body.get("id"))


def _known(inputs: dict[str, TensorSpec]) -> str:
    return " or ".join(f"'{s.name}' ({s.datatype})" for s in inputs.values())


def checked_input(
    name: Any, datatype: Any, shape: Any, inputs: dict[str, TensorSpec], max_batch: int
) -> tuple[TensorSpec, tuple[int, ...]]:
    """An input's name, datatype and shape (over HTTP or gRPC) -> its ``TensorSpec`` and
    shape, or a 400 naming the one at fault."""
    if not isinstance(name, str) or name not in inputs:
        raise Reject(400, f"unknown input {name!r}; this model takes {_known(inputs)}")
    spec = inputs[name]
    return spec, _checked_shape({"shape": shape, "datatype": datatype}, spec, max_batch)


def _parameters(entry: dict, which: str) -> dict:
    """``entry``'s ``"parameters"`` (the request's, an input's or an output's): an object, or
    absent / null (none); anything else is a 400 naming ``which``."""
    parameters = entry.get("parameters")
    if parameters is None:
        return {}
    if not isinstance(parameters, dict):
        raise Reject(
            400,
            f'"parameters" of {which} is a {_json_type(parameters)}; send an object '
            '({"name": value, ...}) or leave it out',
        )
    return parameters


def _json_type(value: Any) -> str:
    names = {str: "string", list: "list", bool: "boolean", int: "number", float: "number"}
    return names.get(type(value), type(value).__name__)


def _checked_shape(tensor: dict, spec: TensorSpec, max_batch: int) -> tuple[int, ...]:
    name, shape, datatype = spec.name, tensor.get("shape"), tensor.get("datatype")
    if datatype != spec.datatype:
        raise Reject(
            400, f"input '{name}' has datatype {datatype!r}; this model takes {spec.datatype}"
        )
    if not isinstance(shape, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) for d in shape
    ):
        raise Reject(400, f"input '{name}' has shape {shape!r}; send a list of integers")
    fits = len(shape) == len(spec.shape) and all(
        want in (-1, got) for want, got in zip(spec.shape, shape)
    )
    if not fits:
        raise Reject(
            400,
            f"input '{name}' has shape {shape}; this model takes "
            f"{list(spec.shape)} (-1: the batch, any size)",
        )
    if not 1 <= shape[0] <= max_batch:
        raise Reject(
            400,
            f"input '{name}' holds a batch of {shape[0]}; send 1 to {max_batch} "
            "(serve.max_images_per_request)",
        )
    return tuple(shape)


def from_binary(chunk: bytes, spec: TensorSpec, shape: tuple[int, ...]):
    """Raw tensor bytes (the binary-data extension's, gRPC's ``raw_input_contents``) -> a
    float32 array of ``shape`` or ``shape[0]`` BYTES elements; a 400 when they do not fit."""
    count = math.prod(shape)
    if spec.datatype == "BYTES":
        items, offset = [], 0
        while offset + 4 <= len(chunk) and len(items) < count:
            (length,) = struct.unpack_from("<I", chunk, offset)
            items.append(chunk[offset + 4 : offset + 4 + length])
            offset += 4 + length
        if len(items) != count or offset != len(chunk):
            raise Reject(
                400,
                f"input '{spec.name}': its {len(chunk)} binary bytes do not hold "
                f"{count} length-prefixed BYTES elements of shape {list(shape)}",
            )
        return items
    if len(chunk) != count * 4:
        raise Reject(
            400,
            f"input '{spec.name}': {len(chunk)} binary bytes for shape "
            f"{list(shape)}; FP32 needs {count * 4}",
        )
    return finite(np.frombuffer(chunk, "<f4").reshape(shape).astype(np.float32), spec.name)


def _from_json(data: Any, spec: TensorSpec, shape: tuple[int, ...]):
    count = math.prod(shape)
    if spec.datatype == "BYTES":
        items = _flat(data)
        if len(items) != count or not all(isinstance(i, str) for i in items):
            raise Reject(
                400, f"input '{spec.name}' needs {count} base64 strings for shape {list(shape)}"
            )
        try:
            return [base64.b64decode(i, validate=True) for i in items]
        except (binascii.Error, ValueError) as err:
            raise Reject(400, f"input '{spec.name}': an element is not base64 ({err})") from err
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # 1e40 -> inf: refused below
            array = np.asarray(data, dtype=np.float32)
    except (ValueError, TypeError, OverflowError) as err:
        raise Reject(
            400, f"input '{spec.name}': data is not a (nested) list of numbers ({err})"
        ) from err
    if array.size != count:
        raise Reject(
            400,
            f"input '{spec.name}': {array.size} numbers for shape "
            f"{list(shape)}, which holds {count}",
        )
    return finite(array.reshape(shape), spec.name)


def finite(array: np.ndarray, name: str) -> np.ndarray:
    """``array`` when every value is a finite float32; else a 400 counting the others."""
    bad = array.size - int(np.isfinite(array).sum())
    if bad:
        raise Reject(
            400,
            f"input '{name}' holds {bad} values that are not finite float32 numbers (NaN, inf, "
            "or beyond +-3.4e38); send the normalized image, (pixels / 255 - mean) / std",
        )
    return array


def _flat(data: Any) -> list:
    """Nested lists -> their items, depth first (no recursion: the nesting is the client's)."""
    items, stack = [], [data]
    while stack:
        top = stack.pop()
        if isinstance(top, list):
            stack.extend(reversed(top))
        else:
            items.append(top)
    return items


def classification(values: np.ndarray, k: int, labels: list[str]) -> list[bytes]:
    """Triton's classification extension: per row the ``k`` largest values as
    ``"value:index:label"``, largest first; (N, K) -> N * k strings, row by row."""
    order = np.argsort(-values, axis=1, kind="stable")[:, :k]  # (N, k)
    return [f"{row[i]:f}:{i}:{labels[i]}".encode() for row, idx in zip(values, order) for i in idx]


def encode_response(head: dict, outputs: list[tuple[str, str, list[int], Any, bool]]):
    """``head`` (model_name, model_version, id) and (name, datatype, shape, data, binary)
    per output -> (body, JSON length or None when no output is binary)."""
    described, blobs = [], []
    for name, datatype, shape, data, binary in outputs:
        entry = {"name": name, "datatype": datatype, "shape": shape}
        if binary:
            blob = tensor_bytes(datatype, data)
            entry["parameters"] = {"binary_data_size": len(blob)}
            blobs.append(blob)
        elif datatype == "BYTES":
            entry["data"] = [b.decode() for b in data]
        else:
            entry["data"] = np.asarray(data, np.float32).reshape(-1).tolist()
        described.append(entry)
    text = dumps({**head, "outputs": described})
    if not blobs:
        return text, None
    return text + b"".join(blobs), len(text)


def tensor_bytes(datatype: str, data) -> bytes:
    """An output's raw bytes: BYTES elements each after its 4-byte little-endian length,
    FP32 little-endian float32 (the binary-data extension's, gRPC's ``raw_output_contents``)."""
    if datatype == "BYTES":
        return b"".join(struct.pack("<I", len(b)) + b for b in data)
    return np.ascontiguousarray(data, "<f4").tobytes()
