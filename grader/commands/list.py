"""``trainwreck list``: the exercises (scripts to fix and design scenarios), from their manifests;
a manifest that does not load is a warning naming its file, and the others are still listed."""

from __future__ import annotations

import click

from grader import console


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def command(as_json):
    """The exercises (scripts to fix, and design scenarios), from their manifests."""
    from grader.exercises import discover

    found, errors = discover()
    for e in errors:
        console.warn(e)
    if as_json:
        console.emit_json({"exercises": [{
            "slug": e.slug, "kind": e.kind, "title": e.manifest.title, "difficulty": e.manifest.difficulty,
            "minutes": e.manifest.minutes, "topics": list(e.manifest.topics), "symptom": e.manifest.symptom,
        } for e in found], "errors": errors})
        return
    if not found:
        console.text("no exercises found")
        return
    console.table(None, ["slug", "kind", "title", "difficulty", "min", "topics", "symptom"],
                  [[e.slug, e.kind, e.manifest.title, e.manifest.difficulty, e.manifest.minutes,
                    ", ".join(e.manifest.topics), e.manifest.symptom] for e in found])
