"""An interview closed to the answers: the kit's commands that show an answer (``hint``,
``solution`` and its notes) ask here first. While a session is open for that exercise on this
machine (in the session database the sessions use), or the command runs inside an open session's
workspace, the reveal is recorded in that session (what, when, where, shown or refused), and
refused where the interviewer made the session with ``--answers refuse``.

This closes the kit's own commands; a read of its solutions/ folder from outside the kit is timed
by the file system (``grader.sessions.tripwire``). What covers every route is the similarity flag
(``grader.sessions.similarity``), and on a machine the team provides the candidate runs as a user
who cannot read the kit's install (docs/design.md). A practice user with no session database is not slowed down: nothing is
opened, nothing is created.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from grader.sessions.errors import SessionError
from grader.sessions.models import Reveal, Session, now
from grader.sessions.store import Store, default_db
from grader.sessions.workspace import find_marker


@dataclass
class Watch:
    """The open sessions that see a reveal of ``slug`` made in ``place``."""

    slug: str
    place: Path
    sessions: list[tuple[Path, Session]] = field(default_factory=list)  # (database, session)

    def record(self, what: str, outcome: str = "shown") -> None:
        for db, s in self.sessions:
            with Store.open(db) as store:
                store.record_reveal(Reveal(s.id, self.slug, now(), what, outcome, str(self.place)))

    def refuse(self, what: str) -> None:
        """Raise the one-line refusal (recorded first) when any watching session refuses answers."""
        closed = [s for _, s in self.sessions if s.answers == "refuse"]
        if not closed:
            return
        self.record(what, "refused")
        ids = ", ".join(s.id for s in closed)
        raise SessionError(f"interview session {ids} is open for {self.slug} on this machine and keeps its "
                           f"answers closed: {what} is not shown until the interviewer closes it "
                           "(`trainwreck session close`)")


def _databases(place: Path) -> list[Path]:
    """The session databases to ask: the one of the session workspace holding ``place`` (its
    marker names it) and the one `trainwreck session` uses here (``$TRAINWRECK_DB`` or the
    default), where they exist; an absent one is not created."""
    out = []
    marker = find_marker(place)
    if marker is not None:
        out.append(Path(marker.db))
    env = os.environ.get("TRAINWRECK_DB")
    out.append(Path(env) if env else default_db())
    seen, found = set(), []
    for p in out:
        p = p.expanduser().resolve()
        if p not in seen and p.is_file():
            seen.add(p)
            found.append(p)
    return found


def watch(place: Path, slug: str) -> Watch:
    """The open sessions that see a reveal of ``slug`` from ``place``: those holding ``slug``,
    and the one whose workspace holds ``place`` (whatever exercise is revealed from inside it)."""
    place = Path(place).resolve()
    marker = find_marker(place)
    w = Watch(slug, place)
    for db in _databases(place):
        try:
            with Store.open(db) as store:
                found = {s.id: s for s in store.open_sessions_for(slug)}
                if marker is not None and Path(marker.db).resolve() == db:
                    mine = [s for s in store.sessions(open_only=True) if s.id == marker.session]
                    found.update({s.id: s for s in mine})
        except SessionError as e:  # fail closed: an unreadable database may hold an open session
            raise SessionError(f"cannot tell whether an interview session is open ({e})") from None
        w.sessions.extend((db, s) for s in found.values())
    return w


# ---- the practice commands' answers, asked for through here ----
def hints(ws, unfold: bool):
    """``grader.practice.workspace.hints`` for the workspace ``ws``, refused or recorded as above
    (``hint``, and watch's h key)."""
    from grader.practice.workspace import hints as unfold_hints

    w = watch(ws.root, ws.slug)
    w.refuse("the next hint" if unfold else "the hints seen so far")
    h = unfold_hints(ws, unfold)
    if h.new:
        w.record(f"hint {len(h.shown)} of {h.total}")
    elif h.shown:  # seen before, shown again: still an answer on the screen during the interview
        w.record(f"hints 1-{len(h.shown)} of {h.total} again" if not unfold else
                 f"no new hint (all {h.total} seen)")
    return h


def solution(ws, with_notes: bool):
    """``grader.practice.workspace.solution`` (the caller has checked its refusal), refused or
    recorded as above."""
    from grader.practice.workspace import solution as reference

    what = "the reference notes" if ws.scenario else (
        "the reference diff and notes" if with_notes else "the reference diff")
    w = watch(ws.root, ws.slug)
    w.refuse(what)
    sol = reference(ws)
    w.record(what)
    return sol


def reference_graded(place: Path, slug: str, command: str) -> None:
    """``grade --solution`` and ``demo`` grade the reference fix: its verdicts reach the screen and
    its code the grading's folder. While a session is open for ``slug`` (or from inside a session
    workspace) that is refused or recorded, as ``solution`` is."""
    w = watch(place, slug)
    what = f"the reference graded (`trainwreck {command}`)"
    w.refuse(what)
    w.record(what)
