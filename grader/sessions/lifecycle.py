"""Opening a session (workspaces made, clock started) and closing it (clock stopped, the
candidate's written diagnosis captured into the store)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from grader.sessions import tripwire
from grader.sessions.errors import SessionError
from grader.sessions.models import ANSWER_POLICIES, Session, SessionExercise
from grader.sessions.store import Store
from grader.sessions.workspace import is_graded, make_workspace, read_diagnosis

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def clean_name(name: str) -> str:
    name = _CONTROL.sub("", name).strip()
    if not name:
        raise SessionError("--candidate is empty; give the candidate's name")
    return name


def new_session(store: Store, candidate: str, slugs: list[str], minutes: int | None = None,
                root: Path | None = None, answers: str = "record") -> tuple[Session, list[SessionExercise]]:
    """Create the session's workspaces under ``root`` (default ``./session-<id>``: one folder per
    exercise) and record the session; the clock starts now. ``answers``: what the kit's hint and
    solution commands do while it is open (``grader.sessions.reveals``)."""
    from grader.exercises import find
    from grader.rubric import for_exercise

    candidate = clean_name(candidate)
    if answers not in ANSWER_POLICIES:
        raise SessionError(f"--answers {answers!r} is not a policy; use one of {', '.join(ANSWER_POLICIES)}")
    if not slugs:
        raise SessionError("no exercise given; name one or more with --exercise SLUG (see `trainwreck list`)")
    if len(set(slugs)) != len(slugs):
        raise SessionError(f"--exercise names {', '.join(sorted({s for s in slugs if slugs.count(s) > 1}))} twice; give each once")
    exs = [find(s) for s in slugs]
    for ex in exs:  # a rubric that does not load is an error now, not at scoring time
        for_exercise(ex.manifest, ex.dir / "exercise.toml")
    total = minutes if minutes is not None else sum(int(getattr(ex.manifest, "minutes", 0) or 0) for ex in exs)
    if total <= 0:
        raise SessionError("--minutes must be positive; give the interview's time budget")
    sid = store.new_id()
    root = Path(root or Path.cwd() / f"session-{sid}").resolve()
    if root.exists() and any(root.iterdir()):
        raise SessionError(f"{root} already exists and is not empty; give another folder with --dir")
    made: list[Path] = []
    try:
        for ex in exs:
            made.append(make_workspace(root / ex.slug, ex.dir, ex.manifest, sid, store.path))
        store.create_session(sid, candidate, total, root, [
            (ex.slug, root / ex.slug, _rubric_id(ex), is_graded(ex.manifest), getattr(ex.manifest, "title", ex.slug))
            for ex in exs], answers=answers)
    except BaseException:
        for d in made:
            shutil.rmtree(d, ignore_errors=True)
        raise
    tripwire.arm(sid)  # from now on a read of solutions/ from outside the kit is seen
    return store.session(sid), store.exercises(sid)


def _rubric_id(ex) -> str:
    from grader.rubric import rubric_id_for

    return rubric_id_for(ex.manifest)


def close_session(store: Store, ref: str) -> Session:
    session = store.session(ref)
    store.reap(session.id)
    tripwire.sweep()  # reads up to now, timed by the file system, before the clock stops
    for sx in store.exercises(session.id):
        text = read_diagnosis(Path(sx.workspace))
        if text is not None:
            store.set_diagnosis(session.id, sx.slug, text)
    return store.close_session(session.id)
