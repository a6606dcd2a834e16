"""An interview closed to the answers (issue 26 item 2b): from a session workspace, `trainwreck
start SLUG --dir X && cd X && trainwreck solution --reveal --yes` printed the reference diff and
nothing was recorded. Now every hint and reference shown while a session is open for the exercise
is recorded in it (session show, its JSON and the debrief), or refused with one line where the
session was made with --answers refuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.practice import state as practice_state
from grader.sessions import lifecycle
from grader.sessions.errors import SessionError
from grader.sessions.store import Store
from tests.grader.commands.test_console_width import shown, terminal

SLUG = "memory-leak"


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch, private_kit):
    """The user's state, the default session database and the kit's answers in the test's own folder."""
    monkeypatch.setenv("TRAINWRECK_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TRAINWRECK_DB", raising=False)
    return tmp_path / "home"


def new_session(invoke, tmp_path, *extra: str, slug: str = SLUG) -> tuple[str, Path]:
    r = invoke("session", "new", "--candidate", "Ann", "--exercise", slug, "--dir", str(tmp_path / "S"),
               "--json", *extra)
    assert r.code == 0, r.err
    return json.loads(r.out)["session"], tmp_path / "S" / slug


def practice_inside(invoke, ws: Path) -> Path:
    r = invoke("start", SLUG, "--dir", str(ws / "X"))
    assert r.code == 0, r.err
    return ws / "X"


def reveals(home: Path, sid: str) -> list[tuple[str, str, str]]:
    with Store.open(home / "sessions.db") as store:
        return [(r.what, r.outcome, r.place) for r in store.reveals(sid)]


def test_the_issues_reproduction_is_recorded_and_shown_to_the_interviewer(invoke, tmp_path, home, monkeypatch):
    sid, ws = new_session(invoke, tmp_path)
    x = practice_inside(invoke, ws)
    r = invoke("solution", "--reveal", "--yes", cwd=x)
    assert r.code == 0 and "+++ solution/train.py" in r.out  # shown, as the default policy records
    assert invoke("hint", cwd=x).code == 0
    assert reveals(home, sid) == [("the reference diff", "shown", str(x)), ("hint 1 of 3", "shown", str(x))]

    term = terminal(monkeypatch, 80)
    assert invoke("session", "show", sid).code == 0
    lines = shown(term, 80)
    at = lines.index("answers asked for: 2 (2 shown); hints and reference recorded while open")
    assert lines[at + 1].split()[1:6] == ["memory-leak:", "the", "reference", "diff,", "shown"]
    assert lines[at + 2].split()[1:6] == ["memory-leak:", "hint", "1", "of", "3,"]
    view = json.loads(invoke("session", "show", sid, "--json").out)
    assert view["answers"] == "record" and [v["what"] for v in view["reveals"]] == ["the reference diff",
                                                                                      "hint 1 of 3"]

    out = tmp_path / "debrief.md"
    assert invoke("report", sid, "--format", "md", "--out", str(out)).code == 0
    md = out.read_text()
    assert "## Answers asked for, and submissions like another's" in md
    assert "memory-leak: the reference diff, shown" in md and "memory-leak: hint 1 of 3, shown" in md
    html = tmp_path / "debrief.html"
    assert invoke("report", sid, "--out", str(html)).code == 0
    page = html.read_text()
    assert "<h2>Answers asked for, and submissions like another's</h2>" in page
    assert f"<td>hint 1 of 3, shown</td><td>{x}</td>" in page


def test_a_session_made_to_refuse_answers_refuses_them_in_one_line_and_records_the_try(invoke, tmp_path, home):
    sid, ws = new_session(invoke, tmp_path, "--answers", "refuse")
    x = practice_inside(invoke, ws)
    for args in (["solution", "--reveal", "--yes"], ["solution", "--reveal", "--yes", "--json"], ["hint"],
                 ["hint", "--all"]):
        r = invoke(*args, cwd=x)
        assert r.code == 2 and r.out == "", (args, r.out)
        assert r.err.count("\n") == 1 and f"interview session {sid} is open for {SLUG}" in r.err
        assert "`trainwreck session close`" in r.err
    assert practice_state.load(x).hints_seen == 0 and not practice_state.load(x).solution_shown_at
    assert [(w, o) for w, o, _ in reveals(home, sid)] == [("the reference", "refused")] * 2 + [
        ("the next hint", "refused"), ("the hints seen so far", "refused")]

    assert invoke("session", "close", sid).code == 0  # closed: the answers are open again, unrecorded
    assert invoke("hint", cwd=x).code == 0
    assert len(reveals(home, sid)) == 4


