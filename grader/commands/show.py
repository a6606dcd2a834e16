"""``trainwreck show SLUG``: an exercise's facts and its brief (for a design scenario also its
constraints and the files the candidate is handed), the brief word-wrapped at the terminal's width."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from grader import console

if TYPE_CHECKING:  # imported when the command runs: `trainwreck --help` stays quick
    from grader.exercises import Exercise
    from grader.scenario import Scenario


@click.command("show")
@click.argument("slug")
def command(slug):
    """An exercise's facts and its brief."""
    from grader.exercises import find

    ex = find(slug)
    if ex.kind == "scenario":
        _scenario(ex)
    else:
        _script(ex)


def _scenario(ex: Scenario) -> None:
    m = ex.manifest
    console.table(m.title, ["fact", "value"], [
        ["slug", m.slug], ["kind", "design scenario (scored by the interviewer)"], ["situation", m.summary],
        ["difficulty", m.difficulty], ["time budget", f"{m.minutes} min"], ["topics", ", ".join(m.topics)],
        ["deliverable", m.deliverable], ["files", ", ".join(m.files)],
    ])
    for name in ("BRIEF.md", "CONSTRAINTS.md"):
        if (ex.dir / name).exists():
            _brief((ex.dir / name).read_text())


def _script(ex: Exercise) -> None:
    m = ex.manifest
    console.table(m.title, ["fact", "value"], [
        ["slug", m.slug], ["symptom", m.symptom], ["difficulty", m.difficulty],
        ["time budget", f"{m.minutes} min"], ["topics", ", ".join(m.topics)],
        ["world size", m.world_size], ["backends", ", ".join(m.backends)],
        ["entry", m.entry], ["you may edit", ", ".join(m.editable)],
        ["checks", ", ".join(c.name for c in m.checks)],
    ])
    if ex.brief.exists():
        _brief(ex.brief.read_text())


def _brief(md: str) -> None:
    """A brief, its paragraphs word-wrapped at the terminal's width (commands in code blocks whole)."""
    for line in console.reflow_markdown(md, console.out.width):
        console.text(line)
