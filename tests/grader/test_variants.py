"""The variant corpus's format and the agreement rule (no grading: results built by hand)."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from grader.checks.base import CheckResult
from grader.errors import ManifestError
from grader.result import GradeResult, SubmissionInfo
from grader.variants import discover, judge, load_variant

GOOD = 'format_version = 1\nclass = "cheat"\nexpect = "fail"\nwhy = "prints PASSED and forges records"\n'


def _variant(tmp_path: Path, text: str) -> Path:
    d = tmp_path / "tests" / "variants" / "memory-leak" / "v1"
    d.mkdir(parents=True)
    (d / "variant.toml").write_text(text)
    (d / "train.py").write_text("")
    return d


def _res(passed: bool, failing=(), env=False, says="") -> GradeResult:
    checks = [CheckResult(n, False, says or f"{n} failed") for n in failing]
    checks += [CheckResult("completes", True, "ok")]
    if env:
        checks.append(CheckResult("environment", False, "the reference broke", environment=True))
    return GradeResult(exercise="memory-leak", submission=SubmissionInfo(kind="workspace"), passed=passed,
                       score=1.0 if passed else 0.0, checks=checks, environment_failure=env)


@pytest.mark.parametrize("text, says", [
    (GOOD.replace('class = "cheat"', 'class = "valid"'), "a valid fix is expected to pass"),
    (GOOD.replace('expect = "fail"', 'expect = "pass"'), "a cheat is expected to fail"),
    (GOOD.replace("format_version = 1", "format_version = 2"), "format_version 2 is not 1"),
    (GOOD + 'colour = "red"\n', "colour: Extra inputs are not permitted"),
    (GOOD.replace('why = "prints PASSED and forges records"', 'why = "x"'), "why: String should have at least 10"),
    (GOOD + "[[[", "not valid TOML"),
    ('format_version = 1\nclass = "valid"\nexpect = "pass"\nwhy = "a fix in another style"\nmust_fail = ["x"]\n',
     "leave them out for expect"),
])
def test_a_malformed_variant_is_one_line_naming_file_and_field(tmp_path, text, says):
    d = _variant(tmp_path, text)
    with pytest.raises(ManifestError) as e:
        load_variant(d, "memory-leak")
    assert says in str(e.value) and str(d / "variant.toml") in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("extra, result, agrees, problem", [
    ("", _res(False, ["memory_flat"]), True, ""),
    ("", _res(True), False, "expected to fail, passed"),
    ('must_fail = ["memory_flat"]\n', _res(False, ["workload_intact"]), False, "memory_flat passed"),
    ('must_fail = ["memory_flat"]\nsays = "MB per step"\n', _res(False, ["memory_flat"], says="+2 MB per step"),
     True, ""),
    ('says = "MB per step"\n', _res(False, ["memory_flat"], says="slope"), False, "no failing check says"),
    ("", _res(False, [], env=True), False, "environment failure"),
])
def test_agreement(tmp_path, extra, result, agrees, problem):
    v = load_variant(_variant(tmp_path, GOOD + extra), "memory-leak")
    o = judge(v, result)
    assert o.agrees is agrees and problem in o.problem, o.problem


def test_a_valid_fix_that_fails_names_the_check(tmp_path):
    v = load_variant(_variant(tmp_path, GOOD.replace('"cheat"', '"valid"').replace('"fail"', '"pass"')), "memory-leak")
    o = judge(v, _res(False, ["matches_reference"]))
    assert not o.agrees and "expected to pass, failed (matches_reference:" in o.problem
    assert o.to_json()["got"] == "fail"


def test_discover_filters_by_exercise(tmp_path):
    _variant(tmp_path, GOOD)
    assert [v.id for v in discover(None, tmp_path)] == ["memory-leak/v1"]
    assert discover(["lr-scaling"], tmp_path) == []


def test_a_patch_variant_is_the_broken_files_with_the_patch_applied(tmp_path):
    from grader.exercises import find_script
    from grader.variants import PATCH, workspace

    ex = find_script("memory-leak")
    d = _variant(tmp_path, GOOD)
    (d / "train.py").unlink()
    broken = (ex.dir / "train.py").read_text()
    line = next(x for x in broken.splitlines() if x.startswith("EPOCHS"))
    fixed = broken.replace(line, "EPOCHS = 1")
    diff = difflib.unified_diff(broken.splitlines(keepends=True), fixed.splitlines(keepends=True), "a/train.py",
                                "b/train.py")
    (d / PATCH).write_text("".join(diff))
    ws = workspace(load_variant(d, "memory-leak"), ex, tmp_path / "ws")
    assert (ws / "train.py").read_text() == broken.replace(line, "EPOCHS = 1")
    (d / PATCH).write_text("--- a/train.py\n+++ b/train.py\n@@ -1 +1 @@\n-no such line\n+x\n")
    with pytest.raises(ManifestError, match="fix.patch: does not apply"):
        workspace(load_variant(d, "memory-leak"), ex, tmp_path / "ws2")


def _corpus():
    return discover()


@pytest.mark.parametrize("v", _corpus(), ids=lambda v: v.id)
def test_every_corpus_variant_loads_and_its_patch_applies_to_todays_script(v, tmp_path):
    """A script edited since a variant was written must not turn it into a grading error: the corpus
    is regenerated with the script."""
    from grader.checks import CHECK_NAMES
    from grader.exercises import find
    from grader.variants import workspace

    ex = find(v.slug)
    assert set(v.spec.must_fail) <= set(CHECK_NAMES), f"{v.id}: must_fail names no check"
    ws = workspace(v, ex, tmp_path / "ws")
    for f in ex.manifest.editable:
        if (ws / f).exists() and f.endswith(".py"):
            compile((ws / f).read_text(), str(ws / f), "exec")
