"""Scoring: required checks gate; past the gate, the weighted share of credit."""

from __future__ import annotations

import pytest

from grader.checks.base import CheckResult
from grader.manifest import Issue
from grader.scoring import score


def _C(name, passed, required=True, weight=1.0, environment=False, credit=None):
    return CheckResult(name, passed, "", required=required, weight=weight, environment=environment, credit=credit)


@pytest.mark.parametrize("checks, passed, value", [
    ([_C("a", True), _C("b", True)], True, 1.0),
    ([_C("a", True), _C("b", False)], False, 0.0),
    ([_C("a", True), _C("b", False, required=False)], True, 0.5),
    ([_C("a", True, weight=3), _C("b", False, required=False)], True, 0.75),
    # a check with credit of its own (throughput's normalised speedup) earns it, pass or not
    ([_C("a", True), _C("throughput", False, required=False, credit=0.5)], True, 0.75),
    ([_C("a", True), _C("throughput", True, required=False, weight=0.0, credit=1.0)], True, 1.0),
    ([_C("a", True), _C("environment", False, environment=True)], False, 0.0),
])
def test_score(checks, passed, value):
    s = score(checks)
    assert s.passed is passed and s.score == pytest.approx(value)


# -- by issue (partial credit) --------------------------------------------------------------------

ISSUES = [Issue(name="order", title="t", checks=["sample_partition", "matches_reference"]),
          Issue(name="leak", title="t", checks=["memory_flat"]),
          Issue(name="end", title="t", checks=["completes", "checkpoint_valid"])]
ALL = ["sample_partition", "matches_reference", "memory_flat", "completes", "checkpoint_valid", "workload_intact"]


def _checks(failing=(), **extra):
    return [_C(n, n not in failing) for n in ALL] + [_C(n, p) for n, p in extra.items()]


@pytest.mark.parametrize("checks, issues, passed, value, fixed, gate", [
    (_checks(), ISSUES, True, 1.0, ["order", "leak", "end"], []),
    (_checks(["sample_partition", "matches_reference", "memory_flat", "completes", "checkpoint_valid"]),
     ISSUES, False, 0.0, [], []),
    # one fix each: credit for exactly that issue, though required checks of the others fail
    (_checks(["memory_flat", "completes", "checkpoint_valid"]), ISSUES, False, 0.3333, ["order"], []),
    (_checks(["sample_partition", "matches_reference", "completes", "checkpoint_valid"]), ISSUES, False,
     0.3333, ["leak"], []),
    # an issue is fixed only when all its checks pass
    (_checks(["matches_reference"]), ISSUES, False, 0.6667, ["leak", "end"], []),
    # weights
    (_checks(["memory_flat", "completes"]), [ISSUES[0].model_copy(update={"weight": 2.0}), *ISSUES[1:]],
     False, 0.5, ["order"], []),
    # a required check outside every issue gates: gaming the workload scores 0 however much looks fixed
    (_checks(["workload_intact"]), ISSUES, False, 0.0, ["order", "leak", "end"], ["workload_intact"]),
    # so does the environment failure the grader appends
    ([*_checks(), _C("environment", False, environment=True)], ISSUES, False, 0.0, ["order", "leak", "end"],
     ["environment"]),
    # a credit check outside every issue neither gates nor scores
    ([*_checks(), _C("collectives_per_step", False, required=False)],
     ISSUES, True, 1.0, ["order", "leak", "end"], []),
    # a check that never ran (absent from the results) does not fix its issue
    ([c for c in _checks() if c.name != "checkpoint_valid"], ISSUES, False, 0.6667, ["order", "leak"], []),
])
def test_score_by_issue(checks, issues, passed, value, fixed, gate):
    s = score(checks, issues=issues)
    assert s.passed is passed and s.score == pytest.approx(value, abs=1e-4) and s.gate == gate
    assert [v.name for v in s.issues if v.fixed] == fixed
    assert all(set(v.failed) <= set(v.checks) for v in s.issues)


def test_without_issues_scoring_is_unchanged():
    s = score([_C("a", True), _C("b", False, required=False)])
    assert s.passed and s.score == 0.5 and s.issues == []
