"""A stored grading is about the scripts it graded: when they change, or the suite generates other cases,
docs/validity.json says so (and the page prints it) instead of showing the old figures as current."""

from __future__ import annotations

import json
import shutil

import pytest

from grader.validity import freshness, table
from grader.validity.suite import build
from tests.grader.validity.scripts import REPO

STORED = json.loads((REPO / "docs" / "validity.json").read_text())


@pytest.mark.parametrize("slug", sorted(STORED["exercises"]))
def test_the_stored_page_says_whether_the_fix_changed_since_its_grading(slug):
    # hashing only: a script edited without `python -m grader.validity.table refresh` (or a new grading)
    # would leave the page showing the old figures as the current code's
    e = STORED["exercises"][slug]
    assert e.get("scripts"), f"{slug}: the stored grading does not say which scripts it graded"
    changed = e["scripts"] != freshness.fingerprint(slug)
    assert e["freshness"]["fix_changed"] == changed, (
        f"{slug}: docs/validity.json says fix_changed={not changed}; run `python -m grader.validity.table refresh`")


@pytest.mark.slow  # builds every exercise's suite (about 8 s)
def test_the_stored_freshness_is_what_the_suites_generate_today():
    assert table.render(freshness.refresh(STORED)) == table.render(STORED), \
        "docs/validity.json's freshness is out of date: run `python -m grader.validity.table refresh`"


def _stored(cases: list[str], scripts: dict[str, str] | None) -> dict:
    return {"scripts": scripts, "cases": [{"case": c} for c in cases]}


def test_cases_never_graded_and_cases_gone_are_named_and_a_changed_fix_is_flagged():
    suite = build("lr-scaling")
    now = freshness.fingerprint("lr-scaling")
    names = [c.name for c in suite.cases]
    f = freshness.assess(_stored(names, now), suite, now)
    assert f == {"fix_changed": False, "ungraded": [], "gone": []}
    f = freshness.assess(_stored([*names[1:], "drop-line-9999"], None), suite, now)
    assert f["fix_changed"] and f["ungraded"] == [names[0]]
    assert f["gone"] == [{"case": "drop-line-9999", "why": "no longer generated from the fix"}]


def test_an_edited_reference_changes_the_fingerprint(tmp_path):
    for part in ("exercises", "solutions", "tests/validity"):
        shutil.copytree(REPO / part, tmp_path / part)
    before = freshness.fingerprint("lr-scaling", tmp_path)
    ref = tmp_path / "solutions" / "lr-scaling" / "train.py"
    ref.write_text(ref.read_text() + "\n# one more line\n")
    after = freshness.fingerprint("lr-scaling", tmp_path)
    assert after["broken"] == before["broken"] and after["solution"] != before["solution"]
