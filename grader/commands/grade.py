"""``trainwreck grade [SLUG]``: run a fix as the manifest asks, judge the runs, write result.json.
Inside an interview workspace (``trainwreck session new``) no slug is needed, and the grading is
recorded as an attempt of the session."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from grader import console
from grader.commands._options import device_option
from grader.errors import UserError
from harness.executor import Executor, Sandboxed, executor_for


@click.command("grade")
@click.argument("slug", required=False)
@click.option("--workspace", type=click.Path(path_type=Path), help="Folder holding your edited files.")
@click.option("--solution", "kind", flag_value="solution", help="Grade the reference solution.")
@click.option("--broken", "kind", flag_value="broken", help="Grade the broken script as shipped.")
@click.option("--repeats", type=click.IntRange(min=1), default=None, help="Throughput rounds (default: the manifest's).")
@device_option
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Where result.json and the run dirs go.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option("--verbose", "-v", is_flag=True,
              help="Each check's whole evidence (what it observed), not one line per check.")
@click.option("--no-sandbox", "no_sandbox", is_flag=True,
              help="Run the graded code without the bubblewrap sandbox (unisolated: only where the sandbox cannot run; "
                   "result.json and every report say so).")
def command(slug, workspace, kind, repeats, device, out, as_json, verbose, no_sandbox):
    """Grade a fix of exercise SLUG: run it as the manifest asks, judge the runs, write result.json.

    Inside a practice workspace (`trainwreck start`) or a session workspace, SLUG may be left out:
    the workspace's exercise is graded and the attempt is recorded in its progress or its session.
    One line per check: its verdict and the deciding figure; --verbose shows all each check
    observed. A practice grading's --json has the same, no evidence figures; the full result.json
    stays under $TRAINWRECK_HOME/practice/grades/.
    """
    if kind and workspace:
        raise UserError("give either --workspace, --solution or --broken")
    executor = executor_for(sandboxed=not no_sandbox)
    if not kind:
        from grader.practice.state import find_root
        from grader.sessions.attempts import find_workspace, record_attempt

        where = workspace or Path.cwd()
        marker = find_workspace(where)
        practice = find_root(where)
        if practice is not None and (marker is None or len(practice.parts) > len(marker.dir.parts)):
            marker = None  # the nearer workspace is a practice one
        if marker is not None and slug in (None, marker.exercise):
            res = record_attempt(marker, repeats=repeats, device=device, out=out, progress=console.info,
                                 executor=executor)
            console.grade_result(res, as_json, verbose)
            sys.exit(res.exit_code)
        if practice is not None:
            _practice(practice, slug, repeats, device, out, as_json, executor, verbose)
    if slug is None:
        raise UserError("give SLUG (with --workspace DIR, --solution or --broken), or run `trainwreck grade` inside "
                        "a practice workspace (`trainwreck start SLUG` makes one) or a session workspace")
    kind = kind or "workspace"
    if kind == "workspace" and workspace is None:
        raise UserError("give --workspace DIR (your edited files), or --solution / --broken")
    from grader.exercises import find_script as find
    from grader.grade import GradeOptions, grade

    ex = find(slug)
    if kind == "solution":  # while a session is open for it, an answer like `solution`: recorded or refused
        from grader.sessions.reveals import reference_graded

        reference_graded(Path.cwd(), ex.slug, "grade --solution")
    res = grade(ex, GradeOptions(kind=kind, workspace=workspace, out_dir=out, repeats=repeats,
                                         device=device, executor=executor), progress=console.info)
    console.grade_result(res, as_json, verbose)
    sys.exit(res.exit_code)


def _practice(root: Path, slug: str | None, repeats, device, out, as_json, executor: Executor = Sandboxed(),
              verbose: bool = False) -> None:
    """Grade the practice workspace at ``root`` and record the attempt in its attempt store."""
    from grader.practice import console as console_practice
    from grader.practice.grading import grade_workspace
    from grader.practice.workspace import open_workspace

    ws = open_workspace(root)
    if slug not in (None, ws.slug):
        return  # another exercise than the workspace's: graded as usual, not recorded
    res, shown = grade_workspace(ws, repeats=repeats, device=device, out=out, progress=console.info,
                                 executor=executor)
    if as_json:
        console.emit_json(shown)
    else:
        console_practice.result(shown, verbose)
    sys.exit(res.exit_code)
