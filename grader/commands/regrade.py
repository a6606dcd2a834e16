"""``trainwreck regrade RESULT_JSON``: judge the stored runs of an earlier grading again, with the
current checks, without re-running anything; the new result goes beside the old one."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

import click

from grader import console


@click.command("regrade")
@click.argument("result_json", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
@click.option("--verbose", "-v", is_flag=True,
              help="Each check's whole evidence (what it observed), not one line per check.")
def command(result_json, as_json, verbose):
    """Judge the run dirs of an earlier grading again, without re-running anything (one line per
    check; --verbose: each check's whole evidence)."""
    from grader.exercises import find_script as find
    from grader.grade import regrade
    from grader.result import GradeResult

    old = GradeResult.read(result_json)
    res = regrade(old, find(old.exercise))
    folder = Path(result_json) if Path(result_json).is_dir() else Path(result_json).parent
    out = folder / f"regrade-{datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    res.write(out)  # beside the original, which stays as it was
    console.info(f"re-graded from stored runs: {out}")
    console.grade_result(res, as_json, verbose)
    sys.exit(res.exit_code)
