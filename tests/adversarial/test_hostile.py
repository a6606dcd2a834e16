"""Hostile submissions against the grader (issue 11, item 7): each one graded for real, in a
process of its own, then an honest fix graded after it. A case passes when the hostile grading
failed for what it did (or was refused) within its time limit, left no process behind, changed
nothing a later grading reads, and the honest fix still passes. See README.md.

    make adversarial                                   # the whole suite (about an hour)
    make adversarial ADV="-k hang"                     # one class (a pytest keyword per class)
    make adversarial ADV="-k fifo-checkpoint"          # one case
    make adversarial-ci                                # CI's tier (cases with ci=True, a few minutes)
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime

import pytest

from grader.exercises import find_script, kit_root
from tests.adversarial.cases import CASES, SLUGS, Case
from tests.adversarial.runner import HONEST_LIMIT_S, REGRADE_LIMIT_S, run_case, run_child

pytestmark = [pytest.mark.slow, pytest.mark.adversarial]


def _param(case: Case):
    marks = [getattr(pytest.mark, SLUGS[case.klass]),
             pytest.mark.timeout(case.limit_s + max(HONEST_LIMIT_S, case.limit_s) + 2 * REGRADE_LIMIT_S + case.settle_s + 300)]
    if case.needs_sandbox:
        marks.append(pytest.mark.needs_sandbox)
    if case.ci:
        marks.append(pytest.mark.adversarial_ci)
    return pytest.param(case, id=case.id, marks=marks)


@pytest.fixture(scope="session")
def victim(tmp_path_factory, sandbox):
    """An earlier grading (memory-leak's broken script, failed), made once, on first use."""
    made = {}

    def get():
        if "dir" not in made:
            folder = tmp_path_factory.mktemp("victim")
            ex = find_script("memory-leak")
            ws = folder / "ws"
            ws.mkdir()
            (ws / "train.py").write_bytes((ex.dir / "train.py").read_bytes())
            flag = ["--sandbox"] if sandbox[0] else []
            c = run_child(["grade", "memory-leak", str(ws), str(folder / "out"), *flag], folder,
                          dict(os.environ), HONEST_LIMIT_S, "victim")
            assert c.result and not c.result["passed"], f"the earlier grading to attack could not be made: {c.describe()}"
            made["dir"] = folder / "out"
        return made["dir"]

    return get


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_hostile_submission(case, tmp_path, sandbox, suite_log, victim):
    wired, why = sandbox
    if case.needs_sandbox and not wired:
        if os.environ.get("TRAINWRECK_ADVERSARIAL_UNISOLATED") != "1" or not case.unisolated_safe:
            pytest.skip(f"needs the sandbox: {why}")
        mode = "unisolated"
    else:
        mode = "sandboxed" if wired else "unisolated"
    ex = find_script(case.exercise)
    report = run_case(case, tmp_path, kit_root(), mode, victim() if case.victim else None, ex.manifest.editable)
    with open(suite_log, "a") as f:
        f.write(json.dumps({**report.to_json(), "needs_sandbox": case.needs_sandbox, "sandbox_state": why,
                            "finished_at": datetime.now(UTC).isoformat(timespec="seconds")}) + "\n")
    assert report.stopped, f"{case.id} ({case.klass}: {case.tries}):\n  " + "\n  ".join(report.problems)
