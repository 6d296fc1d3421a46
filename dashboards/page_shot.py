"""A picture of ``streamscope demo``'s page: answers relayed to a browser, one complete, one INCOMPLETE.

Playwright for Python drives Debian's Chromium (``/usr/bin/chromium``, ``scripts/ensure-chromium``);
no browser is downloaded. ``render.py --live`` (``make screenshots``) calls :func:`capture_page` on
the page of the demo run it draws the panels from. Loaded by path, as ``render.py``'s other siblings.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

from PIL import Image

FILE = "demo-page.png"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 # Without these, Chromium's own background connections go to a closed network.
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
PAGE_URL = re.compile(r"the demo page(?:, answers relayed to a browser:| is at) (http://127\.0\.0\.1:\d+/)")
"""What ``streamscope demo`` prints about its page."""


def capture_page(url: str, path: Path, *, timeout: float = 30) -> Path:
    """The demo page at ``url`` in headless Chromium, after one normal answer and one answer
    overloaded mid-way (shown INCOMPLETE) streamed to the end; a PNG of the whole page at ``path``."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(viewport={"width": 860, "height": 600})
            page.goto(url)
            for kind, state in (("answer", "complete"), ("cut", "incomplete")):
                page.click(f'button[data-kind="{kind}"]')
                page.wait_for_selector(f'.card[data-kind="{kind}"][data-state="{state}"]', timeout=timeout * 1000)
            page.mouse.move(0, 0)  # no button hovered
            shot = page.screenshot(full_page=True)
        finally:
            browser.close()
    with Image.open(io.BytesIO(shot)) as image:
        image.convert("RGB").quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
    return path


def page_url(output: str) -> str:
    """The demo page's URL, from what ``streamscope demo`` printed."""
    found = PAGE_URL.search(" ".join(output.split()))
    if found is None:
        raise RuntimeError(f"the demo printed no page URL:\n{output[-3000:]}")
    return found.group(1)
