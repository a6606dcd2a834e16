"""``trainwreck hint``: inside a practice workspace, the exercise's next hint (they go from where to
look towards the mechanism); the count is kept in the workspace's state file. While an interview session is open for the
exercise, each hint is recorded in it too, or refused (``grader.sessions.reveals``)."""

from __future__ import annotations

import click

from grader import console
from grader.commands._practice import json_option, workspace_option
from grader.practice import console as show


@click.command("hint")
@click.option("--all", "listing", is_flag=True, help="List the hints seen so far, unfolding no new one.")
@workspace_option
@json_option
def command(listing, workspace, as_json):
    """The next hint of this workspace's exercise, one more each time (--all: those seen so far)."""
    from grader.practice.workspace import open_workspace
    from grader.sessions.reveals import hints

    ws = open_workspace(workspace)
    h = hints(ws, unfold=not listing)
    if as_json:
        console.emit_json({"exercise": ws.slug, "seen": len(h.shown), "total": h.total,
                           "hint": h.shown[-1] if h.new else None, "hints": h.shown})
        return
    show.hints(h, listing)
