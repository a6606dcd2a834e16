"""docs/design.md's map ("Where things are") names every module of harness/ and grader/ once, and
nothing that is not there: a module added, moved or removed without the map fails here."""

from __future__ import annotations

import re

from tests.conftest import REPO


def _tables() -> dict[str, list[str]]:
    text = (REPO / "docs" / "design.md").read_text()
    section = text.split("## Where things are", 1)[1].split("\n## ", 1)[0]
    out: dict[str, list[str]] = {}
    for part in re.split(r"\*\*(harness|grader)/\*\*", section)[1:]:
        if part in ("harness", "grader"):
            package = part
            continue
        rows = [line.split("|")[2] for line in part.splitlines() if line.startswith("| **")]
        out[package] = [n.split("/")[0] for row in rows for n in re.findall(r"`([a-z0-9_/]+)`", row)
                        if "/" not in n.rstrip("/")]
    return out


def _modules(package: str) -> set[str]:
    root = REPO / package
    return {p.stem for p in root.glob("*.py") if p.stem != "__init__"} \
        | {p.name for p in root.iterdir() if (p / "__init__.py").is_file()}


def test_the_map_names_every_module_once_and_only_modules_that_exist():
    tables = _tables()
    assert set(tables) == {"harness", "grader"}
    for package, named in tables.items():
        doubled = sorted({n for n in named if named.count(n) > 1})
        assert not doubled, f"docs/design.md names {package}/{doubled} twice"
        assert set(named) == _modules(package), (
            f"docs/design.md's map of {package}/ is out of date: missing {sorted(_modules(package) - set(named))}, "
            f"gone {sorted(set(named) - _modules(package))}")
