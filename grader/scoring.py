"""From check verdicts to a pass and a score in [0, 1].

Required checks gate: if any fails, the submission does not pass and scores 0. Past the gate, the
score is the weighted share of credit earned over all checks (required ones included, so a pass is
never 0): a check earns 1 when it passes, 0 when it fails, unless it sets its own credit
(throughput earns its normalised speedup, RE-Bench style: 0 = the broken baseline, 1 = the
reference); weights come from the manifest.

An exercise with several planted bugs groups its checks into issues (``[[issues]]`` in the
manifest). Then each issue is fixed when every one of its checks passes, and the score is the
weighted share of issues fixed: partial credit per issue. Only the checks outside every issue gate
(``workload_intact``: a submission that shrinks the work scores 0 however many issues look fixed);
checks inside an issue count through their issue alone; credit checks outside every issue
(throughput included) are reported but not scored, so put them in an issue to credit them. The
submission passes when every issue is fixed and every required check passes.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class IssueVerdict:
    name: str
    title: str
    weight: float
    fixed: bool
    checks: list[str]  # the issue's checks, in manifest order
    failed: list[str]  # those of them that did not pass (a check that never ran counts as failed)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Score:
    passed: bool
    score: float
    environment_failure: bool
    gate: list[str]  # required checks that failed (outside every issue, when there are issues)
    issues: list[IssueVerdict] = field(default_factory=list)


def score(checks, issues=()) -> Score:
    env = any(c.environment for c in checks)
    if issues:
        return _score_issues(checks, issues, env)
    failed_required = [c.name for c in checks if c.required and not c.passed]
    if failed_required:
        return Score(False, 0.0, env, failed_required)
    parts = [(c.weight, c.earned()) for c in checks]
    total = sum(w for w, _ in parts)
    value = sum(w * s for w, s in parts) / total if total else 1.0
    return Score(True, round(min(max(value, 0.0), 1.0), 4), env, [])


def _score_issues(checks, issues, env: bool) -> Score:
    passed = {c.name: c.passed for c in checks}
    verdicts = []
    for i in issues:
        failed = [n for n in i.checks if not passed.get(n, False)]
        verdicts.append(IssueVerdict(i.name, i.title, i.weight, not failed, list(i.checks), failed))
    in_issue = {n for i in issues for n in i.checks}
    gate = [c.name for c in checks if c.required and not c.passed and c.name not in in_issue]
    if gate:
        return Score(False, 0.0, env, gate, verdicts)
    total = sum(v.weight for v in verdicts)
    value = sum(v.weight for v in verdicts if v.fixed) / total
    all_required = all(c.passed for c in checks if c.required)
    return Score(all(v.fixed for v in verdicts) and all_required, round(value, 4), env, [], verdicts)
