"""Issue 51's mutation pass over serve/oip_tensors.py: the binary-data extension both ways
(little-endian FP32 and length-prefixed BYTES in, several binary outputs in their order out),
the batch limit, the shape check and Triton's classification strings, on the functions
themselves (no server: each test runs in milliseconds)."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from lightning_cls.serve.inputs import Reject
from lightning_cls.serve.oip_tensors import (
    TensorSpec,
    classification,
    encode_response,
    parse_request,
)

INPUTS = {
    "input": TensorSpec("input", "FP32", (-1, 3, 4, 4)),
    "image": TensorSpec("image", "BYTES", (-1,)),
}


def binary_body(name, datatype, shape, blob: bytes, trailing: bytes = b""):
    head = {"inputs": [{"name": name, "shape": shape, "datatype": datatype,
                        "parameters": {"binary_data_size": len(blob)}}]}  # fmt: skip
    text = json.dumps(head).encode()
    return text + blob + trailing, len(text)


def test_binary_fp32_is_read_little_endian_and_bytes_by_their_length_prefix():
    x = np.random.default_rng(0).standard_normal((2, 3, 4, 4)).astype("<f4")
    raw, length = binary_body("input", "FP32", [2, 3, 4, 4], x.tobytes())
    np.testing.assert_array_equal(parse_request(raw, length, INPUTS, 8).data, x)
    items = [b"abc", bytes(range(256)) * 2]  # 3 and 512 bytes: the prefix's byte order shows
    blob = b"".join(struct.pack("<I", len(b)) + b for b in items)
    raw, length = binary_body("image", "BYTES", [2], blob)
    assert parse_request(raw, length, INPUTS, 8).data == items
    raw, length = binary_body("image", "BYTES", [2], blob + b"\0\0")  # not the elements' size
    with pytest.raises(Reject, match=r"do not hold 2 length-prefixed BYTES elements"):
        parse_request(raw, length, INPUTS, 8)


def test_a_batch_over_the_limit_and_a_wrong_image_size_are_400s():
    x = np.zeros((3, 3, 4, 4), "<f4")
    raw, length = binary_body("input", "FP32", [3, 3, 4, 4], x.tobytes())
    assert parse_request(raw, length, INPUTS, 3).data.shape == (3, 3, 4, 4)
    with pytest.raises(Reject, match=r"holds a batch of 3; send 1 to 2") as err:
        parse_request(raw, length, INPUTS, 2)
    assert err.value.status == 400
    raw, length = binary_body("input", "FP32", [3, 3, 2, 8], x.tobytes())  # same count
    with pytest.raises(Reject, match=r"has shape \[3, 3, 2, 8\]; this model takes \[-1, 3, 4, 4\]"):
        parse_request(raw, length, INPUTS, 8)


def test_several_binary_outputs_follow_the_json_in_their_order():
    logits = np.arange(6, dtype=np.float32).reshape(2, 3)
    probs = np.full((2, 3), 0.25, np.float32)
    labels = [b"cat", b"dog"]
    outputs = [
        ("logits", "FP32", [2, 3], logits, True),
        ("probabilities", "FP32", [2, 3], probs, True),
        ("label", "BYTES", [2], labels, True),
    ]
    body, length = encode_response({"model_name": "m"}, outputs)
    described = json.loads(body[:length])["outputs"]
    offset, got = length, {}
    for entry in described:
        size = entry["parameters"]["binary_data_size"]
        got[entry["name"]] = body[offset : offset + size]
        offset += size
    assert offset == len(body)
    np.testing.assert_array_equal(np.frombuffer(got["logits"], "<f4").reshape(2, 3), logits)
    np.testing.assert_array_equal(np.frombuffer(got["probabilities"], "<f4").reshape(2, 3), probs)
    assert got["label"] == b"".join(struct.pack("<I", len(b)) + b for b in labels)


def test_classification_gives_the_k_largest_largest_first():
    values = np.array([[0.1, 0.7, 0.2], [0.5, 0.2, 0.3]], np.float32)
    assert classification(values, 2, ["a", "b", "c"]) == [
        b"0.700000:1:b",
        b"0.200000:2:c",
        b"0.500000:0:a",
        b"0.300000:2:c",
    ]
