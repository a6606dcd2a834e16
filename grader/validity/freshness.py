"""Whether an exercise's stored validity results are still about its current code.

A stored grading is a claim about the scripts it graded. When the broken script or the reference fix
changes afterwards (a migration, a new constant), the same case names can name other programs, some
generated mutants were never graded and some graded ones are no longer generated. The published table
must say so instead of showing the old figures as current: ``assess`` compares what was graded with
what the suite generates now, and ``table`` prints it beside the figures.

The fingerprint is the sha256 of the two scripts the suite is generated from (the exercise's entry
file as shipped and as fixed); the expected verdicts (tests/validity/<slug>.toml) are not in it:
changing an expectation does not change what the grader said about a program."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from grader.validity.suite import Suite, build, script_source


def fingerprint(slug: str, root: Path | None = None) -> dict[str, str]:
    """The sha256 of the scripts the suite of ``slug`` is generated from."""
    return {kind: hashlib.sha256(script_source(slug, root, kind).encode()).hexdigest()
            for kind in ("broken", "solution")}


def assess(stored: dict[str, Any], suite: Suite, now: dict[str, str]) -> dict[str, Any]:
    """What separates a stored exercise's results from its suite today: ``fix_changed`` (the scripts
    differ from those graded, or nobody recorded which were graded), the cases generated now but never
    graded, and the graded cases the suite no longer holds (left out by the config since, with its
    reason, or no longer generated from the fix)."""
    graded = {c["case"] for c in stored["cases"]}
    current = {c.name for c in suite.cases}
    reasons = {s.name.removeprefix("rewrite "): s.why for s in suite.skipped}
    gone = [{"case": c["case"], "why": reasons.get(c["case"], "no longer generated from the fix")}
            for c in stored["cases"] if c["case"] not in current]
    return {"fix_changed": stored.get("scripts") != now,
            "ungraded": [c.name for c in suite.cases if c.name not in graded],
            "gone": gone}


def refresh(data: dict[str, Any], root: Path | None = None) -> dict[str, Any]:
    """``data`` (docs/validity.json) with every exercise's ``freshness`` assessed against today's code."""
    out = dict(data)
    out["exercises"] = {slug: {**e, "freshness": assess(e, build(slug, root), fingerprint(slug, root))}
                        for slug, e in data.get("exercises", {}).items()}
    return out

