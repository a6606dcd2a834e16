"""``trainwreck grade | regrade | verify | record | demo``: thin commands over grader.grade,
grader.verify and grader.record; all printing goes through grader.console.

This module is imported by every `trainwreck` command (to register these), so the grading modules
are imported inside the commands that use them: `trainwreck run` starts without them."""

from __future__ import annotations

import sys
from datetime import datetime
from pathlib import Path

import click

from grader import console
from grader import result as results


def find(slug: str):
    from grader.exercises import find as find_exercise  # pydantic, only for the commands that need it

    return find_exercise(slug)


def discover():
    from grader.exercises import discover as discover_exercises

    return discover_exercises()

EXIT_OK, EXIT_FAIL, EXIT_USAGE = 0, 1, 2


def _exit_for(res) -> int:
    if res["environment_failure"]:
        return EXIT_USAGE
    return EXIT_OK if res["passed"] else EXIT_FAIL


def _report(res, as_json: bool):
    if as_json:
        console.emit_json(_public(res))
    else:
        console.grade_summary(res)
    sys.exit(_exit_for(res))


def _public(res) -> dict:
    return {
        "exercise": res["exercise"], "passed": res["passed"], "score": res["score"],
        "environment_failure": res["environment_failure"],
        "checks": [{k: c[k] for k in ("name", "passed", "evidence", "message", "required", "environment")}
                   for c in res["checks"]],
        "issues": [{k: i[k] for k in ("name", "title", "fixed", "checks")} for i in res.get("issues", [])],
        "throughput": None if not res.get("throughput") else {
            k: res["throughput"].get(k) for k in ("speedup", "spread", "normalized", "rounds",
                                                  "reference_speedup", "suspicious", "counted",
                                                  "fraction_of_bound", "reference_fraction_of_bound",
                                                  "bound_spread")},
        "submission": res["submission"], "environment": res["environment"], "timings": res["timings"],
        "result_json": str(Path(res["out_dir"]) / "result.json"),
    }


@click.command("grade")
@click.argument("slug", required=False)
@click.option("--workspace", type=click.Path(path_type=Path), help="Folder holding your edited files.")
@click.option("--solution", "kind", flag_value="solution", help="Grade the reference solution.")
@click.option("--broken", "kind", flag_value="broken", help="Grade the broken script as shipped.")
@click.option("--repeats", type=click.IntRange(min=1), default=None, help="Throughput rounds (default: the manifest's).")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=None, help="Where result.json and the run dirs go.")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON on stdout.")
def grade_cmd(slug, workspace, kind, repeats, device, out, as_json):
    """Grade a fix of exercise SLUG: run it as the manifest asks, judge the runs, write result.json.

    Inside a session workspace (made by `trainwreck session new`) SLUG may be left out, and the
    grading is recorded as an attempt of the session."""
    if kind and workspace:
        raise click.UsageError("give either --workspace, --solution or --broken")
    if not kind:
        from grader.sessions.attempts import find_workspace, record_attempt

        marker = find_workspace(workspace or Path.cwd())
        if marker is not None and slug in (None, marker.exercise):
            _report(record_attempt(marker, repeats=repeats, device=device, out=out, progress=console.info), as_json)
    if slug is None:
        raise click.UsageError("give SLUG, or run `trainwreck grade` inside a session workspace "
                               "(see `trainwreck session new`)")
    kind = kind or "workspace"
    if kind == "workspace" and workspace is None:
        raise click.UsageError("give --workspace DIR (your edited files), or --solution / --broken")
    from grader.grade import GradeOptions, grade
    from grader.submission import SubmissionError

    ex = find(slug)
    try:
        res = grade(ex, GradeOptions(kind=kind, workspace=workspace, out_dir=out, repeats=repeats,
                                     device=device), progress=console.info)
    except SubmissionError as e:
        raise click.UsageError(str(e))
    _report(res, as_json)


@click.command("regrade")
@click.argument("result_json", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True)
def regrade_cmd(result_json, as_json):
    """Judge the run dirs of an earlier grading again, without re-running anything."""
    try:
        old = results.read(result_json)
    except ValueError as e:
        raise click.UsageError(str(e))
    from grader.grade import regrade

    res = regrade(result_json, find(old["exercise"]))
    out = Path(result_json)
    out = (out if out.is_dir() else out.parent) / f"regrade-{datetime.now().strftime('%Y%m%d-%H%M%S')}.json"
    results.write(out, res)  # beside the original, which stays as it was
    console.info(f"re-graded from stored runs: {out}")
    _report(res, as_json)


@click.command("verify")
@click.argument("slugs", nargs=-1)
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
@click.option("--out", type=click.Path(path_type=Path), default=None)
@click.option("--json", "as_json", is_flag=True)
def verify_cmd(slugs, device, out, as_json):
    """Prove every exercise (or SLUGS) fails as shipped and passes with its reference solution."""
    from grader.verify import verify

    found, errors = discover()
    if slugs:
        found = [find(s) for s in slugs]
        errors = []
    if not found and not errors:
        raise click.UsageError("no exercises found")
    out = (out or Path(".trainwreck") / "verify" / datetime.now().strftime("%Y%m%d-%H%M%S")).resolve()
    report = [{"slug": e.split(":")[0], "ok": False, "problems": [e]} for e in errors]
    for ex in found:
        v = verify(ex, out / ex.slug, device=device, progress=console.info)
        report.append(v.to_json())
        if not as_json:
            console.verify_line(v.to_json())
    if as_json:
        console.emit_json({"exercises": report})
    sys.exit(EXIT_OK if all(r["ok"] for r in report) else EXIT_FAIL)


@click.command("record")
@click.argument("slug")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto", show_default=True)
def record_cmd(slug, device):
    """Run the broken script of SLUG and keep its logs/ and baseline.json in the exercise folder."""
    from grader.record import record

    ex = find(slug)
    baseline = record(ex, device=device, progress=console.info)
    console.text(f"recorded {slug}: status {baseline['status']}, {baseline['world_size']} ranks on "
                 f"{baseline['device']} ({baseline['backend']}), torch {baseline['torch']} → "
                 f"{ex.dir / 'logs'}, {ex.dir / 'baseline.json'}")


@click.command("demo")
@click.argument("slug", default="memory-leak")
def demo_cmd(slug):
    """The kit end to end on one exercise: the broken script graded (failing, with its evidence),
    then the reference fix graded (passing)."""
    from grader.grade import GradeOptions, grade

    ex = find(slug)
    console.text(f"== {ex.manifest.title}: {ex.manifest.symptom}")
    console.text("== 1/2 grading the broken script as shipped")
    broken = grade(ex, GradeOptions(kind="broken"), progress=console.info)
    console.grade_summary(broken)
    console.text("== 2/2 grading the reference fix")
    fixed = grade(ex, GradeOptions(kind="solution"), progress=console.info)
    console.grade_summary(fixed)
    ok = not broken["passed"] and fixed["passed"]
    console.text("demo " + ("complete: the broken script fails and the fix passes" if ok else
                            "found a problem: the kit's self-check did not hold"))
    sys.exit(EXIT_OK if ok else EXIT_FAIL)


COMMANDS = [grade_cmd, regrade_cmd, verify_cmd, record_cmd, demo_cmd]

# TEMPORARY (sessions branch): until grader/cli.py's lazy group lists them, register the new
# command modules here. Each imports nothing heavy at module level.
from grader.commands import bundle as _bundle, report as _report_cmd, session as _session  # noqa: E402

COMMANDS += [_session.command, _report_cmd.command, _bundle.command]
