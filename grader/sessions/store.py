"""The session store: one SQLite file (stdlib ``sqlite3``, no server).

Every write is one ``BEGIN IMMEDIATE`` transaction, in WAL mode with a busy timeout, so two
terminals grading at once queue for the write lock instead of failing or corrupting anything, and
a process killed at any point leaves every committed row as it was (WAL with ``synchronous=NORMAL``
loses nothing on a process crash; only a power cut can take back the last commits).

The default database is ``$TRAINWRECK_HOME/sessions.db``, else ``~/.trainwreck/sessions.db``.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psutil

from grader.attempts import AttemptStore, transaction
from grader.sessions import migrations
from grader.sessions.errors import SessionError
from grader.sessions.models import (
    Attempt,
    DimensionScore,
    FeedbackRound,
    Recommendation,
    Reveal,
    ScoreSheet,
    Session,
    SessionExercise,
    SheetDeletion,
    dumps,
    now,
)

BUSY_TIMEOUT_MS = 30_000  # a grading holds the write lock for milliseconds; a queue of them, seconds


def default_db() -> Path:
    from harness.defaults import user_home

    return user_home() / "sessions.db"


def connect(path: Path) -> sqlite3.Connection:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None,
                               check_same_thread=False)
    except (OSError, sqlite3.Error) as e:
        raise SessionError(f"{path}: cannot open the session database ({e}); give a writable path with --db") from None
    conn.row_factory = sqlite3.Row
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    try:
        conn.execute("PRAGMA journal_mode = WAL")
    except sqlite3.DatabaseError as e:
        raise SessionError(f"{path}: not a session database ({e}); give another path with --db") from None
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    return conn


class Store:
    def __init__(self, path: Path, conn: sqlite3.Connection):
        self.path = Path(path)
        self.conn = conn

    @classmethod
    def open(cls, path: Path | None = None, migrate: bool = True) -> Store:
        path = Path(path or default_db()).expanduser().resolve()
        conn = connect(path)
        if migrate:
            migrations.migrate(conn, where=str(path))
        return cls(path, conn)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One write transaction, taken with the write lock up front (no upgrade deadlocks)."""
        with transaction(self.conn) as c:
            yield c

    # ---- sessions ----------------------------------------------------------------------------
    @staticmethod
    def new_id() -> str:
        return secrets.token_hex(4)

    def create_session(self, sid: str, candidate: str, minutes: int, root: Path,
                       exercises: list[tuple[str, Path, str, bool, str]], answers: str = "record") -> Session:
        """``exercises``: (slug, workspace, rubric id, graded, title) in order."""
        t = now()
        with self.write() as c:
            c.execute("INSERT INTO sessions (id, candidate, created_at, started_at, minutes, root, answers) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?)", (sid, candidate, t, t, minutes, str(root), answers))
            for i, (slug, ws, rubric_id, graded, title) in enumerate(exercises):
                c.execute("INSERT INTO session_exercises (session_id, slug, position, workspace, rubric_id, "
                          "graded, title) VALUES (?, ?, ?, ?, ?, ?, ?)",
                          (sid, slug, i, str(ws), rubric_id, int(graded), title))
        return self.session(sid)

    def session(self, ref: str) -> Session:
        """A session by id or by a unique prefix of it."""
        rows = self.conn.execute("SELECT * FROM sessions WHERE id = ? OR id LIKE ? ORDER BY id",
                                 (ref, ref.replace("%", "").replace("_", "") + "%")).fetchall()
        exact = [r for r in rows if r["id"] == ref]
        rows = exact or rows
        if not rows:
            raise SessionError(f"no session {ref!r} in {self.path}; see `trainwreck session list`")
        if len(rows) > 1:
            raise SessionError(f"{ref!r} matches sessions {', '.join(r['id'] for r in rows)}; give more of the id")
        return Session(**dict(rows[0]))

    def sessions(self, open_only: bool = False) -> list[Session]:
        q = "SELECT * FROM sessions" + (" WHERE closed_at IS NULL" if open_only else "") + " ORDER BY created_at, id"
        return [Session(**dict(r)) for r in self.conn.execute(q)]

    def close_session(self, sid: str) -> Session:
        with self.write() as c:
            c.execute("UPDATE sessions SET closed_at = ? WHERE id = ? AND closed_at IS NULL", (now(), sid))
        return self.session(sid)

    def exercises(self, sid: str) -> list[SessionExercise]:
        rows = self.conn.execute("SELECT * FROM session_exercises WHERE session_id = ? ORDER BY position", (sid,))
        return [SessionExercise(**{**dict(r), "graded": bool(r["graded"])}) for r in rows]

    def exercise(self, sid: str, slug: str | None) -> SessionExercise:
        exs = self.exercises(sid)
        if slug is None:
            if len(exs) == 1:
                return exs[0]
            raise SessionError(f"session {sid} has exercises {', '.join(e.slug for e in exs)}; "
                               "name one with --exercise")
        for e in exs:
            if e.slug == slug:
                return e
        raise SessionError(f"session {sid} has no exercise {slug!r}; it has {', '.join(e.slug for e in exs)}")

    def set_diagnosis(self, sid: str, slug: str, text: str | None) -> None:
        with self.write() as c:
            c.execute("UPDATE session_exercises SET diagnosis = ?, diagnosis_at = ? WHERE session_id = ? AND slug = ?",
                      (text, now(), sid, slug))

    # ---- attempts (grader.attempts: the one attempt store, here on the session database) --------
    @property
    def _attempts(self) -> AttemptStore:
        return AttemptStore(self.conn)

    def begin_attempt(self, sid: str, slug: str, sha256: str, files: dict[str, str], shipped: dict[str, str],
                      diff_fn, at: str | None = None) -> Attempt:
        """Number the attempt and diff it against the previous one inside one transaction, so two
        gradings started at once get distinct numbers and each diffs against the one before it.
        ``at``: when the attempt was made (default now; an imported submission's own time)."""
        return self._attempts.begin(sid, slug, sha256, files, shipped, diff_fn, at)

    def finish_attempt(self, aid: int, status: str, result: dict[str, Any] | None = None,
                       result_path: str | None = None, series: dict[str, Any] | None = None,
                       error: str | None = None) -> Attempt:
        return self._attempts.finish(aid, status, result, result_path, series, error)

    def reap(self, sid: str | None = None) -> list[int]:
        """Mark as interrupted the gradings still 'running' whose process (on this host) is gone:
        a grading killed mid-way (SIGKILL, a closed terminal) leaves exactly such a row."""
        return self._attempts.reap(_alive, sid)

    def attempt(self, aid: int) -> Attempt:
        try:
            return self._attempts.get(aid)
        except LookupError:
            raise SessionError("no such attempt") from None

    def attempts(self, sid: str, slug: str | None = None) -> list[Attempt]:
        return self._attempts.attempts(sid, slug)

    # ---- scores and the feedback round -------------------------------------------------------
    # ---- quantitative questions ----------------------------------------------------------------
    def record_quiz_answer(self, sid: str, question_id: str, answer: str, verdict: dict[str, Any]) -> None:
        """One answer and its verdict (``grader.tools.quiz.Verdict.to_json()``); every answer is kept, a
        question answered twice shows both."""
        with self.write() as c:
            c.execute("INSERT INTO quiz_answers (session_id, question_id, answer, correct, verdict, answered_at) "
                      "VALUES (?, ?, ?, ?, ?, ?)", (sid, question_id, answer, int(bool(verdict.get("correct"))),
                                                    dumps(verdict), now()))

    def quiz_answers(self, sid: str) -> list[dict[str, Any]]:
        rows = self.conn.execute("SELECT question_id, answer, correct, verdict, answered_at FROM quiz_answers "
                                 "WHERE session_id = ? ORDER BY id", (sid,)).fetchall()
        return [{"question": r["question_id"], "answer": r["answer"], "correct": bool(r["correct"]),
                 "verdict": json.loads(r["verdict"]), "answered_at": r["answered_at"]} for r in rows]

    def save_sheet(self, sheet: ScoreSheet, at: str | None = None) -> None:
        """Replace one interviewer's scores and feedback for one exercise, as one transaction."""
        t = at or now()
        fb = sheet.feedback
        rec = sheet.recommendation
        with self.write() as c:
            c.execute("DELETE FROM scores WHERE session_id = ? AND slug = ? AND interviewer = ?",
                      (sheet.session_id, sheet.slug, sheet.interviewer))
            for s in sheet.levels.values():
                c.execute("INSERT INTO scores (session_id, slug, interviewer, dimension, level, note, updated_at) "
                          "VALUES (?, ?, ?, ?, ?, ?, ?)",
                          (sheet.session_id, sheet.slug, sheet.interviewer, s.dimension, s.level, s.note, t))
            c.execute("INSERT OR REPLACE INTO feedback (session_id, slug, interviewer, strength, improvement, "
                      "revision_outcome, revision_notes, notes, followups_asked, updated_at, recommendation, "
                      "recommendation_reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                      (sheet.session_id, sheet.slug, sheet.interviewer, fb.strength, fb.improvement,
                       fb.revision_outcome, fb.revision_notes, fb.notes, json.dumps(fb.followups_asked), t,
                       rec.verdict if rec else None, rec.reason if rec else ""))

    def sheets(self, sid: str, slug: str) -> list[ScoreSheet]:
        """Every interviewer's sheet for one exercise, by interviewer name."""
        levels: dict[str, dict[str, DimensionScore]] = {}
        updated: dict[str, str] = {}
        for r in self.conn.execute("SELECT * FROM scores WHERE session_id = ? AND slug = ? ORDER BY interviewer",
                                   (sid, slug)):
            levels.setdefault(r["interviewer"], {})[r["dimension"]] = DimensionScore(r["dimension"], r["level"], r["note"])
            updated[r["interviewer"]] = r["updated_at"]
        feedback: dict[str, FeedbackRound] = {}
        recs: dict[str, Recommendation] = {}
        for r in self.conn.execute("SELECT * FROM feedback WHERE session_id = ? AND slug = ?", (sid, slug)):
            if r["recommendation"]:
                recs[r["interviewer"]] = Recommendation(r["recommendation"], r["recommendation_reason"])
            feedback[r["interviewer"]] = FeedbackRound(
                strength=r["strength"], improvement=r["improvement"], revision_outcome=r["revision_outcome"],
                revision_notes=r["revision_notes"], notes=r["notes"], followups_asked=json.loads(r["followups_asked"]))
            updated[r["interviewer"]] = max(updated.get(r["interviewer"], ""), r["updated_at"])
        return [ScoreSheet(sid, slug, who, levels.get(who, {}), feedback.get(who, FeedbackRound()), updated[who],
                           recs.get(who))
                for who in sorted(set(levels) | set(feedback))]

    def delete_sheet(self, sid: str, slug: str, interviewer: str, at: str | None = None) -> SheetDeletion:
        """Take one interviewer's sheet for one exercise out, keeping what it held in
        ``sheet_deletions``; other sheets, attempts and the session stay as they were."""
        sheet = next((sh for sh in self.sheets(sid, slug) if sh.interviewer == interviewer), None)
        if sheet is None:
            who = ", ".join(sh.interviewer for sh in self.sheets(sid, slug)) or "nobody"
            raise SessionError(f"session {sid} has no sheet by {interviewer!r} for {slug}; scored by: {who}")
        gone = SheetDeletion(sid, slug, interviewer, at or now(), sheet.to_json())
        with self.write() as c:
            for table in ("scores", "feedback"):
                c.execute(f"DELETE FROM {table} WHERE session_id = ? AND slug = ? AND interviewer = ?",
                          (sid, slug, interviewer))
            c.execute("INSERT INTO sheet_deletions (session_id, slug, interviewer, deleted_at, sheet) "
                      "VALUES (?, ?, ?, ?, ?)", (sid, slug, interviewer, gone.deleted_at, dumps(gone.sheet)))
        return gone

    def sheet_deletions(self, sid: str) -> list[SheetDeletion]:
        rows = self.conn.execute("SELECT * FROM sheet_deletions WHERE session_id = ? ORDER BY id", (sid,))
        return [SheetDeletion(r["session_id"], r["slug"], r["interviewer"], r["deleted_at"], json.loads(r["sheet"]))
                for r in rows]

    # ---- answers asked for while the session was open (grader.sessions.reveals) ---------------
    def open_sessions_for(self, slug: str) -> list[Session]:
        """The open sessions that hold exercise ``slug``."""
        rows = self.conn.execute("SELECT s.* FROM sessions s JOIN session_exercises x ON x.session_id = s.id "
                                 "WHERE s.closed_at IS NULL AND x.slug = ? ORDER BY s.created_at, s.id", (slug,))
        return [Session(**dict(r)) for r in rows]

    def record_reveal(self, r: Reveal) -> None:
        with self.write() as c:
            c.execute("INSERT INTO reveals (session_id, slug, at, what, outcome, place) VALUES (?, ?, ?, ?, ?, ?)",
                      (r.session_id, r.slug, r.at, r.what, r.outcome, r.place))

    def reveals(self, sid: str) -> list[Reveal]:
        rows = self.conn.execute("SELECT session_id, slug, at, what, outcome, place FROM reveals "
                                 "WHERE session_id = ? ORDER BY id", (sid,))
        return [Reveal(**dict(r)) for r in rows]

    def latest_done(self, slug: str, other_than: str) -> list[tuple[Session, Attempt]]:
        """Each other session's latest graded attempt of ``slug`` (what similarity compares with)."""
        return [(self.session(a.session_id), a) for a in self._attempts.latest_done(slug, other_than)]

    # ---- the feedback round's revision window --------------------------------------------------
    def give_feedback(self, sid: str, slug: str, at: str | None = None) -> str:
        """Record that the feedback round was given now (it opens the revision window); giving it
        again moves the window's start. Returns the time recorded."""
        t = at or now()
        with self.write() as c:
            c.execute("INSERT OR REPLACE INTO feedback_rounds (session_id, slug, given_at) VALUES (?, ?, ?)",
                      (sid, slug, t))
        return t

    def feedback_given_at(self, sid: str, slug: str) -> str | None:
        r = self.conn.execute("SELECT given_at FROM feedback_rounds WHERE session_id = ? AND slug = ?",
                              (sid, slug)).fetchone()
        return r["given_at"] if r else None


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        p = psutil.Process(pid)
        return p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False

