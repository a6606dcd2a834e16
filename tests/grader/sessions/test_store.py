"""The store: sessions by id or prefix, attempts numbered and diffed in one transaction, killed
gradings reaped, score sheets replaced whole."""

import subprocess
import sys

import pytest

from grader.sessions.errors import SessionError
from grader.sessions.store import default_db
from tests.grader.sessions.fakes import FIXED, SHIPPED, add_attempt, result, scored_session


def test_default_db_follows_trainwreck_home(monkeypatch, tmp_path):
    monkeypatch.setenv("TRAINWRECK_HOME", str(tmp_path))
    assert default_db() == tmp_path / "sessions.db"
    monkeypatch.delenv("TRAINWRECK_HOME")
    assert default_db().name == "sessions.db" and default_db().parent.name == ".trainwreck"


def test_attempts_are_numbered_and_diffed_against_the_previous(tmp_path):
    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    a1, a2 = store.attempts(sid)
    assert (a1.n, a2.n) == (1, 2)
    assert a1.diff == ""  # the first attempt was the file as shipped
    assert "+    sampler.set_epoch(epoch)" in a2.diff and "--- attempt 1/train.py" in a2.diff
    assert a2.checks() == {"completes": True, "sample_partition": True} and a2.passed is True
    a3 = add_attempt(store, sid, "sampler-replay", SHIPPED, result("sampler-replay", {"completes": False}), None)
    assert a3.n == 3 and "-    sampler.set_epoch(epoch)" in a3.diff


@pytest.mark.parametrize("ref, error", [
    ("zzzz", "no session 'zzzz'"),
    ("", "matches sessions"),
])
def test_session_lookup_errors(tmp_path, ref, error):
    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    scored_session(tmp_path / "s.db", tmp_path / "ws2", candidate="Bo")
    assert store.session(sid[:6]).id == sid
    with pytest.raises(SessionError, match=error):
        store.session(ref)


def test_a_killed_grading_is_reaped_as_interrupted(tmp_path):
    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    a = store.begin_attempt(sid, "sampler-replay", "h", {"train.py": FIXED}, {}, lambda *a: "")
    assert store.reap(sid) == []  # this process is alive
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    store.conn.execute("UPDATE attempts SET pid = ? WHERE id = ?", (int(dead.stdout), a.id))
    assert store.reap(sid) == [a.id]
    assert store.attempt(a.id).status == "interrupted"
    assert [x.status for x in store.attempts(sid)] == ["done", "done", "interrupted"]


def test_score_sheets_are_per_interviewer_and_replaced_whole(tmp_path):
    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    ada, bob = store.sheets(sid, "sampler-replay")
    assert (ada.interviewer, bob.interviewer) == ("ada", "bob")
    assert ada.feedback.revision_outcome == "improved" and len(ada.feedback.followups_asked) == 2
    from tests.grader.sessions.fakes import sheet
    store.save_sheet(sheet(sid, "sampler-replay", "ada", {"fix": 1}))
    ada = store.sheets(sid, "sampler-replay")[0]
    assert ada.level_map() == {"fix": 1} and ada.feedback.strength == ""


def test_close_stops_the_clock_and_keeps_the_diagnosis(tmp_path):
    from grader.sessions.lifecycle import close_session

    store, sid = scored_session(tmp_path / "s.db", tmp_path / "ws")
    (tmp_path / "ws" / "sampler-replay" / "DIAGNOSIS.md").write_text("final words")
    s = close_session(store, sid)
    assert s.closed and store.exercises(sid)[0].diagnosis == "final words"
    assert [x.id for x in store.sessions(open_only=True)] == []
