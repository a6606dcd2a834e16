"""Scorecards a hiring committee uses (issue 26 item 5): a recommendation per interviewer with a
required reason, shown in `session show`, the debrief and `report --compare`; empty sheets
refused and sheets deletable (recorded); attempts in the revision window marked; passes after the
time budget flagged; `--compare` needing two sessions. Times are injected, never the wall clock."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta

import pytest

from grader.report import data, render
from grader.rubric import find_rubric
from grader.sessions.errors import SessionError
from grader.sessions.live import session_view
from grader.sessions.models import Recommendation, parse_time
from grader.sessions.scoresheet import sheet_from_data
from grader.sessions.timeline import Window, marks
from tests.grader.sessions.fakes import FIXED, add_attempt, result, scored_session

RUBRIC = find_rubric("distributed-debugging")
SLUG = "sampler-replay"


def at(store, sid: str, minutes: float) -> str:
    """The time ``minutes`` after the session's clock started (an injected clock)."""
    start = parse_time(store.session(sid).started_at)
    return (start + timedelta(minutes=minutes)).isoformat(timespec="seconds")


def set_started(store, sid: str, n: int, iso: str) -> None:
    with store.write() as c:
        c.execute("UPDATE attempts SET started_at = ? WHERE session_id = ? AND slug = ? AND n = ?", (iso, sid, SLUG, n))


def recommend(store, sid: str, who: str, verdict: str, reason: str) -> None:
    sh = next(s for s in store.sheets(sid, SLUG) if s.interviewer == who)
    store.save_sheet(replace(sh, recommendation=Recommendation(verdict, reason)))


# ---- the recommendation --------------------------------------------------------------------------
@pytest.mark.parametrize("extra, error", [
    ({}, "sheet.toml: recommendation: missing; add recommendation = one of strong-no, no, yes, strong-yes"),
    ({"recommendation": "maybe", "recommendation_reason": "r"},
     "sheet.toml: recommendation: 'maybe' is not a recommendation; use one of strong-no, no, yes, strong-yes"),
    ({"recommendation": "yes"}, "sheet.toml: recommendation_reason: missing; say why you recommend yes"),
    ({"recommendation": "no", "recommendation_reason": " \x07 "}, "sheet.toml: recommendation_reason: missing"),
])
def test_a_sheet_needs_a_recommendation_and_its_reason(extra, error):
    with pytest.raises(SessionError) as e:
        sheet_from_data({"levels": {"fix": 3}, **extra}, RUBRIC, "s", "ex", "ada", [], where="sheet.toml")
    assert str(e.value).startswith(error) and "\n" not in str(e.value)


@pytest.mark.parametrize("given, stored", [("strong-no", "strong-no"), ("No", "no"), ("strong yes", "strong-yes"),
                                           ("STRONG_YES", "strong-yes")])
def test_recommendation_spellings(given, stored):
    sh = sheet_from_data({"levels": {"fix": 3}, "recommendation": given, "recommendation_reason": "why"},
                         RUBRIC, "s", "ex", "ada", [])
    assert sh.recommendation == Recommendation(stored, "why")


