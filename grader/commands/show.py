"""``trainwreck show SLUG``: an exercise's facts and its brief (for a design scenario also its
constraints and the files the candidate is handed)."""

from __future__ import annotations

import click

from grader import console


@click.command("show")
@click.argument("slug")
def command(slug):
    """An exercise's facts and its brief."""
    from grader.exercises import find

    ex = find(slug)
    m = ex.manifest
    if ex.kind == "scenario":
        console.table(m.title, ["fact", "value"], [
            ["slug", m.slug], ["kind", "design scenario (scored by the interviewer)"], ["situation", m.summary],
            ["difficulty", m.difficulty], ["time budget", f"{m.minutes} min"], ["topics", ", ".join(m.topics)],
            ["deliverable", m.deliverable], ["files", ", ".join(m.files)],
        ])
        for name in ("BRIEF.md", "CONSTRAINTS.md"):
            if (ex.dir / name).exists():
                console.text((ex.dir / name).read_text())
        return
    console.table(m.title, ["fact", "value"], [
        ["slug", m.slug], ["symptom", m.symptom], ["difficulty", m.difficulty],
        ["time budget", f"{m.minutes} min"], ["topics", ", ".join(m.topics)],
        ["world size", m.world_size], ["backends", ", ".join(m.backends)],
        ["entry", m.entry], ["you may edit", ", ".join(m.editable)],
        ["checks", ", ".join(c.name for c in m.checks)],
    ])
    if ex.brief.exists():
        console.text(ex.brief.read_text())
