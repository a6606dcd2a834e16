"""docs/validity.md is rendered from docs/validity.json and nothing else: the committed page matches
its JSON, and the table counts, merges and shows what the grader said (run results built by hand)."""

from __future__ import annotations

import json

import pytest

from grader.validity import table
from tests.grader.validity.scripts import REPO


def test_the_committed_page_is_its_json_rendered():
    data = json.loads((REPO / "docs" / "validity.json").read_text())
    assert (REPO / "docs" / "validity.md").read_text() == table.render(data), \
        "docs/validity.md differs from docs/validity.json: run `python -m grader.validity.table render`"


def test_every_graded_row_holds_its_expectation_and_the_graders_words():
    data = json.loads((REPO / "docs" / "validity.json").read_text())
    for slug, e in data["exercises"].items():
        for c in e["cases"]:
            assert c["why"] and c["got"] in ("pass", "fail", "environment"), (slug, c["case"])
            if c["got"] == "fail":
                assert c["failed"] and all(f["message"] for f in c["failed"]), (slug, c["case"])
            if c["expect"] == "fail":
                assert c["must_fail"] and c["says"], (slug, c["case"])


def _case(case: str, kind: str, expect: str, got: str, agrees: bool, failed=(), problem="") -> dict:
    return {"exercise": "memory-leak", "case": case, "kind": kind, "detail": f"what {case} changes", "breaks": "",
            "expect": expect, "must_fail": ["memory_flat"] if expect == "fail" else [],
            "says": "per step" if expect == "fail" else None, "why": f"why {case} gets that verdict", "ci": False,
            "got": got, "agrees": agrees, "problem": problem,
            "failed": [{"check": c, "message": m} for c, m in failed], "wall_s": 30.0, "result_json": None}


RUN = {"format_version": 1, "commit": "abc1234", "started": "2026-11-26T10:00:00+00:00",
       "ended": "2026-11-26T11:00:00+00:00", "command": "trainwreck verify --validity memory-leak",
       "machine": {"platform": "Linux", "cpus": 2, "load_at_end": 2.0}, "wall_s": 90.0,
       "exercises": {"memory-leak": {"cases": [
           _case("wrap-model", "rewrite", "pass", "pass", True),
           _case("micro-batches", "rewrite", "pass", "fail", False, [("matches_reference", "differ | by 2e-5")],
                 "expected to pass, failed (matches_reference: differ)"),
           _case("revert-hunk-1", "mutation", "fail", "fail", True, [("memory_flat", "+1.2 MB per step")]),
       ]}}}


def test_a_run_replaces_its_exercises_and_keeps_the_others_and_the_corpus():
    stored = {"format_version": 1, "corpus": {"source": "README", "exercises": {"memory-leak": {"agree": 14, "of": 14}}},
              "exercises": {"lr-scaling": {"commit": "old", "ended": "2026-01-01T00:00:00", "command": "x",
                                           "machine": {"cpus": 2}, "wall_s": 1.0, "cases": []},
                            "memory-leak": {"commit": "old", "cases": []}}}
    merged = table.merge(stored, RUN)
    assert merged["exercises"]["lr-scaling"]["commit"] == "old"
    assert merged["exercises"]["memory-leak"]["commit"] == "abc1234"
    assert len(merged["exercises"]["memory-leak"]["cases"]) == 3 and merged["corpus"] == stored["corpus"]


def test_a_run_of_named_cases_replaces_only_those_and_says_they_were_graded_again():
    stored = table.merge({"format_version": 1, "exercises": {}, "corpus": {}}, RUN)
    again = {**RUN, "commit": "def5678", "ended": "2026-11-27T06:00:00+00:00",
             "command": "trainwreck verify --validity memory-leak --case micro-batches",
             "exercises": {"memory-leak": {"cases": [_case("micro-batches", "rewrite", "pass", "pass", True)]}}}
    merged = table.merge(stored, again)
    e = merged["exercises"]["memory-leak"]
    assert [c["case"] for c in e["cases"]] == ["wrap-model", "micro-batches", "revert-hunk-1"]
    assert all(c["agrees"] for c in e["cases"]) and e["commit"] == "abc1234"
    page = table.render(merged)
    assert "Graded again 2026-11-27 06:00 at commit def5678" in page and "`micro-batches`; their rows" in page
    assert "Disagreements" not in page


