"""``GET /`` in a real browser: Debian's chromium driven by Playwright drops two images on the
page and reads the top-5 bars it draws from ``/predict``. Skips, saying why, without chromium
or Playwright (``.ci/run`` installs chromium; Playwright is in the ``serve`` extra)."""

from __future__ import annotations

import os
import shutil

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


def test_page_is_self_contained(server):
    r = httpx.get(server.url + "/")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert "http://" not in r.text and "https://" not in r.text  # no CDN: works offline


def test_dropped_images_show_top5_bars(server, artifacts, tmp_path):
    if not os.path.exists(CHROMIUM) and not shutil.which("chromium"):
        pytest.skip("chromium is not installed (apt-get install -y chromium chromium-driver)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    paths = []
    for i in range(2):
        path = tmp_path / f"digit{i}.png"
        path.write_bytes(png_bytes(artifacts.images[i]))
        paths.append(str(path))
    with sync_api.sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            page = browser.new_page()
            page.goto(server.url + "/")
            page.set_input_files("#files", paths)  # what a drop or the file picker hands over
            page.wait_for_function("document.querySelectorAll('.card .row').length >= 6")
            page.wait_for_selector("#model:has-text('Model')")
            page.screenshot(path=str(tmp_path / "page.png"), full_page=True)
            cards = page.query_selector_all(".card")
            assert len(cards) == 2
            for card in cards:
                rows = card.query_selector_all(".row")
                assert len(rows) == 3  # the server's top_k=3 in this fixture (5 by default)
                pcts = [float(r.query_selector(".pct").inner_text().rstrip("%")) for r in rows]
                assert pcts == sorted(pcts, reverse=True) and 0 < sum(pcts) <= 100.1
                labels = [r.query_selector(".label").inner_text() for r in rows]
                assert set(labels) <= set(artifacts.spec.classes)
                width = rows[0].query_selector(".bar").evaluate("e => e.style.width")
                assert abs(float(width.rstrip("%")) - pcts[0]) < 0.11
            if os.environ.get("LIGHTNING_CLS_PAGE_SCREENSHOT"):  # to look at the page by eye
                shutil.copy(tmp_path / "page.png", os.environ["LIGHTNING_CLS_PAGE_SCREENSHOT"])
        finally:
            browser.close()
