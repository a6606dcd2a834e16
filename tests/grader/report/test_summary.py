"""The debrief's summary box (verdict, time against the budget, attempts, each interviewer's
recommendation, what to talk through) and the plots' text alternatives, in HTML and Markdown."""

from __future__ import annotations

import math
import re
from dataclasses import replace
from datetime import timedelta

import pytest

from grader.report import data, figures, render
from grader.sessions.models import Recommendation, parse_time
from tests.grader.sessions.fakes import FIXED, LEVELS_A, add_attempt, result, scored_session, sheet

SLUG = "sampler-replay"


def recommend(store, sid: str, who: str, verdict: str, reason: str) -> None:
    sh = next(s for s in store.sheets(sid, SLUG) if s.interviewer == who)
    store.save_sheet(replace(sh, recommendation=Recommendation(verdict, reason)))


def minutes_after_start(store, sid: str, minutes: float) -> str:
    return (parse_time(store.session(sid).started_at) + timedelta(minutes=minutes)).isoformat(timespec="seconds")


@pytest.fixture
def session(tmp_path):
    """Ada says yes, Bob strong no, and they score `method` two levels apart (fakes.LEVELS_A/B)."""
    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    recommend(store, sid, "ada", "yes", "found it from the ledger")
    recommend(store, sid, "bob", "strong-no", "guessed before measuring")
    return store, sid


def test_the_summary_box_leads_the_html_with_the_committee_s_questions(session):
    store, sid = session
    html = render.render(data.gather(store, sid), "html")
    box = html[html.index('<section class="summary"'):html.index("</section>")]
    assert html.index('<section class="summary"') < html.index('<section class="exercise"')
    assert "Passed 1 of 1 graded exercise." in box and "2 attempts." in box
    assert re.search(r"Time used: \d+:\d\d of 60 min \(\d+%\); the session is still open", box)
    assert '<span class="pass">PASSED</span>, score 1.00' in box
    assert re.search(r"<td>#2 at \d+:\d\d</td>", box)  # the clock's offset: seconds on a loaded machine
    assert "<td>ada</td><td><strong>yes</strong></td><td>2.89 / 4</td><td>found it from the ledger</td>" in box
    assert "<td>bob</td><td><strong>strong no</strong></td><td>2.96 / 4</td><td>guessed before measuring</td>" in box
    assert "recommendations differ (split for and against hiring): bob strong no, ada yes" in box
    assert "Investigation (method) scored 2 levels apart: ada 2, bob 4" in box
    assert "No disagreement" not in box


def test_the_summary_in_markdown(session):
    store, sid = session
    md = render.render(data.gather(store, sid, with_pixels=False), "md")
    assert md.index("## Summary") < md.index("## Déjà vu")
    assert "**Passed 1 of 1 graded exercise.** Time used:" in md
    assert "| ada | **yes** | 2.89 / 4 | found it from the ledger |" in md
    assert "- recommendations differ (split for and against hiring): bob strong no, ada yes" in md


def test_agreement_one_scorer_and_no_scorer_are_said_plainly(tmp_path):
    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    for who in ("ada", "bob"):  # the same levels and the same call: nothing to talk through
        store.save_sheet(replace(sheet(sid, SLUG, who, LEVELS_A), recommendation=Recommendation("yes", "solid")))
    s = data.gather(store, sid, with_pixels=False).summary
    assert s.talk_through == [] and s.agreement.startswith("No disagreement")
    assert "No disagreement: the recommendations match" in render.render(data.gather(store, sid), "html")

    store.save_sheet(replace(sheet(sid, SLUG, "bob", LEVELS_A), recommendation=Recommendation("strong-yes", "x")))
    assert data.gather(store, sid, with_pixels=False).summary.talk_through == [
        "recommendations differ (same side, different strength): ada yes, bob strong yes"]

    store.delete_sheet(sid, SLUG, "bob")
    s = data.gather(store, sid, with_pixels=False).summary
    assert s.talk_through == [] and s.agreement == "Only ada scored each exercise: no second opinion to reconcile."
    store.delete_sheet(sid, SLUG, "ada")
    assert data.gather(store, sid, with_pixels=False).summary.agreement.startswith("Not scored yet")