def test_the_page_counts_agreements_and_shows_each_disagreement_with_the_graders_message():
    data = table.merge({"format_version": 1, "exercises": {}, "corpus": {
        "source": "README", "exercises": {"memory-leak": {"agree": 14, "of": 14}, "lr-scaling": {"agree": 3, "of": 4}}}},
        RUN)
    data["notes"] = {"memory-leak": {"micro-batches": "rounding of two half-batch sums"}}
    page = table.render(data)
    assert "| memory-leak | 1 of 2 | 1 of 1 | 14 of 14 | 2026-11-26, abc1234 |" in page
    assert "| lr-scaling | not graded yet | not graded yet | 3 of 4 | - |" in page
    assert "`matches_reference`: differ \\| by 2e-5" in page  # the grader's words, escaped for the table
    assert "- `micro-batches`: expected to pass, failed (matches_reference: differ). Found: rounding of two" in page
    assert "why revert-hunk-1 gets that verdict" in page and "fail `memory_flat` saying \"per step\"" in page


def test_corpus_agreement_comes_from_a_variants_run():
    variants = {"agreement": {"memory-leak": {"variants": 17, "agree": 16, "false_pass": 1, "false_fail": 0}}}
    data = table.merge_corpus({"format_version": 1, "exercises": {}, "corpus": {}}, variants, "one pass, 2026-12-01")
    assert data["corpus"] == {"exercises": {"memory-leak": {"agree": 16, "of": 17, "source": "one pass, 2026-12-01"}}}
    older = {"format_version": 1, "exercises": {}, "corpus": {"source": "the README, 2026-11-25",
                                                               "exercises": {"lr-scaling": {"agree": 14, "of": 14}}}}
    data = table.merge_corpus(older, variants, "one pass, 2026-12-01")
    assert data["corpus"]["exercises"]["lr-scaling"] == {"agree": 14, "of": 14}  # keeps the older figure
    page = table.render(data)
    assert "Corpus agreement, except where named below: the README, 2026-11-25" in page
    assert "Corpus agreement of memory-leak: one pass, 2026-12-01" in page


def test_cases_graded_again_on_changed_scripts_are_refused_with_the_command_to_run():
    stored = table.merge({"format_version": 1, "exercises": {}, "corpus": {}},
                         {**RUN, "exercises": {"memory-leak": {**RUN["exercises"]["memory-leak"],
                                                               "scripts": {"broken": "a", "solution": "b"}}}})
    again = {**RUN, "command": "trainwreck verify --validity memory-leak --case micro-batches",
             "exercises": {"memory-leak": {"scripts": {"broken": "a", "solution": "c"},
                                           "cases": [_case("micro-batches", "rewrite", "pass", "pass", True)]}}}
    with pytest.raises(SystemExit, match="grade the whole suite: trainwreck verify --validity memory-leak"):
        table.merge(stored, again)


def test_a_stale_grading_is_marked_and_cases_left_out_since_are_listed_not_counted():
    data = table.merge({"format_version": 1, "exercises": {}, "corpus": {}}, RUN)
    data["exercises"]["memory-leak"]["freshness"] = {
        "fix_changed": True, "ungraded": ["drop-line-7"],
        "gone": [{"case": "revert-hunk-1", "why": "a crash, not a partial fix"}]}
    page = table.render(data)
    assert "| memory-leak | 1 of 2 | - | - | 2026-11-26, abc1234, **not current** |" in page
    assert "**Not current: memory-leak's broken script or reference fix changed" in page
    assert "never graded (1): `drop-line-7`" in page
    assert "left out of the suite since (1, not counted above): `revert-hunk-1` (a crash, not a partial fix)" in page
    assert "| `revert-hunk-1` |" not in page
