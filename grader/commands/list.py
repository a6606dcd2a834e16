"""``trainwreck list``: the exercises, from their manifests; a manifest that does not load is a
warning naming its file, and the others are still listed."""

from __future__ import annotations

import click

from grader import console


@click.command("list")
def command():
    """The exercises, from their manifests."""
    from grader.exercises import discover

    found, errors = discover()
    for e in errors:
        console.warn(e)
    if not found:
        console.text("no exercises found")
        return
    console.table(None, ["slug", "title", "difficulty", "min", "topics", "symptom"],
                  [[e.slug, e.manifest.title, e.manifest.difficulty, e.manifest.minutes,
                    ", ".join(e.manifest.topics), e.manifest.symptom] for e in found])
