"""The quantitative questions: every model answer and every computed misconception is reproduced by
its `trainwreck calc` invocation; grading, the bank's validation, the progress file, the command."""

from __future__ import annotations

import json
import re
import shlex
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner

from grader.commands.calc import command as calc_command
from grader.commands.quiz import command as quiz_command
from grader.tools import quiz as Q
from grader.tools import units

BANK = Q.load_bank()
BY_ID = {q.id: q for q in BANK}


def calc_value(check: Q.CalcCheck, unit: str) -> float:
    r = CliRunner().invoke(calc_command, shlex.split(check.command) + ["--json"])
    assert r.exit_code == 0, f"trainwreck calc {check.command}: {r.output}"
    value = json.loads(r.output)["result"][check.value]
    return units.convert(value, check.unit, unit) if check.unit else value


def test_bank_covers_every_topic_with_at_least_twenty_questions():
    assert len(BANK) >= 20
    assert {q.topic for q in BANK} == set(Q.TOPICS)
    assert all(sum(q.topic == t for q in BANK) >= 4 for t in Q.TOPICS)
    assert sum(bool(q.depends_on) for q in BANK) >= 10  # chains where a misconception cascades
    assert sum(bool(q.misconceptions) for q in BANK) >= 20


@pytest.mark.parametrize("qid", sorted(BY_ID))
def test_model_answer_is_what_the_calculator_gives(qid):
    q = BY_ID[qid]
    assert q.calc is not None, f"{qid}: give the calc invocation that reproduces the answer"
    assert q.tolerance.accepts(calc_value(q.calc, q.unit), q.answer)


@pytest.mark.parametrize("qid, k", [(q.id, k) for q in BANK for k, m in enumerate(q.misconceptions) if m.calc])
def test_computed_misconception_is_what_the_calculator_gives(qid, k):
    q = BY_ID[qid]
    m = q.misconceptions[k]
    assert q.tolerance.accepts(calc_value(m.calc, q.unit), m.answer)


@pytest.mark.parametrize("qid", sorted(BY_ID))
def test_model_answer_grades_correct_and_misconceptions_get_their_feedback(qid):
    q = BY_ID[qid]
    assert Q.grade_answer(q, q.answer).correct
    for m in q.misconceptions:
        v = Q.grade_answer(q, m.answer)
        assert not v.correct and v.misconception and m.feedback in v.feedback


@pytest.mark.parametrize("qid, answer, correct", [
    ("mem-7b-state", "112", True),
    ("mem-7b-state", "112 GB", True),
    ("mem-7b-state", "112e9B", True),
    ("mem-7b-state", "104.31 GiB", True),       # the right amount, in a unit it names: converted
    ("mem-7b-state", "104.31", False),          # the GiB number read as GB
    ("mem-7b-state", "113", True),              # within 1%
    ("mem-7b-state", "114", False),
    ("comm-bits-bytes", "555.6ms", True),
    ("pp-bubble-total", "0.1795 fraction", True),
    ("mem-zero3-max-params", "320B", True),
    ("mem-zero3-max-params", "3.2e11", True),
    ("cost-30b-dollars", "$566,860", True),
    ("dp-goyal-warmup-steps", "780", True),
    ("dp-goyal-warmup-steps", "781", False),    # an absolute tolerance of 0.5 steps
])
def test_grade_answer_reads_units(qid, answer, correct):
    assert Q.grade_answer(BY_ID[qid], answer).correct is correct


def test_wrong_answer_names_a_unit_factor():
    v = Q.grade_answer(BY_ID["ft-checkpoint-write"], 98 * 8 * 1.0)  # listed misconception: its own feedback
    assert v.misconception
    v = Q.grade_answer(BY_ID["comm-ring-time-nvlink"], 122.5 * 8)
    assert not v.correct and "bits against bytes" in v.feedback and "too high" in v.feedback
    assert v.derivation == BY_ID["comm-ring-time-nvlink"].derivation


