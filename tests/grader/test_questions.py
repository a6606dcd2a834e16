"""The interviewer's follow-up banks: one per exercise and scenario, covering the staff-level themes,
keyed to evidence only where evidence exists, and malformed banks reported in one line."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from grader import questions as Q
from grader.manifest import MANIFEST

REPO = Path(__file__).resolve().parents[2]
BANKS = Q.load_all(REPO)
STAFF_THEMES = [t for t in Q.THEMES if t != "exercise"]


def test_every_exercise_and_scenario_has_a_bank():
    folders = {p.parent.name for p in (REPO / "exercises").glob(f"*/{MANIFEST}")}
    assert set(BANKS) == folders


@pytest.mark.parametrize("slug", sorted(BANKS))
def test_bank_mixes_staff_themes_with_exercise_specific_questions(slug):
    followups = BANKS[slug].followups
    themes = {f.theme for f in followups}
    assert len(followups) >= 6
    assert sum(f.theme == "exercise" for f in followups) >= 1
    assert len(themes - {"exercise"}) >= 3, f"{slug}: draw on at least 3 staff themes"


def test_every_staff_theme_is_asked_somewhere():
    asked = {f.theme for b in BANKS.values() for f in b.followups}
    assert set(STAFF_THEMES) <= asked


def test_evidence_keys_only_on_script_exercises():
    keyed = {slug for slug, b in BANKS.items() if any(f.when for f in b.followups)}
    assert keyed and not keyed & {"llm-architecture", "gpu-allocation", "cost-efficiency", "cross-team-rollout"}


def test_select_shows_unconditional_and_matching_questions():
    bank = BANKS["memory-leak"]
    always = [f for f in bank.followups if f.when is None]
    assert Q.select(bank) == always
    assert Q.select(bank, {"memory_flat": True}) == always
    failed = Q.select(bank, {"memory_flat": False})
    assert len(failed) == len(always) + 1 and failed[-1].when.check == "memory_flat"


SCRIPT = '[[checks]]\nname = "completes"\n[[checks]]\nname = "memory_flat"\n'
SCENARIO = 'kind = "scenario"\n'
GOOD = """
format_version = 1
exercise = "ex"
[[followups]]
id = "q1"
theme = "silent-failure"
question = "q"
strong_answer = "s"
weak_answer = "w"
"""


def kit(tmp_path: Path, bank: str, manifest: str = SCRIPT) -> Path:
    (tmp_path / "exercises" / "ex").mkdir(parents=True)
    (tmp_path / "exercises" / "ex" / MANIFEST).write_text(manifest)
    (tmp_path / "rubrics" / "followups").mkdir(parents=True)
    (tmp_path / "rubrics" / "followups" / "ex.toml").write_text(bank)
    return tmp_path


def test_a_good_bank_loads_and_keys_to_a_check(tmp_path):
    root = kit(tmp_path, GOOD + 'when = { check = "memory_flat", passed = false }\n')
    bank = Q.load_bank("ex", root)
    assert bank.followups[0].when.check == "memory_flat"


@pytest.mark.parametrize("bank, manifest, message", [
    (GOOD.replace('"silent-failure"', '"vibes"'), SCRIPT, "followups[0]: theme 'vibes' is unknown; use one of"),
    (GOOD.replace('id = "q1"', 'id = "Q 1"'), SCRIPT, "followups[0].id: String should match pattern"),
    (GOOD.replace('weak_answer = "w"', ""), SCRIPT, "followups[0].weak_answer: Field required; add it"),
    (GOOD + 'hint = "x"\n', SCRIPT, "followups[0].hint: Extra inputs are not permitted; remove it"),
    (GOOD.replace("format_version = 1", "format_version = 2"), SCRIPT, "format_version 2 is not 1"),
    (GOOD + GOOD[GOOD.index("[[followups]]"):], SCRIPT, "id 'q1' is used twice"),
    (GOOD.replace('exercise = "ex"', 'exercise = "other"'), SCRIPT, "exercise: 'other' is not 'ex'"),
    (GOOD + 'when = { check = "throughput", passed = false }\n', SCRIPT,
     "followups[0].when.check: ex has no check 'throughput'; use one of completes, memory_flat"),
    (GOOD + 'when = { check = "completes", passed = true }\n', SCENARIO,
     "followups[0].when: a scenario has no automatic evidence; remove `when`"),
])
def test_malformed_banks_name_file_field_and_fix(tmp_path, bank, manifest, message):
    root = kit(tmp_path, bank, manifest)
    with pytest.raises(Q.QuestionBankError, match=re.escape(message)) as e:
        Q.load_bank("ex", root)
    assert str(e.value).startswith(str(root / "rubrics" / "followups" / "ex.toml")) and "\n" not in str(e.value)


def test_a_bank_for_no_exercise_is_refused(tmp_path):
    root = kit(tmp_path, GOOD.replace('exercise = "ex"', 'exercise = "ghost"'))
    (root / "rubrics" / "followups" / "ghost.toml").write_text(GOOD.replace('exercise = "ex"', 'exercise = "ghost"'))
    with pytest.raises(Q.QuestionBankError, match="no exercise 'ghost'"):
        Q.load_bank("ghost", root)
    with pytest.raises(Q.QuestionBankError, match="not found; write the follow-up bank"):
        Q.load_bank("nothing", root)
