"""``trainwreck reset``: inside a practice workspace, the exercise's files back as shipped (the
broken original), after a confirmation; the files it replaces are copied first into
``.trainwreck-backups/<date-time>/`` inside the workspace. DIAGNOSIS.md and progress are kept."""

from __future__ import annotations

import click

from grader import console
from grader.commands._practice import confirm, json_option, workspace_option
from grader.practice import console as show


@click.command("reset")
@click.option("--yes", is_flag=True, help="Reset without asking (for scripts).")
@workspace_option
@json_option
def command(yes, workspace, as_json):
    """Put the broken original back, keeping your files in .trainwreck-backups/<date-time>/.

    DIAGNOSIS.md, files you added, and the progress (attempts, hints, passed) are kept.
    """
    from grader.practice.workspace import changed_files, open_workspace, reset

    ws = open_workspace(workspace)
    changed = changed_files(ws)
    if changed:
        confirm(f"put {', '.join(changed)} back as shipped (your copies go to .trainwreck-backups/)?", yes)
    r = reset(ws)
    if as_json:
        console.emit_json({"exercise": ws.slug, "restored": r.restored,
                           "backup": str(r.backup) if r.backup else None})
        return
    show.reset(r)
