"""The practice state file and the registry of practice workspaces.

``.trainwreck-practice.json`` at a workspace's root is both the marker (a folder holding it, or any
folder below one, is a practice workspace) and the progress kept between sessions: hints seen,
when it first passed, whether the solution was shown or revealed, resets, the last view. It is
versioned (``format_version``), written atomically (write, fsync, rename) under a lock on the
workspace folder, so a `trainwreck hint` typed while `watch` records a grading loses neither.

The workspace's attempts are in the one attempt store (``grader.attempts``), in
``.trainwreck-attempts.db`` beside the state file, made when the first is recorded. A state file
of format 1 held them in its ``attempts`` list: the first load moves them into the store, under
the workspace's lock, checks that the store holds each of them as it was, then rewrites the state
file as format 2 (atomically); a process killed in between leaves format 1 and the next load does
it again (recording an attempt twice adds nothing). Where the move cannot be made (a read-only
workspace, an attempt file that does not read), the workspace goes on in format 1 as before.

The registry (``$TRAINWRECK_HOME/practice/workspaces.json``) only lists where workspaces are, so
``trainwreck list`` can find them; the progress stays in each workspace. A workspace deleted by
hand is dropped from the registry the next time it is read; a workspace moved by hand registers
itself again the next time a practice command runs inside it.

This module imports json, pathlib and sqlite3 (through ``grader.attempts``) only: ``trainwreck
run`` finds its workspace through it without loading pydantic or the grading modules."""

from __future__ import annotations

import fcntl
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from grader import attempts as store
from grader.attempts import Attempt, AttemptStoreError
from grader.errors import UserError
from harness.defaults import user_home
from harness.rundir import atomic_write_json

STATE = ".trainwreck-practice.json"
ATTEMPTS = store.FILE  # the workspace's attempts (grader.attempts), beside STATE
FORMAT_VERSION = 2  # 1: the attempts in the state file itself
REGISTRY_VERSION = 1
BACKUPS = ".trainwreck-backups"  # reset's copies of the candidate's files, inside the workspace


class PracticeError(UserError):
    """A practice workspace, state file or registry that cannot be used as given."""


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def not_in_workspace(start: Path) -> PracticeError:
    return PracticeError(f"not inside a practice workspace (no {STATE} in {start} or above); make one with "
                         "`trainwreck start SLUG` (`trainwreck list` shows the slugs) and run this inside it")


@dataclass
class PracticeState:
    exercise: str
    kind: str  # script | scenario
    created_at: str
    hints_seen: int = 0
    attempts: list[Attempt] = field(default_factory=list)
    passed_at: str | None = None  # the first grading that passed; it stays, whatever comes after
    solution_shown_at: str | None = None
    solution_revealed: bool = False  # shown with --reveal before the exercise had passed
    resets: list[dict[str, str]] = field(default_factory=list)  # {"at", "backup"}
    last_view: dict[str, Any] | None = None  # what the last grading showed (watch re-shows it when unchanged)
    format_version: int = FORMAT_VERSION  # 1: a state file that could not be moved to format 2 (its attempts in it)

    @property
    def passed(self) -> bool:
        return self.passed_at is not None

    @property
    def best_throughput(self) -> float | None:
        scores = [a.throughput for a in self.attempts if a.throughput is not None]
        return max(scores) if scores else None

    @property
    def graded_attempts(self) -> int:
        return sum(not a.environment_failure for a in self.attempts)

    def to_json(self) -> dict[str, Any]:
        d = {"format_version": self.format_version, "exercise": self.exercise, "kind": self.kind,
             "created_at": self.created_at, "hints_seen": self.hints_seen, "passed_at": self.passed_at,
             "solution_shown_at": self.solution_shown_at, "solution_revealed": self.solution_revealed,
             "resets": list(self.resets), "last_view": self.last_view}
        if self.format_version == 1:
            d["attempts"] = [_v1_attempt(a) for a in self.attempts]
        return d

    def progress(self) -> dict[str, Any]:
        """What `trainwreck list` shows of it."""
        return {"exercise": self.exercise, "kind": self.kind, "passed": self.passed, "passed_at": self.passed_at,
                "attempts": self.graded_attempts, "hints_used": self.hints_seen,
                "best_throughput": self.best_throughput,
                "solution": ("revealed" if self.solution_revealed else "shown") if self.solution_shown_at else None}


def _fix(path: Path) -> str:
    return (f"repair the JSON by hand, or move {path.name} away and make a fresh workspace with "
            "`trainwreck start SLUG --dir NEW_DIR` (your files stay where they are)")


