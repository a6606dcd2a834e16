"""The one attempt model and the one attempt store, for practice and interviews alike.

An **attempt** is one grading of a candidate's editable files: its number (1, 2, ... per exercise),
when it started and finished, its status, the digest of the files graded (``submission_sha256``),
the verdict (passed, score, the required checks that failed, the normalised throughput score, an
environment failure) and, inside an interview, what the interviewer reads of it (the files, the
diff against the attempt before, the result and where it lies, the per-step series, the process
that ran it).

The store is one SQLite table, ``attempts``, read and written only here (``AttemptStore``). An
interview's attempts lie in the session database (``grader.sessions.store`` hands its connection
over; ``grader.sessions.migrations`` keeps that table's schema), a practice workspace's in
``.trainwreck-attempts.db`` at its root (``open_file``; schema ``FILE_SCHEMA`` below), with
``session_id`` empty. Why SQLite for both: an interview needs what a JSON file cannot give cheaply
(numbering and diffing two gradings started at once in one transaction, a row committed before
its grading starts so a killed grading leaves a trace), and practice loses nothing by it: each
write is one transaction, so a killed process leaves every committed attempt as it was, and the
practice state file keeps only what is not an attempt (hints, resets, the solution, the last view).

Light on purpose (stdlib only): ``trainwreck run`` finds its practice workspace through
``grader.practice.state``, which imports this module, without loading pydantic or the grading.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

FILE = ".trainwreck-attempts.db"  # a practice workspace's attempts, beside its state file
# what a session's JSON holds of an attempt, in its order (as before practice shared the model)
JSON_KEYS = ("id", "session_id", "slug", "n", "started_at", "status", "submission_sha256", "files", "diff",
             "finished_at", "result_path", "result", "passed", "score", "error", "pid", "host", "series")

# The table of a file that holds attempts alone (a practice workspace); the session database's
# table has the same columns (grader.sessions.migrations V1, V2 and V6) and keys them to its sessions.
FILE_SCHEMA = """
CREATE TABLE attempts (
    id                   INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id           TEXT NOT NULL DEFAULT '',
    slug                 TEXT NOT NULL,
    n                    INTEGER NOT NULL,
    started_at           TEXT NOT NULL,
    finished_at          TEXT,
    status               TEXT NOT NULL CHECK (status IN ('running', 'done', 'error', 'interrupted')),
    submission_sha256    TEXT NOT NULL,
    files                TEXT NOT NULL DEFAULT '{}',
    diff                 TEXT NOT NULL DEFAULT '',
    result_path          TEXT,
    result               TEXT,
    passed               INTEGER,
    score                REAL,
    error                TEXT,
    pid                  INTEGER,
    host                 TEXT,
    series               TEXT,
    failed               TEXT NOT NULL DEFAULT '[]',
    throughput           REAL,
    environment_failure  INTEGER NOT NULL DEFAULT 0,
    UNIQUE (session_id, slug, n)
)
"""
FILE_VERSION = 1  # PRAGMA user_version of a file made with FILE_SCHEMA


class AttemptStoreError(Exception):
    """An attempt file that cannot be used as given."""


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def dumps(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str)


@dataclass(frozen=True)
class Attempt:
    """One grading of an exercise's editable files. Times are ISO 8601 strings in UTC."""

    n: int  # 1, 2, ... per exercise (per workspace in practice)
    started_at: str
    status: str  # running | done | error | interrupted; practice records finished gradings only ("done")
    submission_sha256: str  # of the editable files as graded
    slug: str = ""
    session_id: str = ""  # "" outside an interview
    id: int = 0  # the row's id in its store
    finished_at: str | None = None
    passed: bool | None = None  # None: no result (running, an error, interrupted)
    score: float | None = None
    failed: tuple[str, ...] = ()  # the required checks that failed
    throughput: float | None = None  # the normalised throughput score, where counted (0 broken, 1 reference)
    environment_failure: bool = False  # the grading could not judge (a machine problem, not the code)
    files: dict[str, str] = field(default_factory=dict)  # the editable files as graded (interviews)
    diff: str = ""  # unified diff against the previous attempt's files (the exercise as shipped for the first)
    result_path: str | None = None
    result: dict[str, Any] | None = None  # result.json as written by the grading
    error: str | None = None
    pid: int | None = None
    host: str | None = None
    series: dict[str, Any] | None = None  # per-step figures for the report's plots (grader.sessions.series)

    def checks(self) -> dict[str, bool]:
        return {c["name"]: bool(c["passed"]) for c in (self.result or {}).get("checks", [])}

    def to_json(self, full: bool = False) -> dict[str, Any]:
        """What ``session show --json`` and the debrief's data hold of it."""
        whole = asdict(self)
        d = {k: whole[k] for k in JSON_KEYS}
        if not full:
            for k in ("files", "result", "series"):
                d.pop(k)
            d["checks"] = self.checks()
        return d