def test_time_over_the_budget_and_a_late_pass_are_in_the_box(tmp_path):
    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    budget = store.session(sid).minutes
    add_attempt(store, sid, SLUG, FIXED + "# late\n", result(SLUG, {"completes": True, "sample_partition": True}), None)
    with store.write() as c:
        c.execute("UPDATE attempts SET started_at = ? WHERE session_id = ? AND n = 3",
                  (minutes_after_start(store, sid, budget + 2.5), sid))
        c.execute("UPDATE sessions SET closed_at = ? WHERE id = ?", (minutes_after_start(store, sid, budget + 5), sid))
    rep = data.gather(store, sid, with_pixels=False)
    s = rep.summary
    assert (s.used_s, s.budget_s, s.over_s, s.share, s.attempts) == (3900, 3600, 300, 108, 3)
    assert s.exercises[0].over_time == [3] and s.exercises[0].first_pass_n == 2
    html = render.render(rep, "html")
    assert "Time used: 1:05:00 of 60 min (108%), <strong>5:00 over the budget</strong>." in html
    assert "passed over time: #3" in html


def test_every_drawn_plot_has_a_text_alternative_with_its_figures(session):
    store, sid = session
    rep = data.gather(store, sid)
    html = render.render(rep, "html")
    # fakes.series: loss 2·exp(-s/15) (+0.05 on rank 1) over 40 steps; attempt 1's RSS leaks 1 MB a step
    last = 2.0 * math.exp(-39 / 15)
    loss = ("Loss per optimizer step: attempt 2, rank 0 from 2.00 to 0.149 over 40 steps; attempt 2, rank 1 from "
            "2.05 to 0.199 over 40 steps; reference, rank 0 ends at 0.149.")
    assert f"{last:.3g}" == "0.149"
    memory = ("RSS (MB) over 40 steps: attempt 1, rank 0 from 300 to 339 (+39.0, peak 339); attempt 1, rank 1 from 303 "
              "to 342 (+39.0, peak 342); attempt 2, rank 0 from 300 to 300 (flat, peak 300)")
    svgs = re.findall(r"<svg [^>]*>", html)
    assert len(svgs) == 3 and all('role="img"' in s and "aria-labelledby" in s for s in svgs)
    for s in svgs:  # each names an element on the page, and that element holds the figures
        ref = re.search(r'aria-labelledby="([^"]+)"', s).group(1)
        caption = re.search(rf'<span class="alt" id="{ref}">([^<]+)</span>', html)
        assert caption and re.search(r"\d", caption.group(1)), ref
    assert f'id="alt-{SLUG}-loss">{loss}</span>' in html and memory in html
    assert f"<title>Loss against the reference: {loss}</title>" in html
    assert "<th scope=\"row\">attempt 1, rank 0</th><td>40</td><td>300</td><td>339</td><td>339</td><td>+39.0</td>" in html
    assert "this exercise has no throughput check" in html  # an undrawn plot says why
    md = render.render(data.gather(store, sid, with_pixels=False), "md")
    assert f"**Loss against the reference**: {loss}" in md and "| reference, rank 0 | 40 | 2.00 | 0.149 | 0.149 |" in md


def test_the_text_alternative_of_throughput_and_step_times():
    tp = {"rounds": [{"broken": 100.0, "candidate": 180.0 + i, "reference": 200.0} for i in range(3)]}
    p = figures.throughput(tp)
    assert figures.alt(p) == ("Steps/s of the slowest rank in 3 measured rounds, median per role: broken 100, "
                              "candidate 181, reference 200.")
    assert figures.table(p).rows[1] == ["candidate", "180", "181", "182", "181"]
    run = {"ranks": {"0": {"dt": [9.0, 9.0] + [0.010, 0.020, 0.030, 0.040, 0.050]}}}  # start-up steps left out
    p = figures.step_times([("#1", run)])
    assert figures.alt(p) == ("Step time in ms, every rank, the first 2 steps of each left out: #1 median 30.0 "
                              "(5th-95th percentile 12.0-48.0, 5 steps).")
    assert figures.throughput({"rounds": []}) is None and figures.step_times([("#1", {"ranks": {}})]) is None


def test_percentile_is_numpy_s():
    import numpy as np

    xs = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    for q in (0, 5, 50, 95, 100):
        assert figures.percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)))
