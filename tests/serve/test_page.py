"""``GET /`` in a real browser: Debian's chromium driven by Playwright. Two images are dropped
on the drop zone through a real ``drop`` event (a ``DataTransfer`` holding the files, the path
a user's drag takes through the page's drop handler), and the bars the page draws must equal
``/predict``'s answer for the same images. The screenshot is kept: under ``$TEST_ARTIFACTS``
when set, else in the test's pytest tmp dir; its path is printed.

Without chromium or Playwright the test skips, saying why, except with ``CI=true``, where it
fails (``.ci/run`` installs chromium, a failed install failing CI; Playwright is in the
``serve`` extra and uses ``/usr/bin/chromium``, never downloading a browser).
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from helpers import png_bytes

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
# A DataTransfer holding the files, as the browser builds one for a drag from the desktop.
MAKE_DATA_TRANSFER = """files => {
  const dt = new DataTransfer();
  for (const f of files) {
    dt.items.add(new File([new Uint8Array(f.bytes)], f.name, {type: "image/png"}));
  }
  return dt;
}"""


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {reason}: the browser test of the page must run in CI")
    pytest.skip(reason)


def test_page_is_self_contained(server):
    r = httpx.get(server.url + "/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "http://" not in r.text and "https://" not in r.text  # no CDN: works offline


def _bars(page) -> dict[str, list[tuple[str, float, float]]]:
    """Per card (by file name): (label, percent shown, bar width in percent) per row."""
    out = {}
    for card in page.query_selector_all(".card"):
        rows = []
        for row in card.query_selector_all(".row"):
            pct = float(row.query_selector(".pct").inner_text().rstrip("%"))
            width = float(row.query_selector(".bar").evaluate("e => e.style.width").rstrip("%"))
            rows.append((row.query_selector(".label").inner_text(), pct, width))
        out[card.query_selector(".name").inner_text()] = rows
    return out


def test_dropped_images_show_the_bars_of_predict(server, artifacts, tmp_path):
    if not os.path.exists(CHROMIUM):
        _missing(f"{CHROMIUM} is not installed (apt-get install -y chromium)")
    try:
        from playwright import sync_api
    except ImportError:
        _missing("playwright is not installed (the serve extra)")
    files = {f"digit{i}.png": png_bytes(artifacts.images[i]) for i in range(2)}
    expected = {}
    for name, data in files.items():  # /predict's answer for the same bytes
        r = httpx.post(server.url + "/predict", content=data, headers={"Content-Type": "image/png"})
        assert r.status_code == 200, r.text
        expected[name] = r.json()["predictions"][0]
    shots = Path(os.environ.get("TEST_ARTIFACTS") or tmp_path)
    shots.mkdir(parents=True, exist_ok=True)
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page()
            page.goto(server.url + "/")
            page.wait_for_selector("#model:has-text('Model')")
            payload = [{"name": n, "bytes": list(data)} for n, data in files.items()]
            transfer = page.evaluate_handle(MAKE_DATA_TRANSFER, payload)
            page.dispatch_event("#drop", "dragover", {"dataTransfer": transfer})
            assert "over" in page.get_attribute("#drop", "class")
            page.dispatch_event("#drop", "drop", {"dataTransfer": transfer})
            page.wait_for_function("document.querySelectorAll('.card .row').length >= 6")
            page.wait_for_function("document.querySelectorAll('.card .explain').length >= 2")
            notes = [n.inner_text() for n in page.query_selector_all(".card .explain")]
            screenshot = shots / "serve_page.png"
            page.screenshot(path=str(screenshot), full_page=True)
            print(f"screenshot of the serving page: {screenshot}")
            shown = _bars(page)
        finally:
            browser.close()
    assert set(shown) == set(files)
    for name, rows in shown.items():
        want = expected[name]
        assert len(rows) == 3  # the server's top_k=3 in this fixture (5 by default)
        assert [label for label, _, _ in rows] == want["labels"]
        for (_, pct, width), prob in zip(rows, want["probs"]):
            assert abs(pct - 100 * prob) <= 0.0501 and width == pct  # toFixed(1) of the same value
    assert screenshot.stat().st_size > 1000
    # An ONNX graph has no feature maps: each card says why it shows no heat map.
    assert notes == ["Heat maps are not supported for this onnx model: its graph outputs logits "
                     "only, not the feature maps a heat map is read from. Use the run's .ckpt (or "
                     "model_weights.pt) for heat maps."] * 2  # fmt: skip
