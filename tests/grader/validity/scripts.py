"""The reference fixes and broken scripts the validity tests read (parsed once)."""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path

from grader.validity.source import parse

REPO = Path(__file__).resolve().parents[3]
SLUGS = sorted(p.parent.name for p in (REPO / "solutions").glob("*/train.py")
               if (REPO / "exercises" / p.parent.name / "train.py").is_file())


@cache
def reference(slug: str) -> str:
    return (REPO / "solutions" / slug / "train.py").read_text()


@cache
def broken(slug: str) -> str:
    return (REPO / "exercises" / slug / "train.py").read_text()


def tree(slug: str) -> ast.Module:
    return parse(reference(slug))


def foreign_imports(t: ast.Module) -> set[str]:
    """Top-level modules a script imports besides torch, the standard library and the kit's workloads."""
    mods = set()
    for n in ast.walk(t):
        if isinstance(n, ast.Import):
            mods |= {a.name.split(".")[0] for a in n.names}
        elif isinstance(n, ast.ImportFrom) and n.module:
            mods.add(n.module.split(".")[0])
    return {m for m in mods if m not in sys.stdlib_module_names and m not in ("torch", "harness")}
