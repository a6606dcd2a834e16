"""Versioned schema of the session store: ``PRAGMA user_version`` is the number of steps applied;
``MIGRATIONS`` is every step in order, never edited once released (add a step instead).

Each step runs in the same write transaction as the bump of ``user_version``, so a process killed
mid-migration leaves the database at the previous version, and two processes opening a fresh
database at once apply each step once (the second waits for the lock, then sees the new version).
"""

from __future__ import annotations

import sqlite3

from grader.sessions.errors import SessionError

V1 = """
CREATE TABLE sessions (
    id          TEXT PRIMARY KEY,
    candidate   TEXT NOT NULL,
    created_at  TEXT NOT NULL,
    started_at  TEXT NOT NULL,
    minutes     INTEGER NOT NULL,
    root        TEXT NOT NULL,
    closed_at   TEXT
);
CREATE TABLE session_exercises (
    session_id  TEXT NOT NULL REFERENCES sessions(id),
    slug        TEXT NOT NULL,
    position    INTEGER NOT NULL,
    workspace   TEXT NOT NULL,
    rubric_id   TEXT NOT NULL,
    graded      INTEGER NOT NULL,
    title       TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (session_id, slug)
);
CREATE TABLE attempts (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id         TEXT NOT NULL,
    slug               TEXT NOT NULL,
    n                  INTEGER NOT NULL,
    started_at         TEXT NOT NULL,
    finished_at        TEXT,
    status             TEXT NOT NULL CHECK (status IN ('running', 'done', 'error', 'interrupted')),
    submission_sha256  TEXT NOT NULL,
    files              TEXT NOT NULL,
    diff               TEXT NOT NULL,
    result_path        TEXT,
    result             TEXT,
    passed             INTEGER,
    score              REAL,
    error              TEXT,
    UNIQUE (session_id, slug, n),
    FOREIGN KEY (session_id, slug) REFERENCES session_exercises(session_id, slug)
);
CREATE TABLE scores (
    session_id   TEXT NOT NULL,
    slug         TEXT NOT NULL,
    interviewer  TEXT NOT NULL,
    dimension    TEXT NOT NULL,
    level        INTEGER NOT NULL,
    note         TEXT NOT NULL DEFAULT '',
    updated_at   TEXT NOT NULL,
    PRIMARY KEY (session_id, slug, interviewer, dimension),
    FOREIGN KEY (session_id, slug) REFERENCES session_exercises(session_id, slug)
);
"""

# 2: the feedback round per interviewer; who runs an attempt (to tell a killed grading from a
# running one); the per-step figures the report plots; the candidate's written diagnosis.
V2 = """
CREATE TABLE feedback (
    session_id        TEXT NOT NULL,
    slug              TEXT NOT NULL,
    interviewer       TEXT NOT NULL,
    strength          TEXT NOT NULL DEFAULT '',
    improvement       TEXT NOT NULL DEFAULT '',
    revision_outcome  TEXT,
    revision_notes    TEXT NOT NULL DEFAULT '',
    notes             TEXT NOT NULL DEFAULT '',
    followups_asked   TEXT NOT NULL DEFAULT '[]',
    updated_at        TEXT NOT NULL,
    PRIMARY KEY (session_id, slug, interviewer),
    FOREIGN KEY (session_id, slug) REFERENCES session_exercises(session_id, slug)
);
ALTER TABLE attempts ADD COLUMN pid INTEGER;
ALTER TABLE attempts ADD COLUMN host TEXT;
ALTER TABLE attempts ADD COLUMN series TEXT;
ALTER TABLE session_exercises ADD COLUMN diagnosis TEXT;
ALTER TABLE session_exercises ADD COLUMN diagnosis_at TEXT;
-- a version-1 grading still marked running has no pid to check: it can only have been cut short
UPDATE attempts SET status = 'interrupted', finished_at = started_at WHERE status = 'running';
CREATE INDEX attempts_by_exercise ON attempts (session_id, slug, n);
"""

