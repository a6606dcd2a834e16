"""One isolation seam (issue 29): how a launch runs is an executor (harness.executor) chosen once
where a grading or a run starts and handed down as an object; no ``sandbox`` flag travels through
the grader's functions, and the launcher does not branch on one. Read from the source, so a new
``sandbox: bool`` parameter anywhere fails here before it spreads."""

from __future__ import annotations

import ast
import dataclasses

from grader.grade import GradeOptions
from harness.launch import LaunchConfig
from tests.conftest import REPO

# Where a sandbox flag may still be a parameter, each with why.
ALLOWED = {
    ("harness/executor.py", "executor_for"): "the one factory: the flag becomes an executor here",
    # the checkpoint reader's own process, started at judging time from the isolation the grading
    # recorded (result.json), not a launch of the candidate's code
    ("grader/evidence/reader.py", "isolated"): "the reader's isolation, from the recorded grading's",
    ("grader/evidence/reader.py", "__init__"): "the reader's isolation, from the recorded grading's",
}
FLAG_NAMES = ("sandbox", "sandboxed", "no_sandbox")


def _is_click_command(fn: ast.FunctionDef) -> bool:
    """A click command's callback: where ``--no-sandbox`` / ``--sandbox`` arrive from the command line
    (turned into the executor at its top)."""
    return any(isinstance(d, ast.Call) and ast.unparse(d.func).endswith(("command", "command.command"))
               for d in fn.decorator_list)


def _flag_parameters() -> list[tuple[str, str, str]]:
    found = []
    for folder in ("grader", "harness"):
        for f in sorted((REPO / folder).rglob("*.py")):
            rel = str(f.relative_to(REPO))
            for n in ast.walk(ast.parse(f.read_text())):
                if not isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                names = [a.arg for a in n.args.posonlyargs + n.args.args + n.args.kwonlyargs]
                for name in names:
                    if name in FLAG_NAMES and (rel, n.name) not in ALLOWED and not _is_click_command(n):
                        found.append((rel, n.name, name))
    return found


def test_no_sandbox_flag_is_a_parameter_of_the_grader_or_the_harness():
    assert not _flag_parameters(), "pass the executor (harness.executor) instead of a flag: " \
        f"{_flag_parameters()}"


def test_the_allowed_places_still_take_the_flag():
    taken = set()
    for rel, fn in ALLOWED:
        tree = ast.parse((REPO / rel).read_text())
        if any(isinstance(n, ast.FunctionDef) and n.name == fn for n in ast.walk(tree)):
            taken.add((rel, fn))
    assert taken == set(ALLOWED), "an allowed place that no longer exists: drop it"


def test_the_launch_and_grade_options_carry_an_executor_not_a_flag():
    for cls in (LaunchConfig, GradeOptions):
        names = {f.name for f in dataclasses.fields(cls)}
        assert "executor" in names and not names & set(FLAG_NAMES), (cls.__name__, names)


def test_the_launcher_never_branches_on_the_sandbox():
    tree = ast.parse((REPO / "harness" / "launch.py").read_text())
    for fn in (n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name in ("launch", "build_env")):
        used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)} | \
               {n.attr for n in ast.walk(fn) if isinstance(n, ast.Attribute)}
        assert not [u for u in used if "sandbox" in u.lower() or u in ("iso", "IsolatedRun")], (fn.name, used)
