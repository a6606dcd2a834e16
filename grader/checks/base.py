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


def trained_to_the_end(ev: RunEvidence, steps: int) -> bool:
    """Every rank of the job made all the workload's optimizer steps in its last attempt."""
    return len(ev.ranks) == ev.world_size > 0 and all(o.steps >= steps for o in ev.ranks.values())


def need_trained(ctx: Context, name: str, role: str = "main") -> RunEvidence | CheckResult:
    """Like ``need``, but a run that failed only after every rank finished training (a collective at
    the end that one rank never reached, say) is judged too: the records of its training are whole,
    and how the job ended is for ``completes`` to judge. This is what lets an exercise with several
    planted issues credit each one while another still breaks the end of the run."""
    ev = need(ctx, name, role, ok_only=False)
    if isinstance(ev, CheckResult) or ev.status == "ok" or trained_to_the_end(ev, ctx.manifest.workload.steps):
        return ev
    return CheckResult(name, False, f"{ev.describe()} did not complete (status {ev.status}) and stopped before "
                       f"the last of its {ctx.manifest.workload.steps} steps", {"status": ev.status})


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