def test_recommendation_is_stored_with_the_sheet_and_shown_everywhere(tmp_path, invoke):
    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    db = str(tmp_path / "s.db")
    f = tmp_path / "ada.toml"
    f.write_text('recommendation = "strong-yes"\nrecommendation_reason = "Found the cause from the ledger"\n'
                 '[levels]\nroot-cause = 4\n')
    r = invoke("session", "score", sid, "--interviewer", "ada", "--file", str(f), "--db", db, "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["sheet"]["recommendation"] == {"verdict": "strong-yes",
                                                             "reason": "Found the cause from the ledger"}
    (ada,) = [s for s in store.sheets(sid, SLUG) if s.interviewer == "ada"]
    assert ada.recommendation == Recommendation("strong-yes", "Found the cause from the ledger")

    r = invoke("session", "show", sid, "--db", db)
    assert "ada: strong yes: Found the cause from the ledger" in r.out
    assert "bob: not given" in r.out  # bob's sheet predates recommendations
    section = r.out.split("scorecards (recommendation per interviewer; timeline marks):")[1]
    assert max(len(line) for line in section.splitlines()) <= 80
    shown = json.loads(invoke("session", "show", sid, "--db", db, "--json").out)["exercises"][0]
    assert shown["recommendations"] == {"ada": {"verdict": "strong-yes", "reason": "Found the cause from the ledger"},
                                        "bob": None}

    rep = data.gather(store, sid, with_pixels=False)
    md, html = render.render(rep, "md"), render.render(rep, "html")
    assert "| ada | strong yes | Found the cause from the ledger |" in md and "| bob | not given | - |" in md
    assert "<td>ada</td><td>strong yes</td><td>Found the cause from the ledger</td>" in html
    assert "<td>bob</td><td>not given</td>" in html

    store2, sid2 = scored_session(tmp_path / "s.db", tmp_path / "ws2", candidate="Bo")
    recommend(store2, sid2, "bob", "no", "Never verified")
    cmp = data.compare(store, [sid, sid2], SLUG)
    cmd, chtml = render.render_compare(cmp, "md"), render.render_compare(cmp, "html")
    assert "| recommendation | ada: strong yes; bob: not given | ada: not given; bob: no |" in cmd
    assert "<td>ada: strong yes; bob: not given</td><td>ada: not given; bob: no</td>" in chtml


# ---- empty sheets and deleting one ---------------------------------------------------------------
@pytest.mark.parametrize("text", ["", 'recommendation = "yes"\nrecommendation_reason = "r"\n[feedback]\nstrength = "s"\n',
                                  "[levels]\n"])
def test_an_empty_sheet_is_refused_and_nothing_is_written(tmp_path, invoke, text):
    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    before = store.sheets(sid, SLUG)
    f = tmp_path / "empty.toml"
    f.write_text(text)
    r = invoke("session", "score", sid, "--interviewer", "carl", "--file", str(f), "--db", str(tmp_path / "s.db"))
    assert r.code != 0 and r.out == ""
    assert len(r.err.strip().splitlines()) == 1
    assert "levels: the sheet scores no rubric leaf, so it is empty; score at least one under [levels]" in r.err
    assert str(f) in r.err
    assert store.sheets(sid, SLUG) == before


def test_a_sheet_can_be_deleted_and_the_deletion_is_recorded(tmp_path, invoke):
    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    db = str(tmp_path / "s.db")
    attempts = store.attempts(sid)
    bob = next(s for s in store.sheets(sid, SLUG) if s.interviewer == "bob")
    r = invoke("session", "unscore", sid, "--interviewer", "ada", "--db", db)
    assert r.code == 0, r.err and "deleted ada's sheet for sampler-replay" in r.out
    assert [s.interviewer for s in store.sheets(sid, SLUG)] == ["bob"]
    assert store.sheets(sid, SLUG)[0] == bob and store.attempts(sid) == attempts
    (gone,) = store.sheet_deletions(sid)
    assert (gone.interviewer, gone.slug) == ("ada", SLUG) and gone.sheet["levels"]["root-cause"] == 3
    assert "deleted: ada's sheet for sampler-replay at " in invoke("session", "show", sid, "--db", db).out
    shown = json.loads(invoke("session", "show", sid, "--db", db, "--json").out)
    assert [d["interviewer"] for d in shown["deleted_sheets"]] == ["ada"]

    r = invoke("session", "unscore", sid, "--interviewer", "ada", "--db", db)
    assert r.code != 0 and len(r.err.strip().splitlines()) == 1
    assert f"session {sid} has no sheet by 'ada' for sampler-replay; scored by: bob" in r.err
    assert len(store.sheet_deletions(sid)) == 1


