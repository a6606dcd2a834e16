"""The candidate's workspaces: one folder per exercise of a session, holding what the candidate
may see (the brief, the scripts, the recorded logs and baseline) and a DIAGNOSIS.md to write, and
never the manifest (hints, checks, thresholds), the solution, its notes, or the grader-only
compute-bound script. A small marker file ties the folder to its session, so that `trainwreck
grade` run inside it records an attempt."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.files import read_quietly
from grader.sessions.errors import SessionError

MARKER = ".trainwreck-session.json"
DIAGNOSIS = "DIAGNOSIS.md"
MANIFEST = "exercise.toml"
ALWAYS_LEFT_OUT = {MANIFEST, "__pycache__", ".pytest_cache"}


# ---- what an exercise shows the candidate, read defensively: scenario exercises (no script, no
# automatic grading) and manifest fields added later (rubric, kind) must not break sessions ----
def is_graded(manifest: Any) -> bool:
    """False for an exercise scored by the interviewer alone (``kind = "scenario"``, or no entry)."""
    return getattr(manifest, "kind", "exercise") != "scenario" and bool(getattr(manifest, "entry", None))


def editable(manifest: Any) -> list[str]:
    return list(getattr(manifest, "editable", None) or []) if is_graded(manifest) else []


def grader_only(manifest: Any) -> set[str]:
    """Files of the exercise folder that only the grader uses (the throughput compute bound: it is
    the fix's ceiling, written the way a fix would be)."""
    tp = getattr(manifest, "throughput", None)
    bound = getattr(tp, "bound", None) if tp else None
    return {bound} if bound else set()


def candidate_files(exercise_dir: Path, manifest: Any) -> list[Path]:
    """Paths (relative) of the exercise folder's files a candidate gets."""
    skip = ALWAYS_LEFT_OUT | grader_only(manifest)
    out = []
    for p in sorted(exercise_dir.rglob("*")):
        rel = p.relative_to(exercise_dir)
        if p.is_file() and not (set(rel.parts) & skip) and str(rel) not in skip and not p.name.endswith(".pyc"):
            out.append(rel)
    return out


def diagnosis_template(title: str, slug: str) -> str:
    return f"""# Diagnosis: {title}

<!-- Write for a teammate who was not here. A few short paragraphs are plenty. -->

## Symptom
What was observed, and where (logs, metrics, the baseline).

## How I narrowed it down
What you looked at and ran, in order, and what each result ruled in or out.

## Root cause
The mechanism, end to end: what happens on each rank, and why.

## The fix
What you changed and why it removes the cause rather than the symptom.

## How I know it is fixed
The measurement that shows the broken property is now right.

## Prevention
A test, a check or a monitor that would catch this next time.
"""


@dataclass(frozen=True)
class Marker:
    session: str
    exercise: str
    db: str  # absolute path of the session database
    dir: Path  # the workspace folder (where the marker is)

    def to_json(self) -> dict[str, Any]:
        return {"format": 1, "session": self.session, "exercise": self.exercise, "db": self.db}


def fill(dest: Path, exercise_dir: Path, manifest: Any) -> list[Path]:
    """Copy what the candidate gets into ``dest`` (which exists) and add the DIAGNOSIS.md template;
    returns the copied paths, relative. Interview and practice workspaces are filled by this alone."""
    slug = manifest.slug
    files = candidate_files(exercise_dir, manifest)
    for rel in files:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(exercise_dir / rel, dest / rel)
    if not (dest / DIAGNOSIS).exists():
        (dest / DIAGNOSIS).write_text(diagnosis_template(getattr(manifest, "title", slug), slug), encoding="utf-8")
    return files


def make_workspace(dest: Path, exercise_dir: Path, manifest: Any, session: str, db: Path) -> Path:
    slug = manifest.slug
    if dest.exists() and any(dest.iterdir()):
        raise SessionError(f"{dest} already exists and is not empty; give another folder with --dir")
    dest.mkdir(parents=True, exist_ok=True)
    fill(dest, exercise_dir, manifest)
    marker = Marker(session, slug, str(Path(db).resolve()), dest)
    (dest / MARKER).write_text(json.dumps(marker.to_json(), indent=2) + "\n", encoding="utf-8")
    return dest


def find_marker(start: Path | None) -> Marker | None:
    """The marker of the workspace holding ``start`` (it or a folder above it), or None."""
    if start is None:
        return None
    here = Path(start).resolve()
    for d in (here, *here.parents):
        m = d / MARKER
        if m.is_file():
            try:
                data = json.loads(m.read_text(encoding="utf-8"))
                return Marker(data["session"], data["exercise"], data["db"], d)
            except (ValueError, KeyError, TypeError) as e:
                raise SessionError(f"{m}: not a readable session marker ({e}); recreate the workspace with "
                                   "`trainwreck session new`") from None
    return None


def snapshot(ws: Path, names: list[str]) -> dict[str, str]:
    """The editable files' text as they are now (a missing one is recorded as missing)."""
    out = {}
    for n in names:
        p = ws / n
        out[n] = read_quietly(p).decode("utf-8", errors="replace") if p.is_file() else ""
    return out


def read_diagnosis(ws: Path) -> str | None:
    p = Path(ws) / DIAGNOSIS
    return p.read_text(encoding="utf-8", errors="replace") if p.is_file() else None
