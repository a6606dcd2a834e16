"""Import boundaries that keep the kit fast and layered (as click's own tests check theirs): the
harness never imports the grader, and `trainwreck run` starts without pydantic or the grading
modules. Each runs in a fresh interpreter, so what an earlier test imported cannot hide a leak."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from functools import cache

from tests.conftest import REPO

GRADING = ("pydantic", "grader.grade", "grader.checks", "grader.manifest", "grader.judge", "grader.result")


def _modules_after(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, cwd=REPO, check=True)
    return json.loads(out.stdout.splitlines()[-1])


HARNESS_MODULES = sorted(p.stem for p in (REPO / "harness").glob("*.py") if p.stem != "__init__")


def _grader_in(modules: list[str]) -> list[str]:
    return [m for m in modules if m == "grader" or m.startswith("grader.")]


def test_the_harness_never_imports_the_grader():
    # One interpreter imports every harness module (each costs a fresh interpreter and often torch:
    # forty of them were a minute of the fast tier); only when the grader shows up is each module
    # imported alone, to name the one that pulls it in.
    if not _grader_in(_modules_after("\n".join(f"import harness.{m}" for m in HARNESS_MODULES))):
        return
    culprits = [m for m in HARNESS_MODULES if _grader_in(_modules_after(f"import harness.{m}"))]
    assert not culprits, f"these harness modules import the grader: {culprits}"


def test_trainwreck_run_imports_neither_pydantic_nor_the_grading_modules():
    mods = _modules_after("from grader.cli import cli\ncli.get_command(None, 'run')")
    assert "grader.commands.run" in mods
    assert not [m for m in mods if m.startswith(GRADING)]


def test_the_harness_parent_never_imports_torch():
    mods = _modules_after("import harness.launch, harness.monitor, harness.watchdog")
    assert "torch" not in mods


# What the grader may take from the harness that the harness itself never uses: the contract the
# two sides share, each with why it is not a reader of evidence for a verdict. Anything else the
# grader imports from the harness must be something the harness uses itself (the launcher, the
# record schema, the sandbox); a new grader-only reader in the harness fails the test below.
SHARED_CONTRACT = {
    ("harness.launch", "launch"): "the launcher's entry point: what the harness offers",
    ("harness.executor", "executor_for"): "how launches run, chosen once where a grading or a run starts",
    ("harness.errors", "EXIT_OK"): "the exit codes every command shares",
    ("harness.errors", "EXIT_FAIL"): "the exit codes every command shares",
    ("harness.errors", "EXIT_INTERRUPTED"): "the exit codes every command shares",
    ("harness.defaults", "user_home"): "where the kit keeps its state",
    ("harness.observe", "median_step_s"): "the run summary `trainwreck run` and `record` print",
    ("harness.phases", "read_run"): "the profile `trainwreck run --profile` prints",
    ("harness.fetches", "size_of"): "the length a loader identity names, read beside `identity`, which writes it",
    ("harness.fetches", "subset_start"): "where a split begins, as `identity` writes it (`Subset@4096[4096]`), read beside it",
}


@cache  # two tests read the grader's imports: parsing every file once is about 2 s of the fast tier
def _harness_names_taken_by(folder: str) -> dict[tuple[str, str], str]:
    taken: dict[tuple[str, str], str] = {}
    for f in sorted((REPO / folder).rglob("*.py")):
        tree = ast.parse(f.read_text())
        aliases: dict[str, str] = {}
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.module == "harness":
                aliases.update({a.asname or a.name: f"harness.{a.name}" for a in n.names})
            elif isinstance(n, ast.ImportFrom) and (n.module or "").startswith("harness."):
                taken.update({(n.module or "", a.name): str(f.relative_to(REPO)) for a in n.names})
        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in aliases:
                taken[(aliases[n.value.id], n.attr)] = str(f.relative_to(REPO))
    return taken


def _names_the_harness_uses() -> set[str]:
    used: set[str] = set()
    for f in (REPO / "harness").rglob("*.py"):
        for n in ast.walk(ast.parse(f.read_text())):
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load):
                used.add(n.id)
            elif isinstance(n, ast.Attribute):
                used.add(n.attr)
    return used


def test_no_grader_only_reader_lives_in_the_harness():
    used = _names_the_harness_uses()
    grader_only = {k: where for k, where in _harness_names_taken_by("grader").items()
                   if k[1] not in used and k not in SHARED_CONTRACT}
    assert not grader_only, ("the grader takes these from the harness, which never uses them itself: move them "
                             f"to grader/ (or name them in SHARED_CONTRACT with why): {grader_only}")


def test_the_shared_contract_is_still_shared():
    taken = _harness_names_taken_by("grader")
    assert not [k for k in SHARED_CONTRACT if k not in taken], "a contract name nothing takes: drop it"