@pytest.mark.parametrize("qid, answer, message", [
    ("mem-7b-state", "lots", "not a number"),
    ("mem-7b-state", "112 s", "cannot be expressed in GB"),
    ("dp-goyal-warmup-steps", "780 GB", "drop 'GB'"),
])
def test_unreadable_answers_raise(qid, answer, message):
    with pytest.raises(Q.AnswerError, match=message):
        Q.grade_answer(BY_ID[qid], answer)


GOOD = """
format_version = 1
topic = "memory-precision"
title = "t"
[[questions]]
id = "a"
question = "q"
answer = 10
unit = "GB"
tolerance = { relative = 0.01 }
derivation = "d"
"""


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.replace('topic = "memory-precision"', 'topic = "vibes"'), "topic 'vibes' is unknown"),
    (lambda s: s.replace("format_version = 1", "format_version = 2"), "format_version 2 is not 1"),
    (lambda s: s.replace("{ relative = 0.01 }", "{ relative = 0.01, absolute = 1 }"), "exactly one of"),
    (lambda s: s.replace('unit = "GB"', 'unit = "furlongs"'), "unit 'furlongs' is unknown"),
    (lambda s: s.replace('derivation = "d"', ""), "questions[0].derivation: Field required; add it"),
    (lambda s: s + "[[questions.misconceptions]]\nanswer = 10.05\nfeedback = 'f'\n", "within the tolerance"),
    (lambda s: s + 'depends_on_typo = ["x"]\n', "questions[0].depends_on_typo: Extra inputs are not permitted; remove it"),
    (lambda s: s.replace('id = "a"', 'id = "A b"'), "questions[0].id"),
])
def test_malformed_question_files_name_file_field_and_fix(tmp_path, edit, message):
    d = tmp_path / "rubrics" / "quiz"
    d.mkdir(parents=True)
    (d / "x.toml").write_text(edit(GOOD))
    with pytest.raises(Q.QuizError, match=re.escape(message)) as e:
        Q.load_bank(tmp_path)
    assert str(e.value).startswith(str(d / "x.toml")) and "\n" not in str(e.value)


def test_bank_rejects_duplicate_ids_and_unknown_dependencies(tmp_path):
    d = tmp_path / "rubrics" / "quiz"
    d.mkdir(parents=True)
    (d / "a.toml").write_text(GOOD)
    (d / "b.toml").write_text(GOOD)
    with pytest.raises(Q.QuizError, match="id already used in a.toml"):
        Q.load_bank(tmp_path)
    (d / "b.toml").write_text(GOOD.replace('id = "a"', 'id = "b"') + 'depends_on = ["zz"]\n')
    with pytest.raises(Q.QuizError, match="no question 'zz'"):
        Q.load_bank(tmp_path)


def test_select_by_topic_and_id():
    assert {q.topic for q in Q.select(BANK, "communication")} == {"communication"}
    assert [q.id for q in Q.select(BANK, ids=("mem-7b-state",))] == ["mem-7b-state"]
    with pytest.raises(Q.QuizError, match="no question 'nope'"):
        Q.select(BANK, ids=("nope",))
    with pytest.raises(Q.QuizError, match="no topic"):
        Q.select(BANK, "vibes")


def test_progress_is_recorded_saved_atomically_and_reloaded(tmp_path):
    path = tmp_path / "sub" / "state.json"
    q = BY_ID["mem-7b-state"]
    t = datetime(2025, 1, 1, tzinfo=UTC)
    s = Q.record(Q.QuizState(), Q.grade_answer(q, "28"), "28", now=t)
    s = Q.record(s, Q.grade_answer(q, "112"), "112", now=t)
    s = Q.record(s, Q.grade_answer(q, "5"), "5", now=t)
    Q.save_state(path, s)
    back = Q.load_state(path)
    p = back.questions["mem-7b-state"]
    assert (p.attempts, p.solved, p.last_correct, p.last_answer) == (3, True, False, "5")
    assert [f.name for f in path.parent.iterdir()] == ["state.json"]  # no temporary left behind
    assert Q.forget(back, ["mem-7b-state"]).questions == {}