def throughput_score(tp: Mapping[str, Any] | None) -> float | None:
    """The normalised throughput score a result counts (rounded to 4 places), or None."""
    tp = tp or {}
    counted = tp.get("normalized") is not None and tp.get("counted", True)
    return round(float(tp["normalized"]), 4) if counted else None


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """One write transaction, taken with the write lock up front (no upgrade deadlocks). The
    connection must be in autocommit mode (``isolation_level=None``)."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _row(r: sqlite3.Row | None) -> Attempt:
    if r is None:
        raise LookupError("no such attempt")
    d = dict(r)
    d["files"] = json.loads(d["files"]) if d.get("files") else {}
    for k in ("result", "series"):
        d[k] = json.loads(d[k]) if d.get(k) else None
    d["passed"] = None if d["passed"] is None else bool(d["passed"])
    d["failed"] = tuple(json.loads(d["failed"])) if d.get("failed") else ()
    d["environment_failure"] = bool(d.get("environment_failure"))
    return Attempt(**d)


Diff = Callable[[dict[str, str], dict[str, str], str, str], str]


class AttemptStore:
    """The attempts table of one SQLite connection (autocommit mode, ``sqlite3.Row`` rows)."""

    def __init__(self, conn: sqlite3.Connection):
        self.conn = conn

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> AttemptStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def begin(self, sid: str, slug: str, sha256: str, files: dict[str, str], shipped: dict[str, str],
              diff_fn: Diff, at: str | None = None) -> Attempt:
        """Commit a ``running`` attempt: numbered and diffed against the previous one inside one
        transaction, so two gradings started at once get distinct numbers and each diffs against
        the one before it. ``at``: when it was made (default now)."""
        with transaction(self.conn) as c:
            prev = c.execute("SELECT n, files FROM attempts WHERE session_id = ? AND slug = ? ORDER BY n DESC LIMIT 1",
                             (sid, slug)).fetchone()
            n = (prev["n"] + 1) if prev else 1
            before = json.loads(prev["files"]) if prev else shipped
            diff = diff_fn(before, files, f"attempt {n - 1}" if prev else "as shipped", f"attempt {n}")
            cur = c.execute("INSERT INTO attempts (session_id, slug, n, started_at, status, submission_sha256, files, "
                            "diff, pid, host) VALUES (?, ?, ?, ?, 'running', ?, ?, ?, ?, ?)",
                            (sid, slug, n, at or now(), sha256, dumps(files), diff, os.getpid(), socket.gethostname()))
            aid = cur.lastrowid
        assert aid is not None, "sqlite sets lastrowid after an INSERT"
        return self.get(aid)

    def finish(self, aid: int, status: str, result: dict[str, Any] | None = None, result_path: str | None = None,
               series: dict[str, Any] | None = None, error: str | None = None) -> Attempt:
        """Complete a running attempt with its result (or the error that ended it)."""
        r = result or {}
        with transaction(self.conn) as c:
            c.execute("UPDATE attempts SET status = ?, finished_at = ?, result = ?, result_path = ?, passed = ?, "
                      "score = ?, series = ?, error = ?, failed = ?, throughput = ?, environment_failure = ? "
                      "WHERE id = ?",
                      (status, now(), dumps(result) if result is not None else None, result_path,
                       None if result is None else int(bool(r.get("passed"))),
                       None if result is None else r.get("score"),
                       dumps(series) if series is not None else None, error,
                       json.dumps([str(x) for x in r.get("failed_required") or []]),
                       throughput_score(r.get("throughput")), int(bool(r.get("environment_failure"))), aid))
        return self.get(aid)

    def record(self, a: Attempt, n: int | None = None) -> Attempt:
        """Add a finished attempt, numbered after the exercise's last one (or ``n`` as given: a
        number already recorded is left as it was, so recording the same list twice adds nothing)."""
        with transaction(self.conn) as c:
            if n is None:
                last = c.execute("SELECT MAX(n) FROM attempts WHERE session_id = ? AND slug = ?",
                                 (a.session_id, a.slug)).fetchone()[0]
                n = (last or 0) + 1
            c.execute(
                "INSERT OR IGNORE INTO attempts (session_id, slug, n, started_at, finished_at, status, "
                "submission_sha256, files, diff, result_path, result, passed, score, error, pid, host, series, "
                "failed, throughput, environment_failure) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (a.session_id, a.slug, n, a.started_at, a.finished_at, a.status, a.submission_sha256,
                 dumps(a.files), a.diff, a.result_path, dumps(a.result) if a.result is not None else None,
                 None if a.passed is None else int(a.passed), a.score, a.error, a.pid, a.host,
                 dumps(a.series) if a.series is not None else None, json.dumps(list(a.failed)), a.throughput,
                 int(a.environment_failure)))
            row = c.execute("SELECT * FROM attempts WHERE session_id = ? AND slug = ? AND n = ?",
                            (a.session_id, a.slug, n)).fetchone()
        return _row(row)

    def reap(self, alive: Callable[[int | None], bool], sid: str | None = None) -> list[int]:
        """Mark as interrupted the attempts still ``running`` whose process (on this host) is gone:
        a grading killed mid-way (SIGKILL, a closed terminal) leaves exactly such a row."""
        host = socket.gethostname()
        q = "SELECT id, pid, host FROM attempts WHERE status = 'running'" + (" AND session_id = ?" if sid else "")
        dead = [r["id"] for r in self.conn.execute(q, (sid,) if sid else ())
                if r["host"] == host and not alive(r["pid"])]
        if dead:
            with transaction(self.conn) as c:
                for aid in dead:
                    c.execute("UPDATE attempts SET status = 'interrupted', finished_at = ?, "
                              "error = 'the grading process ended before it recorded a result' "
                              "WHERE id = ? AND status = 'running'", (now(), aid))
        return dead

    def get(self, aid: int) -> Attempt:
        return _row(self.conn.execute("SELECT * FROM attempts WHERE id = ?", (aid,)).fetchone())

    def attempts(self, sid: str = "", slug: str | None = None) -> list[Attempt]:
        """The attempts of one session (``""``: the file's own), by exercise then number."""
        q = "SELECT * FROM attempts WHERE session_id = ?" + (" AND slug = ?" if slug else "") + " ORDER BY slug, n"
        return [_row(r) for r in self.conn.execute(q, (sid, slug) if slug else (sid,))]

    def latest_done(self, slug: str, other_than: str) -> list[Attempt]:
        """Each other session's latest graded attempt of ``slug``."""
        rows = self.conn.execute(
            "SELECT a.* FROM attempts a WHERE a.slug = ? AND a.session_id != ? AND a.status = 'done' AND a.n = "
            "(SELECT MAX(b.n) FROM attempts b WHERE b.session_id = a.session_id AND b.slug = a.slug "
            "AND b.status = 'done') ORDER BY a.session_id", (slug, other_than)).fetchall()
        return [_row(r) for r in rows]


def open_file(path: Path, create: bool = True) -> AttemptStore | None:
    """The attempt store of one file (a practice workspace's), made with ``FILE_SCHEMA`` when
    ``create`` and absent; None when absent and not ``create``."""
    path = Path(path)
    if not create and not path.exists():
        return None
    try:
        conn = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version > FILE_VERSION:
            conn.close()
            raise AttemptStoreError(f"{path}: attempt file version {version} was written by a newer trainwreck "
                                    f"(this one reads {FILE_VERSION}); upgrade trainwreck")
        if version < FILE_VERSION:
            with transaction(conn) as c:
                if c.execute("PRAGMA user_version").fetchone()[0] == 0:  # not made meanwhile by another process
                    c.execute(FILE_SCHEMA)
                    c.execute(f"PRAGMA user_version = {FILE_VERSION}")
    except sqlite3.DatabaseError as e:
        raise AttemptStoreError(f"{path}: not a readable attempt file ({e})") from None
    return AttemptStore(conn)
