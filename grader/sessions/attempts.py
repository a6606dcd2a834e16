"""An attempt: `trainwreck grade` inside a session workspace grades it as usual and records, in
the session store, the time, the diff against the previous attempt, the submission hash and the
result (its JSON and where it lies).

The attempt row is committed *before* the grading starts (status ``running``) and completed after
it, each in its own transaction: a grading killed mid-way loses nothing recorded before it, leaves
one row that the next grading marks ``interrupted``, and the next grading works as usual.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grader.attempts import Attempt
from grader.sessions import series as series_mod
from grader.sessions.errors import SessionError
from grader.sessions.store import Store
from grader.sessions.workspace import Marker, editable, find_marker, read_diagnosis, snapshot
from harness.executor import Executor, Sandboxed

Progress = Callable[[str], None]


def unified_diff(before: dict[str, str], after: dict[str, str], a_label: str, b_label: str) -> str:
    out: list[str] = []
    for name in sorted(set(before) | set(after)):
        a, b = before.get(name, ""), after.get(name, "")
        if a == b:
            continue
        out.extend(difflib.unified_diff(a.splitlines(keepends=True), b.splitlines(keepends=True),
                                        f"{a_label}/{name}", f"{b_label}/{name}"))
    text = "".join(line if line.endswith("\n") else line + "\n" for line in out)
    return text


def find_workspace(start: Path | None) -> Marker | None:
    return find_marker(start)


def grades_dir(store: Store, sid: str, slug: str, n: int) -> Path:
    return store.path.parent / "grades" / sid / slug / f"attempt-{n}"


def begin(store: Store, marker: Marker, at: str | None = None) -> tuple[Any, Attempt]:
    """Check the session is open and the exercise is graded, then commit the attempt's row (its
    time ``at``, default now: an imported remote submission keeps the time it was made)."""
    from grader.exercises import find
    from grader.submission import files_digest

    session = store.session(marker.session)
    if session.closed:
        raise SessionError(f"session {session.id} was closed at {session.closed_at}; this grading would not be "
                           f"recorded: grade outside the session with `trainwreck grade {marker.exercise} "
                           "--workspace DIR` in a copy of this folder")
    sx = store.exercise(session.id, marker.exercise)
    ex = find(marker.exercise)
    names = editable(ex.manifest)
    if not sx.graded or not names:
        raise SessionError(f"{marker.exercise} is scored by the interviewer alone (no automatic grading); "
                           f"record scores with `trainwreck session score {session.id}`")
    missing = [n for n in names if not (marker.dir / n).is_file()]
    if missing:
        raise SessionError(f"{marker.dir} lacks {', '.join(missing)}; restore the file (a copy is in the "
                           "exercise's bundle) and grade again")
    store.reap(session.id)
    files = snapshot(marker.dir, names)
    shipped = snapshot(ex.dir, names)
    attempt = store.begin_attempt(session.id, marker.exercise, files_digest(marker.dir, names), files, shipped,
                                  unified_diff, at=at)
    store.set_diagnosis(session.id, marker.exercise, read_diagnosis(marker.dir))
    return ex, attempt


def record_attempt(marker: Marker, *, repeats: int | None = None, device: str = "auto",
                   out: Path | None = None, progress: Progress = lambda s: None,
                   executor: Executor = Sandboxed(),
                   at: str | None = None) -> Any:
    """Grade the workspace of ``marker`` and record the attempt (made at ``at``, default now);
    returns what ``grade`` returns."""
    from grader.grade import GradeOptions, grade

    with Store.open(Path(marker.db)) as store:
        ex, attempt = begin(store, marker, at)
        progress(f"session {attempt.session_id}: attempt {attempt.n} of {attempt.slug}")
        out_dir = (out or grades_dir(store, attempt.session_id, attempt.slug, attempt.n)).resolve()
        try:
            res = grade(ex, GradeOptions(kind="workspace", workspace=marker.dir, out_dir=out_dir,
                                         repeats=repeats, device=device, executor=executor), progress=progress)
        except BaseException as e:  # an expected error, Ctrl-C, a bug: the row says so, then it goes on up
            status = "interrupted" if isinstance(e, KeyboardInterrupt) else "error"
            store.finish_attempt(attempt.id, status, error=f"{type(e).__name__}: {e}"[:2000])
            raise
        path = out_dir / "result.json"
        result = json.loads(path.read_text(encoding="utf-8"))  # the JSON contract, whatever grade() returns
        store.finish_attempt(attempt.id, "done", result=result, result_path=str(path),
                             series=series_mod.extract(result))
        progress(f"recorded attempt {attempt.n} of {attempt.slug} in {store.path}")
        return res