# ---- the timeline: revision window and over-time passes -------------------------------------------
def test_attempts_in_the_revision_window_are_marked(tmp_path, invoke):
    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")  # a 30-minute rubric budget or more
    db = str(tmp_path / "s.db")
    add_attempt(store, sid, SLUG, FIXED + "# a\n", result(SLUG, {"completes": True}), None)
    add_attempt(store, sid, SLUG, FIXED + "# b\n", result(SLUG, {"completes": True}), None)
    for n, minute in ((1, 3), (2, 8), (3, 12), (4, 30)):
        set_started(store, sid, n, at(store, sid, minute))
    assert store.feedback_given_at(sid, SLUG) is None
    store.give_feedback(sid, SLUG, at=at(store, sid, 10))
    minutes = RUBRIC.feedback.revision_minutes
    ev = session_view(store, sid).exercises[0]
    assert ev.window == Window(at(store, sid, 10), minutes)
    assert [ev.marks[n][:1] for n in (1, 2, 3, 4)] == [[], [], ["revision window"], ["after the revision window"]]

    r = invoke("session", "show", sid, "--db", db)
    assert f"revision window: from 10:00 for {minutes} min" in r.out and "attempt #3: revision window" in r.out
    assert "attempt #2:" not in r.out
    assert json.loads(invoke("session", "show", sid, "--db", db, "--json").out)["exercises"][0]["marks"]["3"] == \
        ["revision window"]
    rep = data.gather(store, sid, with_pixels=False)
    md, html = render.render(rep, "md"), render.render(rep, "html")
    assert f"Revision window: feedback given at 10:00, for {minutes} min." in md
    assert "| 3 | 12:00 |" in md and md.split("| 3 | 12:00 |")[1].splitlines()[0].endswith("| revision window |")
    assert md.split("| 2 | 8:00 |")[1].splitlines()[0].endswith("| - |")
    assert '<td class="marks">revision window</td>' in html


def test_the_feedback_command_opens_the_window(tmp_path, invoke):
    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    r = invoke("session", "feedback", sid, "--db", str(tmp_path / "s.db"), "--json")
    assert r.code == 0, r.err
    out = json.loads(r.out)
    assert out["minutes"] == RUBRIC.feedback.revision_minutes and store.feedback_given_at(sid, SLUG) == out["given_at"]


def test_a_pass_after_the_time_budget_is_flagged(tmp_path, invoke):
    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    db = str(tmp_path / "s.db")
    budget = store.session(sid).minutes
    add_attempt(store, sid, SLUG, FIXED + "# late fail\n", result(SLUG, {"completes": False}), None)
    add_attempt(store, sid, SLUG, FIXED + "# late pass\n", result(SLUG, {"completes": True}), None)
    set_started(store, sid, 2, at(store, sid, budget - 1))  # a pass within the budget
    set_started(store, sid, 3, at(store, sid, budget + 1))  # a failure over time: not a pass
    set_started(store, sid, 4, at(store, sid, budget + 2.5))
    ev = session_view(store, sid).exercises[0]
    assert ev.marks[2] == [] and ev.marks[3] == [] and ev.marks[4] == ["passed over time (+2:30)"]
    r = invoke("session", "show", sid, "--db", db)
    assert "attempt #4: passed over time (+2:30)" in r.out and "attempt #2:" not in r.out
    rep = data.gather(store, sid, with_pixels=False)
    assert "| passed over time (+2:30) |" in render.render(rep, "md")
    assert '<td class="marks">passed over time (+2:30)</td>' in render.render(rep, "html")


def test_marks_combine_and_the_window_edges_count(tmp_path):
    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    s = store.session(sid)
    a = store.attempts(sid)[1]  # passed
    w = Window(at(store, sid, s.minutes), 10)
    late = replace(a, started_at=at(store, sid, s.minutes + 10))  # the window's last second
    assert marks(s, late, w) == ["revision window", "passed over time (+10:00)"]
    on_time = replace(a, started_at=at(store, sid, s.minutes))  # exactly at the budget
    assert marks(s, on_time, None) == []


# ---- --compare needs two sessions ----------------------------------------------------------------
def test_compare_needs_two_or_more_sessions(tmp_path, invoke):
    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    db = str(tmp_path / "s.db")
    for args in ([sid], [sid, sid]):
        r = invoke("report", "--compare", *args, "--db", db, "--out", str(tmp_path / "c.md"))
        assert r.code != 0 and len(r.err.strip().splitlines()) == 1, r.err
        assert "--compare needs two or more different sessions, got 1; give another session id" in r.err
        assert not (tmp_path / "c.md").exists()
    with pytest.raises(SessionError, match="needs two or more"):
        data.compare(store, [sid], SLUG)
