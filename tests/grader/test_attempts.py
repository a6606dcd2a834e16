"""The one attempt model and store (grader/attempts.py): a file of attempts alone (a practice
workspace's) and the session database's table, read and written by the same code."""

from __future__ import annotations

import sqlite3

import pytest

from grader import attempts
from grader.attempts import JSON_KEYS, Attempt, AttemptStoreError, open_file, throughput_score
from grader.sessions.store import Store


def finished(n: int = 0, **kw) -> Attempt:
    fields = {"n": n, "started_at": "2026-01-01T10:00:00+00:00", "finished_at": "2026-01-01T10:02:00+00:00",
              "status": "done", "submission_sha256": "ab" * 32, "slug": "memory-leak", "passed": False,
              "score": 0.5, "failed": ("memory_flat",), "throughput": 0.8}
    return Attempt(**{**fields, **kw})


def test_a_file_is_made_on_first_open_and_numbers_each_exercises_attempts(tmp_path):
    with open_file(tmp_path / "a.db") as s:
        one = s.record(finished())
        two = s.record(finished(passed=True, score=1.0, failed=(), throughput=None, environment_failure=True))
        other = s.record(finished(slug="lr-scaling"))
        assert (one.n, two.n, other.n) == (1, 2, 1)
        assert s.attempts(slug="memory-leak") == [one, two]
        assert (two.passed, two.failed, two.throughput, two.environment_failure) == (True, (), None, True)
        assert one == finished(n=1, id=one.id)  # every field reads back as written
    with sqlite3.connect(tmp_path / "a.db") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == attempts.FILE_VERSION


def test_recording_a_number_already_held_adds_nothing_and_keeps_the_first(tmp_path):
    with open_file(tmp_path / "a.db") as s:
        first = s.record(finished(), n=3)
        again = s.record(finished(score=0.9), n=3)
        assert again == first and [a.score for a in s.attempts()] == [0.5]


def test_an_absent_file_is_not_made_when_only_read(tmp_path):
    assert open_file(tmp_path / "a.db", create=False) is None and not (tmp_path / "a.db").exists()


def test_a_newer_file_and_a_file_that_is_not_sqlite_are_refused(tmp_path):
    newer = tmp_path / "newer.db"
    with sqlite3.connect(newer) as conn:
        conn.execute("PRAGMA user_version = 9")
    with pytest.raises(AttemptStoreError, match="version 9 was written by a newer trainwreck"):
        open_file(newer)
    junk = tmp_path / "junk.db"
    junk.write_text("not a database, " * 100)
    with pytest.raises(AttemptStoreError, match="not a readable attempt file"):
        open_file(junk)


def test_a_session_attempt_is_begun_then_finished_with_the_verdicts_parts_filled_from_its_result(tmp_path):
    from grader.sessions.lifecycle import new_session

    store = Store.open(tmp_path / "s.db")
    session, (ex,) = new_session(store, "Ada", ["memory-leak"], root=tmp_path / "ws")
    a = store.begin_attempt(session.id, ex.slug, "h1", {"train.py": "x\n"}, {"train.py": "y\n"},
                            lambda *args: "diff")
    assert (a.n, a.status, a.passed, a.failed, a.session_id) == (1, "running", None, (), session.id)
    result = {"passed": False, "score": 0.25, "failed_required": ["memory_flat"], "environment_failure": False,
              "throughput": {"normalized": 0.81234, "counted": True}, "checks": []}
    done = store.finish_attempt(a.id, "done", result=result, result_path="/r.json")
    assert (done.passed, done.score, done.failed, done.throughput) == (False, 0.25, ("memory_flat",), 0.8123)
    assert list(done.to_json()) == [k for k in JSON_KEYS if k not in ("files", "result", "series")] + ["checks"]
    assert list(done.to_json(full=True)) == list(JSON_KEYS)  # a session's JSON as before the model was shared


@pytest.mark.parametrize("tp, score", [(None, None), ({}, None), ({"normalized": None}, None),
                                       ({"normalized": 0.123456}, 0.1235),
                                       ({"normalized": 0.9, "counted": False}, None)])
def test_the_throughput_score_is_the_counted_normalised_figure(tp, score):
    assert throughput_score(tp) == score
