"""A remote candidate's submission, taken into its session: `trainwreck session import`.

``check`` decides, before anything is written, whether an archive (``grader.bundle.archive``)
is an attempt of this session: the session id is the one given, the session is open, the exercise
is one of its graded ones, the files are exactly its editable files (and DIAGNOSIS.md), and the
time lies within the session and after the exercise's last attempt (a candidate's clock may be
a few minutes off). ``record`` then puts the files in the session's workspace, as a candidate
working there would leave them, and grades the workspace through the very path a local
attempt takes (``grader.sessions.attempts.record_attempt``), with the submission's time as the
attempt's: the same sandbox, the same checks, the same verdict.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from grader.bundle.archive import DIAGNOSIS, Submitted, read, shown
from grader.sessions.errors import SessionError
from grader.sessions.models import Session, SessionExercise, parse_time
from grader.sessions.store import Store
from grader.sessions.workspace import Marker

CLOCK_SKEW = timedelta(minutes=5)  # how far the candidate's clock may be from the interviewer's


@dataclass(frozen=True)
class Intake:
    """A submission that will be recorded as attempt ``n`` of ``exercise`` in ``session``."""

    session: Session
    exercise: SessionExercise
    submission: Submitted
    editable: list[str]

    @property
    def at(self) -> str:
        """The attempt's time: the submission's, in UTC as the store keeps times."""
        return self.submission.at.astimezone(UTC).isoformat(timespec="seconds")


def _editable(slug: str) -> list[str]:
    from grader.exercises import find
    from grader.sessions.workspace import editable

    return editable(find(slug).manifest)


def check(store: Store, ref: str, path: Path, now: datetime | None = None) -> Intake:
    """Everything that can refuse the archive, before anything is written."""
    s = store.session(ref)
    sub = read(path)
    if sub.session != s.id:
        raise SessionError(f"{path} was submitted to session {sub.session!r}, not {s.id}; import it into its own "
                           "session, or send the candidate this session's bundle (`trainwreck bundle --session`)")
    if s.closed:
        raise SessionError(f"session {s.id} was closed at {s.closed_at}; an attempt can no longer be recorded in "
                           "it: import before `trainwreck session close`")
    slugs = [sx.slug for sx in store.exercises(s.id)]
    if sub.exercise not in slugs:
        raise SessionError(f"{path} is for exercise {sub.exercise!r}, which session {s.id} does not have "
                           f"(it has {', '.join(slugs)})")
    sx = store.exercise(s.id, sub.exercise)
    names = _editable(sx.slug)
    if not sx.graded or not names:
        raise SessionError(f"{sx.slug} is scored by the interviewer alone (no automatic grading); record "
                           f"scores with `trainwreck session score {s.id}`")
    extra = sorted(set(sub.files) - set(names) - {DIAGNOSIS})
    if extra:
        raise SessionError(f"{path} holds {', '.join(map(shown, extra))}, not an editable file of {sx.slug} (those are "
                           f"{', '.join(names)}); only the files the brief lets the candidate change are taken")
    missing = [n for n in names if n not in sub.files]
    if missing:
        raise SessionError(f"{path} lacks {', '.join(missing)}, an editable file of {sx.slug}; ask the candidate "
                           "to submit again with the file in place")
    _check_time(store, s, sx, sub, now or datetime.now(UTC))
    return Intake(s, sx, sub, names)


def _check_time(store: Store, s: Session, sx: SessionExercise, sub: Submitted, now: datetime) -> None:
    at = sub.at
    when = at.astimezone(UTC).isoformat(timespec="seconds")
    if at < parse_time(s.started_at) - CLOCK_SKEW:
        raise SessionError(f"{sub.path} was submitted at {when}, before session {s.id} started "
                           f"({s.started_at}); it is not an attempt of this session")
    if at > now + CLOCK_SKEW:
        raise SessionError(f"{sub.path} was submitted at {when}, later than now ({now.isoformat(timespec='seconds')}); "
                           "the candidate's clock is wrong: ask them to set it and submit again")
    for a in store.attempts(s.id, sx.slug):
        if a.started_at == when and a.files == _texts(sub, [*a.files]):
            raise SessionError(f"{sub.path} is already recorded as attempt {a.n} of {sx.slug}; nothing to import")
    last = store.attempts(s.id, sx.slug)[-1:] or None
    if last and parse_time(last[0].started_at) > at:
        raise SessionError(f"{sub.path} was submitted at {when}, before attempt {last[0].n} of {sx.slug} "
                           f"({last[0].started_at}); import a candidate's submissions in the order they were made")


def _texts(sub: Submitted, names: list[str]) -> dict[str, str]:
    # as grader.sessions.workspace.snapshot reads a workspace's files
    return {n: sub.files.get(n, b"").decode("utf-8", errors="replace") for n in names}


def install(intake: Intake) -> Path:
    """Put the submitted files in the session's workspace, each replaced whole (a temporary file
    beside it, then a rename): the workspace then holds what the candidate handed in."""
    ws = Path(intake.exercise.workspace)
    if not ws.is_dir():
        raise SessionError(f"{ws}, the workspace of {intake.exercise.slug}, is gone; the attempt is graded there: "
                           "restore the folder")
    for name, data in intake.submission.files.items():
        write_whole(ws / name, data)
    return ws


def write_whole(dest: Path, data: bytes) -> None:
    """``data`` at ``dest`` whole or not at all: a temporary file beside it, then a rename."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".import", dir=dest.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        # mkstemp's 0600 would keep the file from the sandbox's unprivileged user: 0644, the mode
        # the kit's files have in a workspace `session new` made
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def keep_archive(store: Store, intake: Intake) -> Path:
    """A copy of the archive as received (the bytes that were checked), beside the session's
    gradings: the candidate's own bytes."""
    sub = intake.submission
    # named by what it is, not by the name it travelled under (every mail attachment can be "submission.tar.gz")
    stamp = sub.at.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    dest = store.path.parent / "submissions" / intake.session.id / \
        f"{sub.exercise}-{stamp}-{hashlib.sha256(sub.raw).hexdigest()[:12]}.tar.gz"
    write_whole(dest, sub.raw)
    return dest


def record(store: Store, intake: Intake, **grading: Any) -> Any:
    """Install the files and grade them as an attempt at the submission's time; returns what
    ``grade`` returns. ``grading``: record_attempt's options (device, repeats, executor, progress)."""
    from grader.sessions.attempts import record_attempt

    ws = install(intake)
    keep_archive(store, intake)
    marker = Marker(intake.session.id, intake.exercise.slug, str(store.path), ws)
    return record_attempt(marker, at=intake.at, **grading)
