"""Request bodies -> checked, decoded uint8 images, or a ``Reject`` with its HTTP status.

Every check runs per request before anything reaches a batch, so one bad request never fails
the others batched with it:

- a body that is no image, JSON or form -> 415 (``uploads.py``: the Content-Type, the form
  and the sniffed magic numbers);
- body over ``max_body_bytes`` -> 413 (from ``Content-Length``, or counted while reading);
- bad JSON (also nested too deep, or numbers too large), bad base64, bytes PIL cannot
  decode -> 400 naming the reason;
- JSON without an image, too many images, a bad ``top_k`` -> 422;
- an image whose header says more than ``max_pixels`` pixels, or images whose headers sum to
  more than ``max_request_pixels`` -> 413, before any decoding (``PIL.Image.open`` reads only
  the header): pixels, not bytes, set the decode cost.

Images of any size, mode or channel count are converted as ``predict`` does
(``lightning_cls.inference.images.decode_image``).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import time
import warnings

import numpy as np
from PIL import Image

from lightning_cls.inference.images import DECODE_ERRORS, decode_error_reason, decode_image
from lightning_cls.inference.spec import InputSpec

try:  # orjson: ~3x faster, and it refuses nesting deeper than 255 levels itself
    import orjson

    _loads, _JSON_ERRORS = orjson.loads, (orjson.JSONDecodeError,)
except ImportError:  # pragma: no cover - orjson is in the serve extra
    orjson = None
    _loads, _JSON_ERRORS = json.loads, (ValueError,)

# Images up to this many pixels are decoded in the event loop (a 32x32 PNG takes ~50 us);
# larger ones in a decode thread, so one big photo does not hold up other connections.
# Pixels, not bytes, set the cost: a 20 KB 1-bit PNG can hold 13000 x 13000 pixels.
INLINE_DECODE_PIXELS = 256 * 256
MAX_JSON_DEPTH = 8  # the API needs 3 ({"images": [...]}); deeper is refused before parsing

# The server enforces serve.max_pixels from the header; PIL's own bomb warning is redundant.
warnings.simplefilter("ignore", Image.DecompressionBombWarning)


class Reject(Exception):
    """A request answered with ``status`` and ``detail`` before reaching the model."""

    def __init__(self, status: int, detail: str, headers: dict[str, str] | None = None):
        super().__init__(detail)
        self.status, self.detail, self.headers = status, detail, headers or {}


def too_large(size: int, limit: int, at_least: bool = False) -> Reject:
    return Reject(
        413,
        f"request body of {'at least ' if at_least else ''}{size} bytes exceeds "
        f"max_body_bytes={limit}; send a smaller image (the server resizes to the model's "
        "input anyway) or raise serve.max_body_bytes",
    )


def parse_json(raw: bytes, max_images: int, default_top_k: int) -> tuple[list[bytes], int]:
    """A JSON body -> (encoded images, top_k)."""
    depth = _max_depth(raw)
    if depth > MAX_JSON_DEPTH:
        raise Reject(400, f"JSON nested {depth} levels deep; this API needs at most 3")
    try:
        body = _loads(raw)
    except (*_JSON_ERRORS, UnicodeDecodeError, RecursionError) as err:
        raise Reject(400, f"body is not valid JSON ({err})") from err
    if not isinstance(body, dict) or ("image" in body) == ("images" in body):
        raise Reject(
            422,
            'JSON body must be an object with exactly one of "image" '
            '(base64 string) or "images" (list of base64 strings)',
        )
    items = [body["image"]] if "image" in body else body["images"]
    if not isinstance(items, list) or not 1 <= len(items) <= max_images:
        raise Reject(422, f'"images" must be a list of 1 to {max_images} base64 strings')
    top_k = checked_top_k(body.get("top_k", default_top_k), '"top_k"', 422)
    encoded = []
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise Reject(422, f"image {i} is a {type(item).__name__}, not a base64 string")
        try:
            encoded.append(base64.b64decode(item, validate=True))
        except (binascii.Error, ValueError) as err:
            raise Reject(400, f"image {i} is not valid base64 ({err})") from err
    return encoded, top_k


def checked_top_k(top_k, field: str, status: int) -> int:
    """A request's ``top_k``: an integer >= 1, else ``Reject(status)`` naming ``field``."""
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1:
        raise Reject(status, f"{field} must be an integer >= 1, got {top_k!r}")
    return top_k


def _max_depth(raw: bytes) -> int:
    """Deepest bracket nesting of a JSON text (brackets inside strings may overcount, which
    only matters for bodies the API would refuse anyway). C-speed: no Python loop per byte."""
    brackets = raw.count(b"{") + raw.count(b"[")
    if brackets <= MAX_JSON_DEPTH:
        return brackets  # the common case: a handful of brackets bound the depth
    opens = np.frombuffer(raw, np.uint8)
    steps = np.isin(opens, (0x5B, 0x7B)).astype(np.int32) - np.isin(opens, (0x5D, 0x7D))
    return int(np.cumsum(steps).max(initial=0))


def pixel_count(data: bytes, index: int | None, max_pixels: int) -> int:
    """Pixels of an encoded image from its header alone; 413 above ``max_pixels``, 400 if
    unreadable."""
    which = "image" if index is None else f"image {index}"
    try:
        with Image.open(io.BytesIO(data)) as img:
            width, height = img.size
    except Image.DecompressionBombError as err:  # PIL's own hard limit, also header-only
        raise Reject(413, f"{which} is over max_pixels={max_pixels} ({err})") from err
    except DECODE_ERRORS as err:
        raise Reject(400, f"{which}: {decode_error_reason(err)}") from err
    if width * height > max_pixels:
        raise Reject(
            413,
            f"{which} is {width}x{height} = {width * height} pixels, over "
            f"max_pixels={max_pixels}; send a smaller image or raise serve.max_pixels",
        )
    return width * height


def request_pixels(encoded: list[bytes], max_pixels: int, max_request_pixels: int) -> int:
    """Pixels of a request's images from their headers alone: 413 when one is over
    ``max_pixels`` or all together are over ``max_request_pixels`` (nothing decoded yet)."""
    index = (lambda i: i) if len(encoded) > 1 else (lambda i: None)
    total = 0
    for i, data in enumerate(encoded):
        total += pixel_count(data, index(i), max_pixels)
        if total > max_request_pixels:
            raise Reject(
                413,
                f"the request's images hold at least {total} pixels (width x height summed over "
                f"{i + 1} of {len(encoded)} images), over serve.max_request_pixels="
                f"{max_request_pixels}; send fewer or smaller images per request or raise "
                "serve.max_request_pixels",
            )
    return total


def decode_all(encoded: list[bytes], spec: InputSpec, deadline: float | None = None) -> np.ndarray:
    """Encoded images -> uint8 (N, C, H, W); 400 naming the first undecodable one.
    ``TimeoutError`` once ``time.monotonic()`` passes ``deadline`` (checked before each image:
    a decode thread working for an expired request is free within one image)."""
    arrays = []
    for i, data in enumerate(encoded):
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"decoding stopped before image {i} of {len(encoded)}")
        try:
            arrays.append(decode_image(data, spec.image_size, spec.num_channels, spec.resize_size))
        except DECODE_ERRORS as err:
            which = f"image {i}" if len(encoded) > 1 else "image"
            raise Reject(400, f"{which}: {decode_error_reason(err)}") from err
    return np.ascontiguousarray(np.stack(arrays))
