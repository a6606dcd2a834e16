"""Practice workspaces: made with the interview workspace's contents (``grader.sessions.workspace``:
the brief, the scripts, the recorded logs and baseline, a DIAGNOSIS.md template; never the
manifest, its hints and thresholds, the solution or the grader-only compute bound), plus the
practice state file at the root. Hints, the solution's diff and reset work from here."""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from grader.files import read_quietly
from grader.practice import state as st
from grader.practice.state import BACKUPS, STATE, PracticeError, PracticeState


@dataclass
class Workspace:
    root: Path
    state: PracticeState

    @property
    def slug(self) -> str:
        return self.state.exercise

    @property
    def scenario(self) -> bool:
        return self.state.kind == "scenario"

    def exercise(self):
        """The exercise (or scenario) as the kit has it now."""
        from grader.exercises import find

        return find(self.slug)

    def require_script(self, doing: str) -> Any:
        """The script exercise, or one line saying a design scenario has nothing to ``doing``."""
        if self.scenario:
            raise PracticeError(f"{self.slug} is a design scenario: there is no script to {doing}; an interviewer "
                                "scores the written design against its rubric (BRIEF.md says what to hand in; "
                                "`trainwreck solution --reveal` shows the reference notes)")
        return self.exercise()


def open_workspace(start: Path | None = None) -> Workspace:
    """The practice workspace holding ``start`` (default: the current folder), or one line on how to
    make one. Registers it (again) in the registry, so a workspace moved by hand is found by `list`."""
    start = Path(start or Path.cwd())
    root = st.find_root(start)
    if root is None:
        raise st.not_in_workspace(start)
    state = st.load(root)
    try:
        st.register(root, state.exercise)
    except PracticeError:
        pass  # a registry that cannot be read is `list`'s to report; this workspace works without it
    return Workspace(root, state)


def start(slug: str, dest: Path | None = None) -> tuple[Workspace, Any, list[Path]]:
    """Make the practice workspace of ``slug`` at ``dest`` (default ``./<slug>``); returns it, the
    exercise and the files copied."""
    from grader.exercises import find
    from grader.sessions.workspace import fill

    ex = find(slug)
    dest = Path(dest or Path.cwd() / slug).resolve()
    if dest.exists() and not dest.is_dir():
        raise PracticeError(f"{dest} is a file; give a new folder with --dir")
    if dest.exists() and any(dest.iterdir()):
        if (dest / STATE).is_file():
            raise PracticeError(f"{dest} is already a practice workspace; cd into it and go on (`trainwreck watch`), "
                                "or give a new folder with --dir")
        raise PracticeError(f"{dest} already exists and is not empty; give a new folder with --dir")
    created = not dest.exists()
    try:
        dest.mkdir(parents=True, exist_ok=True)
        files = fill(dest, ex.dir, ex.manifest)
        state = PracticeState(exercise=ex.slug, kind=ex.kind, created_at=st.now())
        st.save(dest, state)
        st.register(dest, ex.slug)
    except BaseException:
        if created:
            shutil.rmtree(dest, ignore_errors=True)
        else:
            for p in dest.iterdir():
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
        raise
    return Workspace(dest, state), ex, files


def editable(ex: Any) -> list[str]:
    from grader.sessions.workspace import editable as names

    return names(ex.manifest)


# ---- hints: one more each time, the count kept in the state file ----
@dataclass(frozen=True)
class Hints:
    shown: list[str]  # every hint seen so far, in order
    total: int
    new: bool  # the last of ``shown`` was unfolded by this call


def hints(ws: Workspace, unfold: bool) -> Hints:
    if ws.scenario:
        raise PracticeError(f"{ws.slug} is a design scenario and has no hints; BRIEF.md and CONSTRAINTS.md hold "
                            "everything you are given")
    all_hints = list(ws.exercise().manifest.hints)
    new = False

    def step(s: PracticeState) -> None:
        nonlocal new
        s.hints_seen = min(s.hints_seen, len(all_hints))
        if unfold and s.hints_seen < len(all_hints):
            s.hints_seen += 1
            new = True

    state = st.update(ws.root, step) if unfold else ws.state
    ws.state = state
    return Hints(all_hints[:min(state.hints_seen, len(all_hints))], len(all_hints), new)


