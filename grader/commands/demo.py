"""``trainwreck demo [SLUG]``: the kit end to end on one exercise."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from grader import console
from grader.errors import EXIT_FAIL, EXIT_OK
from harness.executor import executor_for


@click.command("demo")
@click.argument("slug", default="memory-leak")
@click.option("--no-sandbox", "no_sandbox", is_flag=True,
              help="Run the graded code without the bubblewrap sandbox (unisolated: only where the sandbox cannot run; "
                   "result.json and every report say so).")
def command(slug, no_sandbox):
    """The kit end to end on one exercise: the broken script graded (failing, with its evidence),
    then the reference fix graded (passing)."""
    from grader.exercises import find_script as find
    from grader.grade import GradeOptions, grade
    from grader.sessions.reveals import reference_graded

    executor = executor_for(sandboxed=not no_sandbox)
    ex = find(slug)
    reference_graded(Path.cwd(), ex.slug, "demo")  # it grades the reference: refused or recorded in an open session
    console.text(f"== {ex.manifest.title}: {ex.manifest.symptom}")
    console.text("== 1/2 grading the broken script as shipped")
    broken = grade(ex, GradeOptions(kind="broken", executor=executor), progress=console.info)
    console.grade_result(broken)
    console.text("== 2/2 grading the reference fix")
    fixed = grade(ex, GradeOptions(kind="solution", executor=executor), progress=console.info)
    console.grade_result(fixed)
    ok = not broken.passed and fixed.passed
    console.text("demo " + ("complete: the broken script fails and the fix passes" if ok else
                            "found a problem: the kit's self-check did not hold"))
    sys.exit(EXIT_OK if ok else EXIT_FAIL)
