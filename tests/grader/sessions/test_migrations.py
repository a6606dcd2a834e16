"""Schema migrations: from an empty database and from version 1, and refusing a newer one."""

import json
import sqlite3

import pytest

from grader.sessions import migrations
from grader.sessions.errors import SessionError
from grader.sessions.store import Store, connect


def tables(conn):
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_empty_database_migrates_to_latest(tmp_path):
    store = Store.open(tmp_path / "s.db")
    assert migrations.version(store.conn) == migrations.LATEST == 6
    assert {"sessions", "session_exercises", "attempts", "scores", "feedback"} <= tables(store.conn)
    assert store.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    Store.open(tmp_path / "s.db").close()  # opening again applies nothing
    assert migrations.version(store.conn) == 6


def test_version_1_database_keeps_its_rows(tmp_path):
    conn = connect(tmp_path / "s.db")
    assert migrations.migrate(conn, target=1) == 1
    assert "feedback" not in tables(conn)
    conn.execute("INSERT INTO sessions VALUES ('s1', 'Ada', 't0', 't0', 60, '/r', NULL)")
    conn.execute("INSERT INTO session_exercises VALUES ('s1', 'ex', 0, '/r/ex', 'distributed-debugging', 1, 'Ex')")
    conn.execute("INSERT INTO attempts (session_id, slug, n, started_at, status, submission_sha256, files, diff) "
                 "VALUES ('s1', 'ex', 1, 't1', 'done', 'h1', '{}', ''), ('s1', 'ex', 2, 't2', 'running', 'h2', '{}', '')")
    conn.execute("INSERT INTO scores VALUES ('s1', 'ex', 'ada', 'fix', 3, 'n', 't3')")
    conn.close()
    store = Store.open(tmp_path / "s.db")
    assert migrations.version(store.conn) == 6
    a1, a2 = store.attempts("s1")
    assert (a1.status, a1.pid, a1.series) == ("done", None, None)
    assert (a1.failed, a1.throughput, a1.environment_failure) == ((), None, False)  # version 6: none recorded
    assert a2.status == "interrupted"  # a version-1 grading left running cannot be alive any more
    assert store.sheets("s1", "ex")[0].level_map() == {"fix": 3}
    assert store.session("s1").answers == "record" and store.reveals("s1") == []  # version 5: reveals recorded
    old = store.sheets("s1", "ex")[0]  # saved before recommendations existed: "not given", no crash
    assert old.recommendation is None and old.recommendation_words == "not given"
    assert old.to_json()["recommendation"] is None
    assert store.exercises("s1")[0].diagnosis is None


def test_version_5_database_keeps_every_attempt_as_it_was(tmp_path):
    """The last schema before practice shared the attempt model: each column of an attempt reads back."""
    conn = connect(tmp_path / "s.db")
    assert migrations.migrate(conn, target=5) == 5
    conn.execute("INSERT INTO sessions (id, candidate, created_at, started_at, minutes, root) "
                 "VALUES ('s1', 'Ada', 't0', 't0', 60, '/r')")
    conn.execute("INSERT INTO session_exercises (session_id, slug, position, workspace, rubric_id, graded, title) "
                 "VALUES ('s1', 'ex', 0, '/r/ex', 'distributed-debugging', 1, 'Ex')")
    result = {"passed": True, "score": 0.9, "checks": [{"name": "completes", "passed": True}]}
    conn.execute("INSERT INTO attempts (session_id, slug, n, started_at, finished_at, status, submission_sha256, "
                 "files, diff, result_path, result, passed, score, error, pid, host, series) VALUES "
                 "('s1', 'ex', 1, 't1', 't2', 'done', 'h1', ?, '+x', '/g/result.json', ?, 1, 0.9, NULL, 42, 'box', ?)",
                 ('{"train.py": "x"}', json.dumps(result), '{"loss": [1.0]}'))
    before = dict(conn.execute("SELECT * FROM attempts").fetchone())
    conn.close()
    store = Store.open(tmp_path / "s.db")
    (a,) = store.attempts("s1")
    assert a.to_json(full=True) == {**before, "files": {"train.py": "x"}, "result": result, "passed": True,
                                    "series": {"loss": [1.0]}}
    assert (a.failed, a.throughput, a.environment_failure) == ((), None, False)


def test_newer_schema_is_refused(tmp_path):
    conn = sqlite3.connect(tmp_path / "s.db")
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(SessionError, match="schema version 99 is newer than this trainwreck's 6; upgrade"):
        Store.open(tmp_path / "s.db")


def test_a_failed_step_leaves_the_previous_version(tmp_path, monkeypatch):
    monkeypatch.setattr(migrations, "MIGRATIONS", [migrations.V1, "CREATE TABLE x (a);\nCREATE TABLE x (a);\n"])
    monkeypatch.setattr(migrations, "LATEST", 2)
    conn = connect(tmp_path / "s.db")
    with pytest.raises(sqlite3.OperationalError):
        migrations.migrate(conn)
    assert migrations.version(conn) == 1 and "x" not in tables(conn)


def test_not_a_database_is_one_line(tmp_path):
    (tmp_path / "s.db").write_text("hello, not sqlite" * 100)
    with pytest.raises(SessionError, match="not a session database"):
        Store.open(tmp_path / "s.db")


def test_version_3_sheet_loads_without_a_recommendation(tmp_path):
    conn = connect(tmp_path / "s.db")
    assert migrations.migrate(conn, target=3) == 3
    conn.execute("INSERT INTO sessions VALUES ('s1', 'Ada', 't0', 't0', 60, '/r', NULL)")
    conn.execute("INSERT INTO session_exercises (session_id, slug, position, workspace, rubric_id, graded, title) "
                 "VALUES ('s1', 'ex', 0, '/r/ex', 'distributed-debugging', 1, 'Ex')")
    conn.execute("INSERT INTO feedback (session_id, slug, interviewer, strength, updated_at) "
                 "VALUES ('s1', 'ex', 'ada', 'calm', 't3')")
    conn.close()
    store = Store.open(tmp_path / "s.db")
    (sh,) = store.sheets("s1", "ex")
    assert (sh.feedback.strength, sh.recommendation, sh.recommendation_words) == ("calm", None, "not given")
    assert store.sheet_deletions("s1") == [] and store.feedback_given_at("s1", "ex") is None
