"""What is graded: the exercise's files as shipped, with only the editable files taken from the
candidate's workspace (or the reference solution, or left broken).

Protected files are never taken from the workspace; a workspace whose copy of one differs is
reported, because a candidate who edited one was working on a different problem.
"""

from __future__ import annotations

import filecmp
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from grader.errors import SubmissionError
from grader.exercises import Exercise
from grader.files import copy_quietly, read_quietly, regular_file

# Recorded artifacts of the exercise: not inputs of a run.
NOT_COPIED = {"logs", "baseline.json", "__pycache__"}


@dataclass
class Submission:
    kind: str  # workspace | solution | broken
    source: Path
    dir: Path  # the assembled copy that runs
    sha256: str  # of the editable files, in manifest order
    protected_changed: list[str] = field(default_factory=list)


def _files(root: Path) -> list[Path]:
    return sorted(p.relative_to(root) for p in root.rglob("*")
                  if p.is_file() and not (set(p.relative_to(root).parts) & NOT_COPIED))


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(p.name.encode() + b"\0" + read_quietly(p) + b"\0")
    return h.hexdigest()


def source_dir(ex: Exercise, kind: str, workspace: Path | None) -> Path:
    if kind == "broken":
        return ex.dir
    if kind == "solution":
        if not ex.solution_dir.is_dir():
            raise SubmissionError(f"{ex.slug} has no reference solution at {ex.solution_dir}")
        return ex.solution_dir
    if workspace is None or not Path(workspace).is_dir():
        raise SubmissionError(f"workspace {workspace} is not a directory; pass --workspace DIR holding "
                              f"your {', '.join(ex.manifest.editable)}")
    return Path(workspace)


MAX_EDITABLE_BYTES = 16 << 20  # an editable file is a script: compiled, hashed and copied whole


def check_source(ex: Exercise, kind: str, workspace: Path | None) -> Path:
    """The folder the editable files come from, once it is known to hold them as Python that
    compiles: checked before anything is created, so a rejected workspace leaves nothing behind."""
    src = source_dir(ex, kind, workspace).resolve()
    editable = ex.manifest.editable
    missing = [f for f in editable if not regular_file(src / f)]
    if missing:
        raise SubmissionError(f"{src} lacks {', '.join(missing)} as a file; the exercise's editable files must be there")
    big = [f for f in editable if (src / f).stat().st_size > MAX_EDITABLE_BYTES]
    if big:
        f = big[0]
        raise SubmissionError(f"{src / f} is {(src / f).stat().st_size / 2**20:.0f} MiB: too large for a script "
                              f"(at most {MAX_EDITABLE_BYTES >> 20} MiB); hand in the edited file itself")
    if kind == "workspace":  # what is graded is what the workspace holds, never a file elsewhere it points to
        escaping = [f for f in editable if not regular_file(src / f, within=src)]
        if escaping:
            f = escaping[0]
            raise SubmissionError(f"{src / f} is a symlink to {os.path.realpath(src / f)}, outside the workspace; "
                                  "put the file itself in the workspace and grade again")
    for f in editable:
        if not f.endswith(".py"):
            continue
        try:
            compile(read_quietly(src / f), str(src / f), "exec")
        except SyntaxError as e:
            raise SubmissionError(f"{src / f}, line {e.lineno}: {e.msg}; fix the syntax and grade again") from None
        except ValueError as e:  # source with a null byte
            raise SubmissionError(f"{src / f}: {e}; fix the file and grade again") from None
    return src


def assemble(ex: Exercise, kind: str, workspace: Path | None, dest: Path) -> Submission:
    src = check_source(ex, kind, workspace)
    editable = ex.manifest.editable
    dest.mkdir(parents=True, exist_ok=True)
    for rel in _files(ex.dir):
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        copy_quietly(ex.dir / rel, dest / rel)
    for f in editable:  # quietly: a read time on the reference or the manifest is a read from outside the kit
        copy_quietly(src / f, dest / f)
    changed = []
    if kind == "workspace":
        for rel in _files(ex.dir):
            if str(rel) in editable:
                continue
            theirs = src / rel
            # sizes first, then chunk by chunk: a protected file can be a 2 GiB sparse file
            if regular_file(theirs) and not filecmp.cmp(theirs, ex.dir / rel, shallow=False):
                changed.append(str(rel))
    return Submission(kind=kind, source=src, dir=dest, sha256=_digest([src / f for f in editable]),
                      protected_changed=changed)


def files_digest(root: Path, names: list[str]) -> str:
    return _digest([root / n for n in names])
