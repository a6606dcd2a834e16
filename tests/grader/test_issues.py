"""Exercises with several planted issues: the manifest's [[issues]], per-issue scoring, checks that
judge a run which failed only after its last step, and incident-multi's one-fix variants earning
credit for their own issue and no other."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest
import torch

from grader.checks import Context, run_check
from grader.evidence import load_run
from grader.exercises import find
from grader.grade import GradeOptions, grade
from grader.manifest import ManifestError, load_manifest
from grader.record import METRICS_COLUMNS, metrics_csv
from grader.result import GradeResult, SubmissionInfo
from grader.scoring import IssueVerdict, score
from grader.verify import issue_problems
from tests.conftest import REPO
from tests.grader.builders import make_run
from tests.grader.fakes import FakeManifest, W, epochs, perm, spec

SLUG = "incident-multi"
VARIANTS = Path(__file__).parent / "data" / "incident_multi"
# each one-fix variant, and the one issue it fixes
FIXES = {"fix_order": "replayed-order", "fix_leak": "memory-growth", "fix_end": "end-of-run-failure"}
MANIFEST = (REPO / "exercises" / SLUG / "exercise.toml").read_text()


# --- the manifest --------------------------------------------------------------------------------

def _load(tmp_path: Path, text: str):
    d = tmp_path / SLUG
    d.mkdir()
    (d / "train.py").write_text("print('hi')\n")
    (d / "exercise.toml").write_text(text)
    return load_manifest(d)


def test_the_shipped_manifest_groups_every_failing_check():
    m = load_manifest(REPO / "exercises" / SLUG)
    assert [i.name for i in m.issues] == list(FIXES.values())
    grouped = {c for i in m.issues for c in i.checks}
    assert set(m.broken_fails) <= grouped and "workload_intact" not in grouped  # it gates


ISSUE = '[[issues]]\nname = "replayed-order"\ntitle = "every epoch trains on the samples in the same order"\n' \
        'checks = ["sample_partition", "matches_reference"]\n'


@pytest.mark.parametrize("edit, says", [
    (lambda s: s.replace('checks = ["memory_flat"]', 'checks = ["memory_flatt"]'),
     "issues: [1] 'memory-growth': checks names 'memory_flatt', which is not among this exercise's checks; use one of"),
    (lambda s: s.replace('checks = ["memory_flat"]', 'checks = ["memory_flat", "completes"]'),
     "issues: [2] 'end-of-run-failure': check 'completes' is already in issue 'memory-growth'; a check may belong to one issue only"),
    (lambda s: s.replace('checks = ["memory_flat"]', 'checks = []'),
     "issues[1].checks: List should have at least 1 item after validation, not 0; list at least that many"),
    (lambda s: s.replace('name = "memory-growth"', 'name = "replayed-order"'),
     "is used by more than one issue; give each a name of its own"),
    (lambda s: s.replace('checks = ["memory_flat"]', 'checks = ["workload_intact"]'),
     "issues: [1] 'memory-growth': none of its checks is in broken_fails; list there the check"),
    (lambda s: s.replace('name = "memory-growth"', 'name = "Memory Growth"'),
     "issues[1].name: String should match pattern"),
    (lambda s: s.replace('checks = ["memory_flat"]', 'checks = ["memory_flat"]\nweight = 0'),
     "issues[1].weight: Input should be greater than 0"),
    (lambda s: s.replace('checks = ["memory_flat"]', 'checks = ["memory_flat"]\nsevere = true'),
     "issues[1].severe: Extra inputs are not permitted; remove it"),
    (lambda s: s.replace('title = "host memory of every rank grows with every step"\n', ""),
     "issues[1].title: Field required; add it"),
])
def test_malformed_issues_name_file_field_and_fix(tmp_path, edit, says):
    text = edit(MANIFEST)
    assert text != MANIFEST, "the shipped manifest changed: update this edit"
    with pytest.raises(ManifestError) as e:
        _load(tmp_path, text)
    line = str(e.value)
    assert "\n" not in line and line.startswith(str(tmp_path / SLUG / "exercise.toml")) and says in line, line


def test_issues_are_optional(tmp_path):
    start = MANIFEST.index("[[issues]]")
    m = _load(tmp_path, MANIFEST[:start] + MANIFEST[MANIFEST.index("[[references]]"):])
    assert m.issues == []


@pytest.mark.parametrize("broken_fixed, solution_fixed, says", [
    ([False, False], [True, True], None),
    ([True, False], [True, True], "the broken script already fixes issue 'a'"),
    ([False, False], [True, False], "the reference solution does not fix issue 'b': it fails y"),
])
def test_verify_wants_every_issue_broken_and_every_issue_fixed(broken_fixed, solution_fixed, says):
    def res(fixed):
        return GradeResult(exercise=SLUG, submission=SubmissionInfo(kind="broken"), passed=False, score=0.0,
                           issues=[IssueVerdict(n, n, 1.0, f, [c], [] if f else [c])
                                   for n, c, f in zip("ab", "xy", fixed)])
    problems = issue_problems(res(broken_fixed), res(solution_fixed))
    assert (problems == []) if says is None else any(says in p for p in problems), problems


def test_json_output_and_console_show_issue_verdicts(capsys):
    from grader import console
    from tests.grader.test_scoring import ISSUES, _checks

    s = score(_checks(["memory_flat"]), issues=ISSUES)
    res = GradeResult(exercise=SLUG, submission=SubmissionInfo(kind="workspace"), passed=False,
                      score=0.0, timings={"total": 1.0}, out_dir="x").with_verdict([], s)
    public = res.to_json()
    assert [(i["name"], i["fixed"]) for i in public["issues"]] == [("order", True), ("leak", False), ("end", True)]
    assert {"name", "title", "fixed", "checks", "failed", "weight"} == set(public["issues"][0])
    console.grade_summary(res)
    out = capsys.readouterr().out
    assert "NOT FIXED" in out and "2 of 3 issues fixed" in out and "memory_flat" in out


# --- checks on a run that failed after its last step ---------------------------------------------

def _failed_run(tmp_path, steps=16, killed=()):
    params = {r: {"w": torch.zeros(3)} for r in range(W)}
    ev = load_run("main", make_run(tmp_path / "main", steps=steps, status="failed", killed=killed,
                                   ledgers=epochs([perm(0), perm(1)]), params=params))
    ref = load_run("reference", make_run(tmp_path / "ref", steps=16, params=params))
    return Context(FakeManifest(steps=16), {"main": ev, "reference": ref})


@pytest.mark.parametrize("spec, steps, killed, passed, says", [
    (spec("sample_partition"), 16, (), True, "the job then ended with status failed"),
    (spec("sample_partition"), 12, (), False, "stopped before the last of its 16 steps"),
    (spec("matches_reference"), 16, (), True, "identical"),
    (spec("matches_reference"), 12, (), False, "stopped before the last"),
    (spec("workload_intact"), 16, (), True, "the job then ended with status failed"),
    (spec("workload_intact"), 12, (), False, "did not complete"),
    # killed at the end: its steps are there, but the parameter count it trained is not
    (spec("workload_intact"), 16, (1,), False, "rank 1 left no record of the parameters"),
])
def test_checks_judge_a_run_that_failed_after_its_last_step(tmp_path, spec, steps, killed, passed, says):
    c = run_check(spec, _failed_run(tmp_path, steps, killed))
    assert c.passed is passed and says in c.message, c.message


# --- monitoring data -----------------------------------------------------------------------------

def test_metrics_csv_comes_from_signed_step_records_only(tmp_path):
    run = make_run(tmp_path / "run", steps=3, rss=[100.0, 101.5, 103.0])
    with open(run / "ranks" / "0" / "events.jsonl", "a") as f:  # a line the script could have written
        f.write('{"kind": "step", "attempt": 0, "t": 9.0, "step": 4, "dt": 0.01, "rss_mb": 1.0, "lr": [0.1]}\n')
    lines = metrics_csv(load_run("main", run)).splitlines()
    assert lines[0] == ",".join(METRICS_COLUMNS)
    assert len(lines) == 1 + 2 * 3
    assert lines[1:4] == ["0,0,1,0.000,10.00,100.0,,0.1", "0,0,2,1.000,10.00,101.5,,0.1",
                          "0,0,3,2.000,10.00,103.0,,0.1"]


# --- incident-multi's one-fix variants -----------------------------------------------------------

def _edits(base: list[str], other: list[str]) -> list[tuple[int, int, list[str]]]:
    ops = difflib.SequenceMatcher(a=base, b=other, autojunk=False).get_opcodes()
    return [(i1, i2, other[j1:j2]) for tag, i1, i2, j1, j2 in ops if tag != "equal"]


def test_the_variants_each_make_one_of_the_solutions_fixes_and_nothing_else():
    broken = (REPO / "exercises" / SLUG / "train.py").read_text().splitlines()
    solution = (REPO / "solutions" / SLUG / "train.py").read_text().splitlines()
    edits = []
    for name in FIXES:
        mine = _edits(broken, (VARIANTS / f"{name}.py").read_text().splitlines())
        assert mine, f"{name} changes nothing"
        edits += mine
    spans = sorted((i1, i2) for i1, i2, _ in edits)
    assert all(a2 <= b1 for (_, a2), (b1, _) in zip(spans, spans[1:])), "two variants edit the same lines"
    merged = list(broken)
    for i1, i2, new in sorted(edits, reverse=True):  # from the bottom up, so indices stay valid
        merged[i1:i2] = new
    assert merged == solution


@pytest.mark.slow
def test_a_one_fix_variant_earns_credit_for_its_issue_only(tmp_path):
    """The variant that fixes the sample order still dies at the end of the run: its order is
    judged from the records of the training, which are whole, and credited; nothing else is."""
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy(VARIANTS / "fix_order.py", ws / "train.py")
    res = grade(find(SLUG), GradeOptions(kind="workspace", workspace=ws, out_dir=tmp_path / "grade"))
    assert not res.environment_failure
    assert {i.name: i.fixed for i in res.issues} == {
        "replayed-order": True, "memory-growth": False, "end-of-run-failure": False}
    assert res.score == pytest.approx(1 / 3, abs=1e-4) and not res.passed
    verdicts = {c.name: c.passed for c in res.checks}
    assert verdicts["workload_intact"] and not verdicts["completes"]
