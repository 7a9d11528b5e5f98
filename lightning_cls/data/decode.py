"""Decoding one image file into the uint8 layout every dataset and predictor uses.

The decoder itself lives in ``lightning_cls.inference.images`` (no Lightning there, so a server
decodes exactly as training does); datasets import it from here.
"""

from __future__ import annotations

from lightning_cls.inference.images import DECODE_ERRORS, IMAGE_SUFFIXES, decode_image, to_mode

__all__ = ["DECODE_ERRORS", "IMAGE_SUFFIXES", "decode_image", "to_mode"]
