"""``trainwreck start SLUG``: a practice workspace (the interview workspace's contents plus the
practice state file), and the exercise's brief."""

from __future__ import annotations

from pathlib import Path

import click

from grader import console
from grader.commands._practice import json_option
from grader.practice import console as show


@click.command("start")
@click.argument("slug")
@click.option("--dir", "dest", type=click.Path(path_type=Path), default=None,
              help="Where to make the workspace (default ./SLUG); it must not exist, or be empty.")
@json_option
def command(slug, dest, as_json):
    """Make a practice workspace for SLUG and print its brief.

    The workspace holds what a candidate gets in an interview (the brief, the broken script, the
    broken run's logs and baseline, a DIAGNOSIS.md to fill in), never the hints or the solution.
    Inside it, `trainwreck watch`, `grade`, `run`, `hint`, `solution` and `reset` need no slug.
    A design scenario can be started too: its brief and data, scored by an interviewer, not graded.
    """
    from grader.practice.workspace import start

    ws, ex, files = start(slug, dest)
    brief = ex.brief.read_text(encoding="utf-8") if ex.brief.is_file() else ""
    if as_json:
        console.emit_json({"workspace": str(ws.root), "exercise": ex.slug, "kind": ex.kind,
                           "title": ex.manifest.title, "files": sorted(str(f) for f in files),
                           "editable": [] if ws.scenario else list(ex.manifest.editable),
                           "state_file": str(ws.root / ".trainwreck-practice.json"), "brief": brief})
        return
    show.started(ws, ex, files, brief)
