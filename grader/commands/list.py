"""``trainwreck list``: the exercises (scripts to fix and design scenarios), from their manifests;
a manifest that does not load is a warning naming its file, and the others are still listed. Then
the progress of each practice workspace (``trainwreck start``), read from its state file and attempt store."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from grader import console


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def command(as_json):
    """The exercises (scripts to fix, and design scenarios), one line each (slug, kind, difficulty,
    minutes, status), how many of the scripts you have passed, and your practice progress: per
    workspace, passed, attempts, hints used, best throughput score. `trainwreck show SLUG` has an
    exercise's details."""
    print_list(as_json)


def print_list(as_json: bool) -> None:
    """What `trainwreck list` prints (also `watch`'s key l)."""
    from grader.exercises import discover

    found, errors = discover()
    for e in errors:
        console.warn(e)
    hints_total = {e.slug: len(e.manifest.hints) for e in found if e.kind == "script"}
    practice = _practice_rows(hints_total)
    if as_json:
        console.emit_json({"exercises": [{
            "slug": e.slug, "kind": e.kind, "title": e.manifest.title, "difficulty": e.manifest.difficulty,
            "minutes": e.manifest.minutes, "topics": list(e.manifest.topics), "symptom": e.manifest.symptom,
            "progress": _summary([r for r in practice if r["exercise"] == e.slug and not r.get("error")]),
        } for e in found], "errors": errors, "practice": practice})
        return
    if not found:
        console.text("no exercises found")
    else:
        from grader.practice import console as console_practice

        console_practice.exercise_lines(
            [{"slug": e.slug, "kind": e.kind, "difficulty": e.manifest.difficulty, "minutes": e.manifest.minutes,
              "progress": _summary([r for r in practice if r["exercise"] == e.slug and not r.get("error")])}
             for e in found])
    from grader.practice import console as console_practice

    console_practice.progress_table(practice)


def _practice_rows(hints_total: dict[str, int]) -> list[dict[str, Any]]:
    """One row per registered practice workspace; a registry or state file that cannot be read is a
    warning (the rest is still listed), a workspace deleted by hand is dropped with a note."""
    from grader.practice.state import PracticeError, load, registered

    try:
        alive, gone = registered()
    except PracticeError as e:
        console.warn(str(e))
        return []
    for gone_path in gone:
        console.info(f"practice workspace {gone_path} no longer exists; dropped from the list")
    rows: list[dict[str, Any]] = []
    for entry in alive:
        path = Path(entry["path"])
        try:
            s = load(path)
        except PracticeError as e:
            console.warn(str(e))
            rows.append({"workspace": str(path), "exercise": entry.get("exercise"), "error": str(e)})
            continue
        rows.append({"workspace": str(path), **s.progress(), "hints_total": hints_total.get(s.exercise)})
    return rows


def passed_count() -> tuple[int, int]:
    """How many of the script exercises have passed in some practice workspace, and how many there
    are (`list`'s count, and `watch`'s after each grading)."""
    from grader.exercises import discover

    found, _ = discover()
    scripts = {e.slug for e in found if e.kind == "script"}
    passed = {r["exercise"] for r in _practice_rows({}) if not r.get("error") and r["passed"]}
    return len(passed & scripts), len(scripts)


def _summary(rows: list[dict[str, Any]]) -> dict[str, Any] | None:
    """An exercise's progress over its practice workspaces (None: never started)."""
    if not rows:
        return None
    tps = [r["best_throughput"] for r in rows if r["best_throughput"] is not None]
    return {"workspaces": len(rows), "passed": any(r["passed"] for r in rows),
            "attempts": sum(r["attempts"] for r in rows), "hints_used": max(r["hints_used"] for r in rows),
            "best_throughput": max(tps) if tps else None}