# 3: quantitative questions asked in a session, each answer graded when given (grader.tools.quiz).
V3 = """
CREATE TABLE quiz_answers (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id   TEXT NOT NULL REFERENCES sessions(id),
    question_id  TEXT NOT NULL,
    answer       TEXT NOT NULL,
    correct      INTEGER NOT NULL,
    verdict      TEXT NOT NULL,
    answered_at  TEXT NOT NULL
);
CREATE INDEX quiz_answers_by_session ON quiz_answers (session_id, id);
"""

# 4: scorecards a hiring committee uses: each sheet's overall recommendation and its reason (NULL
# on sheets saved before: shown as "not given"); sheets deleted, kept as they were; when the
# feedback round was given, which opens the revision window.
V4 = """
ALTER TABLE feedback ADD COLUMN recommendation TEXT;
ALTER TABLE feedback ADD COLUMN recommendation_reason TEXT NOT NULL DEFAULT '';
CREATE TABLE sheet_deletions (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id   TEXT NOT NULL REFERENCES sessions(id),
    slug         TEXT NOT NULL,
    interviewer  TEXT NOT NULL,
    deleted_at   TEXT NOT NULL,
    sheet        TEXT NOT NULL
);
CREATE TABLE feedback_rounds (
    session_id  TEXT NOT NULL,
    slug        TEXT NOT NULL,
    given_at    TEXT NOT NULL,
    PRIMARY KEY (session_id, slug),
    FOREIGN KEY (session_id, slug) REFERENCES session_exercises(session_id, slug)
);
"""

# 5: an interview closed to the answers: what the session does when the kit's hints or reference
# are asked for while it is open ('record' each reveal, or 'refuse' it), and every such reveal.
V5 = """
ALTER TABLE sessions ADD COLUMN answers TEXT NOT NULL DEFAULT 'record';
CREATE TABLE reveals (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id  TEXT NOT NULL REFERENCES sessions(id),
    slug        TEXT NOT NULL,
    at          TEXT NOT NULL,
    what        TEXT NOT NULL,
    outcome     TEXT NOT NULL CHECK (outcome IN ('shown', 'refused')),
    place       TEXT NOT NULL
);
CREATE INDEX reveals_by_session ON reveals (session_id, id);
"""

# 6: one attempt model for interviews and practice (grader.attempts): the verdict's parts practice
# shows, filled from the result from now on (an attempt finished before has none: [], NULL, 0).
V6 = """
ALTER TABLE attempts ADD COLUMN failed TEXT NOT NULL DEFAULT '[]';
ALTER TABLE attempts ADD COLUMN throughput REAL;
ALTER TABLE attempts ADD COLUMN environment_failure INTEGER NOT NULL DEFAULT 0;
"""

MIGRATIONS: list[str] = [V1, V2, V3, V4, V5, V6]
LATEST = len(MIGRATIONS)


def version(conn: sqlite3.Connection) -> int:
    return conn.execute("PRAGMA user_version").fetchone()[0]


def _statements(script: str) -> list[str]:
    out, buf = [], ""
    for line in script.splitlines(keepends=True):
        if line.lstrip().startswith("--"):
            continue
        buf += line
        if sqlite3.complete_statement(buf):
            out.append(buf.strip())
            buf = ""
    return [s for s in out if s]


def migrate(conn: sqlite3.Connection, target: int = LATEST, where: str = "the session database") -> int:
    """Bring the database to ``target`` (default: the latest); returns the version it is at. The
    connection must be in autocommit mode (``isolation_level=None``)."""
    current = version(conn)
    if current > LATEST:
        raise SessionError(f"{where}: schema version {current} is newer than this trainwreck's {LATEST}; "
                           "upgrade trainwreck, or give another database with --db")
    while current < target:
        conn.execute("BEGIN IMMEDIATE")
        try:
            current = version(conn)  # another process may have migrated while we waited for the lock
            if current >= target:
                conn.execute("COMMIT")
                break
            for stmt in _statements(MIGRATIONS[current]):
                conn.execute(stmt)
            conn.execute(f"PRAGMA user_version = {current + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        current += 1
    return current
