"""The images of a ``/predict`` or ``/explain`` body, whichever way it was uploaded:

- ``application/json``: ``{"image": base64}`` or ``{"images": [...]}``, ``top_k`` (``inputs.py``);
- ``image/*``: the raw image;
- ``multipart/form-data`` (``curl -F file=@x.jpg``, ``requests.post(url, files=...)``, an HTML
  form): every file part is an image, in order (field ``file`` or any other name), and a text
  field ``top_k`` sets it;
- any other Content-Type, or none (``curl --data-binary @x.jpg`` says
  ``application/x-www-form-urlencoded``, ``application/octet-stream`` is common): the raw
  image when its first bytes are a JPEG, PNG, GIF, BMP, TIFF or WebP magic number, else 415.

The body is already in memory (read under ``serve.max_body_bytes``), so python-multipart's push
parser gets it in one call; a malformed form is a 400 ``Reject`` naming the reason. The pixel
budget and decoding follow as for every body (``inputs.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from lightning_cls.serve.inputs import Reject, checked_top_k, parse_json

# The leading bytes of the formats PIL decodes that cameras, browsers and scanners write.
MAGIC = (
    (b"\xff\xd8\xff", "JPEG"),
    (b"\x89PNG\r\n\x1a\n", "PNG"),
    (b"GIF87a", "GIF"),
    (b"GIF89a", "GIF"),
    (b"BM", "BMP"),
    (b"II*\x00", "TIFF"),
    (b"MM\x00*", "TIFF"),
)
FORMATS = "JPEG, PNG, GIF, BMP, TIFF or WebP"


def sniffed_format(raw: bytes) -> str | None:
    """The image format ``raw`` starts with (its magic number), or None."""
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        return "WebP"
    return next((name for magic, name in MAGIC if raw.startswith(magic)), None)


@dataclass
class Part:
    """One part of a form: its field name, file name (None: a text field) and bytes."""

    name: str = ""
    filename: str | None = None
    data: bytearray = field(default_factory=bytearray)


def parse_form(raw: bytes, content_type: str, max_parts: int) -> list[Part]:
    """A ``multipart/form-data`` body -> its parts, in order; 400 when the body is malformed,
    has no boundary, or holds more than ``max_parts`` parts."""
    from python_multipart.exceptions import FormParserError
    from python_multipart.multipart import MultipartParser, parse_options_header

    _, params = parse_options_header(content_type)
    boundary = params.get(b"boundary")
    if not boundary:
        raise Reject(
            400,
            "multipart/form-data without a boundary= in its Content-Type; let the client "
            "write that header (curl -F file=@x.jpg, requests' files=)",
        )
    parts: list[Part] = []
    header = [b"", b""]  # the part header being read: name, value
    ended = []

    def begin() -> None:
        if len(parts) >= max_parts:
            raise Reject(400, f"multipart/form-data body holds over {max_parts} parts")
        parts.append(Part())

    def header_end() -> None:
        name, value = header[0].lower(), header[1]
        header[:] = [b"", b""]
        if name == b"content-disposition":
            _, options = parse_options_header(value)
            parts[-1].name = options.get(b"name", b"").decode("utf-8", "replace")
            filename = options.get(b"filename")
            parts[-1].filename = None if filename is None else filename.decode("utf-8", "replace")

    callbacks = {
        "on_part_begin": begin,
        "on_part_data": lambda data, start, end: parts[-1].data.extend(data[start:end]),
        "on_header_field": lambda data, start, end: header.__setitem__(
            0, header[0] + data[start:end]
        ),
        "on_header_value": lambda data, start, end: header.__setitem__(
            1, header[1] + data[start:end]
        ),
        "on_header_end": header_end,
        "on_end": lambda: ended.append(True),
    }
    try:
        parser = MultipartParser(boundary, callbacks)
        parser.write(raw)
        parser.finalize()
    except (FormParserError, ValueError, UnicodeError) as err:
        raise Reject(400, f"multipart/form-data body is not valid ({err})") from err
    if not ended:
        raise Reject(400, "multipart/form-data body ends before its closing boundary")
    return parts


def uploaded(
    content_type: str, raw: bytes, max_images: int, default_top_k: int
) -> tuple[list[bytes], int]:
    """A body and its Content-Type header -> (encoded images, top_k); see the module."""
    kind = content_type.split(";")[0].strip().lower()
    if kind == "application/json":
        return parse_json(raw, max_images, default_top_k)
    if kind == "multipart/form-data":
        return _form_images(
            parse_form(raw, content_type, max_images + 8), max_images, default_top_k
        )
    if kind.startswith("image/") or sniffed_format(raw) is not None:
        return [raw], default_top_k
    raise Reject(
        415,
        f"unsupported Content-Type '{kind or '(none)'}' for a body that is not a {FORMATS} "
        'image; send raw image bytes, JSON {"image": base64} / {"images": [base64, ...]} as '
        "application/json, or a form: curl -F file=@x.jpg",
    )


def _form_images(parts: list[Part], max_images: int, default_top_k: int):
    files = [bytes(p.data) for p in parts if p.filename is not None]
    if not 1 <= len(files) <= max_images:
        raise Reject(
            422,
            f"multipart/form-data body holds {len(files)} files; send 1 to {max_images} "
            "images as file fields (curl -F file=@x.jpg)",
        )
    top_k = default_top_k
    for part in parts:
        if part.filename is None and part.name == "top_k":
            text = part.data.decode("utf-8", "replace").strip()
            value = int(text) if re.fullmatch(r"[0-9]{1,9}", text) else text
            top_k = checked_top_k(value, 'form field "top_k"', 422)
    return files, top_k
