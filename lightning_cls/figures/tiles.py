"""Tiles of images under captions, in rows, with a title and an optional verdict band: the
doctor's pictures (``doctor/mosaics.py``: duplicate groups, likely label errors, flagged
images). Painted with PIL (``figures.painting``'s font, matplotlib's), written through
``fileio.atomic_path``.

A caption is wrapped to its column's width and a word that still does not fit (a long file
name) is shortened in its middle, keeping its end (``…1234.jpg``). Each row is as tall as its
longest caption, so captions never run into the next row or column.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from lightning_cls.fileio import atomic_path

Tile = tuple[np.ndarray, str, str]  # (C, H, W) uint8 image, caption (lines: "\n"), frame colour

CELL = 96  # pixels of each tile's image (scaled up or down to fit)
GAP = 14  # pixels between columns: a caption may use the tile's width plus this
MARGIN = 10  # around the canvas
CAPTION_PT, TITLE_PT = 8, 10  # font sizes (points, as matplotlib's at painting.DPI)
CAPTION_LINES = 5  # at most, per tile (a longer caption's last line ends in "…")
MIN_WIDTH = 640  # room for the title and the verdict over a narrow grid
COLOURS = {"red": (220, 30, 30), "orange": (240, 150, 0)}
VERDICT = {True: ((0, 110, 40), (225, 245, 230)), False: ((190, 0, 0), (255, 228, 228))}


def shorten(word: str, font, width: float) -> str:
    """``word`` as is when it fits ``width`` pixels, else its start and end around "…" (the
    end kept longer: a file's number and extension are what tell photos apart)."""
    if font.getlength(word) <= width:
        return word
    for keep in range(len(word) - 1, 0, -1):
        head, tail = keep // 3, keep - keep // 3
        short = word[:head] + "…" + word[len(word) - tail :]
        if font.getlength(short) <= width:
            return short
    return "…"


def wrap(text: str, font, width: float, most: int | None = None) -> list[str]:
    """``text``'s lines, each word-wrapped to ``width`` pixels; a word wider than that is
    ``shorten``-ed; beyond ``most`` lines the last one shown ends in "…"."""
    out = []
    for paragraph in text.split("\n"):
        line = ""
        for word in paragraph.split(" "):
            word = shorten(word, font, width)
            trial = f"{line} {word}" if line else word
            if line and font.getlength(trial) > width:
                out.append(line)
                line = word
            else:
                line = trial
        out.append(line)
    if most is not None and len(out) > most:
        last = out[most - 1]
        while last and font.getlength(last + " …") > width:
            last = last[:-1]
        out = out[: most - 1] + [last + " …"]
    return out


def _pixels(image: np.ndarray, colour: str) -> np.ndarray:
    """(C, H, W) uint8 -> (CELL, CELL, 3) uint8 in a 3 px frame of ``colour``; small images
    stay sharp (nearest), photos are smoothed (bilinear)."""
    from PIL import Image

    rgb = np.repeat(image, 3, 0) if image.shape[0] == 1 else image[:3]  # (3, H, W)
    array = np.ascontiguousarray(rgb.transpose(1, 2, 0))  # (H, W, 3)
    small = max(array.shape[:2]) < CELL
    resample = Image.Resampling.NEAREST if small else Image.Resampling.BILINEAR
    cell = np.array(Image.fromarray(array).resize((CELL, CELL), resample))  # (CELL, CELL, 3)
    cell[:3], cell[-3:], cell[:, :3], cell[:, -3:] = (COLOURS[colour],) * 4
    return cell


def paint_tiles(rows: list[list[Tile]], title: str, verdict: tuple[bool, str] | None = None):
    """One PIL image: the title, the verdict (``(trusted, text)``: a green or red band) when
    given, then a row per list of tiles (rows may differ in length), each tile's caption
    under it. Texts are drawn one line per ``ImageDraw.text`` call."""
    from PIL import Image, ImageDraw

    from lightning_cls.figures.painting import font

    small, big = font(CAPTION_PT), font(TITLE_PT)
    pitch = CELL + GAP
    line_h = round(small.size * 1.3)
    cols = max(len(r) for r in rows)
    width = max(cols * pitch - GAP + 2 * MARGIN, MIN_WIDTH)
    captions = [[wrap(text, small, pitch - 4, CAPTION_LINES) for _, text, _ in r] for r in rows]
    title_lines = wrap(title, big, width - 2 * MARGIN)
    verdict_lines = wrap(verdict[1], big, width - 2 * MARGIN - 12) if verdict else []
    big_h = round(big.size * 1.35)
    heights = [CELL + 6 + line_h * max(len(c) for c in row) + 10 for row in captions]
    top = MARGIN + big_h * len(title_lines) + 6
    band = (big_h * len(verdict_lines) + 10) if verdict else 0
    image = Image.new("RGB", (width, top + band + 6 + sum(heights) + MARGIN), "white")
    draw = ImageDraw.Draw(image)
    for i, line in enumerate(title_lines):
        draw.text((MARGIN, MARGIN + i * big_h), line, font=big, fill="black", anchor="la")
    if verdict:
        ink, paper = VERDICT[bool(verdict[0])]
        draw.rectangle(
            (MARGIN, top, width - MARGIN, top + band - 1), fill=paper, outline=ink, width=2
        )
        for i, line in enumerate(verdict_lines):
            draw.text((MARGIN + 6, top + 5 + i * big_h), line, font=big, fill=ink, anchor="la")
    y = top + band + 6
    for tiles, row, height in zip(rows, captions, heights):
        for c, ((pixels, _, colour), lines) in enumerate(zip(tiles, row)):
            x = MARGIN + c * pitch
            image.paste(Image.fromarray(_pixels(pixels, colour)), (x, y))
            for i, line in enumerate(lines):
                xy = (x + CELL / 2, y + CELL + 4 + i * line_h)
                draw.text(xy, line, font=small, fill="black", anchor="ma")
        y += height
    return image


def draw_tiles(
    rows: list[list[Tile]], title: str, path: Path, verdict: tuple[bool, str] | None = None
) -> Path:
    """``paint_tiles`` written to ``path`` (PNG) atomically."""
    image = paint_tiles(rows, title, verdict)
    with atomic_path(path) as tmp:
        image.save(tmp, format="PNG", compress_level=1)
    return Path(path)
