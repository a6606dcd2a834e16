"""Exercise scripts are real code (issue 27, item 2): the broken script and the reference fix of
every exercise import torch, the standard library and files of their own folder, nothing of the
kit. A candidate reading them sees a training script, not a kit's fixture."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPTS = sorted([*REPO.glob("exercises/*/*.py"), *REPO.glob("solutions/*/*.py")])
THIRD_PARTY = {"torch"}


def _foreign_imports(path: Path) -> set[str]:
    own = {p.stem for p in path.parent.glob("*.py")}
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            top = name.split(".")[0]
            if top not in sys.stdlib_module_names and top not in THIRD_PARTY and top not in own:
                found.add(name)
    return found


def test_there_are_scripts_to_check():
    assert len(SCRIPTS) >= 24


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: str(p.relative_to(REPO)))
def test_a_script_imports_torch_the_stdlib_and_its_own_folder_only(path):
    assert _foreign_imports(path) == set()
