"""Grading an exercise's generated cases, and the run result they leave: ``<out>/validity.json``,
one row per case with its expected verdict, what the grader said (every failing check and its
message) and whether they agree. docs/validity.md is rendered from this file (``table``)."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from grader.validity.suite import Case
from grader.variants import Outcome, grade_variant
from harness.executor import Executor, Sandboxed

FORMAT_VERSION = 1
RESULT = "validity.json"


@dataclass
class CaseOutcome:
    case: Case
    outcome: Outcome

    @property
    def agrees(self) -> bool:
        return self.outcome.agrees

    def to_json(self) -> dict[str, Any]:
        c, o, r = self.case, self.outcome, self.outcome.result
        return {"exercise": c.slug, "case": c.name, "kind": c.kind, "detail": c.detail, "breaks": c.breaks,
                "expect": c.spec.expect, "must_fail": c.spec.must_fail, "says": c.spec.says, "why": c.spec.why,
                "ci": c.spec.ci, "got": o.to_json()["got"], "agrees": o.agrees, "problem": o.problem,
                "failed": [{"check": x.name, "message": x.message} for x in (r.checks if r else []) if not x.passed],
                "wall_s": o.wall_s, "result_json": o.to_json()["result_json"]}


def grade_case(case: Case, out: Path, device: str = "auto", executor: Executor = Sandboxed(),
               progress=lambda s: None) -> CaseOutcome:
    """Write the case's script as a workspace and grade it as the corpus grades a variant."""
    folder = out / case.slug / f"{case.kind}-{case.name}"
    v = case.variant(folder / "workspace")
    started = time.monotonic()
    o = grade_variant(v, folder, device=device, progress=progress, executor=executor)
    o.wall_s = round(time.monotonic() - started, 1)
    return CaseOutcome(case, o)


def commit() -> str:
    """The kit's commit, with ``+dirty`` where the working tree differs from it."""
    from grader.exercises import kit_root

    def git(*args: str) -> str:
        p = subprocess.run(["git", *args], cwd=kit_root(), capture_output=True, text=True)
        return p.stdout.strip() if p.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+dirty" if git("status", "--porcelain", "--untracked-files=no") else "")


def run_result(outcomes: list[CaseOutcome], started: datetime, command: str) -> dict[str, Any]:
    from grader.validity.freshness import fingerprint

    per: dict[str, Any] = {}
    for o in outcomes:
        if o.case.slug not in per:  # the scripts read and hashed once per exercise, not once per case
            per[o.case.slug] = {"scripts": fingerprint(o.case.slug), "cases": []}
        per[o.case.slug]["cases"].append(o.to_json())
    return {"format_version": FORMAT_VERSION, "commit": commit(), "started": started.isoformat(timespec="seconds"),
            "ended": datetime.now(UTC).isoformat(timespec="seconds"), "command": command,
            "machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                        "load_at_end": round(os.getloadavg()[0], 1)},
            "wall_s": round(sum(o.outcome.wall_s or 0 for o in outcomes), 1), "exercises": per}


def write_result(result: dict[str, Any], out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    path = out / RESULT
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path


def summary(outcomes: list[CaseOutcome]) -> dict[str, dict[str, int]]:
    """Per exercise: rewrites graded and accepted, mutations graded and rejected as expected."""
    per: dict[str, dict[str, int]] = {}
    for o in outcomes:
        row = per.setdefault(o.case.slug, {"rewrites": 0, "accepted": 0, "mutations": 0, "rejected": 0})
        if o.case.kind == "rewrite":
            row["rewrites"] += 1
            row["accepted"] += o.agrees
        else:
            row["mutations"] += 1
            row["rejected"] += o.agrees
    return per
