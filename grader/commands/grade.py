"""``trainwreck grade [SLUG]``: run a fix as the manifest asks, judge the runs, write result.json.
Inside an interview workspace (``trainwreck session new``) no slug is needed, and the grading is
recorded as an attempt of the session."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from grader import console
from grader.errors import UserError


@click.command("grade")
@click.argument("slug", required=False)
@click.option("--workspace", type=click.Path(path_type=Path), help="Folder holding your edited files.")
@click.option("--solution", "kind", flag_value="solution", help="Grade the reference solution.")
@click.option("--broken", "kind", flag_value="broken", help="Grade the broken script as shipped.")
@click.option("--repeats", type=click.IntRange(min=1), default=None, help="Throughput rounds (default: the manifest's).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Where result.json and the run dirs go.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def command(slug, workspace, kind, repeats, device, out, as_json):
    """Grade a fix of exercise SLUG: run it as the manifest asks, judge the runs, write result.json.

    Inside a session workspace, SLUG may be left out: the workspace's exercise is graded and the
    attempt is recorded in the session.
    """
    if kind and workspace:
        raise UserError("give either --workspace, --solution or --broken")
    if not kind:
        from grader.sessions.attempts import find_workspace, record_attempt

        marker = find_workspace(workspace or Path.cwd())
        if marker is not None and slug in (None, marker.exercise):
            res = record_attempt(marker, repeats=repeats, device=device, out=out, progress=console.info)
            console.grade_result(res, as_json)
            sys.exit(res.exit_code)
    if slug is None:
        raise UserError("give SLUG, or run `trainwreck grade` inside a session workspace "
                        "(see `trainwreck session new`)")
    kind = kind or "workspace"
    if kind == "workspace" and workspace is None:
        raise UserError("give --workspace DIR (your edited files), or --solution / --broken")
    from grader.exercises import find_script as find
    from grader.grade import GradeOptions, grade

    res = grade(find(slug), GradeOptions(kind=kind, workspace=workspace, out_dir=out, repeats=repeats,
                                         device=device), progress=console.info)
    console.grade_result(res, as_json)
    sys.exit(res.exit_code)
