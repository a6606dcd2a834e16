"""The HTML debrief in a real browser (Debian's headless Chromium, installed by `make browser`):
no console errors, no request beyond the file itself, and every plot area drawn (measured from
the screenshot's pixels)."""

from __future__ import annotations

import io
import json

import pytest

from grader.report import data, render
from tests.grader.sessions.fakes import FIXED, add_attempt, result, scored_session, series

pytestmark = pytest.mark.slow  # starts processes of its own (seconds each)

MIN_INK = 0.03  # share of non-background pixels a drawn plot has at least (an empty axes box has ~0.01)


def ink(img, box) -> float:
    x, y, w, h = (int(round(v)) for v in box)
    hist = img.crop((x, y, x + w, y + h)).convert("L").histogram()
    return sum(hist[:235]) / max(sum(hist), 1)


def test_report_renders_in_chromium_with_plots_drawn(tmp_path, browser):
    from PIL import Image

    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    # a passing throughput attempt too, so all four plots are drawn
    add_attempt(store, sid, "sampler-replay", FIXED + "# faster\n",
                result("sampler-replay", {"completes": True, "sample_partition": True}, throughput=True), series())
    page = tmp_path / "debrief.html"
    page.write_text(render.render(data.gather(store, sid), "html"), encoding="utf-8")

    s = browser.open(page.as_uri())
    boxes = json.loads(browser.evaluate(s, """JSON.stringify([...document.querySelectorAll('figure.plot')].map(f => {
        const svg = f.querySelector('svg'); const r = (svg || f).getBoundingClientRect();
        return {key: f.dataset.plot, svg: !!svg, x: r.x + scrollX, y: r.y + scrollY, w: r.width, h: r.height}; }))"""))
    width, height = browser.evaluate(s, "[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
    png = browser.screenshot(s, width, height)
    (tmp_path / "debrief.png").write_bytes(png)

    assert browser.problems() == []
    foreign = [u for u in browser.requests() if not u.startswith(("file:", "data:", "about:"))]
    assert foreign == []
    assert [b["key"] for b in boxes] == ["loss", "memory", "step_times", "throughput"]
    assert all(b["svg"] and b["w"] > 200 and b["h"] > 100 for b in boxes), boxes
    img = Image.open(io.BytesIO(png))
    assert img.size == (width, height)
    for b in boxes:
        share = ink(img, (b["x"], b["y"], b["w"], b["h"]))
        assert share > MIN_INK, f"plot {b['key']} looks blank: {share:.3f} of its pixels drawn"
    # and the measure can fail: a stretch of the page with no plot is blank by it
    header_gap = (0, height - 40, width, 30)
    assert ink(img, header_gap) < MIN_INK
