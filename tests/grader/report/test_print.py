"""The debrief on paper: printed to PDF by headless Chromium (as a committee member's browser
would) and read back page by page with pypdf. Every fold (diffs, evidence, the plots' tables, the
levels) prints open though it is closed on screen, the summary box is on the first page, and no
plot is cut across pages wherever the page breaks fall."""

from __future__ import annotations

import base64
import io
import re
import unicodedata
from dataclasses import replace

import pytest

from grader.report import data, render
from grader.sessions.models import Recommendation
from tests.grader.report.cdp import Browser
from tests.grader.sessions.fakes import FIXED, LEVELS_A, LEVELS_B, SHIPPED, add_attempt, result, series, sheet

pypdf = pytest.importorskip("pypdf", reason="pypdf reads the printed pages: pip install -e '.[test]'")
pytestmark = pytest.mark.slow  # about 10 s: a browser start and a dozen prints

A4 = {"paperWidth": 8.27, "paperHeight": 11.69}
SPACERS_MM = range(0, 280, 70)  # over an A4 page in steps shorter than a plot (about 100 mm): one cuts it
DIFF_MARK = "+sampler.set_epoch(epoch)"  # only in attempt 2's diff, which is folded on screen
EVIDENCE_MARK = '"indices":['  # only in the evidence's JSON (the messages say "indices 0-63")


@pytest.fixture(scope="module")
def debrief(tmp_path_factory):
    from grader.sessions.lifecycle import new_session
    from grader.sessions.store import Store

    tmp = tmp_path_factory.mktemp("print")
    store = Store.open(tmp / "s.db")
    session, _ = new_session(store, "Ada", ["sampler-replay"], root=tmp / "ws")
    sid, slug = session.id, "sampler-replay"
    add_attempt(store, sid, slug, SHIPPED, result(slug, {"completes": True, "sample_partition": False}), series(leak=1.0))
    add_attempt(store, sid, slug, FIXED, result(slug, {"completes": True, "sample_partition": True}), series())
    add_attempt(store, sid, slug, FIXED + "# tidy\n", result(slug, {"completes": True, "sample_partition": True}),
                series())
    for who, levels, rec in (("ada", LEVELS_A, Recommendation("yes", "found it from the ledger")),
                             ("bob", LEVELS_B, Recommendation("strong-no", "guessed before measuring"))):
        store.save_sheet(replace(sheet(sid, slug, who, levels, strength="s", improvement="i"), recommendation=rec))
    report = data.gather(store, sid)
    page = tmp / "debrief.html"
    page.write_text(render.render(report, "html"), encoding="utf-8")
    return report, page


def squash(text: str) -> str:
    """Text to compare: no whitespace (the PDF breaks lines where it must), ligatures undone (NFKC)."""
    return re.sub(r"\s+", "", unicodedata.normalize("NFKC", text))


def print_pages(browser: Browser, s: str) -> list[str]:
    """The page as printed to an A4 PDF, each page's text without whitespace."""
    pdf = base64.b64decode(browser.send("Page.printToPDF", {**A4, "printBackground": False}, session=s)["data"])
    return [squash(p.extract_text()) for p in pypdf.PdfReader(io.BytesIO(pdf)).pages]


def page_of(pages: list[str], needle: str, start: int = 0) -> int | None:
    return next((i for i in range(start, len(pages)) if squash(needle) in pages[i]), None)


def split_plots(report, pages: list[str]) -> list[str]:
    """The plots whose title and last table row are on different pages (cut by a page break)."""
    cut = []
    for p in report.exercises[0].plots:
        if p.table is None:
            continue
        top = page_of(pages, p.title)
        assert top is not None, f"{p.title} is not printed"
        bottom = page_of(pages, "".join(p.table.rows[-1]), top)
        assert bottom is not None, f"{p.title}: its table is not printed"
        if bottom != top:
            cut.append(p.key)
    return cut


def test_folds_are_closed_on_screen_and_open_on_paper(browser, debrief):
    report, page = debrief
    s = browser.open(page.as_uri())
    closed = browser.evaluate(s, """[...document.querySelectorAll('details.fold:not([open]) + .folded')]
        .map(e => getComputedStyle(e).display)""")
    assert closed and set(closed) == {"none"}  # diffs but the latest, evidence, tables, levels: folded
    opened = browser.evaluate(s, """(() => { const d = document.querySelector('details.fold:not([open])');
        d.open = true; return getComputedStyle(d.nextElementSibling).display; })()""")
    assert opened != "none"  # opening a fold (a click) shows what it folds
    # in black and white: verdicts and diff lines are told by their words and signs, not by colour
    browser.send("Emulation.setEmulatedMedia", {"media": "print"}, session=s)
    styles = browser.evaluate(s, """['.pass', '.fail', 'pre.diff .add', 'figure.plot']
        .map(q => getComputedStyle(document.querySelector(q))).map(c => [c.color, c.backgroundColor, c.breakInside])""")
    assert [c[0] for c in styles[:2]] == ["rgb(0, 0, 0)"] * 2
    assert styles[2][1] == "rgba(0, 0, 0, 0)" and styles[3][2] == "avoid"
    browser.close_page(s)

    s = browser.open(page.as_uri())
    pages = print_pages(browser, s)
    text = "".join(pages)
    assert DIFF_MARK in text and EVIDENCE_MARK in text
    assert text.count(EVIDENCE_MARK) == len(report.exercises[0].latest_checks)  # every check's evidence
    assert squash("As 3, and explained the blast radius") in text  # "what each level means", folded on screen
    for p in report.exercises[0].plots:
        if p.table:
            assert squash(" ".join(p.table.headers)) in text and squash(p.alt) in text
    # the summary box leads the first page: verdict, time, each recommendation, the disagreement
    for needle in ["Summary", "Passed 1 of 1 graded exercise", "Time used", "3 attempts", "ada", "yes",
                   "found it from the ledger", "bob", "strong no", "recommendations differ (split for and against hiring)",
                   "Investigation (method) scored 2 levels apart: ada 2, bob 4"]:
        assert squash(needle) in pages[0], needle
    assert browser.problems() == []
    browser.close_page(s)

    # and the reading can fail: printed with the screen's styles, the folds stay shut
    s = browser.open(page.as_uri())
    browser.send("Emulation.setEmulatedMedia", {"media": "screen"}, session=s)
    shut = "".join(print_pages(browser, s))
    assert DIFF_MARK not in shut and EVIDENCE_MARK not in shut
    browser.close_page(s)


def test_no_plot_is_cut_across_pages_wherever_the_breaks_fall(browser, debrief):
    report, page = debrief
    drawn = [p.key for p in report.exercises[0].plots if p.table]
    assert drawn == ["loss", "memory", "step_times"]  # this exercise has no throughput rounds
    cut_without_rule = []
    for mm in SPACERS_MM:  # push the plots down the page, so page breaks fall at every height in them
        s = browser.open(page.as_uri())
        browser.evaluate(s, f"""document.querySelector('.plots').insertAdjacentHTML('beforebegin',
            '<div style="height:{mm}mm"></div>')""")
        pages = print_pages(browser, s)
        assert split_plots(report, pages) == [], f"a plot cut with {mm} mm above the plots"
        if not cut_without_rule:
            browser.evaluate(s, "document.querySelectorAll('figure.plot').forEach(f => f.style.breakInside = 'auto')")
            cut_without_rule += split_plots(report, print_pages(browser, s))
        browser.close_page(s)
    # the measure can fail: without the print stylesheet's break-inside, some break cuts a plot
    assert cut_without_rule, "no spacer put a page break through a plot: the check above proves nothing"
