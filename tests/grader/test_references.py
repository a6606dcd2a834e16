"""Every script exercise stands on public bug reports (issue 27): at least two GitHub issues or pull
requests in its manifest, each address of the shape that resolves, and the README's exercise table
links them."""

from __future__ import annotations

import re

import pytest

from grader.exercises import discover
from grader.sessions.workspace import is_graded
from tests.conftest import REPO

REPORT = re.compile(r"https://github\.com/[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}/(issues|pull)/[1-9][0-9]*")
ADDRESS = re.compile(r"https://[a-z0-9.-]+\.[a-z]{2,}(/[A-Za-z0-9._~%!$&'()*+,;=:@/#?-]*)?")
SCRIPTS = [e for e in discover()[0] if is_graded(e.manifest)]


def _reports(ex) -> list[str]:
    return [r.url for r in ex.manifest.references if REPORT.fullmatch(r.url)]


def test_the_script_exercises_are_all_here():
    assert len(SCRIPTS) == 13


@pytest.mark.parametrize("ex", SCRIPTS, ids=lambda e: e.slug)
def test_at_least_two_public_bug_reports(ex):
    assert len(_reports(ex)) >= 2, f"{ex.slug}: {[r.url for r in ex.manifest.references]}"


@pytest.mark.parametrize("ex", discover()[0], ids=lambda e: e.slug)
def test_every_reference_is_a_well_formed_address(ex):
    bad = [r.url for r in ex.manifest.references if not ADDRESS.fullmatch(r.url)]
    assert not bad, bad
    # a report cited by its number in the title cites the same repository and number as its address
    for r in ex.manifest.references:
        named = re.match(r"([\w.-]+/[\w.-]+)(?: PR)? #(\d+)", r.title)
        if named and REPORT.fullmatch(r.url):
            assert r.url.split("github.com/")[1].split("/")[:2] == named[1].split("/"), (r.title, r.url)
            assert r.url.rsplit("/", 1)[1] == named[2], (r.title, r.url)


def test_the_readme_table_links_each_exercises_reports():
    readme = (REPO / "README.md").read_text()
    for ex in SCRIPTS:
        row = next(line for line in readme.splitlines() if line.startswith(f"| `{ex.slug}` |"))
        linked = [u for u in _reports(ex) if f"]({u})" in row]
        assert len(linked) >= 2, f"{ex.slug}: the README row links {linked}"
