"""Import boundaries that keep the kit fast and layered (as click's own tests check theirs): the
harness never imports the grader, and `trainwreck run` starts without pydantic or the grading
modules. Each runs in a fresh interpreter, so what an earlier test imported cannot hide a leak."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

GRADING = ("pydantic", "grader.grade", "grader.checks", "grader.manifest", "grader.judge", "grader.result")


def _modules_after(code: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", f"{code}\nimport sys, json\nprint(json.dumps(sorted(sys.modules)))"],
                         capture_output=True, text=True, cwd=REPO, check=True)
    return json.loads(out.stdout.splitlines()[-1])


@pytest.mark.parametrize("module", sorted(p.stem for p in (REPO / "harness").glob("*.py") if p.stem != "__init__"))
def test_the_harness_never_imports_the_grader(module):
    if module in ("bootstrap",):  # runs a script as __main__ when imported with arguments; import it plainly
        code = "import harness.bootstrap"
    else:
        code = f"import harness.{module}"
    assert not [m for m in _modules_after(code) if m == "grader" or m.startswith("grader.")]


def test_trainwreck_run_imports_neither_pydantic_nor_the_grading_modules():
    mods = _modules_after("from grader.cli import cli\ncli.get_command(None, 'run')")
    assert "grader.commands.run" in mods
    assert not [m for m in mods if m.startswith(GRADING)]


def test_the_harness_parent_never_imports_torch():
    mods = _modules_after("import harness.launch, harness.monitor, harness.watchdog")
    assert "torch" not in mods