def _state_from(data: Any, path: Path) -> PracticeState:
    def bad(why: str) -> PracticeError:
        return PracticeError(f"{path}: not a readable practice state file ({why}); {_fix(path)}")

    if not isinstance(data, dict):
        raise bad("not a JSON object")
    version = data.get("format_version")
    if isinstance(version, int) and version > FORMAT_VERSION:
        raise PracticeError(f"{path}: format_version {version} was written by a newer trainwreck (this one reads "
                            f"{FORMAT_VERSION}); upgrade trainwreck to go on with this workspace")
    if version not in (1, FORMAT_VERSION):
        raise bad(f"format_version {version!r}, expected {FORMAT_VERSION}")
    try:
        exercise, kind = data["exercise"], data.get("kind", "script")
        if not isinstance(exercise, str) or not exercise or kind not in ("script", "scenario"):
            raise bad("exercise or kind is not a valid value")
        hints = data.get("hints_seen", 0)
        if not isinstance(hints, int) or isinstance(hints, bool) or hints < 0:
            raise bad(f"hints_seen {hints!r} is not a count")
        attempts = [_from_v1(a, exercise) for a in data.get("attempts", [])] if version == 1 else []
        resets = [{"at": str(r["at"]), "backup": str(r["backup"])} for r in data.get("resets", [])]
        view = data.get("last_view")
        return PracticeState(exercise=exercise, kind=kind, created_at=str(data.get("created_at", "")),
                             hints_seen=hints, attempts=attempts, passed_at=data.get("passed_at"),
                             solution_shown_at=data.get("solution_shown_at"),
                             solution_revealed=bool(data.get("solution_revealed", False)), resets=resets,
                             last_view=view if isinstance(view, dict) else None, format_version=version)
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise bad(f"{type(e).__name__}: {e}") from None


def find_root(start: Path) -> Path | None:
    """The practice workspace holding ``start`` (it, or the nearest folder above it with a state
    file), or None."""
    here = Path(start).resolve()
    for d in (here, *here.parents):
        if (d / STATE).is_file():
            return d
    return None


def _read(root: Path) -> PracticeState:
    path = Path(root) / STATE
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise not_in_workspace(Path(root)) from None
    except OSError as e:
        raise PracticeError(f"{path}: cannot be read ({e.strerror}); check its permissions") from None
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise PracticeError(f"{path}: not a readable practice state file (not valid JSON: {e}); {_fix(path)}") from None
    return _state_from(data, path)


def load(root: Path) -> PracticeState:
    """The workspace's state with its attempts (a format-1 state file is moved to format 2 first,
    where it can be)."""
    state = _read(root)
    if state.format_version == 1:
        return _migrate(Path(root))
    state.attempts = _stored(Path(root))
    return state


def save(root: Path, state: PracticeState) -> None:
    """Write the state file (the attempts are recorded with ``add_attempt``, not here; a format-1
    state that could not be moved keeps them in the file, as before)."""
    atomic_write_json(Path(root) / STATE, state.to_json())


_held: set[tuple[str, int]] = set()  # (folder, thread) holding its lock: taken twice, a lock would wait on itself


@contextmanager
def locked(folder: Path) -> Iterator[None]:
    """An exclusive lock on ``folder`` (flock on the folder itself: no lock file to leave behind);
    released when the process ends, however it ends. Taken again inside itself, it is already held."""
    key = (os.path.realpath(folder), threading.get_ident())
    if key in _held:
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _held.add(key)
        yield
    finally:
        _held.discard(key)
        os.close(fd)  # closing the descriptor releases the lock


def update(root: Path, change: Callable[[PracticeState], Any]) -> PracticeState:
    """Read, change and write the state under the workspace's lock; returns the state written."""
    with locked(root):
        state = load(root)
        change(state)
        save(root, state)
    return state


def add_attempt(root: Path, state: PracticeState, attempt: Attempt) -> Attempt:
    """Record a finished grading as the workspace's next attempt (numbered by the store) and add it
    to ``state``; call it inside ``update``, which holds the lock."""
    if state.format_version == 1:  # a workspace that could not be moved to the store: as before
        recorded = replace(attempt, n=len(state.attempts) + 1)
    else:
        try:
            with _writable(Path(root)) as s:
                recorded = s.record(replace(attempt, slug=state.exercise, session_id=""))
        except sqlite3.Error as e:
            raise PracticeError(f"{Path(root) / ATTEMPTS}: the attempt could not be recorded ({e})") from None
    state.attempts.append(recorded)
    return recorded


# ---- the attempts: in the store (format 2), in the state file (format 1) ----
def _open(root: Path, create: bool = True) -> store.AttemptStore | None:
    try:
        return store.open_file(root / ATTEMPTS, create=create)
    except AttemptStoreError as e:
        raise PracticeError(f"{e}; move {ATTEMPTS} away to go on without the attempts it holds") from None


def _writable(root: Path) -> store.AttemptStore:
    s = _open(root)
    assert s is not None, "made when absent"
    return s


