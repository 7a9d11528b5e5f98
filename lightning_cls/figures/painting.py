"""Figures painted with PIL, framed by matplotlib: what the run's plots (``figures.plots``)
and the prediction mosaic (``figures.mosaic``) share.

Every training run pays for its figures, so what grows with the classes or the tiles (cells,
counts, bars, class names, tile labels) is painted with PIL, in matplotlib's font, into a canvas
placed pixel for pixel on the figure; matplotlib draws only frames, titles, axis names and
ticks, at fixed pixel positions (no ``tight_layout``: it lays every text out once more). On a
loaded 2-vCPU EPYC a matplotlib text took about 1.5 ms to lay out and render, a tick about
4 ms, a PIL text 0.1 ms (``benchmarks/plots_cost.py``). Needs numpy, PIL and matplotlib, not
torch or Lightning.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

DPI = 100
# zlib level 1: half the encoding time of the default 6 (12 ms for curves.png), files 10-35%
# larger.
SAVE = {"dpi": DPI, "pil_kwargs": {"compress_level": 1}}
RED, BLUE = (214, 39, 40), (31, 119, 180)  # matplotlib's tab:red and tab:blue


def figure(width_px: float, height_px: float):
    """A bare Agg figure (no pyplot: nothing global to register or close)."""
    from matplotlib.figure import Figure

    return Figure(figsize=(width_px / DPI, height_px / DPI), dpi=DPI)


@functools.lru_cache(maxsize=16)
def font(points: float):
    """PIL font of matplotlib's default family at ``points`` (as a matplotlib text at DPI)."""
    from matplotlib import font_manager
    from PIL import ImageFont

    try:
        return ImageFont.truetype(
            font_manager.findfont(font_manager.FontProperties()), points * DPI / 72
        )
    except OSError:  # a configured font PIL cannot read: Pillow's own
        return ImageFont.load_default(points * DPI / 72)


def paste(fig, canvas: np.ndarray, left: int, bottom: int) -> None:
    """``canvas`` (H, W, 3) uint8 pixel for pixel, its lower left corner at (left, bottom)
    pixels of ``fig``."""
    from matplotlib.artist import Artist

    class Pixels(Artist):  # figimage converts to float and resamples: 0.3 s for 100 classes
        def draw(self, renderer):
            gc = renderer.new_gc()
            renderer.draw_image(gc, left, bottom, rgba[::-1])  # rows from the bottom up
            gc.restore()

    rgba = np.dstack([canvas, np.full(canvas.shape[:2], 255, np.uint8)])  # (H, W, 4)
    fig.add_artist(Pixels())


def place(fig, canvas: np.ndarray, left: int, bottom: int, width: int, height: int, lift: int = 0):
    """``paste`` the canvas, and return an axes of (width, height) pixels over its right edge,
    ``lift`` pixels above its bottom: transparent, the frame only, for matplotlib to draw
    titles and ticks around."""
    paste(fig, canvas, left, bottom)
    w, h = fig.bbox.width, fig.bbox.height
    x = left + canvas.shape[1] - width
    ax = fig.add_axes((x / w, (bottom + lift) / h, width / w, height / h), zorder=1)
    ax.patch.set_visible(False)
    ax.set(yticks=[])
    return ax


def labels(names: Sequence[str], font, pitch: int) -> np.ndarray:
    """(len(names) * pitch, w, 3) uint8: the names right aligned, one every ``pitch`` rows
    (vertically centred), on white; w is the widest name's width and a margin."""
    from PIL import Image, ImageDraw

    width = int(max(font.getlength(s) for s in names)) + 8
    image = Image.new("RGB", (width, len(names) * pitch), "white")
    draw = ImageDraw.Draw(image)
    for i, text in enumerate(names):
        draw.text((width - 5, (i + 0.5) * pitch), text, font=font, fill="black", anchor="rm")
    return np.asarray(image)


def centred(names: Sequence[str], font, pitch: int) -> np.ndarray:
    """(2 * font size, len(names) * pitch, 3) uint8: the names side by side, each centred
    under its ``pitch`` columns, on white."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (len(names) * pitch, round(2 * font.size)), "white")
    draw = ImageDraw.Draw(image)
    for i, text in enumerate(names):
        draw.text(((i + 0.5) * pitch, 4), text, font=font, fill="black", anchor="mt")
    return np.asarray(image)


def bar_pitch(n: int) -> int:
    """Pixels per bar of ``n`` bars: 30 up to 60 bars, then 1800 pixels in all."""
    return 30 if n <= 60 else max(1, 1800 // n)


def bars(
    values: Sequence[float],
    support: Sequence[int],
    classes: Sequence[str],
    pitch: int,
    width: int,
) -> np.ndarray:
    """(n * pitch + pitch, w + width, 3) uint8: one horizontal bar per class (a value in
    0..1 over ``width`` pixels, NaN drawn as none), right of its name and support, values under
    0.5 in red, the value beside each bar up to 30 classes; half a pitch of white above and
    below, as ``barh`` leaves. ``axes_over`` frames it."""
    from PIL import Image, ImageDraw

    n = len(classes)
    values = [0.0 if v != v else float(v) for v in values]
    names = [f"{c} (n={int(s)})" for c, s in zip(classes, support)]
    rows = labels(names, font(8 if n <= 20 else 5), pitch)  # (n * pitch, w, 3)
    plot = Image.new("RGB", (width, n * pitch), "white")
    draw, small = ImageDraw.Draw(plot), font(7)
    gap = round(0.1 * pitch)  # bars 0.8 of the pitch tall, as barh draws them
    for i, (v, s) in enumerate(zip(values, support)):
        if v > 0:
            box = (0, i * pitch + gap, round(v * width) - 1, (i + 1) * pitch - gap - 1)
            draw.rectangle(box, fill=RED if v < 0.5 else BLUE)
        if n <= 30:  # a 0% bar has no width to see
            xy = ((min(v, 0.85) + 0.01) * width, (i + 0.5) * pitch)
            draw.text(xy, f"{v:.0%}" if s else "-", font=small, fill="black", anchor="lm")
    canvas = np.concatenate([rows, np.asarray(plot)], 1)  # (n * pitch, w + width, 3)
    half = (pitch + 1) // 2
    return np.pad(canvas, ((half, half), (0, 0), (0, 0)), constant_values=255)


def axes_over(fig, canvas: np.ndarray, left: int, bottom: int, width: int, title: str, xlabel: str):
    """Place a ``bars`` canvas (its plot ``width`` pixels wide) with its x axis from 0 to 1,
    grid, name and title."""
    ax = place(fig, canvas, left, bottom, width, canvas.shape[0])
    ax.set_xlim(0, 1)
    ax.set(xlabel=xlabel, title=title)
    ax.grid(axis="x", alpha=0.3)
    return ax