# ---- the solution: a diff from the candidate's files to the reference, once it has passed ----
@dataclass(frozen=True)
class Solution:
    diff: str  # unified, workspace/<file> -> solution/<file>; empty for a scenario
    notes: str  # solutions/<slug>/NOTES.md: the root cause, the fix, why it is the fix
    revealed: bool  # shown before the exercise passed here


def refusal(ws: Workspace) -> str | None:
    """Why the solution cannot be shown without --reveal, or None when it can."""
    if ws.state.passed:
        return None
    if ws.state.solution_revealed:
        return None  # revealed once already: showing it again reveals nothing new
    if ws.scenario:
        return (f"{ws.slug} is a design scenario: nothing grades it, so its reference notes are shown only with "
                "`trainwreck solution --reveal` (recorded as revealed)")
    tried = ws.state.graded_attempts
    return (f"{ws.slug} has not passed in this workspace yet ({tried} attempt{'s' if tried != 1 else ''}); grade it "
            "until it passes (`trainwreck grade` or `trainwreck watch`), or `trainwreck solution --reveal` to see "
            "it now (recorded as revealed)")


def solution(ws: Workspace) -> Solution:
    """The reference, recorded in the state file as shown (and as revealed when it had not passed).
    The caller has checked :func:`refusal` or had the reveal confirmed."""
    from grader.sessions.attempts import unified_diff
    from grader.sessions.workspace import snapshot

    ex = ws.exercise()
    notes_path = ex.solution_dir / "NOTES.md"
    notes = read_quietly(notes_path).decode("utf-8") if notes_path.is_file() else ""
    diff = ""
    if not ws.scenario:
        names = editable(ex)
        missing = [n for n in names if not (ex.solution_dir / n).is_file()]
        if missing:
            raise PracticeError(f"the kit has no reference {', '.join(missing)} for {ws.slug} in {ex.solution_dir}; "
                                "the kit is incomplete: reinstall it")
        diff = unified_diff(snapshot(ws.root, names), snapshot(ex.solution_dir, names), "workspace", "solution")

    def shown(s: PracticeState) -> None:
        s.solution_revealed = s.solution_revealed or not s.passed
        s.solution_shown_at = s.solution_shown_at or st.now()

    ws.state = st.update(ws.root, shown)
    return Solution(diff, notes, ws.state.solution_revealed)


# ---- reset: the broken original back, the candidate's files kept in a dated backup ----
@dataclass(frozen=True)
class Reset:
    restored: list[str]  # relative paths put back as shipped
    backup: Path | None  # where the replaced files were copied (None: nothing differed)


def changed_files(ws: Workspace) -> list[str]:
    """The candidate files (as `start` copied them) that differ from the shipped ones or are gone."""
    from grader.sessions.workspace import candidate_files

    ex = ws.exercise()
    out = []
    for rel in candidate_files(ex.dir, ex.manifest):
        mine = ws.root / rel
        if not mine.is_file() or mine.read_bytes() != (ex.dir / rel).read_bytes():
            out.append(str(rel))
    return out


def reset(ws: Workspace) -> Reset:
    ex = ws.exercise()
    changed = changed_files(ws)
    if not changed:
        return Reset([], None)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    backup = ws.root / BACKUPS / stamp
    n = 1
    while backup.exists():
        n += 1
        backup = ws.root / BACKUPS / f"{stamp}-{n}"
    for rel in changed:  # every copy is made before anything is overwritten
        mine = ws.root / rel
        if mine.is_file():
            (backup / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(mine, backup / rel)
    for rel in changed:
        (ws.root / rel).parent.mkdir(parents=True, exist_ok=True)
        if (ws.root / rel).is_dir():
            raise PracticeError(f"{ws.root / rel} is a folder where the exercise has a file; move it away and "
                                "reset again")
        shutil.copy2(ex.dir / rel, ws.root / rel)
    kept = backup if backup.exists() else None

    def note(s: PracticeState) -> None:
        s.resets.append({"at": st.now(), "backup": str(kept.relative_to(ws.root)) if kept else ""})

    ws.state = st.update(ws.root, note)
    return Reset(changed, kept)
