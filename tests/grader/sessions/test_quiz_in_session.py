"""Quantitative questions asked in a session: answers graded and recorded, shown in the live view
and the debrief (HTML and Markdown), bad answers refused in one line."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from grader.commands.report import command as report_cmd
from grader.commands.session import command as session_cmd
from grader.tools.quiz import load_bank


@pytest.fixture
def session(tmp_path):
    db = str(tmp_path / "s.db")
    r = CliRunner().invoke(session_cmd, ["new", "--candidate", "Ada", "--exercise", "llm-architecture",
                                         "--dir", str(tmp_path / "ws"), "--db", db, "--json"])
    assert r.exit_code == 0, r.output
    return json.loads(r.output)["session"], db


def test_answers_are_graded_recorded_and_reported(session, tmp_path):
    sid, db = session
    q = load_bank()[0]
    right, wrong = f"{q.answer}", f"{q.answer * 8}"
    r = CliRunner().invoke(session_cmd, ["quiz", sid, "--answer", f"{q.id}={right}", "--db", db, "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["answers"][0]["correct"] is True
    r = CliRunner().invoke(session_cmd, ["quiz", sid, "--answer", f"{q.id}={wrong}", "--db", db, "--json"])
    assert json.loads(r.output)["answers"][0]["correct"] is False
    r = CliRunner().invoke(session_cmd, ["show", sid, "--db", db, "--json"])
    assert [a["correct"] for a in json.loads(r.output)["quiz"]] == [True, False]
    for fmt, says in (("html", "Quantitative questions"), ("md", "## Quantitative questions (1 of 2 answers right)")):
        out = tmp_path / f"d.{fmt}"
        r = CliRunner().invoke(report_cmd, [sid, "--db", db, "--format", fmt, "--out", str(out)])
        assert r.exit_code == 0, r.output
        assert says in out.read_text() and q.question[:40] in out.read_text()


@pytest.mark.parametrize("answer, says", [
    ("no-equals", "write it as ID=VALUE"),
    ("no-such-question=3", "no question 'no-such-question'"),
])
def test_bad_answers_are_one_line(session, answer, says):
    sid, db = session
    r = CliRunner().invoke(session_cmd, ["quiz", sid, "--answer", answer, "--db", db])
    assert r.exit_code != 0 and says in (r.output + str(r.exception))