@pytest.mark.parametrize("content", ["{not json", '{"format_version": 1, "questions": {"a": {"attempts": -1}}}',
                                     '{"format_version": 9, "questions": {}}'])
def test_unreadable_state_is_a_one_line_error(tmp_path, content):
    path = tmp_path / "state.json"
    path.write_text(content)
    with pytest.raises(Q.QuizError, match="move it away") as e:
        Q.load_state(path)
    assert str(e.value).startswith(str(path))


def test_default_state_path(monkeypatch, tmp_path):
    monkeypatch.setenv("TRAINWRECK_HOME", str(tmp_path))
    assert Q.default_state_path() == tmp_path / "quiz-state.json"
    monkeypatch.delenv("TRAINWRECK_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert Q.default_state_path() == tmp_path / "home" / ".trainwreck" / "quiz-state.json"


def quiz(tmp_path: Path, *args: str, input: str | None = None):
    return CliRunner().invoke(quiz_command, ["--state", str(tmp_path / "s.json"), *args], input=input)


def test_cli_answer_json_and_exit_codes(tmp_path):
    r = quiz(tmp_path, "--answer", "mem-7b-state=112GB", "--answer", "comm-ring-bytes=14", "--json")
    assert r.exit_code == 1
    out = json.loads(r.output)
    assert (out["correct"], out["answered"]) == (1, 2)
    assert out["verdicts"][1]["misconception"] and "the message itself" in out["verdicts"][1]["feedback"]
    r = quiz(tmp_path, "--answer", "comm-ring-bytes=24.5", "--json")
    assert r.exit_code == 0
    state = json.loads((tmp_path / "s.json").read_text())
    assert state["questions"]["comm-ring-bytes"]["attempts"] == 2 and state["questions"]["comm-ring-bytes"]["solved"]


def test_cli_list_shows_progress_without_answers(tmp_path):
    quiz(tmp_path, "--answer", "mem-7b-state=112GB")
    r = quiz(tmp_path, "--list", "--topic", "memory-precision", "--json")
    out = json.loads(r.output)
    assert r.exit_code == 0 and {q["topic"] for q in out["questions"]} == {"memory-precision"}
    assert next(q for q in out["questions"] if q["id"] == "mem-7b-state")["status"] == "solved"
    assert all("answer" not in q and "derivation" not in q for q in out["questions"])  # nothing to copy


def test_cli_interactive_grades_saves_and_skips_solved(tmp_path):
    r = quiz(tmp_path, "--id", "mem-7b-state", "--id", "mem-zero1-dp8", input="lots\n104.31\ns\n")
    assert r.exit_code == 0, r.output
    assert "cannot read that" in r.output and "GiB (2^30 bytes)" in r.output and "derivation:" in r.output
    assert "reproduce: trainwreck calc memory" in r.output
    r = quiz(tmp_path, "--id", "mem-7b-state", input="112\n")
    assert "CORRECT" in r.output
    r = quiz(tmp_path, "--id", "mem-7b-state")
    assert "every selected question is solved" in r.output
    r = quiz(tmp_path, "--id", "mem-7b-state", "--reset")
    assert json.loads((tmp_path / "s.json").read_text())["questions"] == {}


@pytest.mark.parametrize("args, message", [
    (["--answer", "mem-7b-state"], "write it as ID=VALUE"),
    (["--answer", "nope=1"], "no question 'nope'"),
    (["--answer", "mem-7b-state=lots"], "not a number"),
    (["--json"], "--json needs --answer"),
])
def test_cli_usage_errors_exit_2(tmp_path, args, message):
    r = quiz(tmp_path, *args)
    assert r.exit_code == 2 and message in r.output
