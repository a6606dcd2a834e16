"""``trainwreck solution``: inside a practice workspace, the unified diff from your editable files
to the reference fix, once the exercise has passed here; before that only with ``--reveal``,
confirmed, and recorded as revealed in the workspace's progress. While an interview session is
open for the exercise, the reveal is recorded in it too, or refused (``grader.sessions.reveals``)."""

from __future__ import annotations

import click

from grader import console
from grader.commands._practice import confirm, json_option, workspace_option
from grader.practice import console as show
from grader.practice.state import PracticeError


@click.command("solution")
@click.option("--reveal", is_flag=True, help="Show it before the exercise has passed (asks first; recorded).")
@click.option("--yes", is_flag=True, help="Confirm --reveal without asking (for scripts).")
@click.option("--notes", is_flag=True, help="Also print the reference's NOTES.md (root cause, fix, why).")
@workspace_option
@json_option
def command(reveal, yes, notes, workspace, as_json):
    """The diff from your files to the reference fix (after a passing grade, or with --reveal)."""
    from grader.practice.workspace import open_workspace, refusal
    from grader.sessions import reveals

    ws = open_workspace(workspace)
    with_notes = bool(notes or as_json or ws.scenario)  # --json carries the notes whatever the flag
    reveals.watch(ws.root, ws.slug).refuse("the reference")  # before asking the candidate to confirm
    why = refusal(ws)
    if why is not None:
        if not reveal:
            raise PracticeError(why)
        confirm(f"show the reference fix of {ws.slug} before it passes here (recorded as revealed)?", yes)
    sol = reveals.solution(ws, with_notes)
    if as_json:
        console.emit_json({"exercise": ws.slug, "diff": sol.diff, "notes": sol.notes, "revealed": sol.revealed,
                           "passed": ws.state.passed})
        return
    show.solution(sol, with_notes=notes or ws.scenario, scenario=ws.scenario)
