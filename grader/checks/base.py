"""The shapes every check shares."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from grader.evidence import RunEvidence, harness_failed
from grader.manifest import Manifest


@dataclass
class CheckResult:
    name: str
    passed: bool
    message: str
    evidence: dict[str, Any] = field(default_factory=dict)
    environment: bool = False  # could not judge: a run the check needs broke outside the submission
    required: bool = True
    weight: float = 1.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Context:
    manifest: Manifest
    runs: dict[str, RunEvidence]  # by role: main, ws1, resume, reference
    protected_changed: list[str] = field(default_factory=list)


def need(ctx: Context, name: str, role: str, ok_only: bool = True) -> RunEvidence | CheckResult:
    """The run a check needs, or the verdict that it could not be judged."""
    ev = ctx.runs.get(role)
    if ev is None:
        return CheckResult(name, False, f"no {role} run to judge from", environment=True)
    why = harness_failed(ev)
    if why:
        return CheckResult(name, False, why, environment=True)
    if ok_only and ev.status != "ok":
        env = role == "reference"
        return CheckResult(name, False, f"{ev.describe()} did not complete (status {ev.status})",
                           {"status": ev.status}, environment=env)
    return ev


def ranges(indices: list[int], limit: int = 4) -> str:
    """'0-63, 128-131' for a sorted list of ints, at most ``limit`` ranges."""
    if not indices:
        return "none"
    xs = sorted(set(indices))
    out, start, prev = [], xs[0], xs[0]
    for x in xs[1:]:
        if x != prev + 1:
            out.append((start, prev))
            start = x
        prev = x
    out.append((start, prev))
    parts = [f"{a}" if a == b else f"{a}-{b}" for a, b in out[:limit]]
    return ", ".join(parts) + (f" and {len(out) - limit} more ranges" if len(out) > limit else "")