def test_grading_the_reference_is_an_answer_too(invoke, tmp_path, home, monkeypatch):
    """`grade --solution` and `demo` grade the reference (its verdicts on the screen, its code in the
    grading's folder): refused before anything runs where the session refuses answers, else recorded."""
    import grader.grade

    closed, _ = new_session(invoke, tmp_path, "--answers", "refuse")
    graded: list[str] = []
    monkeypatch.setattr(grader.grade, "grade", lambda ex, opts, progress=None: graded.append(opts.kind) or 1 / 0)
    for args in (["grade", SLUG, "--solution"], ["demo", SLUG]):
        r = invoke(*args, cwd=tmp_path)
        assert r.code == 2 and r.err.count("\n") == 1 and f"interview session {closed} is open" in r.err, r.err
    assert graded == [] and not (tmp_path / ".trainwreck").exists()  # nothing ran, nothing was written
    assert [w for w, o, _ in reveals(home, closed)] == ["the reference graded (`trainwreck grade --solution`)",
                                                         "the reference graded (`trainwreck demo`)"]
    assert invoke("session", "close", closed).code == 0

    sid, _ = new_session(invoke, tmp_path / "b")
    invoke("grade", SLUG, "--solution", cwd=tmp_path)  # recorded, then graded (the fake stops it there)
    assert graded == ["solution"]
    assert reveals(home, sid) == [("the reference graded (`trainwreck grade --solution`)", "shown", str(tmp_path))]
    invoke("grade", SLUG, "--broken", cwd=tmp_path)  # the broken script is no answer
    assert len(reveals(home, sid)) == 1


def test_an_open_session_for_the_exercise_sees_a_reveal_from_anywhere_on_the_machine(invoke, tmp_path, home):
    sid, _ = new_session(invoke, tmp_path)
    other, _ = new_session(invoke, tmp_path / "b", slug="sampler-replay")
    r = invoke("start", SLUG, "--dir", str(tmp_path / "elsewhere"))
    assert r.code == 0, r.err
    assert invoke("hint", cwd=tmp_path / "elsewhere").code == 0
    assert reveals(home, sid) == [("hint 1 of 3", "shown", str(tmp_path / "elsewhere"))]
    assert reveals(home, other) == []  # a session for another exercise is not told


def test_practice_with_no_session_database_creates_none(invoke, tmp_path, home):
    assert invoke("start", SLUG, "--dir", str(tmp_path / "p")).code == 0
    assert invoke("hint", cwd=tmp_path / "p").code == 0
    assert invoke("solution", "--reveal", "--yes", cwd=tmp_path / "p").code == 0
    assert not (home / "sessions.db").exists()


def test_an_unreadable_session_database_keeps_the_answers_closed(invoke, tmp_path, home):
    assert invoke("start", SLUG, "--dir", str(tmp_path / "p")).code == 0
    home.mkdir(parents=True, exist_ok=True)
    (home / "sessions.db").write_bytes(b"not a database, " * 64)
    r = invoke("hint", cwd=tmp_path / "p")
    assert r.code == 2 and "cannot tell whether an interview session is open" in r.err
    assert r.err.count("\n") == 1 and practice_state.load(tmp_path / "p").hints_seen == 0


def test_session_new_says_what_happens_to_the_answers_and_refuses_an_unknown_policy(invoke, tmp_path, home):
    r = invoke("session", "new", "--candidate", "Ann", "--exercise", SLUG, "--dir", str(tmp_path / "S"))
    assert r.code == 0 and "hints and the reference: each reveal recorded while it is open (--answers refuse)" in r.out
    r = invoke("session", "new", "--candidate", "Ann", "--exercise", SLUG, "--dir", str(tmp_path / "T"),
               "--answers", "hide")
    assert r.code == 2 and "'hide' is not one of 'record', 'refuse'" in r.err and not (tmp_path / "T").exists()
    with Store.open(home / "sessions.db") as store, pytest.raises(SessionError, match="one of record, refuse"):
        lifecycle.new_session(store, "Ann", [SLUG], root=tmp_path / "U", answers="hide")
    assert not (tmp_path / "U").exists()