def _stored(root: Path) -> list[Attempt]:
    s = _open(root, create=False)
    if s is None:
        return []  # none recorded yet
    try:
        return s.attempts()
    except sqlite3.Error as e:
        raise PracticeError(f"{root / ATTEMPTS}: the attempts cannot be read ({e}); move it away to go on "
                            "without them") from None
    finally:
        s.close()


def _from_v1(a: dict[str, Any], exercise: str) -> Attempt:
    """An attempt as format 1 kept it (``at``: when it was recorded, its start unknown)."""
    tp = a.get("throughput")
    at = str(a["at"])
    return Attempt(n=int(a["n"]), started_at=at, finished_at=at, status="done", slug=exercise,
                   passed=bool(a["passed"]), score=float(a["score"]), submission_sha256=str(a.get("sha256", "")),
                   failed=tuple(str(x) for x in a.get("failed", [])), throughput=None if tp is None else float(tp),
                   environment_failure=bool(a.get("environment_failure", False)))


def _v1_attempt(a: Attempt) -> dict[str, Any]:
    return {"n": a.n, "at": a.finished_at or a.started_at, "passed": a.passed, "score": a.score,
            "sha256": a.submission_sha256, "failed": list(a.failed), "throughput": a.throughput,
            "environment_failure": a.environment_failure}


def _kept(a: Attempt) -> tuple[Any, ...]:
    """What format 1 held of an attempt: the store must give back each of these unchanged."""
    return (a.n, a.finished_at, a.passed, a.score, a.submission_sha256, a.failed, a.throughput,
            a.environment_failure)


def _migrate(root: Path) -> PracticeState:
    """Move a format-1 state file's attempts into the store, then rewrite it as format 2, under the
    lock; where that cannot be done, the format-1 state as it is."""
    with locked(root):
        state = _read(root)  # again, under the lock: another process may have moved it meanwhile
        if state.format_version != 1:
            state.attempts = _stored(root)
            return state
        try:
            if not state.attempts and not (root / ATTEMPTS).exists():
                moved = replace(state, format_version=FORMAT_VERSION)  # nothing to move: no attempt file yet
                save(root, moved)
                return moved
            with _writable(root) as s:
                for a in state.attempts:
                    s.record(a, n=a.n)  # one already there (a move cut short) is left as it was
                held = s.attempts()
            if sorted(map(_kept, held)) != sorted(map(_kept, state.attempts)):
                return state  # the store holds other attempts than the file: keep format 1, lose nothing
            moved = replace(state, attempts=held, format_version=FORMAT_VERSION)
            save(root, moved)
        except (OSError, sqlite3.Error, PracticeError):
            return state  # a read-only workspace, an attempt file that does not read: format 1, as before
        return moved


# ---- the registry: where practice workspaces are ----
def registry_path() -> Path:
    return user_home() / "practice" / "workspaces.json"


def _read_registry(path: Path) -> list[dict[str, str]]:
    if not path.exists():
        return []
    fix = "delete it: each workspace registers itself again the next time a practice command runs inside it"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise PracticeError(f"{path}: not a readable registry of practice workspaces ({e}); {fix}") from None
    if not isinstance(data, dict) or data.get("format_version") != REGISTRY_VERSION \
            or not isinstance(data.get("workspaces"), list) \
            or not all(isinstance(w, dict) and isinstance(w.get("path"), str) for w in data["workspaces"]):
        raise PracticeError(f"{path}: not a registry of practice workspaces (format_version "
                            f"{REGISTRY_VERSION} with a list of workspaces expected); {fix}")
    workspaces: list[dict[str, str]] = data["workspaces"]
    return workspaces


def _write_registry(path: Path, entries: list[dict[str, str]]) -> None:
    atomic_write_json(path, {"format_version": REGISTRY_VERSION, "workspaces": entries})


@contextmanager
def _registry_locked() -> Iterator[Path]:
    path = registry_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    with locked(path.parent):
        yield path


def register(root: Path, exercise: str) -> None:
    """Add the workspace to the registry (nothing changes when it is there already)."""
    where = str(Path(root).resolve())
    with _registry_locked() as path:
        entries = _read_registry(path)
        if any(e["path"] == where for e in entries):
            return
        _write_registry(path, [*entries, {"path": where, "exercise": exercise, "added_at": now()}])


def registered() -> tuple[list[dict[str, str]], list[str]]:
    """The registered workspaces that still exist, and the paths of those that no longer do (dropped
    from the registry now, so each is reported once)."""
    path = registry_path()
    if not path.exists():
        return [], []
    with _registry_locked() as path:
        entries = _read_registry(path)
        alive = [e for e in entries if (Path(e["path"]) / STATE).is_file()]
        gone = [e["path"] for e in entries if e not in alive]
        if gone:
            _write_registry(path, alive)
    return alive, gone
