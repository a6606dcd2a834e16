"""Score sheets (file and interactive), calibration between interviewers, the live view, and the
`session` commands end to end through click."""

import json

import pytest
from click.testing import CliRunner

from grader.commands.session import command as session_cmd
from grader.rubric import find_rubric
from grader.sessions.calibration import calibrate
from grader.sessions.errors import SessionError
from grader.sessions.live import session_view
from grader.sessions.scoresheet import interactive, sheet_from_data
from tests.grader.sessions.fakes import scored_session

RUBRIC = find_rubric("distributed-debugging")
QS = ["q one?", "q two?"]


@pytest.mark.parametrize("data, error", [
    ({"levels": {"fix": 5}}, "levels: fix: 5 is not a level; use one of 1, 2, 3, 4"),
    ({"levels": {"remedy": 3}}, "levels: remedy: 'remedy' is a parent"),
    ({"levels": {"nope": 3}}, "levels: nope: no dimension 'nope'"),
    ({"levels": [3]}, "levels: expected a table"),
    ({"score": {}}, "score: not a score-sheet key"),
    ({"notes": {"nope": "x"}}, "notes: nope: no such dimension"),
    ({"feedback": {"revision_outcome": "great"}}, "feedback.revision_outcome: 'great' is not an outcome"),
    ({"feedback": {"strenght": "x"}}, "feedback.strenght: not a feedback key"),
    ({"feedback": {"followups_asked": [3]}}, "followups_asked: 3 is not a follow-up number; use 1-2"),
])
def test_bad_sheets_name_the_field(data, error):
    with pytest.raises(SessionError) as e:
        sheet_from_data(data, RUBRIC, "s", "ex", "ada", QS, where="sheet.toml")
    assert str(e.value).startswith("sheet.toml: ") and error in str(e.value)


def test_sheet_from_data_cleans_text_and_resolves_followups():
    sh = sheet_from_data({"levels": {"fix": 3}, "notes": {"fix": "ok\x1b[31m", "remedy": "parent note"},
                          "feedback": {"strength": " calm\x07 ", "followups_asked": [2, "own?"]},
                          "recommendation": "Strong Yes", "recommendation_reason": " fixed it\x1b "},
                         RUBRIC, "s", "ex", "ada\x00", QS)
    assert sh.interviewer == "ada" and sh.levels["fix"].note == "ok[31m" and sh.feedback.strength == "calm"
    assert sh.level_map() == {"fix": 3} and sh.levels["remedy"].note == "parent note"
    assert sh.feedback.followups_asked == ["q two?", "own?"]
    assert (sh.recommendation.verdict, sh.recommendation.reason) == ("strong-yes", "fixed it")


def test_interactive_scoring_asks_every_leaf_and_the_feedback_round():
    answers = iter(["3", "note rc", "x", "2", "", "", "", "4", "", "", "", "1,2", "strong", "improve",
                    "meh", "improved", "rev notes", "overall", "maybe", "yes", "", "found the cause"])
    said = []
    sh = interactive(RUBRIC, "s", "ex", "ada", QS, ask=lambda text, default="": next(answers), say=said.append)
    assert sh.level_map() == {"root-cause": 3, "method": 2, "verification": 4}
    assert sh.levels["root-cause"].note == "note rc"
    assert (sh.feedback.strength, sh.feedback.improvement, sh.feedback.revision_outcome) == ("strong", "improve", "improved")
    assert sh.feedback.followups_asked == QS and sh.feedback.notes == "overall"
    assert any("'x' is not a level" in s for s in said) and any("'meh' is not an outcome" in s for s in said)
    assert any(RUBRIC.feedback.strength_prompt in s for s in said)
    assert (sh.recommendation.verdict, sh.recommendation.reason) == ("yes", "found the cause")
    assert any("'maybe' is not a recommendation" in s for s in said)
    assert any("needs a reason" in s for s in said)


def test_calibration_flags_dimensions_two_levels_apart(tmp_path):
    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    cal = calibrate(RUBRIC, store.sheets(sid, "sampler-replay"))
    by = {d.id: d for d in cal.dimensions}
    assert cal.interviewers == ["ada", "bob"]
    assert (by["method"].scores, by["method"].spread, by["method"].status) == ({"ada": 2.0, "bob": 4.0}, 2.0, "apart")
    assert by["root-cause"].status == "agree" and by["fix"].status == "adjacent"
    assert [d.id for d in cal.flagged] == ["method"]
    assert cal.summary() == {"leaves_compared": 5, "exact": 0.6, "within_one": 0.8, "flagged": ["method"]}


def test_live_view_shows_flips_and_evidence_keyed_followups(tmp_path):
    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    view = session_view(store, sid)
    ev = view.exercises[0]
    row = next(c for c in ev.checks if c.name == "sample_partition")
    assert row.verdicts == [False, True] and row.flips == [2]
    qs = [f.followup.question for f in ev.followups]
    assert any("disjoint shard" in q for q in qs)  # failed in attempt 1 (attempt = "any")
    assert view.clock()["budget_s"] == view.session.minutes * 60


def test_session_commands_through_click(tmp_path):
    runner = CliRunner()
    db = str(tmp_path / "s.db")
    r = runner.invoke(session_cmd, ["new", "--candidate", "Ada", "--exercise", "sampler-replay", "--minutes", "30",
                                    "--dir", str(tmp_path / "ws"), "--db", db, "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["workspaces"] == [str(tmp_path / "ws" / "sampler-replay")]
    sid = out["session"]
    sheet = tmp_path / "sheet.json"
    sheet.write_text(json.dumps({"levels": {"root-cause": 4}, "feedback": {"strength": "s", "revision_outcome": "partly",
                                                                         "followups_asked": [1]},
                                 "recommendation": "yes", "recommendation_reason": "r"}))
    r = runner.invoke(session_cmd, ["score", sid, "--interviewer", "ada", "--file", str(sheet), "--db", db, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["sheet"]["levels"] == {"root-cause": 4}
    r = runner.invoke(session_cmd, ["show", sid, "--db", db, "--json"])
    assert json.loads(r.output)["exercises"][0]["scored_by"] == ["ada"]
    r = runner.invoke(session_cmd, ["show", sid, "--db", db])
    assert "no attempt yet" in r.output and "follow-ups the evidence calls for" in r.output
    r = runner.invoke(session_cmd, ["close", sid, "--db", db, "--json"])
    assert json.loads(r.output)["closed_at"]
    r = runner.invoke(session_cmd, ["list", "--db", db, "--json"])
    assert [s["id"] for s in json.loads(r.output)["sessions"]] == [sid]
    r = runner.invoke(session_cmd, ["score", "nope", "--interviewer", "ada", "--file", str(sheet), "--db", db])
    assert isinstance(r.exception, SessionError) and "no session 'nope'" in str(r.exception)
